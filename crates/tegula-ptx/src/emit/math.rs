//! f32 transcendental functions on PTX's special-function unit (f16/bf16 compute through f32,
//! then round once). Precision, against the correctly rounded result:
//!
//! | op    | PTX                                    | error                                   |
//! |-------|----------------------------------------|-----------------------------------------|
//! | exp2  | `ex2.approx.ftz.f32`                   | ~2 ulp; subnormal results flush to 0    |
//! | exp   | `ex2.approx.ftz.f32(x * log2 e)`       | ~2 ulp + the rounding of x*log2e (grows with |x|: ~|x| * 2^-24 relative) |
//! | log2  | `lg2.approx.f32`                       | ~2^-22 absolute/relative                |
//! | log   | `lg2.approx.f32(x) * ln 2`             | ~2^-21 relative                         |
//! | sqrt  | `sqrt.rn.f32`                          | correctly rounded                       |
//! | rsqrt | `rsqrt.approx.f32`                     | ~2 ulp                                  |
//! | div   | `div.rn.f32`                           | correctly rounded (IEEE)                |
//! | sin, cos | Cody-Waite reduction to [-pi, pi], then `sin/cos.approx.f32` | ~2^-20.9 absolute |
//! | tanh  | `tanh.approx.f32` (sm_75+)             | ~2^-11 relative (the GPU's fast tanh)   |
//! | erf   | |x|<1: Taylor series in x^2 (11 terms); else Abramowitz-Stegun 7.1.26 | ~2e-7 absolute |
//! | floor, ceil | `cvt.rmi` / `cvt.rpi`            | exact                                   |
//! | rint, trunc, round | `cvt.rni`, `cvt.rzi`; round: trunc + 1 where `|x - trunc x| >= 1/2` | exact |
//! | asin .. cbrt, tan, log10, exp10, erfc, lgamma, tgamma, rcbrt, normcdf, sinpi, cospi, erfcx, erfcinv, normcdfinv, cyl_bessel_i0, cyl_bessel_i1, j0, j1, y0, y1, atan2, pow, hypot, remainder, rhypot, jn, yn | `tegula_ir::mathlib` in f64 (`libm.rs`; jn and yn loop, the CTA agreeing on each step), rounded once | correctly rounded but ~2^-20 ulp of halfway; erfinv 2.5 ulp; remainder exact; the interpreter's bits |

use super::{Lower, R};
use crate::ptx::{Arg, Reg, RegClass, Ty};
use tegula_ir::UnaryOp;

const LOG2_E: f32 = std::f32::consts::LOG2_E;
const LN_2: f32 = std::f32::consts::LN_2;

impl Lower<'_> {
    fn f(&mut self, op: &str, args: Vec<Arg>) -> Reg {
        self.b.op(op, RegClass::F32, args)
    }

    pub(crate) fn math_f32(&mut self, op: UnaryOp, x: Reg) -> R<Reg> {
        Ok(match op {
            UnaryOp::Exp2 => self.f("ex2.approx.ftz.f32", vec![x.into()]),
            UnaryOp::Exp => {
                let t = self.f("mul.rn.f32", vec![x.into(), Arg::F32(LOG2_E)]);
                self.f("ex2.approx.ftz.f32", vec![t.into()])
            }
            UnaryOp::Log2 => self.f("lg2.approx.f32", vec![x.into()]),
            UnaryOp::Log => {
                let t = self.f("lg2.approx.f32", vec![x.into()]);
                self.f("mul.rn.f32", vec![t.into(), Arg::F32(LN_2)])
            }
            UnaryOp::Sqrt => self.f("sqrt.rn.f32", vec![x.into()]),
            UnaryOp::Rsqrt => self.f("rsqrt.approx.f32", vec![x.into()]),
            UnaryOp::Sin | UnaryOp::Cos => {
                let r = self.reduce_two_pi(x);
                let op = if op == UnaryOp::Sin {
                    "sin.approx.f32"
                } else {
                    "cos.approx.f32"
                };
                self.f(op, vec![r.into()])
            }
            UnaryOp::Tanh => self.f("tanh.approx.f32", vec![x.into()]),
            UnaryOp::Erf => self.erf(x),
            other => match other.libm() {
                Some(f) => self.libm1_f32(f, &[x])[0],
                None => return Err(self.unsupported(format!("`{}` on f32", other.name()))),
            },
        })
    }

    /// C's `round`: the nearest integer, halfway cases away from zero (`t` is f32 or f64).
    /// `x - trunc(x)` is exact, so the comparison with 1/2 is too.
    pub(crate) fn round_half_away(&mut self, t: Ty, x: Reg) -> Reg {
        let c = x.class;
        let (half, one) = if t == Ty::F64 {
            (Arg::F64(0.5), Arg::F64(1.0))
        } else {
            (Arg::F32(0.5), Arg::F32(1.0))
        };
        let tr = self.b.op(format!("cvt.rzi{t}{t}"), c, vec![x.into()]);
        let d = self
            .b
            .op(format!("sub.rn{t}"), c, vec![x.into(), tr.into()]);
        let ad = self.b.op(format!("abs{t}"), c, vec![d.into()]);
        let up = self
            .b
            .op(format!("setp.ge{t}"), RegClass::Pred, vec![ad.into(), half]);
        let one = self.imm(c, one);
        let s = self
            .b
            .op(format!("copysign{t}"), c, vec![x.into(), one.into()]);
        let bumped = self
            .b
            .op(format!("add.rn{t}"), c, vec![tr.into(), s.into()]);
        self.b.op(
            format!("selp{t}"),
            c,
            vec![bumped.into(), tr.into(), up.into()],
        )
    }

    /// `x - k * 2pi` with `k = round(x / 2pi)`, with 2pi split in two for accuracy.
    fn reduce_two_pi(&mut self, x: Reg) -> Reg {
        let two_pi_hi = f32::from_bits(0x40C9_0FDB);
        let two_pi_lo = (std::f64::consts::TAU - two_pi_hi as f64) as f32;
        let q = self.f(
            "mul.rn.f32",
            vec![x.into(), Arg::F32(1.0 / std::f32::consts::TAU)],
        );
        let k = self.f("cvt.rni.f32.f32", vec![q.into()]);
        let nk = self.f("neg.f32", vec![k.into()]);
        let r = self.f("fma.rn.f32", vec![nk.into(), Arg::F32(two_pi_hi), x.into()]);
        self.f("fma.rn.f32", vec![nk.into(), Arg::F32(two_pi_lo), r.into()])
    }

    fn erf(&mut self, x: Reg) -> Reg {
        let a = self.f("abs.f32", vec![x.into()]);
        // |x| < 1: erf(x) = 2/sqrt(pi) * x * sum_n (-1)^n x^(2n) / (n! (2n+1)).
        let z = self.f("mul.rn.f32", vec![x.into(), x.into()]);
        let mut coef = Vec::new();
        let mut fact = 1.0f64;
        for n in 0..11 {
            if n > 0 {
                fact *= n as f64;
            }
            let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
            coef.push(sign / (fact * (2 * n + 1) as f64));
        }
        let mut p = self.imm(RegClass::F32, Arg::F32(*coef.last().unwrap_or(&1.0) as f32));
        for &c in coef.iter().rev().skip(1) {
            p = self.f("fma.rn.f32", vec![p.into(), z.into(), Arg::F32(c as f32)]);
        }
        let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI as f32;
        let xs = self.f("mul.rn.f32", vec![a.into(), Arg::F32(two_over_sqrt_pi)]);
        let small = self.f("mul.rn.f32", vec![xs.into(), p.into()]);
        // |x| >= 1: 1 - (a1 t + .. + a5 t^5) e^(-x^2), t = 1 / (1 + 0.3275911 |x|).
        let d = self.f(
            "fma.rn.f32",
            vec![a.into(), Arg::F32(0.327_591_1), Arg::F32(1.0)],
        );
        let t = self.f("rcp.rn.f32", vec![d.into()]);
        let ks = [
            1.061_405_4f32,
            -1.453_152_1,
            1.421_413_7,
            -0.284_496_74,
            0.254_829_6,
        ];
        let mut q = self.imm(RegClass::F32, Arg::F32(ks[0]));
        for &c in &ks[1..] {
            q = self.f("fma.rn.f32", vec![q.into(), t.into(), Arg::F32(c)]);
        }
        q = self.f("mul.rn.f32", vec![q.into(), t.into()]);
        let nz = self.f("mul.rn.f32", vec![z.into(), Arg::F32(-LOG2_E)]);
        let e = self.f("ex2.approx.ftz.f32", vec![nz.into()]);
        let nq = self.f("neg.f32", vec![q.into()]);
        let large = self.f("fma.rn.f32", vec![nq.into(), e.into(), Arg::F32(1.0)]);
        let is_small = self
            .b
            .op("setp.lt.f32", RegClass::Pred, vec![a.into(), Arg::F32(1.0)]);
        let m = self.f(
            "selp.f32",
            vec![small.into(), large.into(), is_small.into()],
        );
        self.f("copysign.f32", vec![x.into(), m.into()])
    }
}
