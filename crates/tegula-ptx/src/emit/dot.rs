//! `dot`: f16/bf16 operands, and f32 operands with `InputPrecision::Tf32` or `Tf32x3` (three
//! tf32 mmas), with an f32 accumulator run on tensor cores (`mma.rs`). Everything else goes
//! through FMA here: f32 with `Ieee` (exact products), `Tf32x3` dots too small for an mma
//! (exact f32 products, more accurate than three tf32 ones), f64, integers, and accumulators
//! other than f32.
//!
//! FMA: both operands go to shared memory row-major, and each thread accumulates its block of
//! the output with one multiply-add per element and `k`, reading the `k`-th column of its rows
//! of `a` and row of `b` from shared memory. Integers accumulate in i32 (`mad.lo.s32`), f64 in
//! f64.

use super::types::class_of;
use super::{Lower, Vals, R};
use crate::layout::Layout;
use crate::ptx::{Arg, Reg, RegClass};
use tegula_ir::{DType, Elem, InputPrecision, Inst, Op};

impl Lower<'_> {
    /// The accumulator layout: the mma layout on tensor cores, else a few contiguous columns
    /// per thread.
    pub(crate) fn dot_layout(&self, inst: Inst) -> Layout {
        match self.mma_plan(inst) {
            Some(p) => crate::mma_layout::accumulator(p.wm, p.wn),
            None => {
                let shape = self.k.ty(self.k.insts[inst].results[0]).shape;
                Layout::blocked(&shape, 4, self.num_warps())
            }
        }
    }

    /// The registers `dot` accumulates in, holding its accumulator `init` (in layout `l`):
    /// those of the loop-carried value that is its home (rule *accumulator home*), `init` moved
    /// there first, else a copy of `init`.
    pub(crate) fn accumulator_registers(&mut self, dot: Inst, init: &[Reg], l: &Layout) -> R<Vals> {
        match self.plan.accumulators.of(dot) {
            Some(home) => {
                let regs = self.get(home, l)?;
                self.assign(std::slice::from_ref(&regs), &[init.to_vec()]);
                Ok(regs)
            }
            None => Ok(self.copy_regs(init)),
        }
    }

    pub(crate) fn lower_dot(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let Op::Dot { precision } = d.op else {
            unreachable!()
        };
        if let Some(plan) = self.mma_plan(inst) {
            return self.lower_mma(inst, plan);
        }
        let (a, b, c) = (d.args[0], d.args[1], d.args[2]);
        let (aty, bty, cty) = (self.k.ty(a), self.k.ty(b), self.k.ty(c));
        let (m, kk, n) = (aty.shape.dim(0), aty.shape.dim(1), bty.shape.dim(1));
        let dt = aty.dtype();
        let acc_dt = cty.dtype();
        let es = class_of(Elem::Scalar(dt)).bytes() as usize;
        let a_bytes = (m * kk * es).div_ceil(16) * 16;
        let total = a_bytes + kk * n * es;
        if total > self.max_shared() as usize {
            return Err(self.unsupported(format!(
                "dot of {aty} and {bty} through FMA ({total} bytes of shared memory; at most {})",
                self.max_shared()
            )));
        }
        let ld = self.dot_layout(inst);
        let init = self.get(c, &ld)?;
        let acc = self.accumulator_registers(inst, &init, &ld)?;
        let (la, _) = self.natural(a);
        let av = self.get(a, &la)?;
        let (lb, _) = self.natural(b);
        let bv = self.get(b, &lb)?;
        let base = self.smem(total as u32);
        self.b.comment(format!("dot {aty} x {bty} through FMA"));
        self.barrier();
        let sa = Lower::parent_strides(&la, &aty.shape, 1);
        self.smem_write(&av, &aty.shape, &la, &sa, 0, None);
        let sb = Lower::parent_strides(&lb, &bty.shape, 1);
        self.smem_write(&bv, &bty.shape, &lb, &sb, a_bytes as i64, None);
        self.barrier();

        let g = ld.geometry(&cty.shape);
        let es = es as i64;
        // Address of (row, k = 0) of a for each row counter, and of (k = 0, col) of b.
        let row_str = [kk as i64 * es, 0];
        let col_str = [0, es];
        let roff = self.thread_offset(&ld, &cty.shape, &row_str);
        let coff = self.thread_offset(&ld, &cty.shape, &col_str);
        let rbase = match roff {
            Some(r) => self
                .b
                .op("add.s32", RegClass::B32, vec![base.into(), r.into()]),
            None => base,
        };
        let cbase0 = match coff {
            Some(r) => self
                .b
                .op("add.s32", RegClass::B32, vec![base.into(), r.into()]),
            None => base,
        };
        let cbase = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![cbase0.into(), Arg::Imm(a_bytes as i64)],
        );
        // Loop over k with running addresses.
        let ka = self.copy_regs(&[rbase])[0];
        let kb = self.copy_regs(&[cbase])[0];
        let kend = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![rbase.into(), Arg::Imm(kk as i64 * es)],
        );
        let top = self.b.new_label("dot_k");
        self.b.place_label(&top);
        let class = class_of(Elem::Scalar(dt));
        let ld_ty = super::convert::st_ty(class);
        // Each operand widens from its own dtype (an e4m3 A may meet an e5m2 B; both are held
        // in registers of one class).
        let load = |s: &mut Self, dt: DType, addr: Reg, off: i64| -> Reg {
            let r = s.b.op(
                format!("ld.shared{ld_ty}"),
                class,
                vec![Arg::Addr(Box::new(addr.into()), off)],
            );
            s.dot_operand(dt, precision, r)
        };
        let rows: Vec<Reg> = (0..g.n[0])
            .map(|c0| load(self, dt, ka, g.const_index(0, c0) as i64 * kk as i64 * es))
            .collect();
        let cols: Vec<Reg> = (0..g.n[1])
            .map(|c1| load(self, bty.dtype(), kb, g.const_index(1, c1) as i64 * es))
            .collect();
        for (i, &r) in acc.iter().enumerate() {
            let c = g.coords(i);
            let (x, y) = (rows[c[0]], cols[c[1]]);
            let op = match acc_dt {
                DType::F64 => "fma.rn.f64",
                DType::F32 => "fma.rn.f32",
                _ => "mad.lo.s32",
            };
            self.b
                .emit(op, vec![r.into(), x.into(), y.into(), r.into()]);
        }
        self.b
            .emit("add.s32", vec![ka.into(), ka.into(), Arg::Imm(es)]);
        self.b.emit(
            "add.s32",
            vec![kb.into(), kb.into(), Arg::Imm(n as i64 * es)],
        );
        let more = self
            .b
            .op("setp.lt.u32", RegClass::Pred, vec![ka.into(), kend.into()]);
        self.b.bra_if(more, false, &top);
        self.define(d.results[0], &ld, acc);
        Ok(())
    }

    /// An operand element in the accumulator's arithmetic type.
    fn dot_operand(&mut self, dt: DType, precision: InputPrecision, r: Reg) -> Reg {
        match dt {
            DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => self.widen(dt, r),
            DType::F32 if precision == InputPrecision::Tf32 => {
                let t = self.b.op("cvt.rna.tf32.f32", RegClass::B32, vec![r.into()]);
                self.b.op("mov.b32", RegClass::F32, vec![t.into()])
            }
            DType::F64 | DType::F32 => r,
            _ => r, // integers are already extended to 32 bits
        }
    }
}
