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
//! A loop whose `wgmma` dot stays in flight into the next iteration (`wgmma.rs`, the plan's
//! `wgmma_in_flight`) refills after that dot's `wgmma.wait_group 1`: it retires last
//! iteration's k-tile in this warpgroup, a second barrier makes that so in every warpgroup,
//! and the slot read last iteration is then refilled, as in the plain order (Triton's order
//! on Hopper: the slots stay `S - 1` ahead while the tensor cores always hold a k-tile):
//!
//! ```text
//! iteration i:       wait_group S-2; fence.proxy.async; bar.sync
//!                    wgmmas of slot i mod S; commit; wgmma.wait_group 1; bar.sync
//!                    copy iteration i+S-1 into slot (i-1) mod S; commit_group
//! after the loop:    wait_all; wgmma.wait_group 0
//! ```
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
use super::{Lower, R};
use crate::layout::Layout;
use crate::mma_layout::{Role, Stage};
use crate::ptx::{Arg, Reg, RegClass, SMEM};
use std::collections::HashMap;
use tegula_ir::fast_hash::HashSet;
use tegula_ir::{Block, Elem, Inst, Op, Value};

use super::mma::{MmaPlan, SharedOperand};
use crate::analysis::affine::{affine_form, Coef};
use crate::plan::pipeline::{PipeLoad, RowLoad};
use tegula_ir::uses::region_values;

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
    /// Whether a `wgmma` dot of the body stays in flight into the next iteration: the
    /// refill then waits for that dot (see the module doc).
    in_flight: bool,
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
    /// [`Nest`]): its slots and its first `S - 1` stages come from there.
    nested: bool,
    /// The slots' `mbarrier`s, when TMA fills some (see [`SlotBarriers`]).
    bars: Option<SlotBarriers>,
}

/// The `mbarrier`s of a pipeline whose loads TMA copies (rule *TMA slots*), one a slot, below
/// the scratch buffer ([`Lower::mbarrier_bytes`]). Each slot's barrier completes one phase a
/// fill: the thread that issues the copies arms it with their bytes (`expect_tx`), the copies
/// complete it, and every thread waits for the phase with `try_wait.parity` before the
/// iteration's barrier. Every fill of a slot is waited for once before the slot is filled
/// again, so the parity a slot's next wait needs is the count of its waits so far, mod 2: a
/// bit a slot, flipped after each wait, in a register that lives as long as the barriers (a
/// nest's across its outer loop). Fills past the loop's end copy nothing and arm nothing; no
/// iteration waits for them.
///
/// ```text
/// before the loop:   bar.sync; init S barriers (count 1); fence.mbarrier_init; bar.sync
///                    for s in 0..S-1: arm barrier s; copy iteration s into slot s
/// iteration i:       try_wait.parity barrier i mod S, its bit; flip its bit; bar.sync
///                    ... arm barrier (i-1) mod S; copy iteration i+S-1 into its slot ...
/// after the loop:    bar.sync; inval S barriers
/// ```
///
/// A nest's inner loop takes the nest's barriers and bits: the nest initializes them before its
/// outer loop and invalidates them after it.
#[derive(Clone, Copy, Debug)]
struct SlotBarriers {
    /// Shared address of slot 0's barrier.
    first: Reg,
    /// Shared addresses of the barriers of the slot read and the slot written this
    /// iteration (loop-carried).
    read: Reg,
    write: Reg,
    /// Bit `s`: the parity slot `s`'s next wait needs.
    phases: Reg,
}

/// A loop nest pipelined across its outer loop (a persistent matmul's `for tile { for k {
/// loads -> dot }; store }`): the outer loop owns the inner loop's slots, so the epilogue after
/// the inner loop (the store's shared-memory exchange) takes scratch after them, and the first
/// `S - 1` stages of the outer loop's next iteration are copied while it runs:
///
/// ```text
/// before the outer loop:  fill S-1 slots for outer iteration lo (when lo < hi)
/// outer iteration j:      ... inner loop (no prologue of its own; its carried addresses
///                         start S-1 iterations in) ...; wait_all; bar.sync
///                         fill S-1 slots for outer iteration j + step (when < hi)
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
    /// The inner loop's [`Pipe::in_flight`].
    in_flight: bool,
    base: Reg,
    /// The inner loop's slot barriers, when TMA fills some of its slots.
    bars: Option<SlotBarriers>,
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
    active: Vec<Pipe>,
    /// The nests pipelined across their outer loop, innermost last.
    nests: Vec<Nest>,
}

impl Lower<'_> {
    pub(crate) fn is_pipelined(&self, inst: Inst) -> bool {
        self.pipe.active.iter().any(|p| {
            p.loads.iter().any(|l| l.inst == inst) || p.rows.iter().any(|r| r.inst == inst)
        })
    }

    /// Before the loop: plans the pipeline and fills the first `S - 1` slots (or, for the inner
    /// loop of a [`Nest`], takes the slots the outer loop filled). Returns whether the loop is
    /// pipelined.
    pub(crate) fn pipeline_prologue(
        &mut self,
        for_inst: Inst,
        iv: Reg,
        hi: Reg,
        step: Reg,
    ) -> R<bool> {
        let plan = self.plan;
        let Some(lp) = plan.pipelines.of(for_inst) else {
            return Ok(false);
        };
        let Some(pp) = &lp.pipeline else {
            return Ok(false);
        };
        let nested = lp.nested;
        let base = if nested {
            self.pipe.nests.last().expect("the enclosing nest").base
        } else {
            self.reserve_slots(pp.stages * pp.slot_bytes)
        };
        let (loads, rows, stages, slot_bytes, in_flight) = (
            pp.loads.clone(),
            pp.rows.clone(),
            pp.stages,
            pp.slot_bytes,
            pp.in_flight,
        );
        let body = self.k.insts[for_inst].regions[0];
        let read_off = self.imm(RegClass::B32, Arg::Imm(0));
        let write_off = self.imm(RegClass::B32, Arg::Imm(((stages - 1) * slot_bytes) as i64));
        let mut pipe = Pipe {
            body,
            iv: self.k.blocks[body].args[0],
            loads,
            rows,
            stages,
            slot_bytes,
            in_flight,
            base,
            read_off,
            write_off,
            deferred: None,
            carried: vec![],
            boundary: None,
            nested,
            bars: None,
        };
        if let Some(first) = pp.barriers {
            pipe.bars = Some(if nested {
                let nest = self.pipe.nests.last().expect("the enclosing nest");
                let nb = nest
                    .bars
                    .expect("the nest initialized its inner loop's barriers");
                self.slot_barriers_at(nb.first, nb.phases, stages)
            } else {
                self.init_slot_barriers(first, stages)
            });
        }
        // The carried addresses start at the first iteration the prologue did not copy.
        let first_refill = if nested {
            self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![step.into(), Arg::Imm(i64::from(stages - 1)), iv.into()],
            )
        } else {
            iv
        };
        let inside = region_values(self.k, body);
        for pl in &pipe.loads {
            let carried = match pl.tma {
                Some(_) => None,
                None => self.carry_addrs(pl, pipe.iv, first_refill, step, &inside)?,
            };
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
        if let Some(dot) = lp.boundary {
            self.boundary_prologue(dot);
        }
        Ok(true)
    }

    /// Before a loop whose slots TMA fills: its `S` barriers, from index `first` among the
    /// pipelines', initialized (after the barrier that `reserve_slots` placed: every thread
    /// is done with a previous run of the loop) and visible to every thread.
    fn init_slot_barriers(&mut self, first: u32, stages: u32) -> SlotBarriers {
        let index = self.plan.descriptors.tma_loads(self.k) as u32 + first;
        let array = self
            .b
            .op("mov.u32", RegClass::B32, vec![Arg::Sym(SMEM.into())]);
        let first = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![array.into(), Arg::Imm(8 * index as i64)],
        );
        let thread0 = self.first_thread();
        for s in 0..stages {
            self.b.emit_guarded(
                thread0,
                false,
                "mbarrier.init.shared::cta.b64",
                vec![Arg::Addr(Box::new(first.into()), 8 * s as i64), Arg::Imm(1)],
            );
        }
        self.b.emit_guarded(
            thread0,
            false,
            "fence.mbarrier_init.release.cluster",
            vec![],
        );
        self.barrier();
        let phases = self.imm(RegClass::B32, Arg::Imm(0));
        self.slot_barriers_at(first, phases, stages)
    }

    /// The barriers from `first` on with the parities `phases`, read from slot 0 and written
    /// from slot `S - 1`, as a loop's first iteration needs them.
    fn slot_barriers_at(&mut self, first: Reg, phases: Reg, stages: u32) -> SlotBarriers {
        let read = self.b.op("mov.u32", RegClass::B32, vec![first.into()]);
        let write = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![first.into(), Arg::Imm(8 * (stages as i64 - 1))],
        );
        SlotBarriers {
            first,
            read,
            write,
            phases,
        }
    }

    /// After the last wait on `bars`: a barrier (every thread is past its wait), then their
    /// end.
    fn inval_slot_barriers(&mut self, bars: SlotBarriers, stages: u32) {
        self.barrier();
        let thread0 = self.first_thread();
        for s in 0..stages {
            self.b.emit_guarded(
                thread0,
                false,
                "mbarrier.inval.shared::cta.b64",
                vec![Arg::Addr(Box::new(bars.first.into()), 8 * s as i64)],
            );
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
        self.shared
            .smem_shift
            .push((shifted, self.reserved_shared() + total));
        // Earlier users of the scratch buffer (a hoisted operand's staging) may still read it.
        self.barrier();
        base
    }

    /// Bytes at the start of the scratch buffer held by enclosing pipelines and resident dot
    /// operands (scratch uses now start after them).
    pub(crate) fn reserved_shared(&self) -> u32 {
        self.shared.smem_shift.last().map_or(0, |&(_, bytes)| bytes)
    }

    fn release_slots(&mut self) {
        self.shared.smem_shift.pop();
    }

    /// Before the loop, when `dot`'s fragments cross the tile boundary (see
    /// [`BoundaryFragments`]): the first slot's wait and barrier, and its k-step 0 fragments.
    fn boundary_prologue(&mut self, dot: Inst) {
        let pipe = self.pipe.active.last().expect("a pipeline").clone();
        self.wait_for_slot(&pipe);
        let words = self
            .first_kstep_fragments(dot, pipe.read_off, None)
            .expect("the plan found both operands in the slots");
        self.pipe.active.last_mut().expect("a pipeline").boundary =
            Some(BoundaryFragments { dot, words });
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
            .expect("the plan found both operands in the slots");
        Ok(())
    }

    /// At the top of an iteration: wait for this iteration's slot, then refill the slot read
    /// last iteration with iteration `i + S - 1`, now or (when a dot of the body reads a
    /// pipelined operand) from within that dot, see [`Self::pipeline_refill_in_dot`].
    pub(crate) fn pipeline_iteration_start(&mut self, iv: Reg, hi: Reg, step: Reg) -> R<()> {
        let pipe = self.pipe.active.last().expect("a pipeline").clone();
        // With fragments across the boundary, the last iteration (or the prologue) waited.
        if pipe.boundary.is_none() {
            self.wait_for_slot(&pipe);
        }
        if self.body_dot_reads_pipe(&pipe) {
            let scope_depth = self.vals.scopes.len();
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
    /// body (the scope depth of the iteration's top) calls it; nothing otherwise. In a loop
    /// whose `wgmma` stays in flight only that dot takes it, past its wait (`retired`: last
    /// iteration's k-tile is retired in this warpgroup), after a barrier: in every
    /// warpgroup.
    pub(crate) fn pipeline_refill_in_dot(&mut self, retired: bool) -> R<()> {
        let Some(pipe) = self.pipe.active.last() else {
            return Ok(());
        };
        let Some(d) = pipe.deferred else {
            return Ok(());
        };
        if self.vals.scopes.len() != d.scope_depth || pipe.in_flight != retired {
            return Ok(());
        }
        let pipe = pipe.clone();
        self.pipe.active.last_mut().expect("a pipeline").deferred = None;
        if retired {
            self.barrier();
        }
        // The addresses depend on the induction variable and values from outside the loop
        // only; the body's scope may hold this iteration's values of the same expressions, so
        // its values are set aside while they are evaluated for iteration `i + S - 1`. Its
        // hoist point stays: what the refill computes from outside the loop only (a tile's
        // masks in a persistent grid) goes before the loop, once.
        let set_aside = self.set_aside_values(d.scope_depth - 1);
        let r = self.pipeline_refill(&pipe, d.iv, d.hi, d.step);
        self.restore_values(d.scope_depth - 1, set_aside);
        r
    }

    /// Refills the slot read last iteration with iteration `iv + (S - 1) step`.
    fn pipeline_refill(&mut self, pipe: &Pipe, iv: Reg, hi: Reg, step: Reg) -> R<()> {
        let it = self.b.op(
            "mad.lo.s32",
            RegClass::B32,
            vec![step.into(), Arg::Imm(i64::from(pipe.stages - 1)), iv.into()],
        );
        let valid = self
            .b
            .op("setp.lt.s32", RegClass::Pred, vec![it.into(), hi.into()]);
        let bar = pipe.bars.map(|b| (b.write, 0));
        self.pipeline_issue(pipe, it, valid, pipe.write_off, bar)
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
        if let Some(bars) = pipe.bars {
            let end = bars.first;
            for r in [bars.read, bars.write] {
                let next = self
                    .b
                    .op("add.s32", RegClass::B32, vec![r.into(), Arg::Imm(8)]);
                let past = self.b.op(
                    "add.s32",
                    RegClass::B32,
                    vec![end.into(), Arg::Imm(8 * pipe.stages as i64)],
                );
                let wrap = self.b.op(
                    "setp.ge.u32",
                    RegClass::Pred,
                    vec![next.into(), past.into()],
                );
                self.b.emit(
                    "selp.b32",
                    vec![r.into(), end.into(), next.into(), wrap.into()],
                );
            }
        }
        Ok(())
    }

    /// Waits until this iteration's slot has landed (at most `S - 2` copy groups still in
    /// flight), then a barrier: every thread's copies are visible, and every read of the slot
    /// the next refill overwrites is done (but a `wgmma`'s in flight, see the module doc).
    fn wait_for_slot(&mut self, pipe: &Pipe) {
        if let Some(bars) = pipe.bars {
            // Slot index (read - first) / 8; its parity bit, flipped once waited.
            let off = self.b.op(
                "sub.s32",
                RegClass::B32,
                vec![bars.read.into(), bars.first.into()],
            );
            let slot = self
                .b
                .op("shr.u32", RegClass::B32, vec![off.into(), Arg::Imm(3)]);
            let shifted = self.b.op(
                "shr.u32",
                RegClass::B32,
                vec![bars.phases.into(), slot.into()],
            );
            let parity = self
                .b
                .op("and.b32", RegClass::B32, vec![shifted.into(), Arg::Imm(1)]);
            let wait = self.b.new_label("slot_wait");
            self.b.place_label(&wait);
            let done = self.b.op(
                "mbarrier.try_wait.parity.shared::cta.b64",
                RegClass::Pred,
                vec![Arg::Addr(Box::new(bars.read.into()), 0), parity.into()],
            );
            self.b.bra_if(done, true, &wait);
            let bit = self
                .b
                .op("shl.b32", RegClass::B32, vec![Arg::Imm(1), slot.into()]);
            self.b.emit(
                "xor.b32",
                vec![bars.phases.into(), bars.phases.into(), bit.into()],
            );
        }
        let by_threads = |l: &&PipeLoad| l.tma.is_none();
        if pipe.loads.iter().any(|l| by_threads(&l)) || !pipe.rows.is_empty() {
            self.b.emit(
                "cp.async.wait_group",
                vec![Arg::Imm(i64::from(pipe.stages - 2))],
            );
        }
        if pipe
            .loads
            .iter()
            .filter(by_threads)
            .any(|l| self.plan.pipelines.wgmma_loads.contains(&l.inst))
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
        if let (Some(bars), false) = (pipe.bars, pipe.nested) {
            self.inval_slot_barriers(bars, pipe.stages);
        }
        if pipe.in_flight {
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
        let body_scope = self.vals.scopes.len() - 1;
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
        let plan = self.plan;
        let Some(np) = plan.pipelines.of(for_inst).and_then(|l| l.nest.as_ref()) else {
            return Ok(false);
        };
        let (inner, loads, rows, stages, slot_bytes, in_flight, barriers) = (
            np.inner,
            np.pipe.loads.clone(),
            np.pipe.rows.clone(),
            np.pipe.stages,
            np.pipe.slot_bytes,
            np.pipe.in_flight,
            np.pipe.barriers,
        );
        let body = self.k.insts[for_inst].regions[0];
        let outer_iv = self.k.blocks[body].args[0];
        let base = self.reserve_slots(stages * slot_bytes);
        let bars = barriers.map(|first| self.init_slot_barriers(first, stages));
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
            in_flight,
            base,
            bars,
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
        let nest = self.pipe.nests.pop().expect("a nest");
        if let Some(bars) = nest.bars {
            self.inval_slot_barriers(bars, nest.stages);
        }
        self.release_slots();
    }

    /// Copies the first `S - 1` stages of the nest's inner loop at outer iteration `outer_it`
    /// (nothing when `outer_it` is past the outer bound) into slots `0..S-1`.
    fn nest_issue(&mut self, nest: &Nest, outer_it: Reg) -> R<()> {
        self.vals.scopes.push(Default::default());
        self.define(nest.outer_iv, &Layout::scalar(), vec![outer_it]);
        let r = self.nest_issue_stages(nest, outer_it);
        self.vals.scopes.pop();
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
            in_flight: nest.in_flight,
            base: nest.base,
            read_off: lo,
            write_off: lo,
            deferred: None,
            carried: vec![],
            boundary: None,
            nested: true,
            bars: nest.bars,
        };
        self.issue_first_stages(&pipe, lo, step, hi, Some(exists))?;
        Ok(())
    }

    /// Copies iteration `it`'s tiles (when `valid`) into the slot at byte offset `slot`.
    /// The prologue's copies: iteration `start + s * step` into slot `s` for `s` in
    /// `0..stages - 1`, each only while it is below `hi` and, with `guard`, where it holds.
    fn issue_first_stages(
        &mut self,
        pipe: &Pipe,
        start: Reg,
        step: Reg,
        hi: Reg,
        guard: Option<Reg>,
    ) -> R<()> {
        for s in 0..pipe.stages - 1 {
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
            let bar = pipe.bars.map(|b| (b.first, 8 * s as i64));
            self.pipeline_issue(pipe, it, valid, slot, bar)?;
        }
        Ok(())
    }

    /// Copies iteration `it` (when `valid`) into the slot at byte offset `slot`, whose
    /// `mbarrier` (address and offset) is `bar` when TMA fills some of it.
    fn pipeline_issue(
        &mut self,
        pipe: &Pipe,
        it: Reg,
        valid: Reg,
        slot: Reg,
        bar: Option<(Reg, i64)>,
    ) -> R<()> {
        // Evaluate the addresses with the induction variable bound to `it`.
        self.vals.scopes.push(Default::default());
        self.define(pipe.iv, &Layout::scalar(), vec![it]);
        let r = match bar {
            Some(bar) => self.issue_tma_copies(pipe, valid, slot, bar),
            None => Ok(()),
        };
        let r = r.and_then(|()| self.pipeline_issue_loads(pipe, valid, slot));
        self.vals.scopes.pop();
        r?;
        if pipe.loads.iter().any(|l| l.tma.is_none()) || !pipe.rows.is_empty() {
            self.b.emit("cp.async.commit_group", vec![]);
        }
        Ok(())
    }

    /// The TMA copies of one slot fill (see [`SlotBarriers`]): the first thread, when
    /// `valid`, arms the slot's barrier with the bytes of every copy, then issues them.
    fn issue_tma_copies(&mut self, pipe: &Pipe, valid: Reg, slot: Reg, bar: (Reg, i64)) -> R<()> {
        let thread0 = self.first_thread();
        let issue = self.b.op(
            "and.pred",
            RegClass::Pred,
            vec![thread0.into(), valid.into()],
        );
        let bytes: u32 = pipe
            .loads
            .iter()
            .filter(|l| l.tma.is_some())
            .map(|l| l.stage.bytes())
            .sum();
        let bar_addr = || Arg::Addr(Box::new(bar.0.into()), bar.1);
        self.b.emit_guarded(
            issue,
            false,
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            vec![Arg::Sym("_".into()), bar_addr(), Arg::Imm(bytes as i64)],
        );
        let at_slot = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![pipe.base.into(), slot.into()],
        );
        for pl in &pipe.loads {
            let Some(feed) = &pl.tma else {
                continue;
            };
            let tmap = self.tensor_map(feed.map);
            let coords = self.tma_coords(feed.offsets)?;
            for p in 0..feed.copies {
                let col = if p == 0 {
                    coords[0]
                } else {
                    self.b.op(
                        "add.s32",
                        RegClass::B32,
                        vec![coords[0].into(), Arg::Imm((p * feed.box_cols) as i64)],
                    )
                };
                let dst = pl.stage.offset + p * pl.stage.rows * 128;
                self.b.emit_guarded(
                    issue,
                    false,
                    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                    vec![
                        Arg::Addr(Box::new(at_slot.into()), dst as i64),
                        Arg::TensorCoords(tmap, vec![col, coords[1]]),
                        bar_addr(),
                    ],
                );
            }
        }
        Ok(())
    }

    /// `v` in layout `l` with the induction variable bound to `it`.
    fn eval_at_iteration(&mut self, v: Value, l: &Layout, iv: Value, it: Reg) -> R<Vec<Reg>> {
        self.vals.scopes.push(Default::default());
        self.define(iv, &Layout::scalar(), vec![it]);
        let r = self.get(v, l);
        self.vals.scopes.pop();
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
        let Some(form) = affine_form(self.k, ptr, iv_value, inside) else {
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
        let keyed = |c: Coef| matches!(c, Coef::Runtime | Coef::Varying);
        let mut groups: Vec<(i64, i64, usize, i64, i64)> = Vec::new();
        let mut copies = Vec::new();
        for start in (0..g.count).step_by(pl.vec as usize) {
            let c = g.coords(start);
            let rc = g.const_index(kept[0], c[kept[0]]) as i64;
            let cc = g.const_index(kept[1], c[kept[1]]) as i64;
            let key = (
                if keyed(rows) { rc } else { 0 },
                if keyed(cols) { cc } else { 0 },
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
        let chained = groups.len() >= 2 && rows == Coef::Runtime && {
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
            if pl.tma.is_some() {
                continue;
            }
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
            let es = pl.stage.kind.elem_bytes();
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
        if !pl.reads.contains(&(role, k_major)) || pl.stage.kind != plan.kind_of(role) {
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
