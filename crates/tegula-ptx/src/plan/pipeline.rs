//! Software pipelines and dot-operand homes: per `for` loop, which of its loads stream through
//! its stages' shared-memory slots (`cp.async`), what rides along in each slot, where the
//! refill goes, which dots read their operands there on `wgmma` or fetch their first
//! fragments across the tile boundary, and which loop-invariant dot operands stay resident in
//! shared memory; each a named rule with its precondition, decided in program order before
//! any code is written (`emit/pipeline.rs` and `emit/mma.rs` carry them out).
//!
//! Rules, in the order they are decided at a loop:
//! - **resident operands** (loops at the kernel's top level): when the operands that the dots
//!   of the loop nest read from outside the loop would hold more than
//!   [`HOISTED_OPERAND_REGS`] registers a thread together as fragments, each stays resident in
//!   shared memory (as long as it fits), written once before the loop and read with
//!   `ldmatrix` (or a `wgmma` descriptor) at each use; one copy serves both roles when both
//!   read it as loaded. An A that a `wgmma` candidate would read by descriptor stays resident
//!   whatever its size (it then costs no registers and no instructions). Smaller sets of
//!   other invariant operands are loaded into registers once before the loop.
//! - **stage count** ([`super::Context::stages_asked`]): a loop asks for its own
//!   `num_stages` when it has one (`range(..).num_stages(s)`, Triton's `tl.range(..,
//!   num_stages=s)`), else for the launch's; an inner loop of a nest asks for its own count
//!   too, whatever the outer loop's. A loop that asks for fewer than 2 is not pipelined ("1
//!   stage asked for"). The stages it is planned for are the ones asked within the kernel's
//!   stage cap (lowered one at a time by `compile` while the kernel's shared memory exceeds
//!   the target's); the shared-memory cut below then works from that count, loop by loop, and
//!   the report's `asked` is the loop's count.
//! - **streamed loads** ([`PipeLoad`]): a load qualifies when every use of it is an f16/bf16
//!   mma operand (directly or through `.trans()`) of a dot in the loop body, its pointer and
//!   mask depend on the induction variable and values from outside the loop only, its
//!   `other` is zero and its accesses are 4, 8 or 16 bytes. Slots that do not fit in the
//!   shared memory left cost stages (down to 2), then loads.
//! - **TMA slots** ([`TmaFeed`]): a streamed load that replaced a
//!   tensor descriptor's load TMA can move ([`super::descriptors::Streamable`]) has its slots
//!   filled by one thread's `cp.async.bulk.tensor` copies, completed on an `mbarrier` per
//!   slot, instead of every thread's `cp.async`, when its stored rows are a TMA swizzle's
//!   span (32, 64 or 128 bytes; or panels of 128) and its place in the slot, the slots and the
//!   scratch before them keep the swizzle's alignment. The copy writes the block as the slot
//!   holds it (row-major, its 16-byte chunks swizzled by row) and zero-fills outside the
//!   tensor, as the region's masked load reads; it needs no address or mask registers. The
//!   loop then crosses no tile boundary with its fragments (the next slot's barrier is
//!   another's). A nest's inner loop takes the rule too: its slots' barriers live across the
//!   outer loop.
//! - **row loads** ([`RowLoad`]): a rank-1 word load of the body whose uses broadcast it into
//!   an mma accumulator (rule *broadcast load* of [`super::layouts`]) rides along in each slot.
//! - **wgmma slots**: a `wgmma` candidate dot runs on `wgmma` when B (and A unless A comes in
//!   registers) is in a slot that starts at a multiple of 1024 bytes with rows a descriptor
//!   reads; A must be K-major. When its accumulator is the carried value it runs in (rule
//!   *accumulator home*, [`super::accumulators`]), nothing else reads that value, and the dot
//!   is the body's one dot (other dots' waits would retire it), its k-tile stays in flight
//!   into the next iteration, and the refill follows its wait for last iteration's k-tile and
//!   a second barrier.
//! - **nest** ([`NestPlan`]): a loop whose body holds one `for` directly, whose loop is
//!   pipelined with copies depending only on the two induction variables and invariants, and
//!   whose dots read only operands loaded in the inner body, copies the inner loop's first
//!   stages for the outer loop's next iteration while the rest of its body (the store) runs.
//! - **boundary fragments** ([`LoopPlan::boundary`]): when the body's one dot reads both
//!   operands from the slots in at least two k-steps, nothing else in the body touches shared
//!   memory, and the registers the loop then needs fit ([`BOUNDARY_MAX_REGISTERS`]), the next
//!   tile's first fragments are loaded before the current tile's last mmas.

use super::accumulators::AccumulatorHomes;
use super::descriptors::{Descriptors, TensorMapAbi};
use super::dots::{DotPlans, MmaPlan};
use super::layouts::LayoutPlan;
use super::Context;
use crate::analysis::affine::{depends_on_ivs_only, is_zero};
use crate::analysis::{is_anchored, moves_across_threads};
use crate::analysis::{staging_source, untransposed};
use crate::layout::Layout;
use crate::mma_layout::{MmaKind, Role, Stage};
use tegula_ir::fast_hash::{HashMap, HashSet};
use tegula_ir::uses::region_values;
use tegula_ir::{Block, DType, Inst, Loc, Op, Value};

/// Loop-invariant dot operands whose fragments take at most this many registers a thread
/// together are loaded once before the loop and held in registers. Larger ones are written to
/// shared memory once before the loop and read again with `ldmatrix` at each use, as
/// FlashAttention-2 does: holding 64 registers (a 128 x 128 bf16 Q over 4 warps) beside a
/// 128-register accumulator spills, while re-reading it costs one `ldmatrix.x4` per 16 rows x
/// 16 columns a step.
pub const HOISTED_OPERAND_REGS: u32 = 32;

/// The most registers the boundary-fragments estimate may count: 255 a thread, less 15 that
/// the estimate leaves out (loop counter, slot offsets, address strides, ldmatrix addresses,
/// masks). Calibrated with ptxas (sm_90a) on the bf16 tuner grid: every config estimated at or
/// under it compiles without spills; the smallest estimate over it (244) spills.
pub const BOUNDARY_MAX_REGISTERS: u32 = 240;

/// One streamed load.
#[derive(Clone, Debug)]
pub struct PipeLoad {
    pub inst: Inst,
    pub value: Value,
    /// Its place within a slot (rows x cols of the loaded tile, swizzled), as its first dot
    /// reads it.
    pub stage: Stage,
    /// How each dot operand that reads it does: (role, K-major). The slot holds the loaded
    /// tile row-major, swizzled by its row length only, so every reader's `ldmatrix` (plain
    /// when K is the stored column, `.trans` when K is the stored row) finds it there.
    pub reads: Vec<(Role, bool)>,
    pub layout: Layout,
    pub vec: u32,
    /// Its slots filled by TMA (rule *TMA slots*), else by `cp.async`.
    pub tma: Option<TmaFeed>,
}

/// A streamed load whose slots TMA fills: one thread arms the slot's `mbarrier` with the
/// bytes and issues the copies, every thread waits on the barrier's phase.
#[derive(Clone, Debug)]
pub struct TmaFeed {
    /// Its tensor map ([`super::descriptors::Descriptors::maps`]).
    pub map: usize,
    /// The block's offsets `[o0, o1]`, evaluated at the iteration a refill copies.
    pub offsets: [Value; 2],
    /// Copies a slot takes: one per 128-byte panel of a panel-major stage, else one; copy `p`
    /// starts `p * box columns` on and `p * rows * 128` bytes into the stage.
    pub copies: u32,
    /// Columns of one copy's box.
    pub box_cols: u32,
}

/// A rank-1 load staged beside the tiles: each slot holds its elements in order in a region of
/// its own, copied by the threads of a blocked layout and read at its first use straight into
/// the layout its uses take (an mma accumulator's slice).
#[derive(Clone, Debug)]
pub struct RowLoad {
    pub inst: Inst,
    pub value: Value,
    /// Byte offset of its region within a slot.
    pub offset: u32,
    /// The copies: `vec` elements each, in a blocked layout (replicas copy nothing).
    pub copy: Layout,
    pub vec: u32,
}

/// One loop's software pipeline.
#[derive(Clone, Debug)]
pub struct PipePlan {
    pub loads: Vec<PipeLoad>,
    pub rows: Vec<RowLoad>,
    pub stages: u32,
    /// Bytes of one slot.
    pub slot_bytes: u32,
    /// Whether a `wgmma` dot of the body stays in flight into the next iteration: the refill
    /// then follows that dot's wait for last iteration's k-tile and a barrier.
    pub in_flight: bool,
    /// With loads on TMA: the index of its first slot's `mbarrier` among the pipelines'
    /// ([`Pipelines::tma_barriers`]; one a slot).
    pub barriers: Option<u32>,
}

/// A loop nest pipelined across its outer loop: the inner loop and its pipeline.
#[derive(Clone, Debug)]
pub struct NestPlan {
    pub inner: Inst,
    pub pipe: PipePlan,
}

/// A loop-invariant dot operand kept in shared memory for the rest of the kernel.
#[derive(Clone, Copy, Debug)]
pub struct Resident {
    pub value: Value,
    pub role: Role,
    /// Where it is stored (its offset is from the resident's own base).
    pub stage: Stage,
    /// The write transposes the source (K-major storage of a source that is not).
    pub transpose: bool,
    /// Bytes it takes (aligned); 0 when it shares the copy its other role keeps.
    pub bytes: u32,
    /// It shares the copy its other role keeps (both read it as loaded).
    pub as_loaded: bool,
    /// Laid out for `wgmma` descriptors (K-major, panels, 1024-aligned).
    pub wgmma: bool,
    /// The dot that asked for it (for error locations).
    pub dot: Inst,
}

/// The decisions about one `for` loop.
#[derive(Clone, Debug, Default)]
pub struct LoopPlan {
    /// Its own pipeline, or the one an enclosing nest prepared for it (`nested`).
    pub pipeline: Option<PipePlan>,
    /// Its pipeline's first stages are copied by the enclosing loop ([`NestPlan`]).
    pub nested: bool,
    /// It pipelines its inner loop across its own iterations.
    pub nest: Option<NestPlan>,
    /// The dot whose next k-step 0 fragments cross the tile boundary.
    pub boundary: Option<Inst>,
    /// Operands made resident before it, in order.
    pub residents: Vec<Resident>,
    /// Why it has no pipeline (or a shallower one than asked), for the report.
    pub note: Option<String>,
    /// It has fewer stages than asked because more would not fit in shared memory.
    pub shared_cut: bool,
}

/// The pipeline decisions of one kernel.
#[derive(Clone, Debug, Default)]
pub struct Pipelines {
    loops: HashMap<Inst, LoopPlan>,
    /// Dots that run on `wgmma` (both operands in slots it can read, or A in registers), and
    /// the loads whose slots they read (their waits add a proxy fence).
    pub wgmma_dots: HashSet<Inst>,
    pub wgmma_loads: HashSet<Inst>,
    /// `wgmma` dots whose k-tile stays in flight while the next one is issued.
    pub wgmma_in_flight: HashSet<Inst>,
    /// `mbarrier`s the pipelines with loads on TMA use, one a slot.
    pub tma_barriers: u32,
}

impl Pipelines {
    /// The plan of `for` loop `inst`.
    pub fn of(&self, inst: Inst) -> Option<&LoopPlan> {
        self.loops.get(&inst)
    }

    /// Every loop's plan, in no particular order.
    pub fn loops(&self) -> impl Iterator<Item = (Inst, &LoopPlan)> {
        self.loops.iter().map(|(&i, p)| (i, p))
    }

    /// Whether any `wgmma` reads a pipeline slot (the scratch buffer is then 1024-aligned).
    pub fn any_wgmma(&self) -> bool {
        !self.wgmma_dots.is_empty()
    }
}

/// Plans the pipelines of `cx`'s kernel in program order; the maps of loads on TMA join
/// `descriptors`.
pub fn plan(
    cx: &Context<'_>,
    dots: &DotPlans,
    layouts: &LayoutPlan,
    accumulators: &AccumulatorHomes,
    descriptors: &mut Descriptors,
) -> Pipelines {
    let mut p = Planner {
        cx,
        dots,
        layouts,
        accumulators,
        descriptors,
        reserved: Vec::new(),
        active: Vec::new(),
        nests: Vec::new(),
        resident: HashMap::default(),
        wgmma_resident: HashSet::default(),
        materialized: HashSet::default(),
        out: Pipelines::default(),
    };
    p.walk(cx.k.body, 0);
    p.out
}

/// A pipeline enclosing the code being planned.
struct Active {
    pipe: PipePlan,
}

struct Planner<'a, 'k> {
    cx: &'a Context<'k>,
    dots: &'a DotPlans,
    layouts: &'a LayoutPlan,
    accumulators: &'a AccumulatorHomes,
    descriptors: &'a mut Descriptors,
    /// Bytes at the start of the scratch buffer held by enclosing pipelines and resident
    /// operands, innermost last (cumulative).
    reserved: Vec<u32>,
    /// The pipelines enclosing the code being planned, innermost last.
    active: Vec<Active>,
    /// The nests enclosing it, innermost last.
    nests: Vec<NestPlan>,
    resident: HashMap<(Value, Role), Resident>,
    wgmma_resident: HashSet<Value>,
    /// Operands already in registers in their operand layout in the kernel's top-level scope.
    materialized: HashSet<(Value, Layout)>,
    out: Pipelines,
}

impl Planner<'_, '_> {
    fn reserved_shared(&self) -> u32 {
        self.reserved.last().copied().unwrap_or(0)
    }

    fn reserve(&mut self, bytes: u32) {
        self.reserved.push(self.reserved_shared() + bytes);
    }

    fn max_shared(&self) -> u32 {
        self.cx.target.max_shared_bytes()
    }

    fn mma_plan(&self, inst: Inst) -> Option<MmaPlan> {
        self.dots.mma(inst)
    }

    fn natural(&self, v: Value) -> Layout {
        self.layouts.natural(v).0
    }

    /// The anchored instructions of `block` in program order, `depth` loop or branch bodies
    /// deep.
    fn walk(&mut self, block: Block, depth: u32) {
        let k = self.cx.k;
        for &inst in &k.blocks[block].insts {
            let d = &k.insts[inst];
            if !is_anchored(&d.op) {
                continue;
            }
            match d.op {
                Op::For { .. } => self.plan_for(inst, depth),
                Op::While | Op::If => {
                    for &r in &d.regions {
                        self.walk(r, depth + 1);
                    }
                }
                Op::Dot { .. } if depth == 0 => self.straight_line_dot(inst),
                _ => {}
            }
        }
    }

    /// A dot of the kernel's top level outside every loop: the operands it fetches into
    /// registers stay there for the code after it.
    fn straight_line_dot(&mut self, dot: Inst) {
        let Some(plan) = self.mma_plan(dot) else {
            return;
        };
        let args = self.cx.k.insts[dot].args.clone();
        for (v, role) in [(args[0], Role::A), (args[1], Role::B)] {
            if !self.in_shared(v, role, &plan) {
                self.materialized.insert((v, plan.operand_layout(role)));
            }
        }
    }

    fn plan_for(&mut self, inst: Inst, depth: u32) {
        let k = self.cx.k;
        let body = k.insts[inst].regions[0];
        let mut lp = LoopPlan::default();
        // The operands of the body's dots defined outside the loop: resident, or hoisted.
        let inside = region_values(k, body);
        if depth == 0 {
            lp.residents = self.keep_invariants_resident(body, &inside);
        }
        for &dot in &k.blocks[body].insts {
            let Some(plan) = self.mma_plan(dot) else {
                continue;
            };
            let args = &k.insts[dot].args;
            for (v, role) in [(args[0], Role::A), (args[1], Role::B)] {
                if depth == 0 && !inside.contains(&v) && !self.resident.contains_key(&(v, role)) {
                    self.materialized.insert((v, plan.operand_layout(role)));
                }
            }
        }
        // Its pipeline: the one an enclosing nest prepared, or its own.
        let nested = self.nests.last().filter(|n| n.inner == inst).cloned();
        let piped = match nested {
            Some(n) => {
                lp.nested = true;
                Some(PipePlan {
                    in_flight: self.has_dot_in_flight(body),
                    ..n.pipe
                })
            }
            None => match self.plan_pipeline(inst) {
                Ok((mut pipe, left_out)) => {
                    lp.note = left_out;
                    self.plan_tma_slots(&mut pipe);
                    self.reserve(pipe.stages * pipe.slot_bytes);
                    Some(PipePlan {
                        in_flight: self.has_dot_in_flight(body),
                        ..pipe
                    })
                }
                Err(why) => {
                    lp.note = Some(why);
                    None
                }
            },
        };
        if let Some(pipe) = &piped {
            if pipe.stages < self.cx.stages_planned(inst) && !lp.nested {
                lp.shared_cut = true;
                lp.note = Some(format!(
                    "{} stages of {} bytes: {} stages would exceed the {} bytes of shared memory left",
                    pipe.stages,
                    pipe.slot_bytes,
                    pipe.stages + 1,
                    self.max_shared().saturating_sub(self.reserved_before(lp.nested))
                ));
            } else if pipe.stages < self.cx.stages_asked(inst) && !lp.nested {
                lp.shared_cut = true;
                lp.note = Some(self.kernel_cut(pipe.stages));
            }
            self.active.push(Active { pipe: pipe.clone() });
            lp.boundary = self.boundary_dot(body, pipe);
        }
        lp.pipeline = piped.clone();
        if piped.is_none() {
            if let Some(nest) = self.nest_inner_loop(inst) {
                self.reserve(nest.pipe.stages * nest.pipe.slot_bytes);
                let in_flight = self.has_dot_in_flight(k.insts[nest.inner].regions[0]);
                let nest = NestPlan {
                    pipe: PipePlan {
                        in_flight,
                        ..nest.pipe
                    },
                    ..nest
                };
                lp.nest = Some(nest.clone());
                lp.note = None;
                self.nests.push(nest);
            }
        }
        let has_nest = lp.nest.is_some();
        self.out.loops.insert(inst, lp);
        self.walk(body, depth + 1);
        if piped.is_some() {
            self.active.pop();
            if !self.out.loops[&inst].nested {
                self.reserved.pop();
            }
        }
        if has_nest {
            self.nests.pop();
            self.reserved.pop();
        }
    }

    /// Why a loop has `stages` (fewer than it asks for) under the kernel's stage cap.
    fn kernel_cut(&self, stages: u32) -> String {
        format!(
            "{stages} stage{}: with {} the kernel's shared memory exceeds the {} bytes sm_{} \
             allows a block",
            if stages == 1 { "" } else { "s" },
            self.cx.stage_cap.saturating_add(1),
            self.max_shared(),
            self.cx.target.sm
        )
    }

    /// The bytes reserved before this loop's slots.
    fn reserved_before(&self, nested: bool) -> u32 {
        if nested {
            self.reserved_shared()
        } else {
            let n = self.reserved.len();
            if n >= 2 {
                self.reserved[n - 2]
            } else {
                0
            }
        }
    }

    // --- resident operands -----------------------------------------------------------------

    /// Rule *resident operands* before a loop at the kernel's top level (see the module doc).
    fn keep_invariants_resident(&mut self, body: Block, inside: &HashSet<Value>) -> Vec<Resident> {
        let k = self.cx.k;
        let mut candidates: Vec<(Value, Role, MmaPlan, Inst)> = Vec::new();
        for inst in dots_within(k, body) {
            let Some(plan) = self.mma_plan(inst) else {
                continue;
            };
            let args = k.insts[inst].args.clone();
            for (v, role) in [(args[0], Role::A), (args[1], Role::B)] {
                let ol = plan.operand_layout(role);
                let known = candidates.iter().any(|c| (c.0, c.1) == (v, role));
                if known
                    || inside.contains(&v)
                    || self.resident.contains_key(&(v, role))
                    || self.natural(v) == ol
                    || self.materialized.contains(&(v, ol))
                {
                    continue;
                }
                candidates.push((v, role, plan, inst));
            }
        }
        // An A that a `wgmma` reads with a descriptor costs neither registers nor
        // instructions where it is resident, so it stays there whatever its size (as Triton
        // keeps a loaded wgmma A in shared memory); the register budget is for the others,
        // which `ldmatrix` re-reads at each use.
        let (by_descriptor, others): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|(v, role, plan, _)| self.descriptor_reads(*v, *role, plan));
        let mut out: Vec<Resident> = by_descriptor
            .into_iter()
            .filter_map(|(v, role, plan, inst)| self.stay_resident(v, role, &plan, inst))
            .collect();
        let registers: u32 = others
            .iter()
            .map(|(_, role, plan, _)| plan.fragment_registers(*role))
            .sum();
        if registers > HOISTED_OPERAND_REGS {
            out.extend(
                others
                    .into_iter()
                    .filter_map(|(v, role, plan, inst)| self.stay_resident(v, role, &plan, inst)),
            );
        }
        out
    }

    /// Whether a `wgmma` candidate would read the invariant operand `v` in `role` from its
    /// resident copy with a descriptor ([`Self::stay_resident`]'s `wgmma_a`): an A, stored
    /// K-major in rows of 64 bytes or a multiple of 128, at a 1024-byte aligned offset.
    fn descriptor_reads(&self, v: Value, role: Role, plan: &MmaPlan) -> bool {
        let (_, src_k_major) = staging_source(self.cx.k, v, role);
        let (st, _) = plan.operand_stage(role, src_k_major, 0);
        let row_bytes = st.cols * st.kind.elem_bytes();
        plan.wgmma
            && role == Role::A
            && st.k_major
            && self.reserved_shared().is_multiple_of(1024)
            && (row_bytes == 64 || row_bytes.is_multiple_of(128))
    }

    /// Keeps the loop-invariant operand `v` in shared memory for the rest of the kernel, when
    /// it fits (later scratch uses go after it).
    fn stay_resident(
        &mut self,
        v: Value,
        role: Role,
        plan: &MmaPlan,
        dot: Inst,
    ) -> Option<Resident> {
        let k = self.cx.k;
        let (_, src_k_major) = staging_source(k, v, role);
        let (mut st, transpose) = plan.operand_stage(role, src_k_major, 0);
        if let Some(stage) = self.resident_as_loaded(v, role, &st, transpose) {
            let r = Resident {
                value: v,
                role,
                stage,
                transpose,
                bytes: 0,
                as_loaded: true,
                wgmma: false,
                dot,
            };
            self.resident.insert((v, role), r);
            return Some(r);
        }
        let shift = self.reserved_shared();
        // An A a `wgmma` may read with a descriptor (the backward's K and V, the forward's Q).
        let row_bytes = st.cols * st.kind.elem_bytes();
        let wgmma_a = self.descriptor_reads(v, role, plan);
        st.panel_major = wgmma_a && row_bytes > 128;
        let align = if wgmma_a { 1024 } else { 128 };
        let bytes = st.bytes().div_ceil(align) * align;
        if shift + bytes > self.max_shared() {
            return None;
        }
        self.reserve(bytes);
        let r = Resident {
            value: v,
            role,
            stage: st,
            transpose,
            bytes,
            as_loaded: false,
            wgmma: wgmma_a,
            dot,
        };
        self.resident.insert((v, role), r);
        if wgmma_a {
            self.wgmma_resident.insert(v);
        }
        Some(r)
    }

    /// The stage of the copy of `v` already resident for its other role, when both roles read
    /// it as it was loaded (row-major, swizzled by its row length only, not transposed by the
    /// write): FlashAttention's backward reads K as A of `K Q^T` (plain `ldmatrix`) and as B of
    /// `dS K` (`.trans`) from one copy. `st` and `transpose`: the stage this role would write.
    fn resident_as_loaded(
        &self,
        v: Value,
        role: Role,
        st: &Stage,
        transpose: bool,
    ) -> Option<Stage> {
        let other = match role {
            Role::A => Role::B,
            Role::B => Role::A,
        };
        let so = self.resident.get(&(v, other))?.stage;
        let (_, other_src_k_major) = staging_source(self.cx.k, v, other);
        let other_as_loaded = so.k_major == other_src_k_major;
        let same_tile = (so.kind, so.rows, so.cols) == (st.kind, st.rows, st.cols);
        (!transpose && other_as_loaded && same_tile).then_some(Stage {
            role,
            k_major: st.k_major,
            ..so
        })
    }

    /// Whether a dot of `plan` finds operand `v` in shared memory already (resident, or a slot
    /// of an enclosing pipeline) rather than in registers.
    fn in_shared(&self, v: Value, role: Role, plan: &MmaPlan) -> bool {
        self.shared_operand(v, role, plan).is_some()
    }

    /// Where a dot of `plan` finds operand `v` in shared memory: `Some(true)` in a pipeline
    /// slot, `Some(false)` resident, `None` in registers.
    fn shared_operand(&self, v: Value, role: Role, plan: &MmaPlan) -> Option<bool> {
        let ol = plan.operand_layout(role);
        if self.materialized.contains(&(v, ol.clone())) || self.natural(v) == ol {
            return None;
        }
        if let Some(r) = self.resident.get(&(v, role)) {
            if r.stage.kind == plan.kind_of(role) {
                return Some(false);
            }
        }
        let (src, src_k_major) = staging_source(self.cx.k, v, role);
        self.pipelined_stage(src, role, src_k_major, plan)
            .then_some(true)
    }

    /// Whether `src` is streamed by a running pipeline in the orientation a dot of `plan`
    /// reads it.
    fn pipelined_stage(&self, src: Value, role: Role, k_major: bool, plan: &MmaPlan) -> bool {
        let Some(a) = self
            .active
            .iter()
            .rev()
            .find(|a| a.pipe.loads.iter().any(|l| l.value == src))
        else {
            return false;
        };
        let pl = a
            .pipe
            .loads
            .iter()
            .find(|l| l.value == src)
            .expect("found above");
        pl.reads.contains(&(role, k_major)) && pl.stage.kind == plan.kind_of(role)
    }

    // --- streamed loads --------------------------------------------------------------------

    /// Why load `li` cannot be copied a stage ahead, or `None` when it can: not volatile,
    /// masked elements read zero (the copies zero-fill them), and its pointer and mask depend
    /// only on `iv` and values from outside the loop (`inside`).
    fn not_streamable(&self, li: Inst, iv: Value, inside: &HashSet<Value>) -> Option<String> {
        let k = self.cx.k;
        let d = &k.insts[li];
        let Op::Load {
            has_mask,
            has_other,
            volatile,
            ..
        } = d.op
        else {
            return Some("not a load".into());
        };
        if volatile {
            return Some("it is volatile".into());
        }
        if has_mask && has_other && !is_zero(k, d.args[2]) {
            return Some("its masked elements read a value other than zero".into());
        }
        let culprit = |v: Value| {
            (!depends_on_ivs_only(k, v, &[iv], inside))
                .then(|| loop_dependency(self.cx, v, iv, inside))
        };
        if let Some(why) = culprit(d.args[0]) {
            return Some(format!("its address {why}"));
        }
        if has_mask {
            if let Some(why) = culprit(d.args[1]) {
                return Some(format!("its mask {why}"));
            }
        }
        None
    }

    /// The loads of `for_inst`'s body worth pipelining, with their slot layout, or why there
    /// are none.
    /// On success, also what was left out of the pipeline and why.
    fn plan_pipeline(&mut self, for_inst: Inst) -> Result<(PipePlan, Option<String>), String> {
        let k = self.cx.k;
        let asked = self.cx.stages_asked(for_inst);
        if asked < 2 {
            return Err(format!("{asked} stage asked for"));
        }
        let num_stages = self.cx.stages_planned(for_inst);
        if num_stages < 2 {
            return Err(self.kernel_cut(num_stages));
        }
        let body = k.insts[for_inst].regions[0];
        let iv = k.blocks[body].args[0];
        if k.ty(iv).dtype().bits() > 32 {
            return Err("its induction variable is wider than 32 bits".into());
        }
        let inside = region_values(k, body);
        let mut loads: Vec<PipeLoad> = Vec::new();
        let mut rejected: Vec<String> = Vec::new();
        let mut offset = 0u32;
        let body_insts: HashSet<Inst> = k.blocks[body].insts.iter().copied().collect();
        let mut any_dot = false;
        // Loads rule *TMA slots* may take (decided after the wgmma slots): their stages are
        // placed at its alignment.
        let mut tma_candidates: HashSet<Inst> = HashSet::default();
        for &dot in &k.blocks[body].insts {
            if !matches!(k.insts[dot].op, Op::Dot { .. }) {
                continue;
            }
            let Some(plan) = self.mma_plan(dot) else {
                continue;
            };
            // tf32 operands are rounded as they are written, which a copy cannot do.
            if plan.kind == MmaKind::Tf32 {
                continue;
            }
            any_dot = true;
            for (pos, role) in [(0, Role::A), (1, Role::B)] {
                let operand = k.insts[dot].args[pos];
                let (src, permuted) = untransposed(k, operand);
                let Some(li) = k.def_inst(src) else {
                    continue;
                };
                // A load read by several dots has one slot; its first dot placed it.
                if !body_insts.contains(&li) || loads.iter().any(|l| l.inst == li) {
                    continue;
                }
                if !matches!(k.insts[li].op, Op::Load { .. }) {
                    continue;
                }
                let at = loc_of(k.insts[li].loc);
                let Some(reads) = self.dot_reads(src, &body_insts, plan.kind_of(role)) else {
                    rejected.push(format!(
                        "the load at {at} is also used by something other than a dot operand"
                    ));
                    continue;
                };
                if let Some(why) = self.not_streamable(li, iv, &inside) {
                    rejected.push(format!("the load at {at} cannot be copied ahead: {why}"));
                    continue;
                }
                // fp8 slots are read with plain `ldmatrix` (`.trans` moves 16-bit elements).
                if !plan.kind_of(role).transposable() && reads.iter().any(|&(_, k_major)| !k_major)
                {
                    rejected.push(format!(
                        "the load at {at} is an fp8 operand with K across its rows (only a \
                         K-contiguous one is copied as it is; this one is transposed through \
                         registers)"
                    ));
                    continue;
                }
                let dt = k.ty(src).dtype();
                if !matches!(dt, DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2) {
                    continue;
                }
                let es = dt.size_bytes() as u32;
                let vec = self.layouts.access(li).vec;
                if !matches!(vec * es, 4 | 8 | 16) {
                    rejected.push(format!(
                        "the load at {at} moves {} bytes an access (cp.async copies 4, 8 or 16)",
                        vec * es
                    ));
                    continue;
                }
                let shape = k.ty(src).shape;
                let stage = Stage {
                    role,
                    kind: plan.kind_of(role),
                    rows: shape.dim(0) as u32,
                    cols: shape.dim(1) as u32,
                    k_major: (role == Role::A) != permuted,
                    offset,
                    panel_major: false,
                };
                // wgmma's swizzle, and TMA's, are anchored at 1024-byte boundaries.
                let row_bytes = stage.cols * stage.kind.elem_bytes();
                let tma_span = matches!(row_bytes, 32 | 64 | 128)
                    || (plan.wgmma && row_bytes.is_multiple_of(128));
                if tma_span && self.descriptors.streamable.contains_key(&li) {
                    tma_candidates.insert(li);
                }
                let align = if plan.wgmma || tma_candidates.contains(&li) {
                    1024
                } else {
                    128
                };
                offset += stage.bytes().div_ceil(align) * align;
                loads.push(PipeLoad {
                    inst: li,
                    value: src,
                    stage,
                    reads,
                    layout: self.layouts.access(li).layout.clone(),
                    vec,
                    tma: None,
                });
            }
        }
        if loads.is_empty() {
            return Err(if !rejected.is_empty() {
                rejected.join("; ")
            } else if any_dot {
                "no f16/bf16/fp8 dot of the body reads a load of the body".into()
            } else {
                "no tensor-core dot in the body".into()
            });
        }
        // The slots must leave room for other scratch uses (checked again at the end of
        // compilation, which retries with fewer stages), after what is reserved already (a
        // resident dot operand). Fewer stages, then fewer loads, until the slots fit.
        let room = self.max_shared().saturating_sub(self.reserved_shared());
        let mut stages = num_stages;
        while stages > 2 && stages * offset > room {
            stages -= 1;
        }
        while stages * offset > room && loads.len() > 1 {
            let last = loads.pop().expect("a load");
            offset = last.stage.offset;
        }
        if stages * offset > room {
            return Err(format!(
                "2 stages of {offset} bytes exceed the {room} bytes of shared memory left"
            ));
        }
        let (rows, mut slot_bytes) = self.plan_row_loads(body, &inside, offset, stages, room);
        // Slots of wgmma or TMA tiles start at multiples of 1024 bytes, also when row loads
        // follow the tiles in each slot.
        let wgmma_slots = offset.is_multiple_of(1024)
            && (k.blocks[body]
                .insts
                .iter()
                .any(|&i| self.mma_plan(i).is_some_and(|p| p.wgmma))
                || loads.iter().any(|l| tma_candidates.contains(&l.inst)));
        if wgmma_slots && stages * slot_bytes.next_multiple_of(1024) <= room {
            slot_bytes = slot_bytes.next_multiple_of(1024);
        }
        self.plan_wgmma_slots(body, &mut loads, slot_bytes);
        let left_out = (!rejected.is_empty()).then(|| rejected.join("; "));
        Ok((
            PipePlan {
                loads,
                rows,
                stages,
                slot_bytes,
                in_flight: false,
                barriers: None,
            },
            left_out,
        ))
    }

    /// Rule *TMA slots* (see the module doc) over a loop's or a nest's pipeline.
    fn plan_tma_slots(&mut self, pipe: &mut PipePlan) {
        if !self.reserved_shared().is_multiple_of(1024) {
            return;
        }
        let mut any = false;
        for pl in &mut pipe.loads {
            let Some(source) = self.descriptors.streamable.get(&pl.inst).cloned() else {
                continue;
            };
            let st = &pl.stage;
            let row_bytes = st.cols * st.kind.elem_bytes();
            let span = if st.panel_major { 128 } else { row_bytes };
            // The swizzle TMA writes is the slot's (`Swizzle::for_row_bytes`) for these
            // spans, anchored at multiples of 8 of them.
            let aligned =
                st.offset.is_multiple_of(8 * span) && pipe.slot_bytes.is_multiple_of(8 * span);
            if !matches!(span, 32 | 64 | 128) || !aligned {
                continue;
            }
            let box_cols = span / st.kind.elem_bytes();
            let map = self.descriptors.add_map(&TensorMapAbi {
                box_dims: [box_cols, st.rows],
                swizzle: span,
                ..source.map.clone()
            });
            pl.tma = Some(TmaFeed {
                map,
                offsets: source.offsets,
                copies: st.cols / box_cols,
                box_cols,
            });
            any = true;
        }
        if any {
            pipe.barriers = Some(self.out.tma_barriers);
            self.out.tma_barriers += pipe.stages;
        }
    }

    /// How the dots read `src` (a load's value in the loop body), as (role, K-major) per
    /// operand, when every use of it is an operand of an f16/bf16 tensor-core dot of `kind`
    /// directly in the body, as is or through `.trans()` (whose uses are such operands too);
    /// `None` when some use is not (the value is then needed in registers).
    fn dot_reads(
        &self,
        src: Value,
        body_insts: &HashSet<Inst>,
        kind: MmaKind,
    ) -> Option<Vec<(Role, bool)>> {
        let k = self.cx.k;
        // The role of operand `pos` of `user` when it is a dot operand read from the slot.
        let dot_role = |user: Inst, pos: usize| {
            let is_dot = matches!(k.insts[user].op, Op::Dot { .. });
            if !is_dot || pos > 1 || !body_insts.contains(&user) {
                return None;
            }
            let plan = self.mma_plan(user)?;
            let role = if pos == 0 { Role::A } else { Role::B };
            (plan.kind_of(role) == kind).then_some(role)
        };
        let mut reads = Vec::new();
        for &(user, pos) in self.cx.uses.users(src)? {
            if let Some(role) = dot_role(user, pos) {
                reads.push((role, role == Role::A));
                continue;
            }
            let d = &k.insts[user];
            if !matches!(&d.op, Op::Permute { perm } if perm[..] == [1, 0]) {
                return None;
            }
            for &(dot, pos) in self.cx.uses.users(d.results[0])? {
                let role = dot_role(dot, pos)?;
                reads.push((role, role != Role::A));
            }
        }
        Some(reads)
    }

    /// Rule *row loads*: the rank-1 loads of a pipelined loop's body staged beside its tiles,
    /// placed after `tile_bytes` in each slot, while `stages` slots fit in `room`, and the
    /// bytes of one slot. A load qualifies when its layout is an mma accumulator's slice (rule
    /// *broadcast load*), its elements are 4 bytes, it can be copied ahead, and its accesses
    /// are 1, 2 or 4 elements.
    fn plan_row_loads(
        &self,
        body: Block,
        inside: &HashSet<Value>,
        tile_bytes: u32,
        stages: u32,
        room: u32,
    ) -> (Vec<RowLoad>, u32) {
        let k = self.cx.k;
        let iv = k.blocks[body].args[0];
        let mut rows = Vec::new();
        let mut offset = tile_bytes;
        for &li in &k.blocks[body].insts {
            if !matches!(k.insts[li].op, Op::Load { .. })
                || self.not_streamable(li, iv, inside).is_some()
            {
                continue;
            }
            let value = k.insts[li].results[0];
            let ty = k.ty(value);
            let word = matches!(ty.dtype(), DType::F32 | DType::I32 | DType::U32);
            if ty.shape.rank() != 1 || !word || !self.layouts.access(li).broadcast {
                continue;
            }
            let vec = self.layouts.access(li).vec;
            if !matches!(vec, 1 | 2 | 4) {
                continue;
            }
            let n = ty.shape.dim(0) as u32;
            let bytes = (n * 4).div_ceil(16) * 16;
            if stages * (offset + bytes).div_ceil(128) * 128 > room {
                break;
            }
            rows.push(RowLoad {
                inst: li,
                value,
                offset,
                copy: Layout::blocked(&ty.shape, vec, self.cx.num_warps()),
                vec,
            });
            offset += bytes;
        }
        (rows, offset.div_ceil(128) * 128)
    }

    /// Rule *wgmma slots* over the body's `wgmma` candidates (see the module doc); marks those
    /// that run on `wgmma`, the loads they read, and which stay in flight.
    fn plan_wgmma_slots(&mut self, body: Block, loads: &mut [PipeLoad], slot_bytes: u32) {
        if !slot_bytes.is_multiple_of(1024) || !self.reserved_shared().is_multiple_of(1024) {
            return;
        }
        let k = self.cx.k;
        let body_insts: HashSet<Inst> = k.blocks[body].insts.iter().copied().collect();
        // With other dots in the body, their waits retire a k-tile left in flight within the
        // iteration, while its register A stays live across them: nothing gained, registers
        // lost (docs/performance.md, "wgmma and its k-tile in flight").
        let only_dot = body_insts
            .iter()
            .filter(|&&i| matches!(k.insts[i].op, Op::Dot { .. }))
            .count()
            == 1;
        for dot in k.blocks[body].insts.clone() {
            if !matches!(k.insts[dot].op, Op::Dot { .. }) {
                continue;
            }
            if !self.mma_plan(dot).is_some_and(|p| p.wgmma) {
                continue;
            }
            let mut slots = Vec::new();
            let mut placed = true;
            for (pos, role) in [(0, Role::A), (1, Role::B)] {
                let operand = k.insts[dot].args[pos];
                let (src, permuted) = untransposed(k, operand);
                let k_major = (role == Role::A) != permuted;
                let Some(i) = loads.iter().position(|l| l.value == src) else {
                    // Not in a slot: only an A in registers, not loaded in the body.
                    let loaded_here = k.def_inst(src).is_some_and(|li| {
                        body_insts.contains(&li) && matches!(k.insts[li].op, Op::Load { .. })
                    });
                    // A resident A (a Q too large for registers) stays on `mma.sync`, which
                    // reads it from shared memory a k-step at a time; wgmma's register form
                    // would hold all of it across the loop. Unless it is resident in a layout
                    // wgmma's descriptors read (the backward's K and V): then wgmma reads it
                    // there.
                    let resident = self.resident.contains_key(&(operand, role))
                        && !self.wgmma_resident.contains(&operand);
                    placed &= role == Role::A && !loaded_here && !resident;
                    continue;
                };
                let st = &loads[i].stage;
                let readable = self
                    .cx
                    .target
                    .wgmma_reads_rows_of(st.cols * st.kind.elem_bytes());
                // Other dots may read the slot too, either way: another `wgmma` through its own
                // descriptor, `mma.sync` through `ldmatrix`, which reads panels as well.
                if !loads[i].reads.contains(&(role, k_major))
                    || !st.offset.is_multiple_of(1024)
                    || !readable
                    || ((role == Role::A || !st.kind.transposable()) && !k_major)
                {
                    placed = false;
                    continue;
                }
                slots.push(i);
            }
            if placed {
                for i in slots {
                    let st = &mut loads[i].stage;
                    st.panel_major = st.cols * st.kind.elem_bytes() > 128;
                    self.out.wgmma_loads.insert(loads[i].inst);
                }
                self.out.wgmma_dots.insert(dot);
                if only_dot && self.accumulates_in_flight(dot) {
                    self.out.wgmma_in_flight.insert(dot);
                }
            }
        }
    }

    /// Whether `dot` may stay in flight into the next iteration: its accumulator is the
    /// carried value it runs in (rule *accumulator home*), which nothing else reads (the next
    /// iteration's readers would read it while the dot still writes it).
    fn accumulates_in_flight(&self, dot: Inst) -> bool {
        let acc = self.cx.k.insts[dot].args[2];
        // Live readers only: the arena keeps instructions that passes dropped.
        let readers = self.cx.uses.users(acc).map_or(0, |u| u.len());
        self.accumulators.of(dot) == Some(acc) && readers == 1
    }

    /// Whether one of the dots of the loop with this body is a `wgmma` in flight into the
    /// next iteration.
    fn has_dot_in_flight(&self, body: Block) -> bool {
        self.cx.k.blocks[body]
            .insts
            .iter()
            .any(|i| self.out.wgmma_in_flight.contains(i))
    }

    // --- nests and boundary fragments ------------------------------------------------------

    /// Rule *nest* for `outer` (see the module doc): its inner loop and that loop's pipeline.
    fn nest_inner_loop(&mut self, outer: Inst) -> Option<NestPlan> {
        let k = self.cx.k;
        let body = k.insts[outer].regions[0];
        let outer_iv = k.blocks[body].args[0];
        if k.ty(outer_iv).dtype().bits() > 32 {
            return None;
        }
        let mut loops = k.blocks[body]
            .insts
            .iter()
            .copied()
            .filter(|&i| matches!(k.insts[i].op, Op::For { .. }));
        let inner = loops.next()?;
        if loops.next().is_some() {
            return None;
        }
        let outer_inside = region_values(k, body);
        let d = &k.insts[inner];
        let inner_body = d.regions[0];
        let inner_iv = k.blocks[inner_body].args[0];
        let bounds_ok = d.args[..3]
            .iter()
            .all(|&v| depends_on_ivs_only(k, v, &[outer_iv], &outer_inside));
        // Every dot operand loaded in the inner body (through a transpose): no resident
        // operand takes scratch the inner loop's prologue would write.
        let inner_inside = region_values(k, inner_body);
        let operand_inside = |v: Value| {
            let v = match k.def_inst(v).map(|i| &k.insts[i]) {
                Some(t) if matches!(t.op, Op::Permute { .. }) => t.args[0],
                _ => v,
            };
            inner_inside.contains(&v)
        };
        let operands_ok = k.blocks[inner_body].insts.iter().all(|&i| {
            let t = &k.insts[i];
            !matches!(t.op, Op::Dot { .. }) || t.args[..2].iter().all(|&v| operand_inside(v))
        });
        if !bounds_ok || !operands_ok {
            return None;
        }
        let (pipe, _) = self.plan_pipeline(inner).ok()?;
        let ivs = [outer_iv, inner_iv];
        let insts = pipe.loads.iter().map(|pl| pl.inst);
        let addrs_ok = insts.chain(pipe.rows.iter().map(|r| r.inst)).all(|li| {
            let t = &k.insts[li];
            let has_mask = matches!(t.op, Op::Load { has_mask: true, .. });
            depends_on_ivs_only(k, t.args[0], &ivs, &outer_inside)
                && (!has_mask || depends_on_ivs_only(k, t.args[1], &ivs, &outer_inside))
        });
        if !addrs_ok {
            return None;
        }
        let mut pipe = pipe;
        self.plan_tma_slots(&mut pipe);
        Some(NestPlan { inner, pipe })
    }

    /// Rule *boundary fragments*: the body's only dot, with both operands in this pipeline's
    /// slots and at least two k-steps, and no other instruction of the body that may use shared
    /// memory (the pipelined loads aside), within [`BOUNDARY_MAX_REGISTERS`].
    fn boundary_dot(&self, body: Block, pipe: &PipePlan) -> Option<Inst> {
        let k = self.cx.k;
        let mut dot = None;
        for &i in &k.blocks[body].insts {
            let op = &k.insts[i].op;
            match op {
                Op::Dot { .. } if dot.is_none() => dot = Some(i),
                Op::Load { .. } if pipe.loads.iter().any(|l| l.inst == i) => {}
                Op::Yield => {}
                Op::Gather { .. } | Op::Flip { .. } => return None,
                _ if is_anchored(op) || !k.insts[i].regions.is_empty() => return None,
                _ => {}
            }
        }
        let dot = dot?;
        let plan = self.mma_plan(dot)?;
        if self.out.wgmma_dots.contains(&dot)
            || pipe.barriers.is_some()
            || plan.k / plan.kind.k_step() < 2
            || plan.split_tf32
            || self.boundary_registers(pipe, &plan) > BOUNDARY_MAX_REGISTERS
        {
            return None;
        }
        let args = &k.insts[dot].args;
        let both_piped = [(args[0], Role::A), (args[1], Role::B)]
            .into_iter()
            .all(|(v, role)| self.shared_operand(v, role, &plan) == Some(true));
        both_piped.then_some(dot)
    }

    /// An estimate of the registers a thread holds in the loop when the fragments cross the
    /// tile boundary: the f32 accumulators, three k-steps of operand fragments (the next
    /// tile's first, carried, and the current and next k-step's, double-buffered within the
    /// tile) and one per `cp.async` copy (its source or destination address).
    fn boundary_registers(&self, pipe: &PipePlan, plan: &MmaPlan) -> u32 {
        let k = self.cx.k;
        let accumulators = plan.m * plan.n / (32 * self.cx.num_warps());
        let k_steps = plan.k / plan.kind.k_step();
        let kstep_words: u32 = [Role::A, Role::B]
            .into_iter()
            .map(|role| plan.fragment_registers(role) / k_steps)
            .sum();
        let copies: u32 = pipe
            .loads
            .iter()
            .map(|pl| {
                let shape = k.ty(pl.value).shape;
                pl.layout.geometry(&shape).count as u32 / pl.vec
            })
            .sum();
        accumulators + 3 * kstep_words + copies
    }
}

/// The dots in `block` and in the regions nested in it, in program order.
fn dots_within(k: &tegula_ir::Kernel, block: Block) -> Vec<Inst> {
    let mut out = Vec::new();
    for &i in &k.blocks[block].insts {
        if matches!(k.insts[i].op, Op::Dot { .. }) {
            out.push(i);
        }
        for &r in &k.insts[i].regions {
            out.extend(dots_within(k, r));
        }
    }
    out
}

/// `file:line` of a location, or `?` where it is unknown.
fn loc_of(loc: Loc) -> String {
    loc.to_string()
}

/// What makes `v` depend on the loop beyond its induction variable: the first value it reads
/// that is defined in the loop and is neither `iv` nor computed from `iv` and invariants by
/// free ops, said for a kernel author.
fn loop_dependency(cx: &Context<'_>, v: Value, iv: Value, inside: &HashSet<Value>) -> String {
    let k = cx.k;
    let mut stack = vec![v];
    let mut seen = HashSet::default();
    while let Some(x) = stack.pop() {
        if x == iv || !inside.contains(&x) || !seen.insert(x) {
            continue;
        }
        match k.values[x].def {
            tegula_ir::ValueDef::BlockArg(block, i) => {
                let what = match cx.uses.parent_of(block) {
                    Some(l) => format!("the loop at {}", k.insts[l].loc),
                    None => "its region".into(),
                };
                return format!(
                    "depends on {x}, a value carried by {what} (argument {i}): a loop-carried \
                     recurrence, not a function of the loop counter"
                );
            }
            tegula_ir::ValueDef::Result(i, _) => {
                let d = &k.insts[i];
                if is_anchored(&d.op) || moves_across_threads(&d.op) {
                    return format!(
                        "depends on the `{}` at {}, computed in the loop",
                        d.op.name(),
                        d.loc
                    );
                }
                stack.extend(d.args.iter().copied());
            }
            tegula_ir::ValueDef::Param(_) => {}
        }
    }
    "depends on values computed in the loop".into()
}
