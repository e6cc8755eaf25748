//! Reductions and scans.
//!
//! Reduce: combine a thread's registers along the axis, then butterfly shuffles
//! (`shfl.sync.bfly`) across the lanes that hold distinct elements of the axis, then shared
//! memory across warps; every thread ends with the result in the sliced layout. Floats
//! accumulate in f32 (f16/bf16 round once at the end); `max`/`min` propagate NaN
//! (`max.NaN.f32`), as the interpreter does.
//!
//! Scan: convert to a layout where each thread holds one contiguous run of the axis, scan the
//! run, then an inclusive scan of run totals across lanes (`shfl.sync.up`), then across warps
//! through shared memory; each element adds the total of everything before its run.

use super::convert::Remap;
use super::{Lower, Vals, R};
use crate::layout::Layout;
use crate::plan::layouts::PartialSum;
use crate::ptx::{Arg, Reg, RegClass, Ty};
use std::collections::HashSet;
use tegula_ir::{BinaryOp, Constant, DType, Inst, Op, ReduceOp, Rounding, Value, ValueDef};

/// The dtype reductions and scans of `d` accumulate in.
fn acc_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
        DType::I1 => DType::U32,
        d => d,
    }
}

fn combiner(op: ReduceOp) -> BinaryOp {
    match op {
        ReduceOp::Sum => BinaryOp::Add,
        ReduceOp::Prod => BinaryOp::Mul,
        ReduceOp::Max | ReduceOp::ArgMax => BinaryOp::MaxNan,
        ReduceOp::Min | ReduceOp::ArgMin => BinaryOp::MinNan,
        ReduceOp::And => BinaryOp::And,
        ReduceOp::Or => BinaryOp::Or,
        ReduceOp::Xor => BinaryOp::Xor,
    }
}

/// One partial result: a value and, for arg-reductions, its index.
#[derive(Clone, Copy)]
struct Partial {
    v: Reg,
    i: Option<Reg>,
}

/// A reduction reduced within each warp, waiting for the round across warps.
struct PendingReduce {
    result: Value,
    op: ReduceOp,
    ad: DType,
    /// One partial per output element the thread holds.
    parts: Vec<Partial>,
}

impl Lower<'_> {
    fn widen_acc(&mut self, d: DType, x: Reg) -> Reg {
        if d == DType::I1 {
            return self.b.op(
                "selp.u32",
                RegClass::B32,
                vec![Arg::Imm(1), Arg::Imm(0), x.into()],
            );
        }
        self.widen(d, x)
    }

    fn narrow_acc(&mut self, d: DType, x: Reg) -> Reg {
        if d == DType::I1 {
            return self
                .b
                .op("setp.ne.u32", RegClass::Pred, vec![x.into(), Arg::Imm(0)]);
        }
        self.narrow(d, x, Rounding::NearestEven)
    }

    /// `a (+) b` where `a` comes first in index order (arg ties keep the first index).
    fn combine(&mut self, op: ReduceOp, ad: DType, a: Partial, b: Partial) -> R<Partial> {
        if !op.is_arg() {
            let v = self.binary(combiner(op), ad, a.v, b.v)?;
            return Ok(Partial { v, i: None });
        }
        let (ia, ib) = (a.i.expect("arg index"), b.i.expect("arg index"));
        let t = super::types::arith_ty(ad);
        let float = matches!(t, Ty::F32 | Ty::F64);
        let better = if op == ReduceOp::ArgMax { "gt" } else { "lt" };
        let p = |s: &mut Self, op: String, x: Reg, y: Reg| {
            s.b.op(op, RegClass::Pred, vec![x.into(), y.into()])
        };
        let wins = p(self, format!("setp.{better}{t}"), b.v, a.v);
        let eq = p(self, format!("setp.eq{t}"), b.v, a.v);
        let earlier = p(self, "setp.lt.s32".into(), ib, ia);
        let tie = p(self, "and.pred".into(), eq, earlier);
        let mut take = p(self, "or.pred".into(), wins, tie);
        if float {
            // NaN beats everything (counts as largest for argmax, smallest for argmin).
            let bn = p(self, format!("setp.nan{t}"), b.v, b.v);
            let an = p(self, format!("setp.nan{t}"), a.v, a.v);
            let not_an = self.b.op("not.pred", RegClass::Pred, vec![an.into()]);
            let first_nan = p(self, "and.pred".into(), bn, not_an);
            let both = p(self, "and.pred".into(), bn, an);
            let both_earlier = p(self, "and.pred".into(), both, earlier);
            take = p(self, "or.pred".into(), take, first_nan);
            take = p(self, "or.pred".into(), take, both_earlier);
        }
        let v = self.select(take, b.v, a.v);
        let i = self.select(take, ib, ia);
        Ok(Partial { v, i: Some(i) })
    }

    /// `shfl.sync.{mode}.b32` of any register (64-bit values as two halves).
    pub(super) fn shuffle(&mut self, mode: &str, x: Reg, amount: u32, c: i64) -> Reg {
        let shfl = |s: &mut Self, r: Reg| {
            s.b.op(
                format!("shfl.sync.{mode}.b32"),
                RegClass::B32,
                vec![r.into(), Arg::Imm(amount as i64), Arg::Imm(c), Arg::Imm(-1)],
            )
        };
        match x.class {
            RegClass::B32 => shfl(self, x),
            RegClass::F32 => {
                let r = self.b.op("mov.b32", RegClass::B32, vec![x.into()]);
                let s = shfl(self, r);
                self.b.op("mov.b32", RegClass::F32, vec![s.into()])
            }
            RegClass::B64 | RegClass::F64 => {
                let w = if x.class == RegClass::F64 {
                    self.b.op("mov.b64", RegClass::B64, vec![x.into()])
                } else {
                    x
                };
                let (lo, hi) = (self.b.reg(RegClass::B32), self.b.reg(RegClass::B32));
                self.b
                    .emit("mov.b64", vec![Arg::Vec(vec![lo, hi]), w.into()]);
                let (slo, shi) = (shfl(self, lo), shfl(self, hi));
                let r = self.b.reg(RegClass::B64);
                self.b
                    .emit("mov.b64", vec![r.into(), Arg::Vec(vec![slo, shi])]);
                if x.class == RegClass::F64 {
                    self.b.op("mov.b64", RegClass::F64, vec![r.into()])
                } else {
                    r
                }
            }
            _ => unreachable!("accumulators are 32 or 64 bits"),
        }
    }

    /// The warp's coordinate along parent axis `d` of `l`.
    pub(super) fn warp_coord(&mut self, l: &Layout, d: usize) -> Reg {
        let ws = l.warp_strides()[d];
        let warp = self.thread.warp;
        let s = self.b.op(
            "shr.u32",
            RegClass::B32,
            vec![warp.into(), Arg::Imm(ws.trailing_zeros() as i64)],
        );
        self.b.op(
            "and.b32",
            RegClass::B32,
            vec![s.into(), Arg::Imm(l.wpc[d] as i64 - 1)],
        )
    }

    /// Reductions lower in groups: `inst` and the later reductions of its block that
    /// [`Lower::fusable_reductions`] finds share one round through shared memory (one pair of
    /// barriers instead of a pair each), e.g. a row's sum and sum of squares. A reduction
    /// lowered with an earlier one is skipped when its turn comes.
    pub(crate) fn lower_reduce(&mut self, inst: Inst) -> R<()> {
        let x = self.k.insts[inst].args[0];
        let (l, _) = self.natural(x);
        let Op::Reduce { axis, .. } = self.k.insts[inst].op else {
            unreachable!()
        };
        let out_l = l.slice(axis as usize);
        if self.lookup(self.k.insts[inst].results[0], &out_l).is_some() {
            return Ok(());
        }
        if let Some(sum) = self.plan.layouts.partial_sum(inst).cloned() {
            return self.lower_partial_sum(inst, &sum.operand, sum.update);
        }
        let group = self.fusable_reductions(inst, &l);
        let mut pending = Vec::with_capacity(group.len());
        for &r in &group {
            pending.push(self.reduce_in_warps(r, &l)?);
        }
        self.reduce_across_warps(&l, axis as usize, &mut pending)?;
        for p in pending {
            let out_ty = self.k.ty(p.result);
            let out: Vals = p
                .parts
                .iter()
                .map(|part| match part.i {
                    Some(i) => i,
                    None => self.narrow_acc(out_ty.dtype(), part.v),
                })
                .collect();
            self.define(p.result, &out_l, out);
        }
        Ok(())
    }

    /// `inst` and the reductions after it in its block that can join its round: not arg
    /// reductions, over the same axis of an operand of the same shape in the same layout
    /// `l`, and computable now (their operand needs no anchored result from `inst` onwards,
    /// so evaluating it early changes nothing).
    fn fusable_reductions(&mut self, inst: Inst, l: &Layout) -> Vec<Inst> {
        let d = &self.k.insts[inst];
        let (Op::Reduce { op, axis }, x) = (&d.op, d.args[0]) else {
            unreachable!()
        };
        let mut group = vec![inst];
        if op.is_arg() {
            return group;
        }
        let shape = self.k.ty(x).shape;
        let Some(block) = self.k.blocks.iter().find(|(_, b)| b.insts.contains(&inst)) else {
            return group;
        };
        let insts = &block.1.insts;
        let pos = insts
            .iter()
            .position(|&i| i == inst)
            .expect("inst is in its block");
        // Anchored instructions from `inst` on: not lowered yet.
        let pending: HashSet<Inst> = insts[pos..]
            .iter()
            .copied()
            .filter(|&i| super::is_anchored(&self.k.insts[i].op))
            .collect();
        for &other in &insts[pos + 1..] {
            let od = &self.k.insts[other];
            let Op::Reduce {
                op: oop,
                axis: oaxis,
            } = od.op
            else {
                continue;
            };
            let ox = od.args[0];
            if oop.is_arg()
                || self.plan.layouts.partial_sum(other).is_some()
                || oaxis != *axis
                || self.k.ty(ox).shape != shape
                || !self.ready(ox, &pending, &mut HashSet::new())
                || self.natural(ox).0 != *l
            {
                continue;
            }
            group.push(other);
        }
        group
    }

    /// Whether `v` can be computed before the anchored instructions in `pending` are lowered.
    fn ready(&self, v: Value, pending: &HashSet<Inst>, seen: &mut HashSet<Value>) -> bool {
        if !seen.insert(v) {
            return true;
        }
        match self.k.values[v].def {
            ValueDef::Param(_) | ValueDef::BlockArg(..) => true,
            ValueDef::Result(inst, _) => {
                let d = &self.k.insts[inst];
                if super::is_anchored(&d.op) {
                    return !pending.contains(&inst);
                }
                d.args.iter().all(|&a| self.ready(a, pending, seen))
            }
        }
    }

    /// Steps 1 and 2 of reduction `inst` over its operand in layout `l`: within each thread,
    /// then across the lanes of a warp.
    fn reduce_in_warps(&mut self, inst: Inst, l: &Layout) -> R<PendingReduce> {
        let mut pending = self.reduce_in_thread(inst, l)?;
        self.reduce_across_lanes(l, &mut pending)?;
        Ok(pending)
    }

    /// Step 1 of reduction `inst` over its operand in layout `l`: each thread combines the
    /// elements it holds, one partial per element of the result's layout (`l`'s slice).
    fn reduce_in_thread(&mut self, inst: Inst, l: &Layout) -> R<PendingReduce> {
        let d = self.k.insts[inst].clone();
        let Op::Reduce { op, axis } = d.op else {
            unreachable!()
        };
        let x = d.args[0];
        let xty = self.k.ty(x);
        let (dt, shape) = (xty.dtype(), xty.shape);
        let out_shape = self.k.ty(d.results[0]).shape;
        let ad = acc_dtype(dt);
        let vals = self.get(x, l)?;
        let p = l.kept()[axis as usize];
        let out_l = l.slice(axis as usize);
        let gin = l.geometry(&shape);
        let gout = out_l.geometry(&out_shape);
        let idx_base = if op.is_arg() {
            self.bases(l, &shape)[p]
        } else {
            None
        };
        // 1. Within the thread: each output's elements in order, then combined as a balanced
        // tree of adjacent pairs (a chain of n dependent combines would wait out n latencies;
        // the tree waits out log2 n, and adjacent pairs keep arg ties on the lower index).
        let mut leaves: Vec<Vec<Partial>> = vec![Vec::new(); gout.count];
        for (i, &r) in vals.iter().enumerate() {
            let mut c = gin.coords(i);
            let cp = c[p];
            c[p] = 0;
            let o = if out_l.is_scalar() { 0 } else { gout.index(&c) };
            let v = self.widen_acc(dt, r);
            let idx = if op.is_arg() {
                let k = gin.const_index(p, cp) as i64;
                Some(match idx_base {
                    Some(b) => self
                        .b
                        .op("add.s32", RegClass::B32, vec![b.into(), Arg::Imm(k)]),
                    None => self.imm(RegClass::B32, Arg::Imm(k)),
                })
            } else {
                None
            };
            leaves[o].push(Partial { v, i: idx });
        }
        let mut parts = Vec::with_capacity(leaves.len());
        for mut level in leaves {
            while level.len() > 1 {
                let mut next = Vec::with_capacity(level.len().div_ceil(2));
                for pair in level.chunks(2) {
                    next.push(match *pair {
                        [a, b] => self.combine(op, ad, a, b)?,
                        [a] => a,
                        _ => unreachable!("chunks of two"),
                    });
                }
                level = next;
            }
            parts.push(level.pop().expect("every output has inputs"));
        }
        Ok(PendingReduce {
            result: d.results[0],
            op,
            ad,
            parts,
        })
    }

    /// Step 2 of a reduction over an operand in layout `l`: across the lanes of a warp that
    /// hold distinct elements of the axis (butterfly shuffles; every lane ends with the warp's
    /// result).
    fn reduce_across_lanes(&mut self, l: &Layout, pending: &mut PendingReduce) -> R<()> {
        let (axis, shape) = self.reduced_axis(pending.result);
        let p = l.kept()[axis];
        let pp = l.geometry(&shape).parent[p];
        let (op, ad) = (pending.op, pending.ad);
        let lane_stride = l.lane_strides()[p];
        let mut k = 1u32;
        while k < l.tpw[p] && k * l.spt[p] < pp {
            for part in pending.parts.iter_mut() {
                let other = Partial {
                    v: self.shuffle("bfly", part.v, k * lane_stride, 0x1f),
                    i: part
                        .i
                        .map(|i| self.shuffle("bfly", i, k * lane_stride, 0x1f)),
                };
                // Order by lane so that ties pick the lower index consistently.
                *part = self.combine(op, ad, *part, other)?;
            }
            k *= 2;
        }
        Ok(())
    }

    /// The axis a reduction's `result` reduces and the shape of its operand.
    fn reduced_axis(&self, result: Value) -> (usize, tegula_ir::Shape) {
        let ValueDef::Result(inst, _) = self.k.values[result].def else {
            unreachable!("a reduction's result")
        };
        let d = &self.k.insts[inst];
        let Op::Reduce { axis, .. } = d.op else {
            unreachable!("a reduction's result")
        };
        (axis as usize, self.k.ty(d.args[0]).shape)
    }

    /// Step 3 of the reductions `pending` (one operand shape, layout `l`, axis `axis`):
    /// across warps, through one shared-memory round for all of them. Each reduction has its
    /// own slots (values, then arg indices), one after another.
    fn reduce_across_warps(
        &mut self,
        l: &Layout,
        axis: usize,
        pending: &mut [PendingReduce],
    ) -> R<()> {
        let first = pending[0].result;
        let inst_shape = {
            let ValueDef::Result(inst, _) = self.k.values[first].def else {
                unreachable!()
            };
            self.k.ty(self.k.insts[inst].args[0]).shape
        };
        let p = l.kept()[axis];
        let pp = l.geometry(&inst_shape).parent[p];
        let distinct_warps = l.wpc[p].min((pp / (l.tpw[p] * l.spt[p])).max(1));
        if distinct_warps <= 1 {
            return Ok(());
        }
        let out_shape = self.k.ty(first).shape;
        let n_out = out_shape.numel() as i64;
        // Byte offsets of each reduction's value and index slots, 16-byte aligned.
        let align = |b: i64| (b + 15) / 16 * 16;
        let mut offsets = Vec::with_capacity(pending.len());
        let mut total = 0i64;
        for r in pending.iter() {
            let es = r.parts[0].v.class.bytes() as i64;
            let voff = total;
            total += align(distinct_warps as i64 * n_out * es);
            let ioff = total;
            if r.op.is_arg() {
                total += align(distinct_warps as i64 * n_out * 4);
            }
            offsets.push((voff, ioff, es));
        }
        if total > self.max_shared() as i64 {
            return Err(self.unsupported(format!(
                "a reduction needing {total} bytes of shared memory"
            )));
        }
        let base = self.smem(total as u32);
        let slots = self.warp_slots(l, axis, &out_shape, distinct_warps);
        let out_offset = |o: usize| slots.out_offset(o);
        let my = self.warp_slot(&slots, slots.warp);
        self.barrier();
        for (r, &(voff, ioff, es)) in pending.iter().zip(&offsets) {
            let vaddr = self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![my.into(), Arg::Imm(es), base.into()],
            );
            let iaddr = self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![my.into(), Arg::Imm(4), base.into()],
            );
            let st = super::convert::st_ty(r.parts[0].v.class);
            for (o, part) in r.parts.iter().enumerate() {
                let c = out_offset(o);
                self.b.emit(
                    format!("st.shared{st}"),
                    vec![
                        Arg::Addr(Box::new(vaddr.into()), voff + c * es),
                        part.v.into(),
                    ],
                );
                if let Some(i) = part.i {
                    self.b.emit(
                        "st.shared.b32",
                        vec![Arg::Addr(Box::new(iaddr.into()), ioff + c * 4), i.into()],
                    );
                }
            }
        }
        self.barrier();
        let zero = self.imm(RegClass::B32, Arg::Imm(0));
        let s0 = self.warp_slot(&slots, zero);
        for (r, &(voff, ioff, es)) in pending.iter_mut().zip(&offsets) {
            let class = r.parts[0].v.class;
            let st = super::convert::st_ty(class);
            let a0 = self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![s0.into(), Arg::Imm(es), base.into()],
            );
            let i0 = self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![s0.into(), Arg::Imm(4), base.into()],
            );
            let (op, ad) = (r.op, r.ad);
            for (o, part) in r.parts.iter_mut().enumerate() {
                let c = out_offset(o);
                let mut acc: Option<Partial> = None;
                for w in 0..distinct_warps as i64 {
                    let v = self.b.op(
                        format!("ld.shared{st}"),
                        class,
                        vec![Arg::Addr(Box::new(a0.into()), voff + (w * n_out + c) * es)],
                    );
                    let i = if op.is_arg() {
                        Some(self.b.op(
                            "ld.shared.b32",
                            RegClass::B32,
                            vec![Arg::Addr(Box::new(i0.into()), ioff + (w * n_out + c) * 4)],
                        ))
                    } else {
                        None
                    };
                    let pw = Partial { v, i };
                    acc = Some(match acc {
                        None => pw,
                        Some(a) => self.combine(op, ad, a, pw)?,
                    });
                }
                *part = acc.expect("at least one warp");
            }
        }
        Ok(())
    }

    /// The shared-memory slots of a reduction along `axis` of `l` (parent axis `p`) whose
    /// `distinct_warps` warps along it each hold partials of the `out_shape` result.
    pub(crate) fn warp_slots(
        &mut self,
        l: &Layout,
        axis: usize,
        out_shape: &tegula_ir::Shape,
        distinct_warps: u32,
    ) -> WarpSlots {
        let p = l.kept()[axis];
        let wc = self.warp_coord(l, p);
        let warp = self.b.op(
            "and.b32",
            RegClass::B32,
            vec![wc.into(), Arg::Imm(distinct_warps as i64 - 1)],
        );
        let out = l.slice(axis);
        let strides = Lower::parent_strides(&out, out_shape, 1);
        let thread = self.thread_offset(&out, out_shape, &strides);
        WarpSlots {
            n_out: out_shape.numel() as i64,
            warp,
            thread,
            scalar: out.is_scalar(),
            geom: out.geometry(out_shape),
            strides,
        }
    }

    /// The slot of warp `w`'s partial of this thread's first output: `w * n_out` plus the
    /// output's index.
    pub(crate) fn warp_slot(&mut self, slots: &WarpSlots, w: Reg) -> Reg {
        let ws = self.b.op(
            "mul.lo.s32",
            RegClass::B32,
            vec![w.into(), Arg::Imm(slots.n_out)],
        );
        match slots.thread {
            Some(t) => self
                .b
                .op("add.s32", RegClass::B32, vec![ws.into(), t.into()]),
            None => ws,
        }
    }

    // --- row sums carried as per-thread partials across a loop -------------------------

    /// A sum carried as partials ([`crate::plan::layouts::PartialSum`]), inside the loop: only the
    /// thread's own part; the result holds one partial per element of the sliced layout, and
    /// its only user is the carried value's `update`, computed right here (not where the
    /// loop yields it), so that the sum's registers are not held across what follows.
    fn lower_partial_sum(&mut self, inst: Inst, operand: &Layout, update: Value) -> R<()> {
        let Op::Reduce { axis, .. } = self.k.insts[inst].op else {
            unreachable!("a reduction")
        };
        let pending = self.reduce_in_thread(inst, operand)?;
        let parts = pending.parts.iter().map(|p| p.v).collect();
        let out_l = operand.slice(axis as usize);
        self.define(pending.result, &out_l, parts);
        self.get(update, &out_l)?;
        Ok(())
    }

    /// The partials a carried sum starts from, given its initial value's registers `init`:
    /// the initial value in the first thread of each group the sum combines (the one that
    /// holds the axis's element 0) and -0.0 in the others (x + -0.0 is x, even for x = -0.0),
    /// or `init` itself when the initial value is +0.0 everywhere.
    pub(crate) fn partial_sum_init(
        &mut self,
        PartialSum {
            reduce, operand, ..
        }: &PartialSum,
        init_value: Value,
        init: &[Reg],
    ) -> Vals {
        if self.is_positive_zero(init_value) {
            return init.to_vec();
        }
        let Op::Reduce { axis, .. } = self.k.insts[*reduce].op else {
            unreachable!("a reduction")
        };
        let shape = self.k.ty(self.k.insts[*reduce].args[0]).shape;
        let p = operand.kept()[axis as usize];
        let Some(base) = self.bases(operand, &shape)[p] else {
            // Every thread holds element 0 of the axis: nothing is combined across threads.
            return init.to_vec();
        };
        let first = self.b.in_prologue(|b| {
            b.op(
                "setp.eq.u32",
                RegClass::Pred,
                vec![base.into(), Arg::Imm(0)],
            )
        });
        let neg_zero = self.imm(RegClass::F32, Arg::F32(-0.0));
        init.iter()
            .map(|&r| self.select(first, r, neg_zero))
            .collect()
    }

    /// Whether `v` is the constant +0.0 (as a constant tile or a splat of one).
    fn is_positive_zero(&self, v: Value) -> bool {
        let Some(inst) = self.k.def_inst(v) else {
            return false;
        };
        let d = &self.k.insts[inst];
        match d.op {
            Op::Const(Constant::Float(c)) => c == 0.0 && c.is_sign_positive(),
            Op::Splat => self.is_positive_zero(d.args[0]),
            _ => false,
        }
    }

    /// The loop's result of a sum carried as partials: the cross-thread part of the sum
    /// (shuffles across lanes, a round across warps), once, on the partials `parts`.
    pub(crate) fn finish_partial_sum(
        &mut self,
        PartialSum {
            reduce, operand, ..
        }: &PartialSum,
        parts: &[Reg],
    ) -> R<Vals> {
        let Op::Reduce { axis, .. } = self.k.insts[*reduce].op else {
            unreachable!("a reduction")
        };
        let mut pending = PendingReduce {
            result: self.k.insts[*reduce].results[0],
            op: ReduceOp::Sum,
            ad: DType::F32,
            parts: parts.iter().map(|&v| Partial { v, i: None }).collect(),
        };
        self.reduce_across_lanes(operand, &mut pending)?;
        self.reduce_across_warps(operand, axis as usize, std::slice::from_mut(&mut pending))?;
        Ok(pending.parts.iter().map(|p| p.v).collect())
    }

    /// The identity of a scan combiner in the accumulator type.
    fn identity(&mut self, op: ReduceOp, ad: DType) -> Reg {
        let class = super::types::arith_class(ad);
        let float = ad.is_float();
        let arg = match (op, float) {
            (ReduceOp::Sum | ReduceOp::Or | ReduceOp::Xor, false) => Arg::Imm(0),
            (ReduceOp::Prod, false) => Arg::Imm(1),
            (ReduceOp::And, _) => Arg::Imm(-1),
            (ReduceOp::Max, false) => Arg::Imm(match ad {
                DType::I64 => i64::MIN,
                DType::I32 | DType::I16 | DType::I8 => i32::MIN as i64,
                _ => 0,
            }),
            (ReduceOp::Min, false) => Arg::Imm(match ad {
                DType::I64 => i64::MAX,
                DType::U64 => -1,
                DType::U32 | DType::U16 | DType::U8 => u32::MAX as i64,
                _ => i32::MAX as i64,
            }),
            (op, true) => {
                let v = match op {
                    ReduceOp::Prod => 1.0,
                    ReduceOp::Max => f64::NEG_INFINITY,
                    ReduceOp::Min => f64::INFINITY,
                    _ => 0.0,
                };
                if ad == DType::F64 {
                    Arg::F64(v)
                } else {
                    Arg::F32(v as f32)
                }
            }
            _ => Arg::Imm(0),
        };
        self.imm(class, arg)
    }

    pub(crate) fn lower_scan(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let Op::Scan { op, axis, reverse } = d.op else {
            unreachable!()
        };
        if op.is_arg() {
            return Err(self.unsupported("arg scans"));
        }
        let x = d.args[0];
        let ty = self.k.ty(x);
        let (dt, shape) = (ty.dtype(), ty.shape);
        let ad = acc_dtype(dt);
        let p = axis as usize;
        let (l, _) = self.natural(x);
        let vals = self.get(x, &l)?;
        let ls = Layout::chunked(&shape, p, self.num_warps());
        let flip = Remap::flip(&shape, p);
        let vals = self.convert(&vals, ty, &l, &ls, if reverse { Some(&flip) } else { None })?;
        let g = ls.geometry(&shape);
        // 1. The thread's run.
        let mut acc: Vec<Reg> = vals.iter().map(|&r| self.widen_acc(dt, r)).collect();
        for i in 0..acc.len() {
            if g.coords(i)[p] > 0 {
                acc[i] = self.binary(combiner(op), ad, acc[i - g.mult[p]], acc[i])?;
            }
        }
        // Run totals, one per group of the other axes.
        let groups: Vec<usize> = (0..acc.len())
            .filter(|&i| g.coords(i)[p] == g.n[p] - 1)
            .collect();
        let mut prefix: Vec<Reg> = Vec::new();
        // The lanes and warps holding distinct runs: an axis shorter than the layout's threads
        // is replicated across the rest, which must scan as copies of the first ones (each
        // copy writes its value where a reverse scan flips the result back).
        let pp = g.parent[p];
        let tpw = ls.tpw[p].min((pp / ls.spt[p]).max(1));
        let lane = self.thread.lane;
        let lane_p = self.b.op(
            "and.b32",
            RegClass::B32,
            vec![lane.into(), Arg::Imm(tpw as i64 - 1)],
        );
        for &gi in &groups {
            // 2. Inclusive scan of run totals across the lanes of the axis.
            let mut incl = acc[gi];
            let mut k = 1;
            while k < tpw {
                let t = self.shuffle("up", incl, k, 0);
                let ok = self.b.op(
                    "setp.ge.u32",
                    RegClass::Pred,
                    vec![lane_p.into(), Arg::Imm(k as i64)],
                );
                let c = self.binary(combiner(op), ad, t, incl)?;
                incl = self.select(ok, c, incl);
                k *= 2;
            }
            let id = self.identity(op, ad);
            let excl = if tpw > 1 {
                let t = self.shuffle("up", incl, 1, 0);
                let ok = self.b.op(
                    "setp.ge.u32",
                    RegClass::Pred,
                    vec![lane_p.into(), Arg::Imm(1)],
                );
                self.select(ok, t, id)
            } else {
                id
            };
            prefix.push(excl);
            prefix.push(incl);
        }
        // prefix holds (exclusive-lane, inclusive-lane) per group.
        let wpc = ls.wpc[p].min((pp / (tpw * ls.spt[p])).max(1));
        let mut warp_prefix: Vec<Option<Reg>> = vec![None; groups.len()];
        if wpc > 1 {
            let es = prefix[1].class.bytes() as i64;
            let mut ostr: Vec<i64> = vec![0; shape.rank()];
            let mut m = 1i64;
            for dd in (0..shape.rank()).rev() {
                if dd != p {
                    ostr[dd] = m * wpc as i64 * es;
                    m *= shape.dim(dd) as i64;
                }
            }
            let bytes = (m * wpc as i64 * es) as u32;
            let base = self.smem(bytes);
            let toff = self.thread_offset(&ls, &shape, &ostr);
            let wc = self.warp_coord(&ls, p);
            let wcoord = if wpc < ls.wpc[p] {
                self.b.op(
                    "and.b32",
                    RegClass::B32,
                    vec![wc.into(), Arg::Imm(wpc as i64 - 1)],
                )
            } else {
                wc
            };
            let gbase = match toff {
                Some(t) => self
                    .b
                    .op("add.s32", RegClass::B32, vec![base.into(), t.into()]),
                None => base,
            };
            let waddr = self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![wcoord.into(), Arg::Imm(es), gbase.into()],
            );
            let last_lane = self.b.op(
                "setp.eq.u32",
                RegClass::Pred,
                vec![lane_p.into(), Arg::Imm(tpw as i64 - 1)],
            );
            let st = super::convert::st_ty(prefix[1].class);
            self.barrier();
            for (gk, &gi) in groups.iter().enumerate() {
                let c = Lower::reg_offset(&g, gi, &ostr);
                self.b.emit_guarded(
                    last_lane,
                    false,
                    format!("st.shared{st}"),
                    vec![
                        Arg::Addr(Box::new(waddr.into()), c),
                        prefix[2 * gk + 1].into(),
                    ],
                );
            }
            self.barrier();
            for (gk, &gi) in groups.iter().enumerate() {
                let c = Lower::reg_offset(&g, gi, &ostr);
                let mut wp = self.identity(op, ad);
                for w in 0..wpc as i64 {
                    let v = self.b.op(
                        format!("ld.shared{st}"),
                        prefix[1].class,
                        vec![Arg::Addr(Box::new(gbase.into()), c + w * es)],
                    );
                    let before = self.b.op(
                        "setp.gt.u32",
                        RegClass::Pred,
                        vec![wcoord.into(), Arg::Imm(w)],
                    );
                    let c2 = self.binary(combiner(op), ad, wp, v)?;
                    wp = self.select(before, c2, wp);
                }
                warp_prefix[gk] = Some(wp);
            }
        }
        // 4. Each element: (warp prefix) (+) (lane prefix) (+) its run's inclusive value.
        let mut out = Vec::with_capacity(acc.len());
        for (i, &a) in acc.iter().enumerate() {
            let mut c = g.coords(i);
            c[p] = g.n[p] - 1;
            let gi = g.index(&c);
            let gk = groups.iter().position(|&x| x == gi).expect("group");
            let mut pre = prefix[2 * gk];
            if let Some(wp) = warp_prefix[gk] {
                pre = self.binary(combiner(op), ad, wp, pre)?;
            }
            let v = self.binary(combiner(op), ad, pre, a)?;
            out.push(self.narrow_acc(dt, v));
        }
        let out = if reverse {
            self.convert(&out, ty, &ls, &ls, Some(&flip))?
        } else {
            out
        };
        self.define(d.results[0], &ls, out);
        Ok(())
    }
}

/// Where a reduction across warps keeps the warps' partial results in shared memory: the
/// partial of output `o` from the warp at coordinate `w` along the axis is slot
/// `w * n_out + o` ([`Lower::warp_slots`]).
pub(crate) struct WarpSlots {
    /// Elements of the reduced result (slots a warp fills).
    pub n_out: i64,
    /// This thread's warp coordinate along the axis, below the distinct warps.
    pub warp: Reg,
    /// This thread's first output's index (`None`: 0).
    thread: Option<Reg>,
    scalar: bool,
    geom: crate::layout::RegGeometry,
    strides: Vec<i64>,
}

impl WarpSlots {
    /// Output register `o`'s index beyond the thread's first output.
    pub fn out_offset(&self, o: usize) -> i64 {
        if self.scalar {
            0
        } else {
            Lower::reg_offset(&self.geom, o, &self.strides)
        }
    }
}
