//! The math library of `tegula_ir::mathlib` emitted as PTX: one instruction per operation of
//! [`MathOps`] and [`MathOps32`], all IEEE round-to-nearest f64 and f32 arithmetic (`.rn`
//! everywhere, so ptxas contracts nothing, and no `.ftz`) and 32- and 64-bit integer
//! operations, so the GPU computes exactly what the interpreter's evaluation of the same
//! algorithm computes.
//!
//! A thread's elements are computed a few at a time in lockstep ([`LANES`]): each operation
//! is emitted for every element of the group before the next. The group's reads of a constant
//! then sit together and ptxas materializes it once for them (emitted element by element, it
//! spends two uniform moves on an f64 constant for every instruction that reads it), and the
//! independent f64 chains interleave across the square root's slow-path branches, which would
//! otherwise cut each element's chain into blocks of its own. The bits are the same either way.
//! (`asin` and `acos` are evaluated in f32, the rest in f64: `mathlib::unary_f32`.)

use super::Lower;
use crate::ptx::{Arg, Reg, RegClass};
use tegula_ir::mathlib::{self, Fn1, Fn2, MathOps, MathOps32};

/// Elements computed in lockstep: enough to share each constant and interleave the f64
/// chains, few enough that the group's live f64 values (a handful per element) stay well
/// within the registers.
const LANES: usize = 4;

/// One value of the algorithm for each element of a group: a register per element (the
/// lanes past the group's `n` repeat lane 0 and are never emitted).
type Lanes = [Reg; LANES];

/// Emits the operations of an algorithm into the lowering's builder, once per element of a
/// group of `n`.
pub(crate) struct Emit<'a, 'k> {
    pub l: &'a mut Lower<'k>,
    n: usize,
}

impl Emit<'_, '_> {
    fn each(&mut self, class: RegClass, op: &str, args: &[&Lanes], extra: Option<Arg>) -> Lanes {
        let regs: Vec<Reg> = (0..self.n)
            .map(|i| {
                let mut a: Vec<Arg> = args.iter().map(|x| x[i].into()).collect();
                a.extend(extra.clone());
                self.l.b.op(op, class, a)
            })
            .collect();
        pad(&regs)
    }
    fn f(&mut self, op: &str, args: &[&Lanes]) -> Lanes {
        self.each(RegClass::F64, op, args, None)
    }
    fn i(&mut self, op: &str, args: &[&Lanes]) -> Lanes {
        self.each(RegClass::B64, op, args, None)
    }
    fn s(&mut self, op: &str, args: &[&Lanes]) -> Lanes {
        self.each(RegClass::F32, op, args, None)
    }
    fn w(&mut self, op: &str, args: &[&Lanes]) -> Lanes {
        self.each(RegClass::B32, op, args, None)
    }
    fn p(&mut self, op: &str, args: &[&Lanes]) -> Lanes {
        self.each(RegClass::Pred, op, args, None)
    }
    fn shift(&mut self, op: &str, a: &Lanes, n: u32) -> Lanes {
        self.each(RegClass::B64, op, &[a], Some(Arg::Imm(n as i64)))
    }
    /// One register for a constant, read by every element.
    fn splat(&mut self, class: RegClass, v: Arg) -> Lanes {
        [self.l.imm(class, v); LANES]
    }
}

/// `regs` (1 to [`LANES`] of them) as a group, the missing lanes repeating the first.
fn pad(regs: &[Reg]) -> Lanes {
    let mut lanes = [regs[0]; LANES];
    lanes[..regs.len()].copy_from_slice(regs);
    lanes
}

impl MathOps for Emit<'_, '_> {
    type F = Lanes;
    type I = Lanes;
    type P = Lanes;
    fn c(&mut self, v: f64) -> Lanes {
        self.splat(RegClass::F64, Arg::F64(v))
    }
    fn ci(&mut self, v: i64) -> Lanes {
        self.splat(RegClass::B64, Arg::Imm(v))
    }
    fn add(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.f("add.rn.f64", &[&a, &b])
    }
    fn sub(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.f("sub.rn.f64", &[&a, &b])
    }
    fn mul(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.f("mul.rn.f64", &[&a, &b])
    }
    fn div(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.f("div.rn.f64", &[&a, &b])
    }
    fn fma(&mut self, a: Lanes, b: Lanes, c: Lanes) -> Lanes {
        self.f("fma.rn.f64", &[&a, &b, &c])
    }
    fn sqrt(&mut self, a: Lanes) -> Lanes {
        self.f("sqrt.rn.f64", &[&a])
    }
    fn neg(&mut self, a: Lanes) -> Lanes {
        self.f("neg.f64", &[&a])
    }
    fn abs(&mut self, a: Lanes) -> Lanes {
        self.f("abs.f64", &[&a])
    }
    fn rint(&mut self, a: Lanes) -> Lanes {
        self.f("cvt.rni.f64.f64", &[&a])
    }
    fn trunc(&mut self, a: Lanes) -> Lanes {
        self.f("cvt.rzi.f64.f64", &[&a])
    }
    fn lt(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.p("setp.lt.f64", &[&a, &b])
    }
    fn gt(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.p("setp.gt.f64", &[&a, &b])
    }
    fn eq(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.p("setp.eq.f64", &[&a, &b])
    }
    fn isnan(&mut self, a: Lanes) -> Lanes {
        self.p("testp.notanumber.f64", &[&a])
    }
    fn sel(&mut self, p: Lanes, a: Lanes, b: Lanes) -> Lanes {
        self.f("selp.f64", &[&a, &b, &p])
    }
    fn and(&mut self, p: Lanes, q: Lanes) -> Lanes {
        self.p("and.pred", &[&p, &q])
    }
    fn or(&mut self, p: Lanes, q: Lanes) -> Lanes {
        self.p("or.pred", &[&p, &q])
    }
    fn not(&mut self, p: Lanes) -> Lanes {
        self.p("not.pred", &[&p])
    }
    fn bits(&mut self, a: Lanes) -> Lanes {
        self.i("mov.b64", &[&a])
    }
    fn of_bits(&mut self, a: Lanes) -> Lanes {
        self.f("mov.b64", &[&a])
    }
    fn iadd(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.i("add.s64", &[&a, &b])
    }
    fn isub(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.i("sub.s64", &[&a, &b])
    }
    fn imul(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.i("mul.lo.s64", &[&a, &b])
    }
    fn iand(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.i("and.b64", &[&a, &b])
    }
    fn ior(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.i("or.b64", &[&a, &b])
    }
    fn shl(&mut self, a: Lanes, n: u32) -> Lanes {
        self.shift("shl.b64", &a, n)
    }
    fn sar(&mut self, a: Lanes, n: u32) -> Lanes {
        self.shift("shr.s64", &a, n)
    }
    fn shr(&mut self, a: Lanes, n: u32) -> Lanes {
        self.shift("shr.u64", &a, n)
    }
    fn f2i(&mut self, a: Lanes) -> Lanes {
        self.i("cvt.rni.s64.f64", &[&a])
    }
    /// A loop of uniform branches: the step `k` (one f64 register) runs while any element
    /// of any thread of the CTA has `k < count` (an or of the group's comparisons, then
    /// `bar.red.or.pred` over the CTA), so no warp diverges and every thread meets the same
    /// barriers; the carried values live in registers of their own, moved to at the end of
    /// each step.
    fn repeat<B>(&mut self, count: Lanes, carried: Vec<Lanes>, mut body: B) -> Vec<Lanes>
    where
        B: FnMut(&mut Self, Lanes, &[Lanes]) -> Vec<Lanes>,
    {
        let n = self.n;
        let vars: Vec<Lanes> = carried
            .iter()
            .map(|v| {
                let regs: Vec<Reg> = (0..n)
                    .map(|i| {
                        let r = self.l.b.reg(RegClass::F64);
                        self.l.b.mov(r, v[i]);
                        r
                    })
                    .collect();
                pad(&regs)
            })
            .collect();
        let k = self.l.b.reg(RegClass::F64);
        self.l.b.mov(k, Arg::F64(0.0));
        let top = self.l.b.new_label("libm_loop");
        let done = self.l.b.new_label("libm_done");
        self.l.b.place_label(&top);
        let mut more = self.l.b.op(
            "setp.lt.f64",
            RegClass::Pred,
            vec![k.into(), count[0].into()],
        );
        for &c in &count[1..n] {
            let p = self
                .l
                .b
                .op("setp.lt.f64", RegClass::Pred, vec![k.into(), c.into()]);
            more = self
                .l
                .b
                .op("or.pred", RegClass::Pred, vec![more.into(), p.into()]);
        }
        // The CTA's or: the lowering's code is the same for every thread, and its barriers
        // (`bar.sync 0`) are too.
        let go = self.l.b.op(
            "bar.red.or.pred",
            RegClass::Pred,
            vec![Arg::Imm(0), more.into()],
        );
        self.l.b.bra_if(go, true, &done);
        let out = body(self, [k; LANES], &vars);
        for (v, o) in vars.iter().zip(&out) {
            for i in 0..n {
                self.l.b.mov(v[i], o[i]);
            }
        }
        let k1 = self
            .l
            .b
            .op("add.rn.f64", RegClass::F64, vec![k.into(), Arg::F64(1.0)]);
        self.l.b.mov(k, k1);
        self.l.b.bra(&top);
        self.l.b.place_label(&done);
        vars
    }
}

impl MathOps32 for Emit<'_, '_> {
    type S = Lanes;
    type W = Lanes;
    fn c32(&mut self, v: f32) -> Lanes {
        self.splat(RegClass::F32, Arg::F32(v))
    }
    fn ci32(&mut self, v: i32) -> Lanes {
        self.splat(RegClass::B32, Arg::Imm(v as u32 as i64))
    }
    fn add32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.s("add.rn.f32", &[&a, &b])
    }
    fn sub32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.s("sub.rn.f32", &[&a, &b])
    }
    fn mul32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.s("mul.rn.f32", &[&a, &b])
    }
    fn fma32(&mut self, a: Lanes, b: Lanes, c: Lanes) -> Lanes {
        self.s("fma.rn.f32", &[&a, &b, &c])
    }
    fn neg32(&mut self, a: Lanes) -> Lanes {
        self.s("neg.f32", &[&a])
    }
    fn abs32(&mut self, a: Lanes) -> Lanes {
        self.s("abs.f32", &[&a])
    }
    fn lt32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.p("setp.lt.f32", &[&a, &b])
    }
    fn gt32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.p("setp.gt.f32", &[&a, &b])
    }
    fn sel32(&mut self, p: Lanes, a: Lanes, b: Lanes) -> Lanes {
        self.s("selp.f32", &[&a, &b, &p])
    }
    fn bits32(&mut self, a: Lanes) -> Lanes {
        self.w("mov.b32", &[&a])
    }
    fn of_bits32(&mut self, a: Lanes) -> Lanes {
        self.s("mov.b32", &[&a])
    }
    fn isub32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.w("sub.s32", &[&a, &b])
    }
    fn iand32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.w("and.b32", &[&a, &b])
    }
    fn ior32(&mut self, a: Lanes, b: Lanes) -> Lanes {
        self.w("or.b32", &[&a, &b])
    }
    fn shr32(&mut self, a: Lanes, n: u32) -> Lanes {
        self.each(RegClass::B32, "shr.u32", &[&a], Some(Arg::Imm(n as i64)))
    }
    fn widen(&mut self, a: Lanes) -> Lanes {
        self.f("cvt.f64.f32", &[&a])
    }
    fn narrow(&mut self, a: Lanes) -> Lanes {
        self.s("cvt.rn.f32.f64", &[&a])
    }
}

impl Lower<'_> {
    /// `f(x)` for each f32 register of `xs`, a group of [`LANES`] at a time
    /// (`mathlib::unary_f32`: in f32, or widened to f64 and rounded once to f32).
    pub(crate) fn libm1_f32(&mut self, f: Fn1, xs: &[Reg]) -> Vec<Reg> {
        let mut out = Vec::with_capacity(xs.len());
        for group in xs.chunks(LANES) {
            let mut e = Emit {
                l: self,
                n: group.len(),
            };
            let r = mathlib::unary_f32(&mut e, f, pad(group));
            out.extend_from_slice(&r[..group.len()]);
        }
        out
    }

    /// `f(x, y)` for each pair of f32 registers, like [`Lower::libm1_f32`].
    pub(crate) fn libm2_f32(&mut self, f: Fn2, xs: &[Reg], ys: &[Reg]) -> Vec<Reg> {
        let mut out = Vec::with_capacity(xs.len());
        for (gx, gy) in xs.chunks(LANES).zip(ys.chunks(LANES)) {
            let mut e = Emit {
                l: self,
                n: gx.len(),
            };
            let r = mathlib::binary_f32(&mut e, f, pad(gx), pad(gy));
            out.extend_from_slice(&r[..gx.len()]);
        }
        out
    }
}
