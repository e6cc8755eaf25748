//! The math library of `tegula_ir::mathlib` emitted as PTX: one instruction per operation of
//! [`MathOps`], all IEEE round-to-nearest f64 arithmetic and 64-bit integer operations, so the
//! GPU computes exactly what the interpreter's evaluation of the same algorithm computes.

use super::Lower;
use crate::ptx::{Arg, Reg, RegClass};
use tegula_ir::mathlib::{self, Fn1, Fn2, MathOps};

/// Emits the operations of an algorithm into the lowering's builder.
pub(crate) struct Emit<'a, 'k> {
    pub l: &'a mut Lower<'k>,
}

impl Emit<'_, '_> {
    fn f(&mut self, op: &str, args: Vec<Arg>) -> Reg {
        self.l.b.op(op, RegClass::F64, args)
    }
    fn i(&mut self, op: &str, args: Vec<Arg>) -> Reg {
        self.l.b.op(op, RegClass::B64, args)
    }
    fn p(&mut self, op: &str, args: Vec<Arg>) -> Reg {
        self.l.b.op(op, RegClass::Pred, args)
    }
}

impl MathOps for Emit<'_, '_> {
    type F = Reg;
    type I = Reg;
    type P = Reg;
    fn c(&mut self, v: f64) -> Reg {
        self.l.imm(RegClass::F64, Arg::F64(v))
    }
    fn ci(&mut self, v: i64) -> Reg {
        self.l.imm(RegClass::B64, Arg::Imm(v))
    }
    fn add(&mut self, a: Reg, b: Reg) -> Reg {
        self.f("add.rn.f64", vec![a.into(), b.into()])
    }
    fn sub(&mut self, a: Reg, b: Reg) -> Reg {
        self.f("sub.rn.f64", vec![a.into(), b.into()])
    }
    fn mul(&mut self, a: Reg, b: Reg) -> Reg {
        self.f("mul.rn.f64", vec![a.into(), b.into()])
    }
    fn div(&mut self, a: Reg, b: Reg) -> Reg {
        self.f("div.rn.f64", vec![a.into(), b.into()])
    }
    fn fma(&mut self, a: Reg, b: Reg, c: Reg) -> Reg {
        self.f("fma.rn.f64", vec![a.into(), b.into(), c.into()])
    }
    fn sqrt(&mut self, a: Reg) -> Reg {
        self.f("sqrt.rn.f64", vec![a.into()])
    }
    fn neg(&mut self, a: Reg) -> Reg {
        self.f("neg.f64", vec![a.into()])
    }
    fn abs(&mut self, a: Reg) -> Reg {
        self.f("abs.f64", vec![a.into()])
    }
    fn rint(&mut self, a: Reg) -> Reg {
        self.f("cvt.rni.f64.f64", vec![a.into()])
    }
    fn trunc(&mut self, a: Reg) -> Reg {
        self.f("cvt.rzi.f64.f64", vec![a.into()])
    }
    fn lt(&mut self, a: Reg, b: Reg) -> Reg {
        self.p("setp.lt.f64", vec![a.into(), b.into()])
    }
    fn gt(&mut self, a: Reg, b: Reg) -> Reg {
        self.p("setp.gt.f64", vec![a.into(), b.into()])
    }
    fn eq(&mut self, a: Reg, b: Reg) -> Reg {
        self.p("setp.eq.f64", vec![a.into(), b.into()])
    }
    fn isnan(&mut self, a: Reg) -> Reg {
        self.p("testp.notanumber.f64", vec![a.into()])
    }
    fn sel(&mut self, p: Reg, a: Reg, b: Reg) -> Reg {
        self.f("selp.f64", vec![a.into(), b.into(), p.into()])
    }
    fn and(&mut self, p: Reg, q: Reg) -> Reg {
        self.p("and.pred", vec![p.into(), q.into()])
    }
    fn or(&mut self, p: Reg, q: Reg) -> Reg {
        self.p("or.pred", vec![p.into(), q.into()])
    }
    fn not(&mut self, p: Reg) -> Reg {
        self.p("not.pred", vec![p.into()])
    }
    fn bits(&mut self, a: Reg) -> Reg {
        self.i("mov.b64", vec![a.into()])
    }
    fn of_bits(&mut self, a: Reg) -> Reg {
        self.f("mov.b64", vec![a.into()])
    }
    fn iadd(&mut self, a: Reg, b: Reg) -> Reg {
        self.i("add.s64", vec![a.into(), b.into()])
    }
    fn isub(&mut self, a: Reg, b: Reg) -> Reg {
        self.i("sub.s64", vec![a.into(), b.into()])
    }
    fn imul(&mut self, a: Reg, b: Reg) -> Reg {
        self.i("mul.lo.s64", vec![a.into(), b.into()])
    }
    fn iand(&mut self, a: Reg, b: Reg) -> Reg {
        self.i("and.b64", vec![a.into(), b.into()])
    }
    fn ior(&mut self, a: Reg, b: Reg) -> Reg {
        self.i("or.b64", vec![a.into(), b.into()])
    }
    fn shl(&mut self, a: Reg, n: u32) -> Reg {
        self.i("shl.b64", vec![a.into(), Arg::Imm(n as i64)])
    }
    fn sar(&mut self, a: Reg, n: u32) -> Reg {
        self.i("shr.s64", vec![a.into(), Arg::Imm(n as i64)])
    }
    fn shr(&mut self, a: Reg, n: u32) -> Reg {
        self.i("shr.u64", vec![a.into(), Arg::Imm(n as i64)])
    }
    fn f2i(&mut self, a: Reg) -> Reg {
        self.i("cvt.rni.s64.f64", vec![a.into()])
    }
}

impl Lower<'_> {
    /// `f(x)` on an f32 register: widened to f64, computed there, rounded once to f32.
    pub(crate) fn libm1_f32(&mut self, f: Fn1, x: Reg) -> Reg {
        let xd = self.b.op("cvt.f64.f32", RegClass::F64, vec![x.into()]);
        let r = mathlib::unary(&mut Emit { l: self }, f, xd);
        self.b.op("cvt.rn.f32.f64", RegClass::F32, vec![r.into()])
    }

    /// `f(x, y)` on f32 registers, like [`Lower::libm1_f32`].
    pub(crate) fn libm2_f32(&mut self, f: Fn2, x: Reg, y: Reg) -> Reg {
        let xd = self.b.op("cvt.f64.f32", RegClass::F64, vec![x.into()]);
        let yd = self.b.op("cvt.f64.f32", RegClass::F64, vec![y.into()]);
        let r = mathlib::binary(&mut Emit { l: self }, f, xd, yd);
        self.b.op("cvt.rn.f32.f64", RegClass::F32, vec![r.into()])
    }
}
