//! What the compiler decided, said for the kernel's author: per loop, how many pipeline stages
//! it got against the ones asked for and, when fewer, why (at the loop's and the load's source
//! lines); per dot, the instructions it runs on and where its operands come from; the shared
//! memory, registers and occupancy that follow. `tegula plan` prints it; `Device::plan` and
//! the tuner read it.

use super::{Context, Plan};
use crate::analysis::{is_anchored, untransposed};
use crate::mma_layout::Role;
use crate::Target;
use std::fmt;
use tegula_ir::{Block, Inst, Kernel, Loc, Op, Value};

/// The instructions a `dot` runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotKind {
    /// FMAs on the CUDA cores.
    Fma,
    /// `mma.sync` with `wm x wn` warps (`tf32x3`: three tf32 mmas a step).
    MmaSync { wm: u32, wn: u32, tf32x3: bool },
    /// Hopper's `wgmma.mma_async`; `in_flight`: a k-tile stays in flight into the next
    /// iteration.
    Wgmma { in_flight: bool },
}

/// Where a dot reads one operand from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperandHome {
    /// Registers computed in the loop (or in straight-line code).
    Registers,
    /// Registers loaded once before the loop (a loop invariant).
    Hoisted,
    /// Shared memory, written once before the loop (a loop invariant too large for registers).
    Resident,
    /// A software pipeline's slot.
    Slot,
}

/// One dot's decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DotReport {
    pub loc: Loc,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub kind: DotKind,
    pub a: OperandHome,
    pub b: OperandHome,
    /// It runs in the registers of the loop-carried value it replaces (rule *accumulator
    /// home*): no copies of its accumulator before or after it.
    pub accumulator_in_carried: bool,
}

/// One `for` loop's decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopReport {
    pub loc: Loc,
    /// Loop bodies enclosing it.
    pub depth: u32,
    /// The loop has a tensor-core dot reading a load of its body: a pipeline candidate.
    pub candidate: bool,
    /// Stages it runs with: 1 when it is not pipelined.
    pub stages: u32,
    /// Stages asked for: the loop's own (`range(..).num_stages(s)`) when it has one, else the
    /// launch's.
    pub asked: u32,
    /// The loop asks for stages of its own rather than the launch's.
    pub own_stages: bool,
    /// Loads streamed through the slots, by source line.
    pub streamed: Vec<Loc>,
    /// Those of them whose slots TMA fills (rule *TMA slots*), with the tensor map each uses.
    pub on_tma: Vec<(Loc, usize)>,
    /// Rank-1 loads riding along in the slots.
    pub row_loads: Vec<Loc>,
    pub slot_bytes: u32,
    /// Its first stages are copied by the enclosing loop (a nest).
    pub nested: bool,
    /// It copies its inner loop's first stages across its own iterations.
    pub pipelines_inner_loop: bool,
    /// A dot's next first fragments are loaded across the tile boundary.
    pub boundary_fragments: bool,
    /// Loop-invariant dot operands kept in shared memory before it.
    pub resident_operands: usize,
    /// It has fewer stages than asked because more would not fit in shared memory.
    pub shared_cut: bool,
    /// Why it has fewer stages than asked (or none), or which of its dot operands' loads are
    /// not streamed and why.
    pub why: Option<String>,
}

/// Everything the compiler decided about one kernel specialization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub kernel: String,
    pub target: Target,
    pub num_warps: u32,
    /// Stages the launch asked for, and the stages the kernel was compiled with for the loops
    /// that take the launch's (fewer when its shared memory did not fit: see `stage_cut`).
    pub stages_asked: u32,
    pub stages_compiled: u32,
    /// Why the whole kernel was compiled with fewer stages than asked (for the launch's
    /// stages or for a loop's own: each loop's `why` says which it lost).
    pub stage_cut: Option<String>,
    pub loops: Vec<LoopReport>,
    pub dots: Vec<DotReport>,
    /// Shared memory a block uses (0 before emission: [`Plan::report`]).
    pub shared_bytes: u32,
    /// Blocks a SM runs at once by shared memory and threads.
    pub blocks_per_sm: u32,
    /// The `.minnctapersm` the kernel declares (ptxas sizes its register budget by it).
    pub min_blocks_per_sm: Option<u32>,
    /// A lower bound of the registers a thread needs: the largest f32 accumulator of a
    /// tensor-core dot, in elements a thread.
    pub registers_estimate: u32,
    /// Tensor maps the launch passes (rule *tensor memory accelerator*).
    pub tensor_maps: usize,
    /// Tensor-descriptor accesses moved on TMA: where, and the map each uses.
    pub descriptors_on_tma: Vec<(Loc, usize)>,
    /// Tensor-descriptor accesses run as masked loads and stores, with the condition unmet.
    pub descriptors_expanded: Vec<(Loc, String)>,
}

impl Report {
    /// Whether some loop that could be pipelined got fewer stages than asked.
    pub fn stages_lost(&self) -> bool {
        self.stages_compiled < self.stages_asked
            || self
                .loops
                .iter()
                .any(|l| l.candidate && l.stages < l.asked && !l.nested)
    }

    /// Whether shared memory cost the kernel or one of its loops stages it asked for: the
    /// same kernel as one asked for fewer stages.
    pub fn stages_cut_by_shared_memory(&self) -> bool {
        self.stage_cut.is_some() || self.loops.iter().any(|l| l.shared_cut)
    }

    /// The dots that run on `wgmma`.
    pub fn wgmma_dots(&self) -> usize {
        self.dots
            .iter()
            .filter(|d| matches!(d.kind, DotKind::Wgmma { .. }))
            .count()
    }

    /// One line per loop that lost stages, with the reason: what a launch warns with.
    pub fn stage_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(cut) = self
            .stage_cut
            .as_ref()
            .filter(|_| self.stages_compiled < self.stages_asked)
        {
            out.push(format!(
                "kernel `{}` compiled with {} stages instead of {}: {cut}",
                self.kernel, self.stages_compiled, self.stages_asked
            ));
        }
        for l in &self.loops {
            if l.candidate && l.stages < l.asked && !l.nested {
                out.push(format!(
                    "kernel `{}`: the loop at {} runs with {} of {} stages: {}",
                    self.kernel,
                    l.loc,
                    l.stages,
                    l.asked,
                    l.why.as_deref().unwrap_or("no reason recorded")
                ));
            }
        }
        out
    }
}

impl Plan {
    /// The report of this plan (shared memory and occupancy are filled in by emission).
    pub fn report(&self, cx: &Context<'_>) -> Report {
        let k = cx.k;
        let mut loops = Vec::new();
        loop_reports(cx, self, k.body, 0, &mut loops);
        let dots = k
            .walk()
            .into_iter()
            .filter(|&i| matches!(k.insts[i].op, Op::Dot { .. }))
            .map(|i| dot_report(cx, self, i))
            .collect::<Vec<_>>();
        let threads = 32 * cx.num_warps();
        let registers_estimate = k
            .walk()
            .into_iter()
            .filter_map(|i| self.dots.mma(i))
            .map(|p| p.m * p.n / threads)
            .max()
            .unwrap_or(0);
        Report {
            kernel: k.name.clone(),
            target: cx.target,
            num_warps: cx.num_warps(),
            stages_asked: cx.options.num_stages,
            stages_compiled: cx.options.num_stages.min(cx.stage_cap),
            stage_cut: None,
            loops,
            dots,
            shared_bytes: 0,
            blocks_per_sm: 0,
            min_blocks_per_sm: None,
            registers_estimate,
            tensor_maps: self.descriptors.maps.len(),
            descriptors_on_tma: {
                let mut on: Vec<(Loc, usize)> = self
                    .descriptors
                    .on_tma
                    .iter()
                    .map(|(&i, &m)| (k.insts[i].loc, m))
                    .collect();
                on.sort_by_key(|&(l, m)| (l.line, l.col, m));
                on
            },
            descriptors_expanded: {
                // Loads in loops that TMA could move but no pipeline's slots stream.
                let on_tma: Vec<Inst> = self
                    .pipelines
                    .loops()
                    .filter_map(|(_, l)| l.pipeline.as_ref())
                    .flat_map(|p| p.loads.iter().filter(|l| l.tma.is_some()).map(|l| l.inst))
                    .collect();
                let mut left: Vec<(Loc, String)> = self
                    .descriptors
                    .streamable
                    .keys()
                    .filter(|i| !on_tma.contains(i))
                    .map(|&i| {
                        let why = "a load in a loop moves on TMA only into the slots of a \
                                   pipeline that streams it, and none does";
                        (k.insts[i].loc, why.to_string())
                    })
                    .collect();
                left.sort_by_key(|(l, _)| (l.line, l.col));
                [self.descriptors.expanded.clone(), left].concat()
            },
        }
    }
}

fn loop_reports(
    cx: &Context<'_>,
    plan: &Plan,
    block: Block,
    depth: u32,
    out: &mut Vec<LoopReport>,
) {
    let k = cx.k;
    for &inst in &k.blocks[block].insts {
        let d = &k.insts[inst];
        if !is_anchored(&d.op) {
            continue;
        }
        if matches!(d.op, Op::For { .. }) {
            out.push(loop_report(cx, plan, inst, depth));
        }
        for &r in &d.regions {
            loop_reports(cx, plan, r, depth + 1, out);
        }
    }
}

fn loop_report(cx: &Context<'_>, plan: &Plan, inst: Inst, depth: u32) -> LoopReport {
    let k = cx.k;
    let body = k.insts[inst].regions[0];
    let lp = plan.pipelines.of(inst).cloned().unwrap_or_default();
    let nest = lp.nest.as_ref();
    let pipe = lp.pipeline.as_ref().or(nest.map(|n| &n.pipe));
    let loc_of = |i: Inst| k.insts[i].loc;
    LoopReport {
        loc: k.insts[inst].loc,
        depth,
        candidate: is_candidate(k, plan, body),
        stages: lp.pipeline.as_ref().map_or(1, |p| p.stages),
        asked: cx.stages_asked(inst),
        own_stages: matches!(
            k.insts[inst].op,
            Op::For {
                num_stages: Some(_)
            }
        ),
        streamed: pipe.map_or(vec![], |p| p.loads.iter().map(|l| loc_of(l.inst)).collect()),
        on_tma: pipe.map_or(vec![], |p| {
            p.loads
                .iter()
                .filter_map(|l| Some((loc_of(l.inst), l.tma.as_ref()?.map)))
                .collect()
        }),
        row_loads: pipe.map_or(vec![], |p| p.rows.iter().map(|r| loc_of(r.inst)).collect()),
        slot_bytes: pipe.map_or(0, |p| p.slot_bytes),
        nested: lp.nested,
        pipelines_inner_loop: nest.is_some(),
        boundary_fragments: lp.boundary.is_some(),
        resident_operands: lp.residents.len(),
        shared_cut: lp.shared_cut,
        why: lp.note.clone(),
    }
}

/// Whether a tensor-core dot directly in `body` reads a load of `body` (through `.trans()`).
fn is_candidate(k: &Kernel, plan: &Plan, body: Block) -> bool {
    let insts = &k.blocks[body].insts;
    insts.iter().any(|&dot| {
        plan.dots.mma(dot).is_some()
            && k.insts[dot].args[..2].iter().any(|&v| {
                let (src, _) = untransposed(k, v);
                k.def_inst(src).is_some_and(|li| {
                    insts.contains(&li) && matches!(k.insts[li].op, Op::Load { .. })
                })
            })
    })
}

fn dot_report(cx: &Context<'_>, plan: &Plan, dot: Inst) -> DotReport {
    let k = cx.k;
    let d = &k.insts[dot];
    let (aty, bty) = (k.ty(d.args[0]), k.ty(d.args[1]));
    let (m, kk, n) = (
        aty.shape.dim(0) as u32,
        aty.shape.dim(1) as u32,
        bty.shape.dim(1) as u32,
    );
    let p = &plan.pipelines;
    let kind = match plan.dots.mma(dot) {
        None => DotKind::Fma,
        Some(_) if p.wgmma_dots.contains(&dot) => DotKind::Wgmma {
            in_flight: p.wgmma_in_flight.contains(&dot),
        },
        Some(mp) => DotKind::MmaSync {
            wm: mp.wm,
            wn: mp.wn,
            tf32x3: mp.split_tf32,
        },
    };
    let home = |v: Value, role: Role| operand_home(cx, plan, dot, v, role);
    DotReport {
        loc: d.loc,
        m,
        n,
        k: kk,
        kind,
        a: home(d.args[0], Role::A),
        b: home(d.args[1], Role::B),
        accumulator_in_carried: plan.accumulators.of(dot).is_some(),
    }
}

fn operand_home(cx: &Context<'_>, plan: &Plan, dot: Inst, v: Value, role: Role) -> OperandHome {
    let k = cx.k;
    if plan.dots.mma(dot).is_none() {
        return OperandHome::Registers;
    }
    let (src, _) = untransposed(k, v);
    // The loops enclosing the dot, innermost first.
    let mut loops = Vec::new();
    let mut block = cx.uses.block_of(dot);
    while let Some(b) = block {
        match cx.uses.parent_of(b) {
            Some(p) => {
                if matches!(k.insts[p].op, Op::For { .. }) {
                    loops.push(p);
                }
                block = cx.uses.block_of(p);
            }
            None => break,
        }
    }
    let slot = loops.iter().any(|&l| {
        plan.pipelines.of(l).is_some_and(|lp| {
            lp.pipeline
                .iter()
                .chain(lp.nest.as_ref().map(|n| &n.pipe))
                .any(|pp| pp.loads.iter().any(|pl| pl.value == src))
        })
    });
    if slot {
        return OperandHome::Slot;
    }
    let resident = plan
        .pipelines
        .loops()
        .any(|(_, lp)| lp.residents.iter().any(|r| r.value == v && r.role == role));
    if resident {
        return OperandHome::Resident;
    }
    let defined_outside = loops
        .first()
        .is_some_and(|&l| !tegula_ir::uses::region_values(k, k.insts[l].regions[0]).contains(&v));
    if defined_outside {
        OperandHome::Hoisted
    } else {
        OperandHome::Registers
    }
}

impl fmt::Display for DotKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DotKind::Fma => f.write_str("fma"),
            DotKind::MmaSync { wm, wn, tf32x3 } => {
                write!(
                    f,
                    "mma.sync {wm}x{wn} warps{}",
                    if tf32x3 { " tf32x3" } else { "" }
                )
            }
            DotKind::Wgmma { in_flight } => {
                write!(f, "wgmma{}", if in_flight { " in-flight" } else { "" })
            }
        }
    }
}

impl fmt::Display for OperandHome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OperandHome::Registers => "registers",
            OperandHome::Hoisted => "hoisted",
            OperandHome::Resident => "resident",
            OperandHome::Slot => "slot",
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kernel {} ({}, {} warps, {} stages asked{})",
            self.kernel,
            self.target,
            self.num_warps,
            self.stages_asked,
            if self.stages_compiled != self.stages_asked {
                format!(", compiled with {}", self.stages_compiled)
            } else {
                String::new()
            }
        )?;
        if let Some(cut) = &self.stage_cut {
            writeln!(f, "  stages cut: {cut}")?;
        }
        for (loc, map) in &self.descriptors_on_tma {
            writeln!(f, "  descriptor access at {loc}: on TMA (tensor map {map})")?;
        }
        for (loc, why) in &self.descriptors_expanded {
            writeln!(
                f,
                "  descriptor access at {loc}: masked loads and stores ({why})"
            )?;
        }
        for l in &self.loops {
            let pad = "  ".repeat(l.depth as usize + 1);
            write!(f, "{pad}loop at {}: ", l.loc)?;
            if l.stages > 1 {
                write!(
                    f,
                    "{} stages of {} bytes, {} streamed load{}",
                    l.stages,
                    l.slot_bytes,
                    l.streamed.len(),
                    if l.streamed.len() == 1 { "" } else { "s" }
                )?;
                if !l.row_loads.is_empty() {
                    write!(f, " + {} row load(s)", l.row_loads.len())?;
                }
                if l.nested {
                    write!(f, ", first stages copied by the outer loop")?;
                }
                if l.boundary_fragments {
                    write!(f, ", fragments across the tile boundary")?;
                }
            } else if l.pipelines_inner_loop {
                write!(
                    f,
                    "copies its inner loop's first stages ({} bytes a slot) across iterations",
                    l.slot_bytes
                )?;
            } else {
                write!(f, "not pipelined")?;
            }
            if l.own_stages {
                write!(f, ", {} asked by the loop", l.asked)?;
            }
            if l.resident_operands > 0 {
                write!(f, ", {} resident operand(s)", l.resident_operands)?;
            }
            writeln!(f)?;
            for s in &l.streamed {
                match l.on_tma.iter().find(|(at, _)| at == s) {
                    Some((_, map)) => writeln!(
                        f,
                        "{pad}  streams the load at {s} on TMA (tensor map {map})"
                    )?,
                    None => writeln!(f, "{pad}  streams the load at {s}")?,
                }
            }
            if let Some(why) = &l.why {
                if l.candidate || l.stages > 1 {
                    let what = if l.stages > 1 { "left out" } else { "why" };
                    writeln!(f, "{pad}  {what}: {why}")?;
                }
            }
        }
        for d in &self.dots {
            writeln!(
                f,
                "  dot at {}: {}x{}x{} on {} (A from {}, B from {}{})",
                d.loc,
                d.m,
                d.n,
                d.k,
                d.kind,
                d.a,
                d.b,
                if d.accumulator_in_carried {
                    ", accumulating in the carried registers"
                } else {
                    ""
                }
            )?;
        }
        writeln!(
            f,
            "  shared memory {} bytes, {} block(s) a SM{}, at least {} registers a thread",
            self.shared_bytes,
            self.blocks_per_sm,
            match self.min_blocks_per_sm {
                Some(n) => format!(" (declares {n})"),
                None => String::new(),
            },
            self.registers_estimate
        )
    }
}
