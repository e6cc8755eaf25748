//! Planning: every decision the GPU backend makes about a kernel, made before any PTX is
//! written, and kept as data in a [`Plan`] that the emitter (`emit/`) only reads.
//!
//! First, rules that rewrite the kernel into the shape the decisions below take:
//! [`descriptors`] (tensor-descriptor accesses on the tensor memory accelerator, the others
//! replaced by their masked loads and stores) and [`load_order`] (a load contiguous down its
//! first axis is loaded transposed).
//!
//! The passes, in order (each reads the kernel, the [`Context`] and the decisions of the
//! passes before it):
//!
//! 1. [`dots`]: how each `dot` maps onto the hardware: FMA, `mma.sync` with its warp grid, or
//!    a `wgmma` candidate ([`dots::MmaPlan`]);
//! 2. [`layouts`]: the layout of every anchored value (loads, reductions, scans, dots, atomics,
//!    loop-carried values and control-flow results), the vector width of every memory access,
//!    the sums a loop carries as per-thread partials, and from those the cheapest layout of
//!    every free value ([`layouts::LayoutPlan`]);
//! 3. [`accumulators`]: the dots that run in a loop-carried value's registers (rule
//!    *accumulator home*, [`accumulators::AccumulatorHomes`]);
//! 4. [`pipeline`]: per loop, the software pipeline (which loads stream through shared-memory
//!    slots, how many stages, what rides along, which dots read their slots on `wgmma`, nests
//!    and fragments across the tile boundary) and the dot operands kept resident in shared
//!    memory ([`pipeline::Pipelines`]).
//!
//! Free values are not placed once and for all: the emitter still materializes them in
//! whatever layout their consumer asks for (rematerialization without conversions); the plan
//! says which layout each one is cheapest in, from its anchored operands.

pub mod accumulators;
pub mod descriptors;
pub mod dots;
pub mod layouts;
pub mod load_order;
pub mod pipeline;
pub mod report;

use crate::analysis::axis_info::AxisAnalysis;
use crate::{CompileOptions, Target};
use tegula_ir::uses::Uses;
use tegula_ir::{Block, Inst, Kernel, Op};

/// What every planning pass reads: the kernel, the target and options, and the analyses of
/// the kernel that do not depend on any decision.
pub struct Context<'k> {
    pub k: &'k Kernel,
    pub target: Target,
    pub options: CompileOptions,
    /// The most stages any loop is planned with: unlimited, or fewer when the kernel's shared
    /// memory exceeded the target's with more (`compile` then plans again with one fewer).
    pub stage_cap: u32,
    pub axis: AxisAnalysis,
    pub uses: Uses,
}

impl<'k> Context<'k> {
    pub fn new(k: &'k Kernel, target: &Target, options: &CompileOptions) -> Context<'k> {
        Context {
            k,
            target: *target,
            options: *options,
            stage_cap: u32::MAX,
            axis: AxisAnalysis::run(k),
            uses: Uses::new(k),
        }
    }

    /// This context with at most `cap` stages a loop.
    pub fn with_stage_cap(self, cap: u32) -> Context<'k> {
        Context {
            stage_cap: cap,
            ..self
        }
    }

    pub fn num_warps(&self) -> u32 {
        self.options.num_warps
    }

    /// The stages `for` loop `inst` asks for: its own (`range(..).num_stages(s)`) when it has
    /// one, else the launch's `num_stages`.
    pub fn stages_asked(&self, inst: Inst) -> u32 {
        match self.k.insts[inst].op {
            Op::For {
                num_stages: Some(s),
            } => s,
            _ => self.options.num_stages,
        }
    }

    /// The stages loop `inst` is planned for: the ones it asks for, within [`Self::stage_cap`].
    pub fn stages_planned(&self, inst: Inst) -> u32 {
        self.stages_asked(inst).min(self.stage_cap)
    }

    /// The stages asked for the code of `block`: those of the `for` loop whose body it is, else
    /// the launch's (within [`Self::stage_cap`]).
    pub fn stages_of_block(&self, block: Block) -> u32 {
        match self.uses.parent_of(block) {
            Some(p) if matches!(self.k.insts[p].op, Op::For { .. }) => self.stages_planned(p),
            _ => self.options.num_stages.min(self.stage_cap),
        }
    }
}

/// Every decision about one kernel.
pub struct Plan {
    pub descriptors: descriptors::Descriptors,
    pub dots: dots::DotPlans,
    pub layouts: layouts::LayoutPlan,
    pub accumulators: accumulators::AccumulatorHomes,
    pub pipelines: pipeline::Pipelines,
}

impl Plan {
    /// Runs the planning passes in order, after the rewriting rules (`descriptors` are the
    /// decisions of the first).
    pub fn build(cx: &Context<'_>, mut descriptors: descriptors::Descriptors) -> Plan {
        let dots = dots::plan(cx);
        let layouts = layouts::plan(cx, &dots);
        let accumulators = accumulators::plan(cx, &layouts);
        let pipelines = pipeline::plan(cx, &dots, &layouts, &accumulators, &mut descriptors);
        Plan {
            descriptors,
            dots,
            layouts,
            accumulators,
            pipelines,
        }
    }
}
