//! Software pipelining of `for` loops whose loads feed tensor-core dots (`num_stages` >= 2).
//!
//! A load qualifies when every use of it is an f16/bf16 mma operand (directly or through
//! `.trans()`) of a dot in the same loop body, its pointers and mask depend on the induction
//! variable and values from outside the loop only, and its `other` is zero. Such loads do not
//! go through registers: each thread copies its 4/8/16-byte vectors straight into the swizzled
//! operand layout with `cp.async` (masked vectors copy 0 source bytes: zero fill), into one of
//! `num_stages` slots. A load several dots read is copied once: the slot holds the tile as
//! loaded (row-major, swizzled by its row length), which each dot reads with its own
//! `ldmatrix`, `.trans` where K is the stored row.
//!
//! ```text
//! before the loop:   for s in 0..S-1: copy iteration s into slot s; commit_group
//! iteration i:       wait_group S-2; bar.sync             (iteration i's slot has landed)
//!                    ... first dot: ldmatrix of its k-steps 0..2, mmas of k-step 0 ...
//!                    copy iteration i+S-1 into slot (i-1) mod S; commit_group
//!                    ... dots read slot i mod S with ldmatrix ...
//! after the loop:    wait_all
//! ```
//!
//! A rank-1 load of the body whose uses broadcast it into an mma accumulator (the attention
//! backward's lse and delta rows, [`RowLoad`]) rides along: each slot holds its elements in
//! order after the tiles, copied with `cp.async` by the owners of a blocked layout in the same
//! commit group, and read with `ld.shared` straight into the accumulator's slice where the
//! value is first needed (no registers held across the step, no barrier of its own).
//!
//! A loop whose one dot reads both operands from the slots loads the next tile's first
//! fragments across the tile boundary instead (see [`BoundaryFragments`]).
//!
//! A loop whose `wgmma` dot stays in flight into the next iteration (`wgmma.rs`,
//! [`PipeState::wgmma_in_flight`]) refills the slot read two iterations back, which every
//! warpgroup's `wgmma.wait_group 1` of the last iteration has released before this
//! iteration's barrier: its lag is 2, so it fills `S - 2` slots ahead and waits for
//! `S - 3` groups.
//!
//! The barrier also tells every thread that the slot being refilled was read last iteration.
//! The refill waits inside the first dot of the body that reads a pipelined operand (when that
//! dot is not nested in a branch): its first fragments then leave shared memory right after
//! the barrier, ahead of the copies and their address arithmetic (ptxas keeps shared-memory
//! reads and `cp.async` writes in program order), so the tensor cores start sooner.
//! Iterations past the end copy nothing (0 source bytes). The slots occupy the start of the
//! scratch buffer (after a resident dot operand, see `mma.rs`) while the loop runs (other
//! scratch uses in the loop go after them); when the total exceeds the target's limit
//! (`Target::max_shared_bytes`), compilation retries with one stage fewer.

use super::types::{class_of, mem_ty};
use super::{is_anchored, Lower, R};
use crate::layout::Layout;
use crate::mma_layout::{MmaKind, Role, Stage};
use crate::ptx::{Arg, Reg, RegClass};
use std::collections::{HashMap, HashSet};
use tegula_ir::{BinaryOp, Block, Constant, DType, Elem, Inst, Op, Value, ValueDef};

use super::mma::{fragment_registers, MmaPlan, SharedOperand};

/// The most registers [`Lower::boundary_registers`] may count for the fragments to cross the
/// tile boundary ([`BoundaryFragments`]): 255 a thread, less 15 that the estimate leaves out
/// (loop counter, slot offsets, address strides, ldmatrix addresses, masks). Calibrated with
/// ptxas 12.9 (sm_90a) on the bf16 tuner grid at 4096^3: every config estimated at <= 240
/// compiles without spills (the largest, 128x128x64 at 4 warps, to 255 registers; 256x128x64
/// at 8 warps, 236, to 254), while 256x64x64 at 4 warps (244) spills 4 bytes.
const BOUNDARY_MAX_REGISTERS: u32 = 240;

/// One pipelined load.
#[derive(Clone, Debug)]
struct PipeLoad {
    inst: Inst,
    value: Value,
    /// Its place within a slot (rows x cols of the loaded tile, swizzled), as its first dot
    /// reads it.
    stage: Stage,
    /// How each dot operand that reads it does: (role, K-major). The slot holds the loaded
    /// tile row-major, swizzled by its row length only, so every reader's `ldmatrix` (plain
    /// when K is the stored column, `.trans` when K is the stored row) finds it there.
    reads: Vec<(Role, bool)>,
    layout: Layout,
    vec: u32,
}

/// A rank-1 load staged beside the tiles (see the module doc): each slot holds its elements
/// in order in a region of its own, copied by the threads of a blocked layout and read at its
/// first use straight into the layout its uses take (an mma accumulator's slice).
#[derive(Clone, Debug)]
struct RowLoad {
    inst: Inst,
    value: Value,
    /// Byte offset of its region within a slot.
    offset: u32,
    /// The copies: `vec` elements each, in a blocked layout (replicas copy nothing).
    copy: Layout,
    vec: u32,
}

/// A loop's pipelined loads, its staged rank-1 loads, its stages and the bytes of one slot
/// (`plan_pipeline`).
type PipePlan = (Vec<PipeLoad>, Vec<RowLoad>, u32, u32);

/// The pipeline of one loop being lowered.
#[derive(Clone, Debug)]
struct Pipe {
    /// The loop body and its induction variable.
    body: Block,
    iv: Value,
    loads: Vec<PipeLoad>,
    rows: Vec<RowLoad>,
    stages: u32,
    slot_bytes: u32,
    /// Iterations between a slot's read and its refill: 1, or 2 when a `wgmma` of the body
    /// is still reading last iteration's slot (see the module doc). `S - lag` slots are
    /// filled ahead.
    lag: u32,
    /// The shared array's address.
    base: Reg,
    /// Byte offsets of the slot read and the slot written this iteration (loop-carried).
    read_off: Reg,
    write_off: Reg,
    /// This iteration's refill, when it waits for the first dot (see the module doc).
    deferred: Option<DeferredRefill>,
    /// Per load (same order as `loads`): its copies' source addresses carried across
    /// iterations, or `None` when they are evaluated again at each refill.
    carried: Vec<Option<CarriedAddrs>>,
    /// The next iteration's first fragments, when they are loaded across the tile boundary
    /// (see [`BoundaryFragments`]).
    boundary: Option<BoundaryFragments>,
    /// Whether the loop is the inner loop of a nest pipelined across its outer loop (see
    /// [`Nest`]): its slots and its first `S - lag` stages come from there.
    nested: bool,
}

/// A loop nest pipelined across its outer loop (a persistent matmul's `for tile { for k {
/// loads -> dot }; store }`): the outer loop owns the inner loop's slots, so the epilogue after
/// the inner loop (the store's shared-memory exchange) takes scratch after them, and the first
/// `S - lag` stages ([`Pipe::lag`]) of the outer loop's next iteration are copied while it
/// runs:
///
/// ```text
/// before the outer loop:  fill S-lag slots for outer iteration lo (when lo < hi)
/// outer iteration j:      ... inner loop (no prologue of its own; its carried addresses
///                         start S-lag iterations in) ...; wait_all; bar.sync
///                         fill S-lag slots for outer iteration j + step (when < hi)
///                         ... the rest of the body (the store) ...
/// after the outer loop:   wait_all
/// ```
///
/// Preconditions ([`Lower::nest_inner_loop`]): the outer body holds one `for` directly, whose
/// loop is pipelined with copies whose addresses and masks depend only on the two induction
/// variables, free ops and values from outside the nest, as do its bounds and step; every dot
/// of the inner body reads operands loaded in that body (no resident operand); both induction
/// variables are at most 32 bits.
#[derive(Clone, Debug)]
struct Nest {
    inner: Inst,
    outer_iv: Value,
    /// The outer loop's induction variable, bound and step registers.
    iv: Reg,
    hi: Reg,
    step: Reg,
    signed: bool,
    loads: Vec<PipeLoad>,
    rows: Vec<RowLoad>,
    stages: u32,
    slot_bytes: u32,
    /// The inner loop's [`Pipe::lag`]: its first `S - lag` stages are copied ahead.
    lag: u32,
    base: Reg,
}

/// The k-step 0 fragments of the loop's one dot, loaded ahead of time (CUTLASS's sm80
/// mainloop order): before the loop, and in each iteration right after the wait and barrier
/// for the next slot, which move from the top of the next iteration to just before the last
/// k-step's mmas. Those mmas then cover the `ldmatrix` latency, and the next iteration's
/// first mmas need no shared-memory read:
///
/// ```text
/// before the loop:   fill S-1 slots; wait_group S-2; bar.sync; ldmatrix k-step 0 of slot 0
/// iteration i:       mmas of k-step 0 (fragments in registers), the refill after them, ...
///                    wait_group S-2; bar.sync; ldmatrix k-step 0 of slot (i+1) mod S
///                    mmas of the last k-step
/// ```
///
/// The barrier still follows every read of the slot the next iteration refills (the last
/// k-step's fragments are read one step ahead), and the wait follows this iteration's
/// refill (at k-step 1), so both keep their meaning. Only when the body's one dot reads both
/// operands from this pipeline in at least two k-steps, nothing else in the body touches
/// shared memory (matmul; attention's two dots keep the plain order), and the registers the
/// loop then needs fit in a thread's ([`BOUNDARY_MAX_REGISTERS`]).
#[derive(Clone, Debug)]
pub(crate) struct BoundaryFragments {
    dot: Inst,
    /// Packed 32-bit operand registers of k-step 0 (see `Lower::first_kstep_fragments`),
    /// carried across iterations.
    words: Vec<Reg>,
}

/// The source addresses of one pipelined load's copies, kept in registers that advance by
/// `delta` bytes after each refill (the pointer is affine in the induction variable, see
/// [`AffineForm`]). The copies of a thread fall into groups whose addresses differ by
/// compile-time constants within a group.
#[derive(Clone, Debug)]
struct CarriedAddrs {
    /// Per copy (one per vector, in register order): its group and byte offset from the
    /// group's address.
    copies: Vec<(usize, i64)>,
    groups: GroupAddrs,
    /// Bytes the addresses advance by from one iteration to the next.
    delta: Reg,
}

#[derive(Clone, Debug)]
enum GroupAddrs {
    /// One loop-carried address per group.
    Each(Vec<Reg>),
    /// Groups a constant runtime distance apart (rows a fixed count apart, times a runtime
    /// row stride): group `j` is at `first + j * step`, one loop-carried address in all.
    Chained { first: Reg, step: Reg, count: usize },
}

/// How an integer or pointer tile depends on the induction variable and on its element's
/// coordinates: `value = v0 + iv * c_iv + sum(coord[d] * c_d)`, every coefficient the same
/// for all elements and iterations (pointer coefficients in bytes).
#[derive(Clone, Debug, PartialEq)]
struct AffineForm {
    iv: Coef,
    axes: Vec<Coef>,
    /// The value itself, when it is the same known constant for every element and iteration.
    known: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Coef {
    Zero,
    Const(i64),
    Runtime,
}

impl Coef {
    fn add(self, o: Coef, sign: i64) -> Coef {
        match (self, o) {
            (a, Coef::Zero) => a,
            (Coef::Zero, Coef::Const(b)) => Coef::Const(sign * b),
            (Coef::Const(a), Coef::Const(b)) => {
                a.checked_add(sign * b).map_or(Coef::Runtime, |c| {
                    if c == 0 {
                        Coef::Zero
                    } else {
                        Coef::Const(c)
                    }
                })
            }
            _ => Coef::Runtime,
        }
    }

    fn scale(self, k: Option<i64>) -> Coef {
        match (self, k) {
            (Coef::Zero, _) | (_, Some(0)) => Coef::Zero,
            (Coef::Const(a), Some(b)) => a.checked_mul(b).map_or(Coef::Runtime, Coef::Const),
            _ => Coef::Runtime,
        }
    }
}

impl AffineForm {
    /// A value the same for every element and iteration.
    fn uniform(rank: usize, known: Option<i64>) -> AffineForm {
        AffineForm {
            iv: Coef::Zero,
            axes: vec![Coef::Zero; rank],
            known,
        }
    }

    fn is_uniform(&self) -> bool {
        self.iv == Coef::Zero && self.axes.iter().all(|&c| c == Coef::Zero)
    }

    fn combine(&self, o: &AffineForm, sign: i64) -> Option<AffineForm> {
        if self.axes.len() != o.axes.len() {
            return None;
        }
        Some(AffineForm {
            iv: self.iv.add(o.iv, sign),
            axes: self
                .axes
                .iter()
                .zip(&o.axes)
                .map(|(a, b)| a.add(*b, sign))
                .collect(),
            known: self
                .known
                .zip(o.known)
                .and_then(|(a, b)| a.checked_add(sign * b)),
        })
    }

    fn scale(&self, k: Option<i64>) -> AffineForm {
        AffineForm {
            iv: self.iv.scale(k),
            axes: self.axes.iter().map(|c| c.scale(k)).collect(),
            known: self.known.zip(k).and_then(|(a, b)| a.checked_mul(b)),
        }
    }
}

/// A refill not yet issued: the loop's induction variable, bound and step, and how many value
/// scopes were open at the top of the iteration (the body's scope is the last of them).
#[derive(Clone, Copy, Debug)]
struct DeferredRefill {
    iv: Reg,
    hi: Reg,
    step: Reg,
    scope_depth: usize,
}

#[derive(Default)]
pub(crate) struct PipeState {
    /// Dots that run on `wgmma` (both operands in slots it can read, see `wgmma.rs`), and
    /// the loads whose slots they read (their waits add a proxy fence).
    pub wgmma_dots: HashSet<Inst>,
    pub wgmma_loads: HashSet<Inst>,
    /// `wgmma` dots whose k-tile stays in flight while the next one is issued: the
    /// accumulator is a loop-carried value only this dot reads, written in place, and the
    /// pipeline's refill, which lags two iterations ([`Pipe::lag`]), still copies
    /// [`crate::WGMMA_IN_FLIGHT_MIN_K_AHEAD`] elements of K ahead.
    pub wgmma_in_flight: HashSet<Inst>,
    /// `wgmma` dots whose accumulator is a loop-carried value only this dot reads: written in
    /// place (no copy of the carried registers first), in flight or not.
    pub wgmma_in_place: HashSet<Inst>,
    active: Vec<Pipe>,
    /// The nests pipelined across their outer loop, innermost last.
    nests: Vec<Nest>,
}

/// Whether `v` is the constant zero (a constant or a splat of one).
fn is_zero(k: &tegula_ir::Kernel, v: Value) -> bool {
    let Some(i) = k.def_inst(v) else {
        return false;
    };
    match &k.insts[i].op {
        Op::Const(Constant::Int(0)) => true,
        Op::Const(Constant::Float(f)) => *f == 0.0 && f.is_sign_positive(),
        Op::Splat | Op::Broadcast => is_zero(k, k.insts[i].args[0]),
        _ => false,
    }
}

impl Lower<'_> {
    pub(crate) fn is_pipelined(&self, inst: Inst) -> bool {
        self.pipe.active.iter().any(|p| {
            p.loads.iter().any(|l| l.inst == inst) || p.rows.iter().any(|r| r.inst == inst)
        })
    }

    /// Whether instruction `li` is a load that `cp.async` copies can stand in for, a stage
    /// ahead: not volatile, masked elements read zero (the copies zero-fill them), and its
    /// pointer and mask depend only on `iv` and values from outside the loop (`inside`).
    fn streamable_load(&self, li: Inst, iv: Value, inside: &HashSet<Value>) -> bool {
        let d = &self.k.insts[li];
        let Op::Load {
            has_mask,
            has_other,
            volatile,
            ..
        } = d.op
        else {
            return false;
        };
        let masked_read_zero = !has_mask || !has_other || is_zero(self.k, d.args[2]);
        !volatile
            && masked_read_zero
            && self.depends_on_iv_only(d.args[0], iv, inside)
            && (!has_mask || self.depends_on_iv_only(d.args[1], iv, inside))
    }

    /// Whether `v` depends only on `iv`, free ops and values defined outside `inside`.
    fn depends_on_iv_only(&self, v: Value, iv: Value, inside: &HashSet<Value>) -> bool {
        self.depends_on_ivs_only(v, &[iv], inside)
    }

    /// Whether `v` depends only on the induction variables `ivs`, free ops and values defined
    /// outside `inside`.
    fn depends_on_ivs_only(&self, v: Value, ivs: &[Value], inside: &HashSet<Value>) -> bool {
        if ivs.contains(&v) || !inside.contains(&v) {
            return true;
        }
        match self.k.values[v].def {
            ValueDef::Result(i, _) => {
                let d = &self.k.insts[i];
                !is_anchored(&d.op)
                    && !matches!(d.op, Op::Reshape | Op::Permute { .. })
                    && d.args
                        .iter()
                        .all(|&a| self.depends_on_ivs_only(a, ivs, inside))
            }
            _ => false,
        }
    }

    /// `v` as an affine form of the induction variable `iv` and of its element's coordinates
    /// (see [`AffineForm`]); `None` when it is not one (or not provably).
    fn affine_form(&self, v: Value, iv: Value, inside: &HashSet<Value>) -> Option<AffineForm> {
        let ty = self.k.ty(v);
        let rank = ty.shape.rank();
        if v == iv {
            return Some(AffineForm {
                iv: Coef::Const(1),
                axes: vec![],
                known: None,
            });
        }
        // A scalar from outside the loop (a parameter, a program id, ...) is the same for
        // every element and iteration.
        let outer_scalar = !inside.contains(&v) && rank == 0;
        let Some(i) = self.k.def_inst(v) else {
            return outer_scalar.then(|| AffineForm::uniform(0, None));
        };
        let d = &self.k.insts[i];
        let arg = |j: usize| self.affine_form(d.args[j], iv, inside);
        match &d.op {
            Op::Const(Constant::Int(c)) => Some(AffineForm::uniform(rank, Some(*c))),
            Op::Arange { .. } => Some(AffineForm {
                iv: Coef::Zero,
                axes: vec![Coef::Const(1)],
                known: None,
            }),
            Op::Splat => {
                let a = arg(0)?;
                Some(AffineForm {
                    axes: vec![Coef::Zero; rank],
                    ..a
                })
            }
            Op::Broadcast => {
                let a = arg(0)?;
                let src = self.k.ty(d.args[0]).shape;
                // A stretched size-1 axis repeats one element.
                let axes = (a.axes.iter().zip(src.dims()))
                    .map(|(&c, &n)| if n == 1 { Coef::Zero } else { c })
                    .collect();
                Some(AffineForm { axes, ..a })
            }
            Op::ExpandDims { axis } => {
                let mut a = arg(0)?;
                let axis = *axis as usize;
                (axis <= a.axes.len()).then(|| {
                    a.axes.insert(axis, Coef::Zero);
                    a
                })
            }
            Op::MultipleOf { .. } | Op::MaxContiguous { .. } => arg(0),
            // Integer widening or narrowing: taken as exact, as the address arithmetic of
            // every load assumes offsets that do not wrap.
            Op::Cast { .. } if ty.dtype().is_int() && self.k.ty(d.args[0]).dtype().is_int() => {
                arg(0)
            }
            Op::Binary(BinaryOp::Add) => arg(0)?.combine(&arg(1)?, 1),
            Op::Binary(BinaryOp::Sub) => arg(0)?.combine(&arg(1)?, -1),
            Op::Binary(BinaryOp::Mul) => {
                let (a, b) = (arg(0)?, arg(1)?);
                if a.is_uniform() {
                    Some(b.scale(a.known))
                } else if b.is_uniform() {
                    Some(a.scale(b.known))
                } else {
                    None
                }
            }
            Op::AddPtr => {
                let bytes = self.k.ty(d.args[0]).dtype().size_bytes() as i64;
                let offset = arg(1)?.scale(Some(bytes));
                let mut p = arg(0)?.combine(&offset, 1)?;
                p.known = None;
                Some(p)
            }
            _ => outer_scalar.then(|| AffineForm::uniform(0, None)),
        }
    }

    /// The loads of `for_inst`'s body worth pipelining, with their slot layout.
    fn plan_pipeline(&mut self, for_inst: Inst) -> Option<PipePlan> {
        if self.num_stages < 2 {
            return None;
        }
        let body = self.k.insts[for_inst].regions[0];
        let iv = self.k.blocks[body].args[0];
        if self.k.ty(iv).dtype().bits() > 32 {
            return None;
        }
        let inside = self.region_values_of(body);
        let mut loads = Vec::new();
        let mut offset = 0u32;
        let body_insts: HashSet<Inst> = self.k.blocks[body].insts.iter().copied().collect();
        for &dot in &self.k.blocks[body].insts {
            if !matches!(self.k.insts[dot].op, Op::Dot { .. }) {
                continue;
            }
            let Some(plan) = self.mma_plan(dot) else {
                continue;
            };
            if plan.kind == MmaKind::Tf32 {
                continue;
            }
            for (pos, role) in [(0, Role::A), (1, Role::B)] {
                let operand = self.k.insts[dot].args[pos];
                let (src, permuted) = self.untransposed(operand);
                let Some(li) = self.k.def_inst(src) else {
                    continue;
                };
                // A load read by several dots has one slot; its first dot placed it.
                if !body_insts.contains(&li) || loads.iter().any(|l: &PipeLoad| l.inst == li) {
                    continue;
                }
                let Some(reads) = self.dot_reads(src, &body_insts, plan.kind) else {
                    continue;
                };
                if !self.streamable_load(li, iv, &inside) {
                    continue;
                }
                let dt = self.k.ty(src).dtype();
                if !matches!(dt, DType::F16 | DType::BF16) {
                    continue;
                }
                let vec = self.access_vec(li);
                if !matches!(vec * 2, 4 | 8 | 16) {
                    continue;
                }
                let shape = self.k.ty(src).shape;
                let stage = Stage {
                    role,
                    kind: plan.kind,
                    rows: shape.dim(0) as u32,
                    cols: shape.dim(1) as u32,
                    k_major: (role == Role::A) != permuted,
                    offset,
                    panel_major: false,
                };
                // wgmma's swizzle is anchored at 1024-byte boundaries (`wgmma.rs`).
                let align = if plan.wgmma { 1024 } else { 128 };
                offset += stage.bytes().div_ceil(align) * align;
                loads.push(PipeLoad {
                    inst: li,
                    value: src,
                    stage,
                    reads,
                    layout: self.access_layout(li),
                    vec,
                });
            }
        }
        if loads.is_empty() {
            return None;
        }
        // The slots must leave room for other scratch uses (checked again at the end of
        // compilation, which retries with fewer stages), after what is reserved already (a
        // resident dot operand).
        // Fewer stages, then fewer loads, until the slots fit.
        let room = self.max_shared.saturating_sub(self.reserved_shared());
        let mut stages = self.num_stages;
        while stages > 2 && stages * offset > room {
            stages -= 1;
        }
        while stages * offset > room && loads.len() > 1 {
            let last = loads.pop().expect("a load");
            offset = last.stage.offset;
        }
        if stages * offset > room {
            return None;
        }
        let (rows, mut slot_bytes) = self.plan_row_loads(body, &inside, offset, stages, room);
        // Slots of wgmma tiles start at multiples of 1024 bytes, also when row loads (the
        // backward's lse and delta) follow the tiles in each slot.
        let wgmma_slots = offset.is_multiple_of(1024)
            && self.k.blocks[body]
                .insts
                .iter()
                .any(|&i| self.mma_plan(i).is_some_and(|p| p.wgmma));
        if wgmma_slots && stages * slot_bytes.next_multiple_of(1024) <= room {
            slot_bytes = slot_bytes.next_multiple_of(1024);
        }
        self.plan_wgmma_slots(body, &mut loads, slot_bytes, stages);
        Some((loads, rows, stages, slot_bytes))
    }

    /// A dot operand's loaded source: `(x, true)` for `x.trans()` (a 2-D permute), else
    /// `(operand, false)`.
    pub(super) fn untransposed(&self, operand: Value) -> (Value, bool) {
        match self.k.def_inst(operand).map(|i| &self.k.insts[i]) {
            Some(d) if matches!(&d.op, Op::Permute { perm } if perm[..] == [1, 0]) => {
                (d.args[0], true)
            }
            _ => (operand, false),
        }
    }

    /// Marks the body's `wgmma` candidate dots (`wgmma.rs`) that can read their operands from
    /// this pipeline's slots: B's slot, and A's unless A is not loaded in the body (it comes in
    /// registers: FlashAttention's P and Q), A read K-major, each slot starting at a multiple
    /// of 1024 bytes in every slot, with rows of 64 bytes or at least 128 (those wider than
    /// 128 are stored panel-major, set here; other dots may read the slot too); and
    /// those of them that can stay in flight into the next iteration
    /// ([`PipeState::wgmma_in_flight`]).
    fn plan_wgmma_slots(
        &mut self,
        body: Block,
        loads: &mut [PipeLoad],
        slot_bytes: u32,
        stages: u32,
    ) {
        if !slot_bytes.is_multiple_of(1024) || !self.reserved_shared().is_multiple_of(1024) {
            return;
        }
        let body_insts: HashSet<Inst> = self.k.blocks[body].insts.iter().copied().collect();
        for dot in self.k.blocks[body].insts.clone() {
            if !matches!(self.k.insts[dot].op, Op::Dot { .. }) {
                continue;
            }
            if !self.mma_plan(dot).is_some_and(|p| p.wgmma) {
                continue;
            }
            let mut slots = Vec::new();
            let mut placed = true;
            for (pos, role) in [(0, Role::A), (1, Role::B)] {
                let operand = self.k.insts[dot].args[pos];
                let (src, permuted) = self.untransposed(operand);
                let k_major = (role == Role::A) != permuted;
                let Some(i) = loads.iter().position(|l| l.value == src) else {
                    // Not in a slot: only an A in registers, not loaded in the body.
                    let loaded_here = self.k.def_inst(src).is_some_and(|li| {
                        body_insts.contains(&li) && matches!(self.k.insts[li].op, Op::Load { .. })
                    });
                    // A resident A (a Q too large for registers) stays on `mma.sync`, which
                    // reads it from shared memory a k-step at a time; wgmma's register form
                    // would hold all of it across the loop (D = 256: 268 bytes of spills).
                    // Unless it is resident in a layout wgmma's descriptors read (the
                    // backward's K and V): then wgmma reads it there.
                    let resident =
                        self.is_resident(operand, role) && self.wgmma_resident_a(operand).is_none();
                    placed &= role == Role::A && !loaded_here && !resident;
                    continue;
                };
                let st = &loads[i].stage;
                let readable = crate::wgmma_reads_rows_of(st.cols * st.kind.elem_bytes());
                // Other dots may read the slot too, either way (FlashAttention's backward: Q is
                // B K-major of `K Q^T` and B N-major of `dS^T Q`): another `wgmma` through its
                // own descriptor, `mma.sync` through `ldmatrix`, which reads panels as well.
                if !loads[i].reads.contains(&(role, k_major))
                    || !st.offset.is_multiple_of(1024)
                    || !readable
                    || (role == Role::A && !k_major)
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
                    self.pipe.wgmma_loads.insert(loads[i].inst);
                }
                self.pipe.wgmma_dots.insert(dot);
                let k_ahead = (stages - 2) * self.mma_plan(dot).map_or(0, |p| p.k);
                if self.accumulates_in_place(body, dot) {
                    self.pipe.wgmma_in_place.insert(dot);
                    if k_ahead >= crate::WGMMA_IN_FLIGHT_MIN_K_AHEAD {
                        self.pipe.wgmma_in_flight.insert(dot);
                    }
                }
            }
        }
    }

    /// Whether `dot`'s accumulator is a value carried by the loop of `body` that nothing but
    /// this dot reads, and the dot's result is what the loop carries on in its place: the
    /// accumulator's registers can then be written in place, and stay the `wgmma`'s own
    /// until a later `wait_group` (no copy reads them in between).
    fn accumulates_in_place(&self, body: Block, dot: Inst) -> bool {
        let d = &self.k.insts[dot];
        let acc = d.args[2];
        let carried = &self.k.blocks[body].args[1..];
        let Some(pos) = carried.iter().position(|&v| v == acc) else {
            return false;
        };
        let yields = self.k.blocks[body]
            .insts
            .last()
            .map(|&t| self.k.insts[t].args.clone())
            .unwrap_or_default();
        let uses = self
            .k
            .insts
            .iter()
            .filter(|(_, i)| i.args.contains(&acc))
            .count();
        yields.get(pos) == Some(&d.results[0]) && uses == 1
    }

    /// The rank-1 loads of a pipelined loop's body staged beside its tiles, placed after
    /// `tile_bytes` in each slot, while `stages` slots fit in `room`, and the bytes of one slot.
    /// A load qualifies when its uses broadcast it into an mma accumulator (its layout is that
    /// accumulator's slice, `broadcast_load_layout`), its elements are 4 bytes, its pointer and
    /// mask depend on the induction variable and values from outside the loop only, and a
    /// masked element may read zero (copies of masked elements zero-fill): a load with another
    /// `other` stays a global load.
    fn plan_row_loads(
        &self,
        body: Block,
        inside: &HashSet<Value>,
        tile_bytes: u32,
        stages: u32,
        room: u32,
    ) -> (Vec<RowLoad>, u32) {
        let iv = self.k.blocks[body].args[0];
        let mut rows = Vec::new();
        let mut offset = tile_bytes;
        for &li in &self.k.blocks[body].insts {
            if !self.streamable_load(li, iv, inside) {
                continue;
            }
            let value = self.k.insts[li].results[0];
            let ty = self.k.ty(value);
            let word = matches!(ty.dtype(), DType::F32 | DType::I32 | DType::U32);
            if ty.shape.rank() != 1 || !word || !self.plan.layouts.access(li).broadcast {
                continue;
            }
            let vec = self.access_vec(li);
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
                copy: Layout::blocked(&ty.shape, vec, self.num_warps),
                vec,
            });
            offset += bytes;
        }
        (rows, offset.div_ceil(128) * 128)
    }

    /// Bytes at the start of the scratch buffer held by enclosing pipelines and resident dot
    /// operands (scratch uses now start after them).
    pub(crate) fn reserved_shared(&self) -> u32 {
        self.smem_shift.last().map_or(0, |&(_, bytes)| bytes)
    }

    /// Every value defined in `block` or its nested regions.
    fn region_values_of(&self, block: Block) -> HashSet<Value> {
        let mut out = HashSet::new();
        let mut stack = vec![block];
        while let Some(b) = stack.pop() {
            out.extend(self.k.blocks[b].args.iter().copied());
            for &i in &self.k.blocks[b].insts {
                out.extend(self.k.insts[i].results.iter().copied());
                stack.extend(self.k.insts[i].regions.iter().copied());
            }
        }
        out
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
        // The role of operand `pos` of `user` when it is a dot operand read from the slot.
        let dot_role = |user: Inst, pos: usize| {
            let is_dot = matches!(self.k.insts[user].op, Op::Dot { .. });
            if !is_dot || pos > 1 || !body_insts.contains(&user) {
                return None;
            }
            let plan = self.mma_plan(user)?;
            (plan.kind == kind).then_some(if pos == 0 { Role::A } else { Role::B })
        };
        let mut reads = Vec::new();
        for &(user, pos) in self.cx.uses.users(src)? {
            if let Some(role) = dot_role(user, pos) {
                reads.push((role, role == Role::A));
                continue;
            }
            let d = &self.k.insts[user];
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

    /// Before the loop: plans the pipeline and fills the first `S - lag` slots (or, for the inner
    /// loop of a [`Nest`], takes the slots the outer loop filled). Returns whether the loop is
    /// pipelined.
    pub(crate) fn pipeline_prologue(
        &mut self,
        for_inst: Inst,
        iv: Reg,
        hi: Reg,
        step: Reg,
    ) -> R<bool> {
        let nest = self
            .pipe
            .nests
            .last()
            .filter(|n| n.inner == for_inst)
            .cloned();
        let (loads, rows, stages, slot_bytes, base) = match nest {
            Some(n) => (n.loads, n.rows, n.stages, n.slot_bytes, n.base),
            None => {
                let Some((loads, rows, stages, slot_bytes)) = self.plan_pipeline(for_inst) else {
                    return Ok(false);
                };
                let base = self.reserve_slots(stages * slot_bytes);
                (loads, rows, stages, slot_bytes, base)
            }
        };
        let nested = self.pipe.nests.last().is_some_and(|n| n.inner == for_inst);
        let body = self.k.insts[for_inst].regions[0];
        let lag = self.pipeline_lag(body);
        let read_off = self.imm(RegClass::B32, Arg::Imm(0));
        let write_off = self.imm(
            RegClass::B32,
            Arg::Imm(((stages - lag) * slot_bytes) as i64),
        );
        let mut pipe = Pipe {
            body,
            iv: self.k.blocks[body].args[0],
            loads,
            rows,
            stages,
            slot_bytes,
            lag,
            base,
            read_off,
            write_off,
            deferred: None,
            carried: vec![],
            boundary: None,
            nested,
        };
        // The carried addresses start at the first iteration the prologue did not copy.
        let first_refill = if nested {
            self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![step.into(), Arg::Imm(i64::from(stages - lag)), iv.into()],
            )
        } else {
            iv
        };
        let inside = self.region_values_of(body);
        for pl in &pipe.loads {
            let carried = self.carry_addrs(pl, pipe.iv, first_refill, step, &inside)?;
            pipe.carried.push(carried);
        }
        self.b.comment(format!(
            "pipeline: {} loads{}, {stages} stages of {slot_bytes} bytes{}",
            pipe.loads.len(),
            match pipe.rows.len() {
                0 => String::new(),
                n => format!(" and {n} rank-1 loads"),
            },
            if nested {
                " (first stages copied by the outer loop)"
            } else {
                ""
            }
        ));
        if !nested {
            self.issue_first_stages(&pipe, iv, step, hi, None)?;
        }
        self.pipe.active.push(pipe);
        // A resident dot operand's write (its global load was issued before the barrier
        // above) goes after the first copies, so that both are in flight together.
        self.write_resident_operands(true);
        self.boundary_prologue()?;
        Ok(true)
    }

    /// The [`Pipe::lag`] of the loop with this body: 2 when one of its dots is a `wgmma` in
    /// flight into the next iteration, else 1.
    fn pipeline_lag(&self, body: Block) -> u32 {
        let in_flight = self.k.blocks[body]
            .insts
            .iter()
            .any(|i| self.pipe.wgmma_in_flight.contains(i));
        if in_flight {
            2
        } else {
            1
        }
    }

    /// `total` bytes of slots at the start of the free scratch buffer (after enclosing
    /// pipelines and resident dot operands): other scratch uses go after them until
    /// [`Self::release_slots`]. Returns the slots' address.
    fn reserve_slots(&mut self, total: u32) -> Reg {
        let base = self.smem(total);
        let shifted = self.b.in_prologue(|b| {
            b.op(
                "add.s32",
                RegClass::B32,
                vec![base.into(), Arg::Imm(total as i64)],
            )
        });
        self.smem_shift
            .push((shifted, self.reserved_shared() + total));
        // Earlier users of the scratch buffer (a hoisted operand's staging) may still read it.
        self.barrier();
        base
    }

    fn release_slots(&mut self) {
        self.smem_shift.pop();
    }

    /// Before the loop, when the fragments cross the tile boundary (see
    /// [`BoundaryFragments`]): the first slot's wait and barrier, and its k-step 0 fragments.
    fn boundary_prologue(&mut self) -> R<()> {
        let pipe = self.pipe.active.last().expect("a pipeline").clone();
        let Some(dot) = self.boundary_dot(&pipe) else {
            return Ok(());
        };
        self.wait_for_slot(&pipe);
        let words = self
            .first_kstep_fragments(dot, pipe.read_off, None)
            .expect("boundary_dot checked the operands");
        self.pipe.active.last_mut().expect("a pipeline").boundary =
            Some(BoundaryFragments { dot, words });
        Ok(())
    }

    /// The dot whose first fragments may be loaded across the tile boundary: the body's only
    /// dot, with both operands in this pipeline's slots and at least two k-steps, and no other
    /// instruction of the body that may use shared memory (the pipelined loads aside).
    fn boundary_dot(&mut self, pipe: &Pipe) -> Option<Inst> {
        let mut dot = None;
        for &i in &self.k.blocks[pipe.body].insts {
            let op = &self.k.insts[i].op;
            match op {
                Op::Dot { .. } if dot.is_none() => dot = Some(i),
                Op::Load { .. } if pipe.loads.iter().any(|l| l.inst == i) => {}
                Op::Yield => {}
                _ if is_anchored(op) || !self.k.insts[i].regions.is_empty() => return None,
                _ => {}
            }
        }
        let dot = dot?;
        let plan = self.mma_plan(dot)?;
        if self.pipe.wgmma_dots.contains(&dot)
            || plan.k / plan.kind.k_step() < 2
            || plan.split_tf32
            || self.boundary_registers(pipe, &plan) > BOUNDARY_MAX_REGISTERS
        {
            return None;
        }
        let args = self.k.insts[dot].args.clone();
        let both_piped = [(args[0], Role::A), (args[1], Role::B)]
            .into_iter()
            .all(|(v, role)| self.slot_operand(v, role, &plan).is_some());
        both_piped.then_some(dot)
    }

    /// An estimate of the registers a thread holds in the loop when the fragments cross the
    /// tile boundary: the f32 accumulators, three k-steps of operand fragments (the next
    /// tile's first, carried, and the current and next k-step's, double-buffered within the
    /// tile) and one per `cp.async` copy (its source or destination address).
    fn boundary_registers(&self, pipe: &Pipe, plan: &MmaPlan) -> u32 {
        let accumulators = plan.m * plan.n / (32 * self.num_warps);
        let k_steps = plan.k / plan.kind.k_step();
        let kstep_words: u32 = [Role::A, Role::B]
            .into_iter()
            .map(|role| fragment_registers(plan, role) / k_steps)
            .sum();
        let copies: u32 = pipe
            .loads
            .iter()
            .map(|pl| {
                let shape = self.k.ty(pl.value).shape;
                pl.layout.geometry(&shape).count as u32 / pl.vec
            })
            .sum();
        accumulators + 3 * kstep_words + copies
    }

    /// The k-step 0 fragments `dot` finds in registers at the top of an iteration, when they
    /// cross the tile boundary.
    pub(crate) fn boundary_fragments(&self, dot: Inst) -> Option<Vec<Reg>> {
        let b = self.pipe.active.last()?.boundary.as_ref()?;
        (b.dot == dot).then(|| b.words.clone())
    }

    /// Inside the boundary dot, before its last k-step's mmas: wait for the next iteration's
    /// slot, the barrier, and that slot's k-step 0 fragments into the carried registers.
    pub(crate) fn boundary_next_fragments(&mut self, dot: Inst) -> R<()> {
        let pipe = self.pipe.active.last().expect("a pipeline").clone();
        let words = pipe
            .boundary
            .as_ref()
            .expect("a boundary dot")
            .words
            .clone();
        self.wait_for_slot(&pipe);
        let next = self.next_slot(&pipe, pipe.read_off, None);
        self.first_kstep_fragments(dot, next, Some(&words))
            .expect("boundary_dot checked the operands");
        Ok(())
    }

    /// At the top of an iteration: wait for this iteration's slot, then refill the slot read
    /// `lag` iterations back with iteration `i + S - lag`, now or (when a dot of the body
    /// reads a pipelined operand) from within that dot, see [`Self::pipeline_refill_in_dot`].
    pub(crate) fn pipeline_iteration_start(&mut self, iv: Reg, hi: Reg, step: Reg) -> R<()> {
        let pipe = self.pipe.active.last().expect("a pipeline").clone();
        // With fragments across the boundary, the last iteration (or the prologue) waited.
        if pipe.boundary.is_none() {
            self.wait_for_slot(&pipe);
        }
        if self.body_dot_reads_pipe(&pipe) {
            let scope_depth = self.scopes.len();
            self.pipe.active.last_mut().expect("a pipeline").deferred = Some(DeferredRefill {
                iv,
                hi,
                step,
                scope_depth,
            });
            return Ok(());
        }
        self.pipeline_refill(&pipe, iv, hi, step)
    }

    /// Whether a dot directly in the loop body (not in a nested region) reads one of `pipe`'s
    /// loads, as is or transposed.
    fn body_dot_reads_pipe(&self, pipe: &Pipe) -> bool {
        let piped = |mut v: Value| loop {
            if pipe.loads.iter().any(|l| l.value == v) {
                return true;
            }
            match self.k.def_inst(v).map(|i| &self.k.insts[i]) {
                Some(d) if matches!(d.op, Op::Permute { .. }) => v = d.args[0],
                _ => return false,
            }
        };
        self.k.blocks[pipe.body].insts.iter().any(|&i| {
            let d = &self.k.insts[i];
            matches!(d.op, Op::Dot { .. }) && d.args[..2].iter().any(|&v| piped(v))
        })
    }

    /// Issues this iteration's deferred refill, when a dot directly in the pipelined loop's
    /// body (the scope depth of the iteration's top) calls it; nothing otherwise.
    pub(crate) fn pipeline_refill_in_dot(&mut self) -> R<()> {
        let Some(pipe) = self.pipe.active.last() else {
            return Ok(());
        };
        let Some(d) = pipe.deferred else {
            return Ok(());
        };
        if self.scopes.len() != d.scope_depth {
            return Ok(());
        }
        let pipe = pipe.clone();
        self.pipe.active.last_mut().expect("a pipeline").deferred = None;
        // The addresses depend on the induction variable and values from outside the loop
        // only; the body's scope may hold this iteration's values of the same expressions, so
        // its values are set aside while they are evaluated for iteration `i + S - lag`. Its
        // hoist point stays: what the refill computes from outside the loop only (a tile's
        // masks in a persistent grid) goes before the loop, once.
        let set_aside = self.set_aside_values(d.scope_depth - 1);
        let r = self.pipeline_refill(&pipe, d.iv, d.hi, d.step);
        self.restore_values(d.scope_depth - 1, set_aside);
        r
    }

    /// Refills the slot read `lag` iterations back with iteration `iv + (S - lag) step`.
    fn pipeline_refill(&mut self, pipe: &Pipe, iv: Reg, hi: Reg, step: Reg) -> R<()> {
        let it = self.b.op(
            "mad.lo.s32",
            RegClass::B32,
            vec![
                step.into(),
                Arg::Imm(i64::from(pipe.stages - pipe.lag)),
                iv.into(),
            ],
        );
        let valid = self
            .b
            .op("setp.lt.s32", RegClass::Pred, vec![it.into(), hi.into()]);
        self.pipeline_issue(pipe, it, valid, pipe.write_off)
    }

    /// At the bottom of an iteration: both slots advance by one (mod S).
    pub(crate) fn pipeline_iteration_end(&mut self) -> R<()> {
        let pipe = self.pipe.active.last().expect("a pipeline").clone();
        if let Some(d) = pipe.deferred {
            // No dot took the refill (it cannot happen when `body_dot_reads_pipe` held, as
            // every such dot calls `pipeline_refill_in_dot`); issue it before the slots move.
            self.pipe.active.last_mut().expect("a pipeline").deferred = None;
            self.pipeline_refill(&pipe, d.iv, d.hi, d.step)?;
        }
        for r in [pipe.read_off, pipe.write_off] {
            self.next_slot(&pipe, r, Some(r));
        }
        Ok(())
    }

    /// Waits until this iteration's slot has landed (at most `S - 1 - lag` copy groups still
    /// in flight), then a barrier: every thread's copies are visible, and every read of the
    /// slot the next refill overwrites is done.
    fn wait_for_slot(&mut self, pipe: &Pipe) {
        self.b.emit(
            "cp.async.wait_group",
            vec![Arg::Imm(i64::from(pipe.stages - 1 - pipe.lag))],
        );
        if pipe
            .loads
            .iter()
            .any(|l| self.pipe.wgmma_loads.contains(&l.inst))
        {
            // The copies wrote through the generic proxy; wgmma reads through the async one.
            self.b.emit("fence.proxy.async.shared::cta", vec![]);
        }
        self.barrier();
    }

    /// The byte offset of the slot after the one at `off` (mod S), into `dst` when given, else
    /// into a new register.
    fn next_slot(&mut self, pipe: &Pipe, off: Reg, dst: Option<Reg>) -> Reg {
        let next = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![off.into(), Arg::Imm(pipe.slot_bytes as i64)],
        );
        let wrap = self.b.op(
            "setp.ge.u32",
            RegClass::Pred,
            vec![
                next.into(),
                Arg::Imm((pipe.stages * pipe.slot_bytes) as i64),
            ],
        );
        let args = vec![Arg::Imm(0), next.into(), wrap.into()];
        match dst {
            Some(d) => {
                self.b.emit("selp.b32", [vec![d.into()], args].concat());
                d
            }
            None => self.b.op("selp.b32", RegClass::B32, args),
        }
    }

    /// After the loop: every copy has landed. The inner loop of a [`Nest`] then copies the
    /// outer loop's next iteration's first stages into the slots it kept.
    pub(crate) fn pipeline_epilogue(&mut self) -> R<()> {
        self.b.emit("cp.async.wait_all", vec![]);
        let pipe = self.pipe.active.pop().expect("a pipeline");
        if pipe.lag == 2 {
            // The last k-tile's wgmma is still in flight: its accumulator is read next.
            self.b
                .emit("wgmma.wait_group.sync.aligned", vec![Arg::Imm(0)]);
        }
        if !pipe.nested {
            self.release_slots();
            return Ok(());
        }
        let nest = self.pipe.nests.last().expect("a nest").clone();
        // Every warp is done reading the slots (and the copies past the loop's end, which
        // zero-fill, have landed everywhere) before the slots are written again.
        self.barrier();
        self.b
            .comment("the outer loop's next iteration's first stages, in flight from here");
        let next = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![nest.iv.into(), nest.step.into()],
        );
        // The values of the outer body are this iteration's; set them aside while the same
        // expressions are evaluated for the next.
        let body_scope = self.scopes.len() - 1;
        let set_aside = self.set_aside_values(body_scope);
        let r = self.nest_issue(&nest, next);
        self.restore_values(body_scope, set_aside);
        r
    }

    /// Before the outer loop of a loop nest (`for_inst`, with these induction variable, bound
    /// and step registers): when the nest can be pipelined across it (see [`Nest`]), reserves
    /// the inner loop's slots and copies the outer loop's first iteration's first stages.
    /// Returns whether it did.
    pub(crate) fn nest_prologue(&mut self, for_inst: Inst, iv: Reg, hi: Reg, step: Reg) -> R<bool> {
        let Some((inner, (loads, rows, stages, slot_bytes))) = self.nest_inner_loop(for_inst)
        else {
            return Ok(false);
        };
        let body = self.k.insts[for_inst].regions[0];
        let outer_iv = self.k.blocks[body].args[0];
        let base = self.reserve_slots(stages * slot_bytes);
        let lag = self.pipeline_lag(self.k.insts[inner].regions[0]);
        let nest = Nest {
            inner,
            outer_iv,
            iv,
            hi,
            step,
            signed: self.k.ty(outer_iv).dtype().is_signed_int(),
            loads,
            rows,
            stages,
            slot_bytes,
            lag,
            base,
        };
        self.b.comment(format!(
            "loop nest pipelined across the outer loop: {} loads, {stages} stages of {slot_bytes} bytes",
            nest.loads.len()
        ));
        self.nest_issue(&nest, iv)?;
        self.pipe.nests.push(nest);
        Ok(true)
    }

    /// After the outer loop of a nest.
    pub(crate) fn nest_epilogue(&mut self) {
        self.b.emit("cp.async.wait_all", vec![]);
        self.pipe.nests.pop();
        self.release_slots();
    }

    /// Copies the first `S - lag` stages of the nest's inner loop at outer iteration `outer_it`
    /// (nothing when `outer_it` is past the outer bound) into slots `0..S-lag`.
    fn nest_issue(&mut self, nest: &Nest, outer_it: Reg) -> R<()> {
        self.scopes.push(Default::default());
        self.define(nest.outer_iv, &Layout::scalar(), vec![outer_it]);
        let r = self.nest_issue_stages(nest, outer_it);
        self.scopes.pop();
        r
    }

    fn nest_issue_stages(&mut self, nest: &Nest, outer_it: Reg) -> R<()> {
        let cmp = if nest.signed { "s32" } else { "u32" };
        let exists = self.b.op(
            format!("setp.lt.{cmp}"),
            RegClass::Pred,
            vec![outer_it.into(), nest.hi.into()],
        );
        let d = self.k.insts[nest.inner].clone();
        let (lo, hi, step) = (
            self.scalar(d.args[0])?,
            self.scalar(d.args[1])?,
            self.scalar(d.args[2])?,
        );
        let body = d.regions[0];
        // The inner loop's pipeline as `pipeline_issue` reads it: its loads and slots, every
        // address evaluated at the bound iterations (none carried); no slot is read here, so
        // the slot offsets are placeholders.
        let pipe = Pipe {
            body,
            iv: self.k.blocks[body].args[0],
            loads: nest.loads.clone(),
            rows: nest.rows.clone(),
            stages: nest.stages,
            slot_bytes: nest.slot_bytes,
            lag: nest.lag,
            base: nest.base,
            read_off: lo,
            write_off: lo,
            deferred: None,
            carried: vec![],
            boundary: None,
            nested: true,
        };
        self.issue_first_stages(&pipe, lo, step, hi, Some(exists))?;
        Ok(())
    }

    /// The inner loop of `outer`'s body and its pipeline plan, when the nest can be pipelined
    /// across `outer` (the preconditions of [`Nest`]).
    fn nest_inner_loop(&mut self, outer: Inst) -> Option<(Inst, PipePlan)> {
        let body = self.k.insts[outer].regions[0];
        let outer_iv = self.k.blocks[body].args[0];
        if self.k.ty(outer_iv).dtype().bits() > 32 {
            return None;
        }
        let mut loops = self.k.blocks[body]
            .insts
            .iter()
            .copied()
            .filter(|&i| matches!(self.k.insts[i].op, Op::For));
        let inner = loops.next()?;
        if loops.next().is_some() {
            return None;
        }
        let outer_inside = self.region_values_of(body);
        let d = self.k.insts[inner].clone();
        let inner_body = d.regions[0];
        let inner_iv = self.k.blocks[inner_body].args[0];
        let bounds_ok = d.args[..3]
            .iter()
            .all(|&v| self.depends_on_ivs_only(v, &[outer_iv], &outer_inside));
        // Every dot operand loaded in the inner body (through a transpose): no resident operand
        // takes scratch the inner loop's prologue would write.
        let inner_inside = self.region_values_of(inner_body);
        let operand_inside = |s: &Self, v: Value| {
            let v = match s.k.def_inst(v).map(|i| &s.k.insts[i]) {
                Some(t) if matches!(t.op, Op::Permute { .. }) => t.args[0],
                _ => v,
            };
            inner_inside.contains(&v)
        };
        let operands_ok = self.k.blocks[inner_body].insts.iter().all(|&i| {
            let t = &self.k.insts[i];
            !matches!(t.op, Op::Dot { .. }) || t.args[..2].iter().all(|&v| operand_inside(self, v))
        });
        if !bounds_ok || !operands_ok {
            return None;
        }
        let plan = self.plan_pipeline(inner)?;
        let ivs = [outer_iv, inner_iv];
        let insts = plan.0.iter().map(|pl| pl.inst);
        let addrs_ok = insts.chain(plan.1.iter().map(|r| r.inst)).all(|li| {
            let t = &self.k.insts[li];
            let has_mask = matches!(t.op, Op::Load { has_mask: true, .. });
            self.depends_on_ivs_only(t.args[0], &ivs, &outer_inside)
                && (!has_mask || self.depends_on_ivs_only(t.args[1], &ivs, &outer_inside))
        });
        addrs_ok.then_some((inner, plan))
    }

    /// Copies iteration `it`'s tiles (when `valid`) into the slot at byte offset `slot`.
    /// The prologue's copies: iteration `start + s * step` into slot `s` for `s` in
    /// `0..stages - lag`, each only while it is below `hi` and, with `guard`, where it holds.
    fn issue_first_stages(
        &mut self,
        pipe: &Pipe,
        start: Reg,
        step: Reg,
        hi: Reg,
        guard: Option<Reg>,
    ) -> R<()> {
        for s in 0..pipe.stages - pipe.lag {
            let it = self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![step.into(), Arg::Imm(s as i64), start.into()],
            );
            let mut valid = self
                .b
                .op("setp.lt.s32", RegClass::Pred, vec![it.into(), hi.into()]);
            if let Some(guard) = guard {
                valid = self
                    .b
                    .op("and.pred", RegClass::Pred, vec![valid.into(), guard.into()]);
            }
            let slot = self.imm(RegClass::B32, Arg::Imm((s * pipe.slot_bytes) as i64));
            self.pipeline_issue(pipe, it, valid, slot)?;
        }
        Ok(())
    }

    fn pipeline_issue(&mut self, pipe: &Pipe, it: Reg, valid: Reg, slot: Reg) -> R<()> {
        // Evaluate the addresses with the induction variable bound to `it`.
        self.scopes.push(Default::default());
        self.define(pipe.iv, &Layout::scalar(), vec![it]);
        let r = self.pipeline_issue_loads(pipe, valid, slot);
        self.scopes.pop();
        r?;
        self.b.emit("cp.async.commit_group", vec![]);
        Ok(())
    }

    /// `v` in layout `l` with the induction variable bound to `it`.
    fn eval_at_iteration(&mut self, v: Value, l: &Layout, iv: Value, it: Reg) -> R<Vec<Reg>> {
        self.scopes.push(Default::default());
        self.define(iv, &Layout::scalar(), vec![it]);
        let r = self.get(v, l);
        self.scopes.pop();
        Ok(r?.to_vec())
    }

    /// Before the loop: the loop-carried source addresses of `pl`'s copies, when its pointer
    /// is affine in the induction variable and the element's coordinates (at the loop's
    /// first iteration `iv`; they advance by one iteration's difference after each refill).
    fn carry_addrs(
        &mut self,
        pl: &PipeLoad,
        iv_value: Value,
        iv: Reg,
        step: Reg,
        inside: &HashSet<Value>,
    ) -> R<Option<CarriedAddrs>> {
        let ptr = self.k.insts[pl.inst].args[0];
        let Some(form) = self.affine_form(ptr, iv_value, inside) else {
            return Ok(None);
        };
        let [rows, cols] = form.axes[..] else {
            return Ok(None);
        };
        let shape = self.k.ty(pl.value).shape;
        let l = &pl.layout;
        let g = l.geometry(&shape);
        let kept = l.kept();
        let bytes_per = |c: Coef| match c {
            Coef::Const(k) => k,
            _ => 0,
        };
        // Copies whose coordinates differ only along axes of constant coefficient share a
        // group: (runtime row, runtime column, first copy, its row, its column).
        let mut groups: Vec<(i64, i64, usize, i64, i64)> = Vec::new();
        let mut copies = Vec::new();
        for start in (0..g.count).step_by(pl.vec as usize) {
            let c = g.coords(start);
            let rc = g.const_index(kept[0], c[kept[0]]) as i64;
            let cc = g.const_index(kept[1], c[kept[1]]) as i64;
            let key = (
                if rows == Coef::Runtime { rc } else { 0 },
                if cols == Coef::Runtime { cc } else { 0 },
            );
            let gi = match groups.iter().position(|x| (x.0, x.1) == key) {
                Some(gi) => gi,
                None => {
                    groups.push((key.0, key.1, start, rc, cc));
                    groups.len() - 1
                }
            };
            let (_, _, _, r0, c0) = groups[gi];
            copies.push((
                gi,
                (rc - r0) * bytes_per(rows) + (cc - c0) * bytes_per(cols),
            ));
        }
        let first = self.eval_at_iteration(ptr, l, iv_value, iv)?;
        let it1 = self
            .b
            .op("add.s32", RegClass::B32, vec![iv.into(), step.into()]);
        let second = self.eval_at_iteration(ptr, l, iv_value, it1)?;
        let lead = groups[0].2;
        let delta = self.b.op(
            "sub.s64",
            RegClass::B64,
            vec![second[lead].into(), first[lead].into()],
        );
        let carry = |s: &mut Self, r: Reg| s.b.op("mov.b64", RegClass::B64, vec![r.into()]);
        // Groups on rows a fixed count apart (same column part) are one runtime step apart.
        let chained = groups.len() >= 2 && {
            let dr = groups[1].0 - groups[0].0;
            groups
                .iter()
                .enumerate()
                .all(|(j, x)| x.1 == groups[0].1 && x.0 - groups[0].0 == j as i64 * dr)
        };
        let groups = if chained {
            let step = self.b.op(
                "sub.s64",
                RegClass::B64,
                vec![first[groups[1].2].into(), first[lead].into()],
            );
            GroupAddrs::Chained {
                first: carry(self, first[lead]),
                step,
                count: groups.len(),
            }
        } else {
            GroupAddrs::Each(groups.iter().map(|x| carry(self, first[x.2])).collect())
        };
        Ok(Some(CarriedAddrs {
            copies,
            groups,
            delta,
        }))
    }

    /// The source address (register and byte offset) of each copy of a carried load.
    fn carried_sources(&mut self, ca: &CarriedAddrs) -> Vec<(Reg, i64)> {
        let group_regs = match &ca.groups {
            GroupAddrs::Each(regs) => regs.clone(),
            GroupAddrs::Chained { first, step, count } => {
                let mut regs = vec![*first];
                for _ in 1..*count {
                    let last = *regs.last().expect("a group");
                    let next =
                        self.b
                            .op("add.s64", RegClass::B64, vec![last.into(), (*step).into()]);
                    regs.push(next);
                }
                regs
            }
        };
        ca.copies
            .iter()
            .map(|&(g, off)| (group_regs[g], off))
            .collect()
    }

    /// After a carried load's copies: its registers advance to the next iteration.
    fn advance_carried(&mut self, ca: &CarriedAddrs) {
        let carried = match &ca.groups {
            GroupAddrs::Each(regs) => regs.clone(),
            GroupAddrs::Chained { first, .. } => vec![*first],
        };
        for r in carried {
            self.b
                .emit("add.s64", vec![r.into(), r.into(), ca.delta.into()]);
        }
    }

    fn pipeline_issue_loads(&mut self, pipe: &Pipe, valid: Reg, slot: Reg) -> R<()> {
        for (li, pl) in pipe.loads.iter().enumerate() {
            let d = self.k.insts[pl.inst].clone();
            let Op::Load { has_mask, .. } = d.op else {
                unreachable!()
            };
            let l = &pl.layout;
            let carried = pipe.carried.get(li).cloned().flatten();
            let sources: Vec<(Reg, i64)> = match &carried {
                Some(ca) => self.carried_sources(ca),
                None => {
                    let ptrs = self.get(d.args[0], l)?;
                    (0..ptrs.len())
                        .step_by(pl.vec as usize)
                        .map(|s| (ptrs[s], 0))
                        .collect()
                }
            };
            let mask = if has_mask {
                Some(self.get(d.args[1], l)?)
            } else {
                None
            };
            let shape = self.k.ty(pl.value).shape;
            let g = l.geometry(&shape);
            let kept = l.kept();
            let (p0, p1) = (kept[0], kept[1]);
            let es = 2u32;
            let bytes = pl.vec * es;
            let mut slot_addr: HashMap<Reg, Reg> = HashMap::new();
            for (copy, &(src, src_off)) in sources.iter().enumerate() {
                let start = copy * pl.vec as usize;
                let c = g.coords(start);
                let (rc, cc) = (
                    g.const_index(p0, c[p0]) as u32,
                    g.const_index(p1, c[p1]) as u32,
                );
                let cbyte = cc * es;
                let (rlo, blo) = (rc % 8, cbyte % 128);
                let var = self.stage_write_addr(pipe.base, l, &shape, false, &pl.stage, rlo, blo);
                let dst = *slot_addr.entry(var).or_insert_with(|| {
                    self.b
                        .op("add.s32", RegClass::B32, vec![var.into(), slot.into()])
                });
                // Whole groups of 8 rows and 128 bytes: the swizzle's phase is unchanged.
                let imm = (pl.stage.stored_offset(rc - rlo, cbyte - blo)) as i64;
                let mask = mask.as_ref().map(|m| m[start]);
                self.copy_async((dst, imm), (src, src_off), bytes, mask, valid, None);
            }
            if let Some(ca) = &carried {
                self.advance_carried(ca);
            }
        }
        for row in &pipe.rows {
            self.issue_row_copies(row, pipe.base, valid, slot)?;
        }
        Ok(())
    }

    /// Copies a staged rank-1 load's elements (when `valid`; masked elements zero-fill) into its
    /// region of the slot at byte offset `slot`: element `e` at `4 e`. Replicated threads of
    /// the copy layout copy nothing (a zero-filling replica would race with the owner's copy).
    fn issue_row_copies(&mut self, row: &RowLoad, base: Reg, valid: Reg, slot: Reg) -> R<()> {
        let d = self.k.insts[row.inst].clone();
        let Op::Load { has_mask, .. } = d.op else {
            unreachable!()
        };
        let shape = self.k.ty(row.value).shape;
        let l = &row.copy;
        let ptrs = self.get(d.args[0], l)?;
        let mask = if has_mask {
            Some(self.get(d.args[1], l)?)
        } else {
            None
        };
        let owner = self.owner(l, &shape);
        let dst = self.row_region_addr(l, &shape, base, slot);
        let g = l.geometry(&shape);
        let axis = l.kept()[0];
        let bytes = row.vec * 4;
        for start in (0..g.count).step_by(row.vec as usize) {
            let e = g.const_index(axis, g.coords(start)[axis]) as i64;
            let dst = (dst, row.offset as i64 + 4 * e);
            let mask = mask.as_ref().map(|m| m[start]);
            self.copy_async(dst, (ptrs[start], 0), bytes, mask, valid, owner);
        }
        Ok(())
    }

    /// One `cp.async` of `bytes` from global `src` to shared `dst` (register plus immediate
    /// offset each): the whole copy when `valid` and the element's `mask` hold, else a zero
    /// fill (source size 0); only threads where `owner` holds issue it. 16-byte copies bypass
    /// L1 (`.cg`), smaller ones may not.
    fn copy_async(
        &mut self,
        dst: (Reg, i64),
        src: (Reg, i64),
        bytes: u32,
        mask: Option<Reg>,
        valid: Reg,
        owner: Option<Reg>,
    ) {
        let ok = self.access_guard(mask, Some(valid)).unwrap_or(valid);
        let src_size = self.b.op(
            "selp.u32",
            RegClass::B32,
            vec![Arg::Imm(bytes as i64), Arg::Imm(0), ok.into()],
        );
        let cache = if bytes == 16 { "cg" } else { "ca" };
        let args = vec![
            Arg::Addr(Box::new(dst.0.into()), dst.1),
            Arg::Addr(Box::new(src.0.into()), src.1),
            Arg::Imm(bytes as i64),
            src_size.into(),
        ];
        let opcode = format!("cp.async.{cache}.shared.global");
        match owner {
            Some(p) => self.b.emit_guarded(p, false, opcode, args),
            None => self.b.emit(opcode, args),
        }
    }

    /// The shared address of a thread's first element of a rank-1 value of `shape` in `l`
    /// within a slot's row regions: `base + slot + 4 * position` (the region's offset and the
    /// register's constant index go in the accesses' immediates).
    fn row_region_addr(
        &mut self,
        l: &Layout,
        shape: &tegula_ir::Shape,
        base: Reg,
        slot: Reg,
    ) -> Reg {
        let at_slot = self
            .b
            .op("add.s32", RegClass::B32, vec![base.into(), slot.into()]);
        match self.bases(l, shape)[l.kept()[0]] {
            Some(pos) => self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![pos.into(), Arg::Imm(4), at_slot.into()],
            ),
            None => at_slot,
        }
    }

    /// When `v` is a rank-1 load staged by a pipeline that is running: its layout, after
    /// reading this iteration's elements from the slot into registers (each thread its own,
    /// contiguous ones as one vector access) unless the current scope has them. The read is
    /// emitted where the value is first needed, so its registers live from there only; the
    /// iteration's wait and barrier came before it, and the slot is refilled only after the
    /// next iteration's barrier.
    pub(crate) fn staged_row(&mut self, v: Value) -> R<Option<Layout>> {
        let Some((base, read_off, row)) = self.pipe.active.iter().rev().find_map(|p| {
            let row = p.rows.iter().find(|r| r.value == v)?;
            Some((p.base, p.read_off, row.clone()))
        }) else {
            return Ok(None);
        };
        let l = self.access_layout(row.inst);
        if self.lookup(v, &l).is_some() {
            return Ok(Some(l));
        }
        let ty = self.k.ty(v);
        let dt = ty.dtype();
        let shape = ty.shape;
        let g = l.geometry(&shape);
        let axis = l.kept()[0];
        let run = Self::contiguous_run(&l, &shape).min(4);
        let run = if run.is_power_of_two() { run } else { 1 } as usize;
        let addr = self.row_region_addr(&l, &shape, base, read_off);
        let class = class_of(Elem::Scalar(dt));
        let mut regs = Vec::with_capacity(g.count);
        for start in (0..g.count).step_by(run) {
            let e = g.const_index(axis, g.coords(start)[axis]) as i64;
            let words: Vec<Reg> = (0..run).map(|_| self.b.reg(class)).collect();
            let dst = if run > 1 {
                Arg::Vec(words.clone())
            } else {
                Arg::Reg(words[0])
            };
            let suffix = if run > 1 {
                format!(".v{run}")
            } else {
                String::new()
            };
            self.b.emit(
                format!("ld.shared{suffix}{}", mem_ty(dt)),
                vec![
                    dst,
                    Arg::Addr(Box::new(addr.into()), row.offset as i64 + 4 * e),
                ],
            );
            regs.extend(words);
        }
        self.define(v, &l, regs);
        Ok(Some(l))
    }

    /// Where a pipelined load's value is this iteration (its slot); `None` when `src` is not
    /// pipelined (or is stored in another orientation).
    pub(crate) fn pipelined_stage(
        &self,
        src: Value,
        role: Role,
        k_major: bool,
        plan: &MmaPlan,
    ) -> Option<SharedOperand> {
        let pipe = self
            .pipe
            .active
            .iter()
            .rev()
            .find(|p| p.loads.iter().any(|l| l.value == src))?;
        let pl = pipe.loads.iter().find(|l| l.value == src)?;
        if !pl.reads.contains(&(role, k_major)) || pl.stage.kind != plan.kind {
            return None;
        }
        Some(SharedOperand {
            base: pipe.base,
            stage: Stage {
                role,
                k_major,
                ..pl.stage
            },
            shift: Some(pipe.read_off),
        })
    }
}
