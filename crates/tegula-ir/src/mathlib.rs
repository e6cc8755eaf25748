//! The math library behind `asin`, `acos`, `atan`, `atan2`, `sinh`, `cosh`, `asinh`, `acosh`,
//! `atanh`, `pow`, `log1p`, `expm1`, `erfinv`, `cbrt`, `hypot`, `tan`, `log10`, `exp10`,
//! `erfc`, `lgamma`, `tgamma`, `rcbrt`, `normcdf`, `sinpi`, `cospi`, `remainder`, `fmod` (the
//! float `%`), `rhypot`,
//! `erfcx`, `erfcinv`, `normcdfinv`, `cyl_bessel_i0`, `cyl_bessel_i1`, `j0`, `j1`, `y0`,
//! `y1`, `jn` and `yn` on f32 (and f16/bf16, which compute through f32), written
//! once over [`MathOps`] (f64) and [`MathOps32`] (f32) so that both backends run the same
//! algorithm: the interpreter evaluates it on Rust `f64`s and `f32`s ([`Eval`]), the GPU
//! lowering emits one PTX instruction per operation (`tegula-ptx`'s `emit/libm.rs`). Every
//! operation is an IEEE operation rounded to nearest (`add.rn.f64`, `fma.rn.f64`,
//! `div.rn.f64`, `sqrt.rn.f64`, `cvt.rni.f64.f64`, `fma.rn.f32`, `mul.rn.f32`, ..: subnormals
//! kept, nothing contracted; integer bit operations), so the two produce the same bits (NaN
//! payloads aside). An f32 argument enters through [`unary_f32`] or [`binary_f32`].
//!
//! `asin` and `acos` compute in f32 arithmetic, with no f64 operation: one degree-5 minimax
//! polynomial on [0, 1/4] serves `|x| <= 1/2` and, through
//! `asin |x| = pi/2 - 2 asin(sqrt((1 - |x|) / 2))`, `|x| > 1/2`; the square root comes from a
//! bit-pattern estimate, two Newton steps and a residual (no `sqrt`, no division), and the
//! last sums are split exactly, so the result is rounded once but for a few hundredths of an
//! ulp: at most 0.5476 ulp (`asin`) and 0.5450 ulp (`acos`) over every f32 (tegula-ir's
//! `tests/asin_f32.rs`).
//!
//! The others widen an f32 argument to f64 exactly (f32 subnormals are normal f64s), compute
//! the function in f64 by range reduction and polynomial (Taylor series of known
//! coefficients, which converge fast on the reduced ranges, or a Chebyshev fit where that
//! takes far fewer terms: `erfc`'s `exp(x^2) erfc(x)`, `lgamma` near 2, and [`unary`]'s f64
//! `asin` and `acos`) to a relative error of about 2^-45 or better, and round once to f32.
//! That f32 result is therefore correctly rounded except when the exact value lies within
//! about 2^-20 ulp of a rounding boundary (`erfinv`, an approximation of Giles, is the
//! exception: a few ulp; `remainder` is exact). `tan` reduces its argument by pi/2 exactly at
//! every magnitude (2/pi in exact pieces), `sinpi` and `cospi` by 2 (exact in f64);
//! `erfcinv` refines a start by Halley's method on `erfc`. The bounds measured by the tests are in docs/semantics.md.
//!
//! Every branch is computed and selected, so the PTX is straight-line but for the loops of
//! `jn`'s and `yn`'s recurrences ([`MathOps::repeat`]), whose exit the CTA agrees on.
//! f64 arithmetic runs at half the f32 rate on A100/H100-class GPUs, at 1/64 on consumer
//! ones.

/// The operations the algorithms are written in: f64 arithmetic, comparisons, selection and
/// 64-bit integer operations on the bits.
pub trait MathOps {
    /// An f64 value.
    type F: Copy;
    /// An i64 value (the bits of an f64, or an integer).
    type I: Copy;
    /// A predicate.
    type P: Copy;
    fn c(&mut self, v: f64) -> Self::F;
    fn ci(&mut self, v: i64) -> Self::I;
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b + c` rounded once.
    fn fma(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    fn sqrt(&mut self, a: Self::F) -> Self::F;
    fn neg(&mut self, a: Self::F) -> Self::F;
    fn abs(&mut self, a: Self::F) -> Self::F;
    /// Round to the nearest integer, ties to even.
    fn rint(&mut self, a: Self::F) -> Self::F;
    /// Round toward zero.
    fn trunc(&mut self, a: Self::F) -> Self::F;
    /// Ordered comparisons: false when either side is NaN.
    fn lt(&mut self, a: Self::F, b: Self::F) -> Self::P;
    fn gt(&mut self, a: Self::F, b: Self::F) -> Self::P;
    fn eq(&mut self, a: Self::F, b: Self::F) -> Self::P;
    fn isnan(&mut self, a: Self::F) -> Self::P;
    /// `a` where `p`, else `b`.
    fn sel(&mut self, p: Self::P, a: Self::F, b: Self::F) -> Self::F;
    fn and(&mut self, p: Self::P, q: Self::P) -> Self::P;
    fn or(&mut self, p: Self::P, q: Self::P) -> Self::P;
    fn not(&mut self, p: Self::P) -> Self::P;
    fn bits(&mut self, a: Self::F) -> Self::I;
    fn of_bits(&mut self, a: Self::I) -> Self::F;
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// The low 64 bits of the product.
    fn imul(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn shl(&mut self, a: Self::I, n: u32) -> Self::I;
    /// Arithmetic (sign-filling) shift right.
    fn sar(&mut self, a: Self::I, n: u32) -> Self::I;
    /// Logical shift right.
    fn shr(&mut self, a: Self::I, n: u32) -> Self::I;
    /// Round to the nearest integer (ties to even), saturating; NaN gives 0.
    fn f2i(&mut self, a: Self::F) -> Self::I;
    /// A loop: `carried <- body(k, carried)` for `k = 0, 1, ..` (f64 integers) while
    /// `k < count` (an f64 integer; NaN or below 1: no step), the values after the last step.
    /// The GPU runs every element of a warp for the warp's largest count (a uniform branch),
    /// so `body` must leave the carried values unchanged for `k >= count` (select on
    /// `k < count`): the bits are then the same on both backends.
    fn repeat<B>(&mut self, count: Self::F, carried: Vec<Self::F>, body: B) -> Vec<Self::F>
    where
        B: FnMut(&mut Self, Self::F, &[Self::F]) -> Vec<Self::F>;
}

/// [`MathOps`] on Rust values: the interpreter's evaluation.
pub struct Eval;

impl MathOps for Eval {
    type F = f64;
    type I = i64;
    type P = bool;
    fn c(&mut self, v: f64) -> f64 {
        v
    }
    fn ci(&mut self, v: i64) -> i64 {
        v
    }
    fn add(&mut self, a: f64, b: f64) -> f64 {
        a + b
    }
    fn sub(&mut self, a: f64, b: f64) -> f64 {
        a - b
    }
    fn mul(&mut self, a: f64, b: f64) -> f64 {
        a * b
    }
    fn div(&mut self, a: f64, b: f64) -> f64 {
        a / b
    }
    fn fma(&mut self, a: f64, b: f64, c: f64) -> f64 {
        a.mul_add(b, c)
    }
    fn sqrt(&mut self, a: f64) -> f64 {
        a.sqrt()
    }
    fn neg(&mut self, a: f64) -> f64 {
        -a
    }
    fn abs(&mut self, a: f64) -> f64 {
        a.abs()
    }
    fn rint(&mut self, a: f64) -> f64 {
        a.round_ties_even()
    }
    fn trunc(&mut self, a: f64) -> f64 {
        a.trunc()
    }
    fn lt(&mut self, a: f64, b: f64) -> bool {
        a < b
    }
    fn gt(&mut self, a: f64, b: f64) -> bool {
        a > b
    }
    fn eq(&mut self, a: f64, b: f64) -> bool {
        a == b
    }
    fn isnan(&mut self, a: f64) -> bool {
        a.is_nan()
    }
    fn sel(&mut self, p: bool, a: f64, b: f64) -> f64 {
        if p {
            a
        } else {
            b
        }
    }
    fn and(&mut self, p: bool, q: bool) -> bool {
        p && q
    }
    fn or(&mut self, p: bool, q: bool) -> bool {
        p || q
    }
    fn not(&mut self, p: bool) -> bool {
        !p
    }
    fn bits(&mut self, a: f64) -> i64 {
        a.to_bits() as i64
    }
    fn of_bits(&mut self, a: i64) -> f64 {
        f64::from_bits(a as u64)
    }
    fn iadd(&mut self, a: i64, b: i64) -> i64 {
        a.wrapping_add(b)
    }
    fn isub(&mut self, a: i64, b: i64) -> i64 {
        a.wrapping_sub(b)
    }
    fn imul(&mut self, a: i64, b: i64) -> i64 {
        a.wrapping_mul(b)
    }
    fn iand(&mut self, a: i64, b: i64) -> i64 {
        a & b
    }
    fn ior(&mut self, a: i64, b: i64) -> i64 {
        a | b
    }
    fn shl(&mut self, a: i64, n: u32) -> i64 {
        a << n
    }
    fn sar(&mut self, a: i64, n: u32) -> i64 {
        a >> n
    }
    fn shr(&mut self, a: i64, n: u32) -> i64 {
        ((a as u64) >> n) as i64
    }
    fn f2i(&mut self, a: f64) -> i64 {
        // `as` saturates and maps NaN to 0, as PTX's cvt.rni.s64.f64 does.
        a.round_ties_even() as i64
    }
    fn repeat<B>(&mut self, count: f64, mut carried: Vec<f64>, mut body: B) -> Vec<f64>
    where
        B: FnMut(&mut Self, f64, &[f64]) -> Vec<f64>,
    {
        let mut k = 0.0;
        while k < count {
            carried = body(self, k, &carried);
            k += 1.0;
        }
        carried
    }
}

/// The single-precision operations of the functions evaluated in f32 (`asin` and `acos`):
/// f32 arithmetic rounded to nearest, comparisons and selection (with [`MathOps`]'
/// predicates), 32-bit integer operations on the bits, and the conversions between f32 and the
/// f64 of [`MathOps`] through which the other functions are computed. Subnormals are kept (no
/// flush to zero), and nothing is contracted: an `fma` is asked for where one is meant, and
/// a `mul` followed by an `add` stays two roundings.
pub trait MathOps32: MathOps {
    /// An f32 value.
    type S: Copy;
    /// An i32 value (the bits of an f32).
    type W: Copy;
    fn c32(&mut self, v: f32) -> Self::S;
    fn ci32(&mut self, v: i32) -> Self::W;
    fn add32(&mut self, a: Self::S, b: Self::S) -> Self::S;
    fn sub32(&mut self, a: Self::S, b: Self::S) -> Self::S;
    fn mul32(&mut self, a: Self::S, b: Self::S) -> Self::S;
    /// `a * b + c` rounded once.
    fn fma32(&mut self, a: Self::S, b: Self::S, c: Self::S) -> Self::S;
    fn neg32(&mut self, a: Self::S) -> Self::S;
    fn abs32(&mut self, a: Self::S) -> Self::S;
    /// Ordered comparisons: false when either side is NaN.
    fn lt32(&mut self, a: Self::S, b: Self::S) -> Self::P;
    fn gt32(&mut self, a: Self::S, b: Self::S) -> Self::P;
    /// `a` where `p`, else `b`.
    fn sel32(&mut self, p: Self::P, a: Self::S, b: Self::S) -> Self::S;
    fn bits32(&mut self, a: Self::S) -> Self::W;
    fn of_bits32(&mut self, a: Self::W) -> Self::S;
    fn isub32(&mut self, a: Self::W, b: Self::W) -> Self::W;
    fn iand32(&mut self, a: Self::W, b: Self::W) -> Self::W;
    fn ior32(&mut self, a: Self::W, b: Self::W) -> Self::W;
    /// Logical shift right.
    fn shr32(&mut self, a: Self::W, n: u32) -> Self::W;
    /// f32 to f64 (exact).
    fn widen(&mut self, a: Self::S) -> Self::F;
    /// f64 to f32, rounded to nearest.
    fn narrow(&mut self, a: Self::F) -> Self::S;
}

impl MathOps32 for Eval {
    type S = f32;
    type W = i32;
    fn c32(&mut self, v: f32) -> f32 {
        v
    }
    fn ci32(&mut self, v: i32) -> i32 {
        v
    }
    fn add32(&mut self, a: f32, b: f32) -> f32 {
        a + b
    }
    fn sub32(&mut self, a: f32, b: f32) -> f32 {
        a - b
    }
    fn mul32(&mut self, a: f32, b: f32) -> f32 {
        a * b
    }
    fn fma32(&mut self, a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    fn neg32(&mut self, a: f32) -> f32 {
        -a
    }
    fn abs32(&mut self, a: f32) -> f32 {
        a.abs()
    }
    fn lt32(&mut self, a: f32, b: f32) -> bool {
        a < b
    }
    fn gt32(&mut self, a: f32, b: f32) -> bool {
        a > b
    }
    fn sel32(&mut self, p: bool, a: f32, b: f32) -> f32 {
        if p {
            a
        } else {
            b
        }
    }
    fn bits32(&mut self, a: f32) -> i32 {
        a.to_bits() as i32
    }
    fn of_bits32(&mut self, a: i32) -> f32 {
        f32::from_bits(a as u32)
    }
    fn isub32(&mut self, a: i32, b: i32) -> i32 {
        a.wrapping_sub(b)
    }
    fn iand32(&mut self, a: i32, b: i32) -> i32 {
        a & b
    }
    fn ior32(&mut self, a: i32, b: i32) -> i32 {
        a | b
    }
    fn shr32(&mut self, a: i32, n: u32) -> i32 {
        ((a as u32) >> n) as i32
    }
    fn widen(&mut self, a: f32) -> f64 {
        a as f64
    }
    fn narrow(&mut self, a: f64) -> f32 {
        a as f32
    }
}

/// The unary functions of this library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fn1 {
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Log1p,
    Expm1,
    Erfinv,
    Cbrt,
    Tan,
    Log10,
    Exp10,
    Erfc,
    Lgamma,
    Tgamma,
    Rcbrt,
    Normcdf,
    Sinpi,
    Cospi,
    Erfcx,
    Erfcinv,
    Normcdfinv,
    CylBesselI0,
    CylBesselI1,
    J0,
    J1,
    Y0,
    Y1,
}

/// The binary functions of this library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fn2 {
    Atan2,
    Pow,
    Hypot,
    Remainder,
    /// C's `fmod` (tegula's float `%`), exact.
    Fmod,
    Rhypot,
    /// `J_n(x)`: the first operand is the order `n`, an integer held in the float.
    Jn,
    /// `Y_n(x)`, the order first likewise.
    Yn,
}

/// `f(x)` for an f64 holding an f32 (or f16/bf16) value; the caller rounds the result to f32.
pub fn unary<O: MathOps>(o: &mut O, f: Fn1, x: O::F) -> O::F {
    match f {
        Fn1::Asin => asin(o, x),
        Fn1::Acos => acos(o, x),
        Fn1::Atan => atan(o, x),
        Fn1::Sinh => sinh(o, x),
        Fn1::Cosh => cosh(o, x),
        Fn1::Asinh => asinh(o, x),
        Fn1::Acosh => acosh(o, x),
        Fn1::Atanh => atanh(o, x),
        Fn1::Log1p => log1p(o, x),
        Fn1::Expm1 => expm1(o, x),
        Fn1::Erfinv => erfinv(o, x),
        Fn1::Cbrt => cbrt(o, x),
        Fn1::Tan => tan(o, x),
        Fn1::Log10 => log10(o, x),
        Fn1::Exp10 => exp10(o, x),
        Fn1::Erfc => erfc(o, x),
        Fn1::Lgamma => lgamma(o, x),
        Fn1::Tgamma => tgamma(o, x),
        Fn1::Rcbrt => rcbrt(o, x),
        Fn1::Normcdf => normcdf(o, x),
        Fn1::Sinpi => sinpi_signed(o, x),
        Fn1::Cospi => cospi(o, x),
        Fn1::Erfcx => erfcx(o, x),
        Fn1::Erfcinv => erfcinv(o, x),
        Fn1::Normcdfinv => normcdfinv(o, x),
        Fn1::CylBesselI0 => bessel_i(o, x, 0),
        Fn1::CylBesselI1 => bessel_i(o, x, 1),
        Fn1::J0 => bessel_j(o, x, 0),
        Fn1::J1 => bessel_j(o, x, 1),
        Fn1::Y0 => bessel_y(o, x, 0),
        Fn1::Y1 => bessel_y(o, x, 1),
    }
}

/// `f(x, y)` for f64s holding f32 values; the caller rounds the result to f32.
pub fn binary<O: MathOps>(o: &mut O, f: Fn2, x: O::F, y: O::F) -> O::F {
    match f {
        Fn2::Atan2 => atan2(o, x, y),
        Fn2::Pow => pow(o, x, y),
        Fn2::Hypot => hypot(o, x, y),
        Fn2::Remainder => remainder(o, x, y),
        Fn2::Fmod => fmod(o, x, y),
        Fn2::Rhypot => rhypot(o, x, y),
        Fn2::Jn => bessel_jn(o, x, y),
        Fn2::Yn => bessel_yn(o, x, y),
    }
}

/// `f(x)` for an f32 value (or an f16/bf16 value widened to f32), rounded to f32: `asin` and
/// `acos` evaluated in f32 arithmetic, the others in f64 through [`unary`] and rounded once.
pub fn unary_f32<O: MathOps32>(o: &mut O, f: Fn1, x: O::S) -> O::S {
    match f {
        Fn1::Asin => asin_f32(o, x),
        Fn1::Acos => acos_f32(o, x),
        _ => {
            let xd = o.widen(x);
            let r = unary(o, f, xd);
            o.narrow(r)
        }
    }
}

/// `f(x, y)` for f32 values, rounded to f32 (computed in f64 through [`binary`]).
pub fn binary_f32<O: MathOps32>(o: &mut O, f: Fn2, x: O::S, y: O::S) -> O::S {
    let (xd, yd) = (o.widen(x), o.widen(y));
    let r = binary(o, f, xd, yd);
    o.narrow(r)
}

/// `f(x)` in f32 on the interpreter: exactly what the GPU computes.
pub fn eval_f32(f: Fn1, x: f32) -> f32 {
    unary_f32(&mut Eval, f, x)
}

/// `f(x, y)` in f32 on the interpreter: exactly what the GPU computes.
pub fn eval2_f32(f: Fn2, x: f32, y: f32) -> f32 {
    binary_f32(&mut Eval, f, x, y)
}

/// ln 2 to 32 bits (the low 21 mantissa bits zero, so `k * LN2_HI` is exact for |k| < 2^21).
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
/// ln 2 - LN2_HI.
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
const LOG2_E: f64 = std::f64::consts::LOG2_E;
const PI: f64 = std::f64::consts::PI;
const FRAC_PI_2: f64 = std::f64::consts::FRAC_PI_2;
const FRAC_PI_4: f64 = std::f64::consts::FRAC_PI_4;
const SIGN: i64 = i64::MIN;

/// Horner evaluation of `c[0] + c[1] x + c[2] x^2 + ..`.
fn horner<O: MathOps>(o: &mut O, x: O::F, c: &[f64]) -> O::F {
    let mut p = o.c(c[c.len() - 1]);
    for &k in c.iter().rev().skip(1) {
        let k = o.c(k);
        p = o.fma(p, x, k);
    }
    p
}

fn mulc<O: MathOps>(o: &mut O, a: O::F, c: f64) -> O::F {
    let c = o.c(c);
    o.mul(a, c)
}

fn addc<O: MathOps>(o: &mut O, a: O::F, c: f64) -> O::F {
    let c = o.c(c);
    o.add(a, c)
}

/// `|a|` with the sign bit of `b`.
fn copysign<O: MathOps>(o: &mut O, a: O::F, b: O::F) -> O::F {
    let (ba, bb) = (o.bits(a), o.bits(b));
    let (m, s) = (o.ci(!SIGN), o.ci(SIGN));
    let (ma, sb) = (o.iand(ba, m), o.iand(bb, s));
    let r = o.ior(ma, sb);
    o.of_bits(r)
}

/// Whether the sign bit is set (also for -0 and NaNs).
fn signbit<O: MathOps>(o: &mut O, a: O::F) -> O::P {
    // The sign bit as a number: -1.0 or +1.0 copied onto 1.
    let one = o.c(1.0);
    let s = copysign(o, one, a);
    let zero = o.c(0.0);
    o.lt(s, zero)
}

fn isinf<O: MathOps>(o: &mut O, a: O::F) -> O::P {
    let a = o.abs(a);
    let inf = o.c(f64::INFINITY);
    o.eq(a, inf)
}

/// `1 / n!` for n = 0..len.
fn inv_factorials(len: usize) -> Vec<f64> {
    let mut f = 1.0f64;
    (0..len)
        .map(|n| {
            f *= n.max(1) as f64;
            1.0 / f
        })
        .collect()
}

/// `exp(z)`, relative error about 2^-50; `z` is clamped to [-200, 200] first (far outside the
/// f32 range, so the rounded result is 0 or inf there). NaN propagates.
fn exp_core<O: MathOps>(o: &mut O, z: O::F) -> O::F {
    let (hi, lo) = (o.c(200.0), o.c(-200.0));
    let big = o.gt(z, hi);
    let z = o.sel(big, hi, z);
    let small = o.lt(z, lo);
    let z = o.sel(small, lo, z);
    // z = k ln2 + r, |r| <= ln2 / 2; k ln2_hi is exact (ln2_hi has 32 trailing zero bits).
    let t = mulc(o, z, LOG2_E);
    let k = o.rint(t);
    let nk = o.neg(k);
    let (l_hi, l_lo) = (o.c(LN2_HI), o.c(LN2_LO));
    let r = o.fma(nk, l_hi, z);
    let r = o.fma(nk, l_lo, r);
    let p = horner(o, r, &inv_factorials(14));
    // 2^k from its bits (|k| <= 289: a normal f64).
    let ki = o.f2i(k);
    let bias = o.ci(1023);
    let e = o.iadd(ki, bias);
    let e = o.shl(e, 52);
    let scale = o.of_bits(e);
    o.mul(p, scale)
}

/// `exp(z) - 1` without cancellation near 0.
fn expm1_core<O: MathOps>(o: &mut O, z: O::F) -> O::F {
    // |z| < ln2 / 2: the series z (1 + z/2 + z^2/6 + ..) itself.
    let c = inv_factorials(14);
    let small_poly = horner(o, z, &c[1..]);
    let small = o.mul(z, small_poly);
    let e = exp_core(o, z);
    let big = addc(o, e, -1.0);
    let az = o.abs(z);
    let lim = o.c(0.346_573_590_279_972_65);
    let is_small = o.lt(az, lim);
    o.sel(is_small, small, big)
}

/// `log(x)` for any f64: -inf at 0, NaN below 0 and for NaN, inf at inf.
fn log_core<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    // x = 2^e m, m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1) / (m + 1).
    let i = o.bits(x);
    let sqrt_half = o.ci(0x3FE6_A09E_667F_3BCD);
    let d = o.isub(i, sqrt_half);
    let e = o.sar(d, 52);
    let es = o.shl(e, 52);
    let mi = o.isub(i, es);
    let m = o.of_bits(mi);
    let f = addc(o, m, -1.0);
    let den = addc(o, f, 2.0);
    let s = o.div(f, den);
    let s2 = o.mul(s, s);
    // 2 atanh(s) = s (2 + 2 s^2 / 3 + 2 s^4 / 5 + ..); |s| <= 0.1716, 12 terms.
    let c: Vec<f64> = (0..12).map(|n| 2.0 / (2 * n + 1) as f64).collect();
    let p = horner(o, s2, &c);
    let logm = o.mul(s, p);
    // e as f64: (e + 2^52 + 2^51) - (2^52 + 2^51) through the bits is exact for |e| < 2^51.
    let magic = o.c(6_755_399_441_055_744.0);
    let mb = o.bits(magic);
    let eb = o.iadd(mb, e);
    let ef = o.of_bits(eb);
    let ef = o.sub(ef, magic);
    let (l_hi, l_lo) = (o.c(LN2_HI), o.c(LN2_LO));
    let t = o.fma(ef, l_lo, logm);
    let r = o.fma(ef, l_hi, t);
    // Special values.
    let zero = o.c(0.0);
    let is_zero = o.eq(x, zero);
    let ninf = o.c(f64::NEG_INFINITY);
    let r = o.sel(is_zero, ninf, r);
    let neg = o.lt(x, zero);
    let nan = o.c(f64::NAN);
    let r = o.sel(neg, nan, r);
    let inf = o.c(f64::INFINITY);
    let is_inf = o.eq(x, inf);
    let r = o.sel(is_inf, inf, r);
    let is_nan = o.isnan(x);
    o.sel(is_nan, x, r)
}

/// `log(1 + x)`, accurate for tiny `x`: `log(u) + (x - (u - 1)) / u` with `u = 1 + x`.
fn log1p_core<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let u = addc(o, x, 1.0);
    let l = log_core(o, u);
    let um1 = addc(o, u, -1.0);
    let d = o.sub(x, um1);
    let corr = o.div(d, u);
    let r = o.add(l, corr);
    // u = 0 (x = -1) or u = inf: the correction would be NaN; log(u) is the answer.
    let zero = o.c(0.0);
    let u0 = o.eq(u, zero);
    let uinf = isinf(o, u);
    let plain = o.or(u0, uinf);
    o.sel(plain, l, r)
}

/// `atan(t)` for `t` in [0, 1] (and NaN).
fn atan_unit<O: MathOps>(o: &mut O, t: O::F) -> O::F {
    // t > tan(pi/8): atan t = pi/4 + atan((t - 1) / (t + 1)), so |u| <= tan(pi/8).
    let tan_pi_8 = o.c(0.414_213_562_373_095_03);
    let big = o.gt(t, tan_pi_8);
    let num = addc(o, t, -1.0);
    let den = addc(o, t, 1.0);
    let q = o.div(num, den);
    let u = o.sel(big, q, t);
    let s = o.mul(u, u);
    // atan u = u (1 - s/3 + s^2/5 - ..); s <= 0.1716, 22 terms.
    let c: Vec<f64> = (0..22)
        .map(|n| {
            let v = 1.0 / (2 * n + 1) as f64;
            if n % 2 == 0 {
                v
            } else {
                -v
            }
        })
        .collect();
    let p = horner(o, s, &c);
    let a = o.mul(u, p);
    let shifted = addc(o, a, FRAC_PI_4);
    o.sel(big, shifted, a)
}

/// `atan2(y, x)` with C99's special values.
fn atan2<O: MathOps>(o: &mut O, y: O::F, x: O::F) -> O::F {
    let (ax, ay) = (o.abs(x), o.abs(y));
    let y_big = o.gt(ay, ax);
    let mx = o.sel(y_big, ay, ax);
    let mn = o.sel(y_big, ax, ay);
    let t = o.div(mn, mx);
    let r = atan_unit(o, t);
    let half_pi = o.c(FRAC_PI_2);
    let comp = o.sub(half_pi, r);
    let r = o.sel(y_big, comp, r);
    let xneg = signbit(o, x);
    let pi = o.c(PI);
    let flip = o.sub(pi, r);
    let r = o.sel(xneg, flip, r);
    // Both zero (t = 0/0) and both infinite (inf/inf): the quadrant's angle.
    let zero = o.c(0.0);
    let (x0, y0) = (o.eq(ax, zero), o.eq(ay, zero));
    let both0 = o.and(x0, y0);
    let zero_angle = o_sel_pi(o, xneg, 0.0, PI);
    let r = o.sel(both0, zero_angle, r);
    let (xi, yi) = (isinf(o, x), isinf(o, y));
    let both_inf = o.and(xi, yi);
    let inf_angle = o_sel_pi(o, xneg, FRAC_PI_4, 3.0 * FRAC_PI_4);
    let r = o.sel(both_inf, inf_angle, r);
    let r = copysign(o, r, y);
    // NaN in, NaN out (copysign would keep a NaN, but the selects above may have replaced it).
    let xn = o.isnan(x);
    let yn = o.isnan(y);
    let n = o.or(xn, yn);
    let sum = o.add(x, y);
    o.sel(n, sum, r)
}

fn o_sel_pi<O: MathOps>(o: &mut O, p: O::P, a: f64, b: f64) -> O::F {
    let (a, b) = (o.c(a), o.c(b));
    o.sel(p, b, a)
}

fn atan<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    // atan2(x, 1) is atan(x) for every x, infinities and zeros included.
    let one = o.c(1.0);
    atan2(o, x, one)
}

/// `asin s` for `0 <= s <= 0.5`, with `z = s^2` (or close to it: `z` only enters the series'
/// tail), and whether `|x| > 0.5` (`s` then is `sqrt((1 - |x|) / 2)`, and `asin |x| =
/// pi/2 - 2 asin s`). One polynomial serves both ranges, so asin and acos cost one square root
/// and no division (atan2's route costs two divisions more).
fn asin_reduced<O: MathOps>(o: &mut O, x: O::F) -> (O::F, O::P) {
    let a = o.abs(x);
    let half = o.c(0.5);
    let far = o.gt(a, half);
    let near_z = o.mul(a, a);
    // 1 - a is exact for a in [0.5, 1] (Sterbenz), and so is the halving.
    let one = o.c(1.0);
    let d = o.sub(one, a);
    let far_z = o.mul(d, half);
    let far_s = o.sqrt(far_z);
    let z = o.sel(far, far_z, near_z);
    let s = o.sel(far, far_s, a);
    // asin s = s (1 + z Q(z)) for z = s^2 <= 1/4, with Q the degree-10 Chebyshev fit to
    // (asin(sqrt z) / sqrt z - 1) / z on [0, 1/4] (mpmath's chebyfit at 40 digits, rounded
    // to f64): |z (Q - that)| < 2^-53 on the range, and the f64 evaluation below stays within
    // 2^-49 of asin s (the Taylor series needs 21 terms for as much).
    const C: [f64; 12] = [
        1.0,
        0.1666666666666695,
        0.07499999999726302,
        0.044642857578717755,
        0.030381917485400308,
        0.022373010066676288,
        0.017337192543712077,
        0.014140941807431192,
        0.0102896411236249,
        0.015445133336819308,
        -0.006822043980671263,
        0.027871289137110143,
    ];
    let p = horner(o, z, &C);
    (o.mul(s, p), far)
}

fn asin<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let (r, far) = asin_reduced(o, x);
    let two_r = o.add(r, r);
    let half_pi = o.c(FRAC_PI_2);
    let far_r = o.sub(half_pi, two_r);
    let r = o.sel(far, far_r, r);
    // NaN in (and |x| > 1, whose square root was NaN): NaN out, which copysign keeps.
    copysign(o, r, x)
}

fn acos<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let (r, far) = asin_reduced(o, x);
    // |x| <= 0.5: pi/2 - asin x; x > 0.5: 2 asin s; x < -0.5: pi - 2 asin s.
    let half_pi = o.c(FRAC_PI_2);
    let signed = copysign(o, r, x);
    let near = o.sub(half_pi, signed);
    let two_r = o.add(r, r);
    let pi = o.c(PI);
    let flipped = o.sub(pi, two_r);
    let neg = signbit(o, x);
    let far_r = o.sel(neg, flipped, two_r);
    o.sel(far, far_r, near)
}

/// pi/2 rounded to f32, and the rest (pi/2 - PIO2_HI_F32 rounded to f32; what is left,
/// 2^-49, is below 2^-25 ulp of any result it enters).
const PIO2_HI_F32: f32 = f32::from_bits(0x3FC9_0FDB);
const PIO2_LO_F32: f32 = f32::from_bits(0xB33B_BD2E);
/// pi rounded to f32, and the rest (likewise).
const PI_HI_F32: f32 = f32::from_bits(0x4049_0FDB);
const PI_LO_F32: f32 = f32::from_bits(0xB3BB_BD2E);

/// `asin(sqrt z) / sqrt z - 1 = z Q(z)` for `z` in [0, 1/4], Q the degree-5 minimax fit
/// (weighted to the absolute error of `z Q`): a Remez exchange in mpmath at 40 digits, the
/// coefficients rounded to f32 one at a time, lowest first, each rounding followed by a refit
/// of the higher ones. |z Q(z) - (asin(sqrt z) / sqrt z - 1)| < 2^-31.6 on the range.
const ASIN_Q: [f32; 6] = [
    f32::from_bits(0x3E2A_AAA6), // 0.16666660
    f32::from_bits(0x3D99_9C55), // 0.07500521
    f32::from_bits(0x3D36_53EE), // 0.044513635
    f32::from_bits(0x3D02_6686), // 0.031836055
    f32::from_bits(0x3C6A_C4FA), // 0.014329189
    f32::from_bits(0x3D1A_4F1A), // 0.037673093
];

/// The reduction shared by `asin_f32` and `acos_f32`, for `a = |x|`: whether `a > 1/2`
/// (`far`, where `asin a = pi/2 - 2 asin s` for `s = sqrt z`, `z = (1 - a) / 2`), `z + z_lo`
/// (exactly `a^2` when not `far`, `z_lo = 0` when `far`), and `s0 + ey / 2`, which is
/// `sqrt((1 - a) / 2)` to within about 2^-34 relative.
struct AsinReduced<O: MathOps32> {
    far: O::P,
    z: O::S,
    z_lo: O::S,
    s0: O::S,
    ey: O::S,
}

fn asin_reduce_f32<O: MathOps32>(o: &mut O, a: O::S) -> AsinReduced<O> {
    let half = o.c32(0.5);
    let far = o.gt32(a, half);
    // 1 - a is exact for a in [1/2, 2] (Sterbenz) and so is the halving (zf >= 2^-25 for
    // a < 1: a normal f32).
    let one = o.c32(1.0);
    let d = o.sub32(one, a);
    let zf = o.mul32(d, half);
    // 1/sqrt(zf) without a square root or a division: the bit-pattern estimate
    // 0x5F3759DF - bits/2 (within 3.5%), then two Newton steps y (3/2 - (zf/2) y^2), each
    // squaring the relative error (within 2^-17 after the second). The step is computed as
    // ((-zf/2) y) y, never y^2, so that y stays finite at zf = 0 (a = 1: the estimate is 2^63
    // and the steps multiply it by 3/2).
    let bz = o.bits32(zf);
    let bh = o.shr32(bz, 1);
    let magic = o.ci32(0x5F37_59DF);
    let yb = o.isub32(magic, bh);
    let mut y = o.of_bits32(yb);
    let nhalf = o.c32(-0.5);
    let nh = o.mul32(zf, nhalf);
    let three_halves = o.c32(1.5);
    for _ in 0..2 {
        let nhy = o.mul32(nh, y);
        let u = o.fma32(nhy, y, three_halves);
        y = o.mul32(y, u);
    }
    // s0 = zf y is sqrt(zf) to 2^-17; (zf - s0^2) y (the residual by one fma, rounded once)
    // is twice Newton's correction to s0, so s0 + ey / 2 is sqrt(zf) to about 2^-34.
    let s0 = o.mul32(zf, y);
    let ns0 = o.neg32(s0);
    let e = o.fma32(ns0, s0, zf);
    let ey = o.mul32(e, y);
    let zn = o.mul32(a, a);
    let nzn = o.neg32(zn);
    let zn_lo = o.fma32(a, a, nzn);
    let z = o.sel32(far, zf, zn);
    let zero = o.c32(0.0);
    let z_lo = o.sel32(far, zero, zn_lo);
    AsinReduced {
        far,
        z,
        z_lo,
        s0,
        ey,
    }
}

/// `k_hi + k_lo + (b + b_lo) (1 + w Q(w))` for `w = z + z_lo` (`k_hi + k_lo` a multiple of
/// pi/2, `b + b_lo` one of `+-a` and `+-2 sqrt z`, `b_lo` and `z_lo` tiny corrections, one of
/// them 0) rounded once but for a few hundredths of an ulp: `k_hi + b` is split exactly into
/// `hi + lo` (Fast2Sum: `|b| <= |k_hi|`, or `k_hi = 0`); the tail (up to 9% of the result) is
/// summed onto `k_lo + b_lo + lo` by fmas, with `b z` split exactly into `bz + bz_lo` and the
/// corrections' first-order terms added to `bz_lo`, its largest part `bz Q[0]` last, so the
/// tail carries one rounding of its size and smaller ones of its parts; `hi` is added to it
/// rounded once.
fn asin_sum_f32<O: MathOps32>(
    o: &mut O,
    k: (O::S, O::S),
    b: (O::S, O::S),
    z: (O::S, O::S),
) -> O::S {
    let ((k_hi, k_lo), (b, b_lo), (z, z_lo)) = (k, b, z);
    let hi = o.add32(k_hi, b);
    let d = o.sub32(k_hi, hi);
    let lo = o.add32(d, b);
    let k = o.add32(k_lo, b_lo);
    let k = o.add32(k, lo);
    let bz = o.mul32(b, z);
    let nbz = o.neg32(bz);
    let bz_lo = o.fma32(b, z, nbz);
    let bz_lo = o.fma32(b_lo, z, bz_lo);
    let bz_lo = o.fma32(b, z_lo, bz_lo);
    // (Q(z) - Q[0]) / z = Q[1] + Q[2] z + ..
    let mut q = o.c32(ASIN_Q[ASIN_Q.len() - 1]);
    for &c in ASIN_Q[1..ASIN_Q.len() - 1].iter().rev() {
        let c = o.c32(c);
        q = o.fma32(q, z, c);
    }
    // (bz + bz_lo) z: b_lo is up to 2^-17 of b, too much to leave out of any part of the tail.
    let bzz = o.mul32(bz, z);
    let bzz = o.fma32(bz_lo, z, bzz);
    let small = o.fma32(bzz, q, k);
    let q0 = o.c32(ASIN_Q[0]);
    let small = o.fma32(bz_lo, q0, small);
    let small = o.fma32(bz, q0, small);
    o.add32(hi, small)
}

/// NaN where `|x| > 1` (infinities included); a NaN `x` stays NaN through the arithmetic.
fn asin_domain_f32<O: MathOps32>(o: &mut O, a: O::S, r: O::S) -> O::S {
    let one = o.c32(1.0);
    let out = o.gt32(a, one);
    let nan = o.c32(f32::NAN);
    o.sel32(out, nan, r)
}

/// `asin x` in f32 arithmetic (tegula-ir's `tests/asin_f32.rs` measures it over every f32;
/// docs/semantics.md has the bound). `|x| <= 1/2`: `a (1 + z Q(z))` for `a = |x|`,
/// `z = a^2`; `|x| > 1/2`: `pi/2 - 2 s (1 + z Q(z))` for `s = sqrt z`, `z = (1 - a) / 2`; the
/// sign of `x` copied onto the result.
fn asin_f32<O: MathOps32>(o: &mut O, x: O::S) -> O::S {
    let a = o.abs32(x);
    let AsinReduced {
        far,
        z,
        z_lo,
        s0,
        ey,
    } = asin_reduce_f32(o, a);
    let zero = o.c32(0.0);
    let (pio2_hi, pio2_lo) = (o.c32(PIO2_HI_F32), o.c32(PIO2_LO_F32));
    let k_hi = o.sel32(far, pio2_hi, zero);
    let k_lo = o.sel32(far, pio2_lo, zero);
    let ntwo = o.c32(-2.0);
    let far_b = o.mul32(s0, ntwo);
    let b = o.sel32(far, far_b, a);
    let far_b_lo = o.neg32(ey);
    let b_lo = o.sel32(far, far_b_lo, zero);
    let r = asin_sum_f32(o, (k_hi, k_lo), (b, b_lo), (z, z_lo));
    let r = asin_domain_f32(o, a, r);
    // |r| with the sign bit of x (-0 stays -0; a NaN stays a NaN).
    let (br, bx) = (o.bits32(r), o.bits32(x));
    let (mag, sign) = (o.ci32(i32::MAX), o.ci32(i32::MIN));
    let (mr, sx) = (o.iand32(br, mag), o.iand32(bx, sign));
    let rb = o.ior32(mr, sx);
    o.of_bits32(rb)
}

/// `acos x` in f32 arithmetic (measured as `asin_f32`). `|x| <= 1/2`: `pi/2 - x (1 + z Q(z))`
/// for `z = x^2`; `x > 1/2`: `2 s (1 + z Q(z))` and `x < -1/2`: `pi - 2 s (1 + z Q(z))`, for
/// `s = sqrt z`, `z = (1 - |x|) / 2`.
fn acos_f32<O: MathOps32>(o: &mut O, x: O::S) -> O::S {
    let a = o.abs32(x);
    let AsinReduced {
        far,
        z,
        z_lo,
        s0,
        ey,
    } = asin_reduce_f32(o, a);
    let zero = o.c32(0.0);
    let neg = o.lt32(x, zero);
    let (one, none) = (o.c32(1.0), o.c32(-1.0));
    let g = o.sel32(neg, none, one);
    let two = o.c32(2.0);
    let s2 = o.mul32(s0, two);
    let far_b = o.mul32(s2, g);
    let far_b_lo = o.mul32(ey, g);
    let (pi_hi, pi_lo) = (o.c32(PI_HI_F32), o.c32(PI_LO_F32));
    let far_hi = o.sel32(neg, pi_hi, zero);
    let far_lo = o.sel32(neg, pi_lo, zero);
    let (pio2_hi, pio2_lo) = (o.c32(PIO2_HI_F32), o.c32(PIO2_LO_F32));
    let k_hi = o.sel32(far, far_hi, pio2_hi);
    let k_lo = o.sel32(far, far_lo, pio2_lo);
    let nx = o.neg32(x);
    let b = o.sel32(far, far_b, nx);
    let b_lo = o.sel32(far, far_b_lo, zero);
    let r = asin_sum_f32(o, (k_hi, k_lo), (b, b_lo), (z, z_lo));
    asin_domain_f32(o, a, r)
}

fn sinh<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    let em = expm1_core(o, a);
    // sinh a = (e^a - e^-a) / 2 = (em + em / (em + 1)) / 2.
    let den = addc(o, em, 1.0);
    let q = o.div(em, den);
    let s = o.add(em, q);
    let s = mulc(o, s, 0.5);
    copysign(o, s, x)
}

fn cosh<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    let e = exp_core(o, a);
    let one = o.c(1.0);
    let inv = o.div(one, e);
    let s = o.add(e, inv);
    mulc(o, s, 0.5)
}

fn asinh<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    let a2 = o.mul(a, a);
    let one = o.c(1.0);
    let w = o.add(a2, one);
    let w = o.sqrt(w);
    // a < 1: log1p(a + a^2 / (1 + sqrt(1 + a^2))); else log(a + sqrt(a^2 + 1)).
    let den = o.add(w, one);
    let q = o.div(a2, den);
    let arg = o.add(a, q);
    let near = log1p_core(o, arg);
    let far_arg = o.add(a, w);
    let far = log_core(o, far_arg);
    let small = o.lt(a, one);
    let r = o.sel(small, near, far);
    copysign(o, r, x)
}

fn acosh<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let one = o.c(1.0);
    let t = o.sub(x, one);
    // x < 2: log1p(t + sqrt(2t + t^2)); else log(x + sqrt(x^2 - 1)).
    let two_t = o.add(t, t);
    let w = o.fma(t, t, two_t);
    let w = o.sqrt(w);
    let arg = o.add(t, w);
    let near = log1p_core(o, arg);
    let nx = o.neg(one);
    let v = o.fma(x, x, nx);
    let v = o.sqrt(v);
    let far_arg = o.add(x, v);
    let far = log_core(o, far_arg);
    let two = o.c(2.0);
    let small = o.lt(x, two);
    let r = o.sel(small, near, far);
    let below = o.lt(x, one);
    let nan = o.c(f64::NAN);
    o.sel(below, nan, r)
}

fn atanh<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    let one = o.c(1.0);
    let d = o.sub(one, a);
    let a2 = o.add(a, a);
    let q = o.div(a2, d);
    let l = log1p_core(o, q);
    let r = mulc(o, l, 0.5);
    copysign(o, r, x)
}

fn log1p<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    log1p_core(o, x)
}

fn expm1<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    expm1_core(o, x)
}

/// `x^y` with C99's (IEEE 754's `pow`) special values: `pow(x, 0) = 1` and `pow(1, y) = 1`
/// even for NaN, a negative `x` needs an integer `y`, and the sign of an odd power is kept.
fn pow<O: MathOps>(o: &mut O, x: O::F, y: O::F) -> O::F {
    let ax = o.abs(x);
    let l = log_core(o, ax);
    let z = o.mul(y, l);
    let r = exp_core(o, z);
    let yt = o.trunc(y);
    let y_int = o.eq(yt, y);
    let hy = mulc(o, y, 0.5);
    let hyt = o.trunc(hy);
    let half_int = o.eq(hyt, hy);
    let not_half = o.not(half_int);
    let y_odd = o.and(y_int, not_half);
    // An odd power of a negative base (or -0, -inf) is negative.
    let xs = signbit(o, x);
    let flip = o.and(xs, y_odd);
    let nr = o.neg(r);
    let r = o.sel(flip, nr, r);
    let zero = o.c(0.0);
    let xneg = o.lt(x, zero);
    let not_int = o.not(y_int);
    let bad = o.and(xneg, not_int);
    let xinf = isinf(o, x);
    let xfin = o.not(xinf);
    let bad = o.and(bad, xfin);
    let nan = o.c(f64::NAN);
    let r = o.sel(bad, nan, r);
    // pow(-1, +-inf) = 1, pow(1, y) = 1, pow(x, +-0) = 1.
    let one = o.c(1.0);
    let m1 = o.c(-1.0);
    let xm1 = o.eq(x, m1);
    let yinf = isinf(o, y);
    let m1inf = o.and(xm1, yinf);
    let r = o.sel(m1inf, one, r);
    let x1 = o.eq(x, one);
    let r = o.sel(x1, one, r);
    let y0 = o.eq(y, zero);
    o.sel(y0, one, r)
}

fn hypot<O: MathOps>(o: &mut O, x: O::F, y: O::F) -> O::F {
    // Squares of f32 values are exact in f64; one rounding of the sum, one of the root.
    let yy = o.mul(y, y);
    let s = o.fma(x, x, yy);
    let r = o.sqrt(s);
    // An infinite side gives +inf even when the other is NaN.
    let (xi, yi) = (isinf(o, x), isinf(o, y));
    let i = o.or(xi, yi);
    let inf = o.c(f64::INFINITY);
    o.sel(i, inf, r)
}

fn cbrt<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    // A 5-bit first guess from the exponent: the high word divided by 3 (as a product by
    // 0xAAAAAAAB, >> 33) plus a bias (FreeBSD's cbrt), then Newton's y = (2y + a / y^2) / 3.
    let b = o.bits(a);
    let hx = o.shr(b, 32);
    let magic = o.ci(0xAAAA_AAAB);
    let q = o.imul(hx, magic);
    let q = o.shr(q, 33);
    let bias = o.ci(715_094_163);
    let t = o.iadd(q, bias);
    let t = o.shl(t, 32);
    let mut y = o.of_bits(t);
    let third = o.c(1.0 / 3.0);
    for _ in 0..5 {
        let y2 = o.mul(y, y);
        let q = o.div(a, y2);
        let s = o.add(y, y);
        let s = o.add(s, q);
        y = o.mul(s, third);
    }
    // 0, inf and NaN are their own cube roots.
    let zero = o.c(0.0);
    let z = o.eq(a, zero);
    let i = isinf(o, a);
    let n = o.isnan(a);
    let own = o.or(z, i);
    let own = o.or(own, n);
    let y = o.sel(own, a, y);
    copysign(o, y, x)
}

/// The inverse error function: Giles' single-precision approximation ("Approximating the erfinv
/// function", GPU Computing Gems, 2011), evaluated in f64. A few ulp in f32.
fn erfinv<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let nx = o.neg(x);
    let one = o.c(1.0);
    let d = o.fma(nx, x, one);
    let l = log_core(o, d);
    let w = o.neg(l);
    let five = o.c(5.0);
    let central = o.lt(w, five);
    let wc = addc(o, w, -2.5);
    let pc = horner(o, wc, &GILES_CENTRAL);
    let ws = o.sqrt(w);
    let wt = addc(o, ws, -3.0);
    let pt = horner(o, wt, &GILES_TAIL);
    let p = o.sel(central, pc, pt);
    let r = o.mul(p, x);
    // erfinv(+-1) = +-inf (the tail polynomial at w = inf is not).
    let ax = o.abs(x);
    let at1 = o.eq(ax, one);
    let inf = o.c(f64::INFINITY);
    let sinf = copysign(o, inf, x);
    o.sel(at1, sinf, r)
}

/// `(hi + lo) * pi / 2` as one f64: the double-double `hi + lo` times pi/2 in two parts, the
/// high product's rounding error recovered with an fma (tan's and the Bessel phases'
/// reduction).
fn times_half_pi<O: MathOps>(o: &mut O, hi: O::F, lo: O::F) -> O::F {
    let (ph, pl) = (o.c(FRAC_PI_2), o.c(FRAC_PI_2_LO));
    let yh = o.mul(hi, ph);
    let nyh = o.neg(yh);
    let ye = o.fma(hi, ph, nyh);
    let t = o.mul(lo, ph);
    let t = o.fma(hi, pl, t);
    let t = o.add(ye, t);
    o.add(yh, t)
}

/// `a + b` as `(s, e)`: `s` the rounded sum, `e` its rounding error exactly (Knuth's TwoSum,
/// for operands of any magnitudes).
fn two_sum<O: MathOps>(o: &mut O, a: O::F, b: O::F) -> (O::F, O::F) {
    let s = o.add(a, b);
    let bb = o.sub(s, a);
    let ab = o.sub(s, bb);
    let da = o.sub(a, ab);
    let db = o.sub(b, bb);
    (s, o.add(da, db))
}

/// The first 232 bits of 2/pi in pieces of 29 bits, so that an f32 (24 bits) times a piece
/// is exact in f64.
const TWO_OVER_PI: [f64; 8] = [
    f64::from_bits(0x3FE4_5F30_6D00_0000),
    f64::from_bits(0x3E19_3910_5400_0000),
    f64::from_bits(0x3C44_FE13_AB00_0000),
    f64::from_bits(0x3A7D_1F53_4D00_0000),
    f64::from_bits(0x38AB_81B6_C500_0000),
    f64::from_bits(0x36B5_993C_4000_0000),
    f64::from_bits(0x350C_820F_F200_0000),
    f64::from_bits(0x3331_63AB_DE00_0000),
];
/// pi/2 - FRAC_PI_2.
const FRAC_PI_2_LO: f64 = f64::from_bits(0x3C91_A626_3314_5C07);

/// `tan x` for every f32 `x`, huge ones included (Payne and Hanek's reduction with the
/// product of `x` and 2/pi split into exact pieces).
fn tan<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    // a * 2/pi mod 2 as a double-double: each exact product p = a * piece is reduced mod 2
    // exactly (p - 2 rint(p / 2)); the leading pieces of a large `a` give multiples of 2, so 0,
    // and what the pieces leave out is below 2^-100. The sum then has an absolute error near
    // 2^-96, where a * 2/pi of an f32 a >= 1/2 is never closer to an integer than 2^-29.86
    // (at 16367173 * 2^72, found by a search over every f32).
    let (half, m2) = (o.c(0.5), o.c(-2.0));
    let (mut hi, mut lo) = (o.c(0.0), o.c(0.0));
    for &c in &TWO_OVER_PI {
        let p = mulc(o, a, c);
        let h = o.mul(p, half);
        let k = o.rint(h);
        let f = o.fma(m2, k, p);
        let (s, e) = two_sum(o, hi, f);
        hi = s;
        lo = o.add(lo, e);
    }
    // a * 2/pi = n + r with |r| <= 1/2; tan a = tan(r pi/2) for even n, -1 / tan(r pi/2) odd.
    let n = o.rint(hi);
    let r0 = o.sub(hi, n);
    let (rh, rl) = two_sum(o, r0, lo);
    let y = times_half_pi(o, rh, rl);
    // sin y and cos y by Taylor series: for |y| <= pi/4 the first terms left out are below
    // 2^-55 of the sums.
    let y2 = o.mul(y, y);
    let sp = horner(o, y2, &sin_coefficients(10));
    let sn = o.mul(y, sp);
    let cs = horner(o, y2, &cos_coefficients(10));
    let even_t = o.div(sn, cs);
    let ncs = o.neg(cs);
    let odd_t = o.div(ncs, sn);
    let hn = o.mul(n, half);
    let hnt = o.trunc(hn);
    let even = o.eq(hnt, hn);
    let r = o.sel(even, even_t, odd_t);
    // tan is odd; -0 stays -0.
    let neg = signbit(o, x);
    let nr = o.neg(r);
    o.sel(neg, nr, r)
}

fn log10<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let l = log_core(o, x);
    mulc(o, l, std::f64::consts::LOG10_E)
}

/// ln 10 - LN_10.
const LN_10_LO: f64 = f64::from_bits(0xBCAF_48AD_494E_A3E9);

fn exp10<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    // Past +-64 the f32 result is inf or 0 anyway; the clamp keeps the correction finite.
    let (hi, lo) = (o.c(64.0), o.c(-64.0));
    let big = o.gt(x, hi);
    let x = o.sel(big, hi, x);
    let small = o.lt(x, lo);
    let x = o.sel(small, lo, x);
    // 10^x = e^z (1 + c) with z = fl(x ln 10) and c the rest of x ln 10: the product's
    // rounding error (exact by fma) and x times ln 10's own.
    let l = o.c(std::f64::consts::LN_10);
    let z = o.mul(x, l);
    let nz = o.neg(z);
    let ze = o.fma(x, l, nz);
    let ll = o.c(LN_10_LO);
    let c = o.fma(x, ll, ze);
    let e = exp_core(o, z);
    o.fma(e, c, e)
}

/// `exp(x^2) erfc(x)` for x in [0, 12] as a polynomial in t = (x - 4) / (x + 4), t in
/// [-1, 1/2]: the degree-21 Chebyshev fit of mpmath's chebyfit (40 digits), relative error
/// below 2^-56 on the range (after Schonfelder's and Shepherd and Laframboise's change of
/// variable).
const ERFCX: [f64; 22] = [
    0.13699945762506138,
    -0.25906804876017164,
    0.21871967891826483,
    -0.16425781669730746,
    0.1089631773989127,
    -0.0631078156398119,
    0.031299056518379526,
    -0.012843946029956147,
    0.0040602636302304795,
    -0.0007991268248951075,
    -2.1761792703976167e-05,
    7.898319699924516e-05,
    -2.2555585110524623e-05,
    -1.90285260566691e-06,
    2.9430858196431154e-06,
    -4.1123075436923865e-07,
    -2.8257345399536133e-07,
    1.0262865983313511e-07,
    2.852987674533507e-08,
    -2.0198719934010692e-08,
    -9.280174423817232e-09,
    -1.116334478633023e-09,
];

/// `1 / cbrt(x)`: the f64 cube root and one f64 division, each within an f64 ulp, so the
/// f32 result is rounded once (+-inf at +-0, +-0 at +-inf).
fn rcbrt<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let c = cbrt(o, x);
    let one = o.c(1.0);
    o.div(one, c)
}

/// The standard normal distribution function `erfc(-x / sqrt 2) / 2`: `erfc` keeps its
/// relative error in the left tail, where `(1 + erf(x / sqrt 2)) / 2` would cancel to 0. The
/// f64 product `x / sqrt 2` is off by one f64 rounding, which moves erfc by a relative
/// `2 x^2 2^-53`, far below an f32 ulp for every `|x|` where the f32 result is not 0 or 1.
fn normcdf<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let t = mulc(o, x, -std::f64::consts::FRAC_1_SQRT_2);
    let e = erfc(o, t);
    mulc(o, e, 0.5)
}

/// `erfc x = 1 - erf x`, with a small relative error in the tail (where `1 - erf x` would be
/// all cancellation): `exp(-x^2)` times the fit of `exp(x^2) erfc(x)`, and `2 - erfc(-x)` for
/// negative `x`.
fn erfc<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    // erfc(12) is far below the smallest f32; NaN passes the clamp.
    let top = o.c(12.0);
    let big = o.gt(a, top);
    let a = o.sel(big, top, a);
    let num = addc(o, a, -4.0);
    let den = addc(o, a, 4.0);
    let t = o.div(num, den);
    let g = horner(o, t, &ERFCX);
    // a^2 is exact (a has 24 bits).
    let a2 = o.mul(a, a);
    let na2 = o.neg(a2);
    let e = exp_core(o, na2);
    let r = o.mul(e, g);
    let two = o.c(2.0);
    let flipped = o.sub(two, r);
    let zero = o.c(0.0);
    let neg = o.lt(x, zero);
    o.sel(neg, flipped, r)
}

/// Taylor coefficients of `sin(t) / t` in `t^2`: `(-1)^k / (2k + 1)!` for k < `len`.
fn sin_coefficients(len: usize) -> Vec<f64> {
    let f = inv_factorials(2 * len);
    (0..len)
        .map(|k| {
            if k % 2 == 0 {
                f[2 * k + 1]
            } else {
                -f[2 * k + 1]
            }
        })
        .collect()
}

/// Taylor coefficients of `cos(t)` in `t^2`: `(-1)^k / (2k)!` for k < `len`.
fn cos_coefficients(len: usize) -> Vec<f64> {
    let f = inv_factorials(2 * len);
    (0..len)
        .map(|k| if k % 2 == 0 { f[2 * k] } else { -f[2 * k] })
        .collect()
}

/// `sin(pi x)` for an f32 `x`, reduced exactly: +-0 at the integers, a relative error near
/// 2^-52 elsewhere.
fn sinpi<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    // r = x - 2 rint(x / 2) in [-1, 1] is exact, and so is 1 - |r| for |r| > 1/2:
    // |sin(pi r)| = sin(pi d) with d in [0, 1/2].
    let half = o.c(0.5);
    let h = o.mul(x, half);
    let k = o.rint(h);
    let m2 = o.c(-2.0);
    let r = o.fma(m2, k, x);
    let ar = o.abs(r);
    let far = o.gt(ar, half);
    let one = o.c(1.0);
    let fr = o.sub(one, ar);
    let d = o.sel(far, fr, ar);
    let t = mulc(o, d, PI);
    // pi/2 at most: the 13th term is below 2^-60 of the sum.
    let t2 = o.mul(t, t);
    let p = horner(o, t2, &sin_coefficients(12));
    let s = o.mul(t, p);
    copysign(o, s, r)
}

/// `lgamma(2 + w) / w` for w in [-1/2, 1/2]: the degree-18 Chebyshev fit of mpmath's chebyfit
/// (40 digits), relative error below 2^-58 (the Taylor series, whose coefficients these
/// approach, needs 26 terms for as much).
const LGAMMA2: [f64; 19] = [
    0.42278433509846713,
    0.32246703342411326,
    -0.0673523010531981,
    0.02058080842778038,
    -0.0073855510286719986,
    0.002890510331034267,
    -0.0011927539118428156,
    0.0005096695154115458,
    -0.00022315475400520507,
    9.945767355819498e-05,
    -4.49263133791557e-05,
    2.0505590755833454e-05,
    -9.438715099211532e-06,
    4.38470440459836e-06,
    -2.0439048107029907e-06,
    9.200527894968101e-07,
    -4.3252393445604814e-07,
    2.78740805211359e-07,
    -1.3219945666117874e-07,
];

/// `log(2 pi) / 2`.
const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;
/// `log(pi)`.
const LN_PI: f64 = 1.144_729_885_849_400_2;

/// `lgamma a` for `a >= 0` (+inf at 0 and inf, NaN for NaN), with a relative error near 2^-52.
fn lgamma_pos<O: MathOps>(o: &mut O, a: O::F) -> O::F {
    // a >= 8: Stirling's series, (a - 1/2)(log a - 1) - 1/2 + log(2 pi)/2 plus
    // sum B_2k / (2k (2k - 1) a^(2k - 1)) for k <= 9 (the 10th term is below 2^-59 of the sum).
    // Below: a = z + k with z in [1.5, 2.5) and k <= 6 integer, lgamma a = lgamma z +
    // log(z (z + 1) .. (z + k - 1)); below 1.5, lgamma a = lgamma(a + 1) - log a (and again
    // below 1/2). lgamma(2 + w) = w P(w) near its zeros at 1 and 2 keeps the relative error.
    let eight = o.c(8.0);
    let below8 = o.lt(a, eight);
    let big = o.not(below8);
    let (c05, c15) = (o.c(0.5), o.c(1.5));
    let lt05 = o.lt(a, c05);
    let lt15 = o.lt(a, c15);
    let zero = o.c(0.0);
    let am15 = o.sub(a, c15);
    let kt = o.trunc(am15);
    let k = o.sel(lt15, zero, kt);
    let z = o.sub(a, k);
    let one = o.c(1.0);
    let mut q = one;
    for i in 0..6 {
        let ci = o.c(i as f64);
        let used = o.lt(ci, k);
        let zi = addc(o, z, i as f64);
        let f = o.sel(used, zi, one);
        q = o.mul(q, f);
    }
    let am1 = addc(o, a, -1.0);
    let zm2 = addc(o, z, -2.0);
    let w = o.sel(lt15, am1, zm2);
    let w = o.sel(lt05, a, w);
    let p = horner(o, w, &LGAMMA2);
    let core = o.mul(w, p);
    // One logarithm serves every range: log a (Stirling, and 1/2 <= a < 1.5), log(a + a^2)
    // below 1/2, log of the product above 1.5.
    let aa = o.fma(a, a, a);
    let arg = o.sel(lt15, a, q);
    let arg = o.sel(lt05, aa, arg);
    let arg = o.sel(big, a, arg);
    let l = log_core(o, arg);
    let down = o.sub(core, l);
    let up = o.add(core, l);
    let small = o.sel(lt15, down, up);
    let inv = o.div(one, a);
    let u = o.mul(inv, inv);
    let st: Vec<f64> = [
        (1.0, 12.0),
        (-1.0, 360.0),
        (1.0, 1260.0),
        (-1.0, 1680.0),
        (1.0, 1188.0),
        (-691.0, 360_360.0),
        (1.0, 156.0),
        (-3617.0, 122_400.0),
        (43867.0, 244_188.0),
    ]
    .iter()
    .map(|(n, d)| n / d)
    .collect();
    let series = horner(o, u, &st);
    let series = o.mul(inv, series);
    let lm1 = addc(o, l, -1.0);
    let ah = o.sub(a, c05);
    let c = o.c(HALF_LN_2PI - 0.5);
    let main = o.fma(ah, lm1, c);
    let stirling = o.add(main, series);
    o.sel(big, stirling, small)
}

/// `log |gamma x|`: +inf at the poles (0 and the negative integers) and at +-inf. Negative
/// `x` by reflection, `log(pi / |x sin(pi x)|) - lgamma(-x)`, which cancels near the zeros
/// between -10 and -2.
fn lgamma<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    let lp = lgamma_pos(o, a);
    let s = sinpi(o, x);
    let sa = o.abs(s);
    let p = o.mul(a, sa);
    let lq = log_core(o, p);
    let ln_pi = o.c(LN_PI);
    let t = o.sub(ln_pi, lq);
    let reflected = o.sub(t, lp);
    let zero = o.c(0.0);
    let neg = o.lt(x, zero);
    let r = o.sel(neg, reflected, lp);
    // sin(pi x) is NaN at -inf.
    let i = isinf(o, x);
    let inf = o.c(f64::INFINITY);
    o.sel(i, inf, r)
}

/// `gamma x`: `exp(lgamma x)` for `x > 0`, `-pi / (x sin(pi x) gamma(-x))` below; +-inf at
/// +-0, NaN at the negative integers and -inf.
fn tgamma<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    let lp = lgamma_pos(o, a);
    // exp_core saturates at e^200, past f32's range, and 1 / e^200 is far below it.
    let g = exp_core(o, lp);
    let s = sinpi(o, x);
    let xs = o.mul(x, s);
    let d = o.mul(xs, g);
    let mpi = o.c(-PI);
    let reflected = o.div(mpi, d);
    let zero = o.c(0.0);
    let neg = o.lt(x, zero);
    let r = o.sel(neg, reflected, g);
    let xt = o.trunc(x);
    let int = o.eq(xt, x);
    let pole = o.and(neg, int);
    let nan = o.c(f64::NAN);
    let r = o.sel(pole, nan, r);
    let x0 = o.eq(x, zero);
    let inf = o.c(f64::INFINITY);
    let sinf = copysign(o, inf, x);
    o.sel(x0, sinf, r)
}

/// `sin(pi x)` with IEEE 754's signs at the integers: `sinpi(+n) = +0`, `sinpi(-n) = -0`
/// (`sinpi` alone gives `+-0` by the parity of `n`), `+-0` at `+-0`, NaN at `+-inf`.
fn sinpi_signed<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let s = sinpi(o, x);
    let zero = o.c(0.0);
    let z = o.eq(s, zero);
    let sz = copysign(o, zero, x);
    o.sel(z, sz, s)
}

/// `cos(pi x)` for an f32 `x`, reduced exactly: `r = x - 2 rint(x / 2)` in [-1, 1] and
/// `a = |r|`; `cos(pi a)` for `a <= 1/4`, `sin(pi (1/2 - a))` for `1/4 < a <= 3/4` and
/// `-cos(pi (1 - a))` above (`1/2 - a` and `1 - a` exact there), each a Taylor series on
/// `|t| <= pi/4`. `+0` at the half-integers (IEEE 754's `cosPi(n + 1/2)`), 1 at `+-0`, NaN at
/// `+-inf`; a relative error near 2^-52.
fn cospi<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let half = o.c(0.5);
    let h = o.mul(x, half);
    let k = o.rint(h);
    let m2 = o.c(-2.0);
    let r = o.fma(m2, k, x);
    let a = o.abs(r);
    let (q1, q3) = (o.c(0.25), o.c(0.75));
    let above_q1 = o.gt(a, q1);
    let hi = o.gt(a, q3);
    let not_hi = o.not(hi);
    let mid = o.and(above_q1, not_hi);
    let one = o.c(1.0);
    let d_hi = o.sub(one, a);
    let dc = o.sel(hi, d_hi, a);
    let tc = mulc(o, dc, PI);
    let tc2 = o.mul(tc, tc);
    let c = horner(o, tc2, &cos_coefficients(11));
    let nc = o.neg(c);
    let c = o.sel(hi, nc, c);
    let d_mid = o.sub(half, a);
    let ts = mulc(o, d_mid, PI);
    let ts2 = o.mul(ts, ts);
    let sp = horner(o, ts2, &sin_coefficients(11));
    let s = o.mul(ts, sp);
    o.sel(mid, s, c)
}

/// `1 / sqrt(x^2 + y^2)` (`libdevice.rhypot`): the squares exact in f64, one rounding of
/// their sum, of the root and of the quotient; +0 when either side is infinite (even when
/// the other is NaN, as `hypot` is +inf there), +inf at `(+-0, +-0)`.
fn rhypot<O: MathOps>(o: &mut O, x: O::F, y: O::F) -> O::F {
    let yy = o.mul(y, y);
    let s = o.fma(x, x, yy);
    let h = o.sqrt(s);
    let one = o.c(1.0);
    let r = o.div(one, h);
    let (xi, yi) = (isinf(o, x), isinf(o, y));
    let i = o.or(xi, yi);
    let zero = o.c(0.0);
    o.sel(i, zero, r)
}

/// IEEE 754's `remainder(x, y) = x - n y` with `n` the nearest integer to `x / y`, halfway
/// cases to even; exact (the result is an f32). `|x|` is reduced by `|y| 2^e` in six steps,
/// each with `e` chosen so that the quotient is below 2^51 (`trunc` of the rounded f64
/// quotient is then the true one or one too large, which the step corrects, and the fma is
/// exact): f32 exponents differ by at most 276, and each step takes 50 of them off. The
/// parity of `n` is the sum of the quotients of the steps with `e = 0`. The result takes the
/// sign of `x` (`-0` for a negative `x` that is a multiple of `y`); NaN when `y` is 0 or `x`
/// infinite or either NaN, `x` when `y` is infinite and `x` finite.
/// `|x| mod |y|` in `[0, |y|)`, exactly, and the parity of the quotient (as a float whose
/// halving is an integer or not): `|x|` reduced by `|y| 2^e` in six steps of an exact fma,
/// each taking up to 50 bits of the quotient, enough for any two f32 values widened to f64.
fn abs_mod<O: MathOps>(o: &mut O, x: O::F, y: O::F) -> (O::F, O::F) {
    let a = o.abs(x);
    let b = o.abs(y);
    let bb = o.bits(b);
    let eb = o.shr(bb, 52);
    let zero = o.c(0.0);
    let one = o.c(1.0);
    let mut r = a;
    let mut parity = zero;
    for _ in 0..6 {
        let rb = o.bits(r);
        let er = o.shr(rb, 52);
        let d = o.isub(er, eb);
        let c50 = o.ci(50);
        let d = o.isub(d, c50);
        // max(d, 0) without a comparison: d & !(d >> 63).
        let m = o.sar(d, 63);
        let all = o.ci(-1);
        let nm = o.isub(all, m);
        let e = o.iand(d, nm);
        let es = o.shl(e, 52);
        let yb = o.iadd(bb, es);
        let ys = o.of_bits(yb);
        let q = o.div(r, ys);
        let n = o.trunc(q);
        let nn = o.neg(n);
        let r1 = o.fma(nn, ys, r);
        let low = o.lt(r1, zero);
        let up = o.add(r1, ys);
        r = o.sel(low, up, r1);
        let n1 = o.sub(n, one);
        let n = o.sel(low, n1, n);
        let unscaled = o.eq(ys, b);
        let p = o.add(parity, n);
        parity = o.sel(unscaled, p, parity);
    }
    (r, parity)
}

/// NaN where `y` is 0 or `x` infinite or either NaN, `x` where `y` is infinite, else `r`
/// (C's rules for `remainder` and `fmod`).
fn remainder_specials<O: MathOps>(o: &mut O, x: O::F, y: O::F, r: O::F) -> O::F {
    let yinf = isinf(o, y);
    let r = o.sel(yinf, x, r);
    let b = o.abs(y);
    let zero = o.c(0.0);
    let y0 = o.eq(b, zero);
    let xinf = isinf(o, x);
    let (xn, yn) = (o.isnan(x), o.isnan(y));
    let bad = o.or(y0, xinf);
    let bad = o.or(bad, xn);
    let bad = o.or(bad, yn);
    let nan = o.c(f64::NAN);
    o.sel(bad, nan, r)
}

fn remainder<O: MathOps>(o: &mut O, x: O::F, y: O::F) -> O::F {
    let (r, parity) = abs_mod(o, x, y);
    let b = o.abs(y);
    // r = |x| mod |y| in [0, |y|); past |y| / 2, or at it with an odd quotient, r - |y|.
    let r2 = o.add(r, r);
    let past = o.gt(r2, b);
    let tie = o.eq(r2, b);
    let hp = mulc(o, parity, 0.5);
    let hpt = o.trunc(hp);
    let even = o.eq(hpt, hp);
    let odd = o.not(even);
    let tie_odd = o.and(tie, odd);
    let down = o.or(past, tie_odd);
    let rd = o.sub(r, b);
    let r = o.sel(down, rd, r);
    let xneg = signbit(o, x);
    let nr = o.neg(r);
    let r = o.sel(xneg, nr, r);
    remainder_specials(o, x, y, r)
}

/// C's `fmod`: `x - trunc(x / y) y`, exactly, with the sign of `x` (a zero result too).
fn fmod<O: MathOps>(o: &mut O, x: O::F, y: O::F) -> O::F {
    let (r, _) = abs_mod(o, x, y);
    let xneg = signbit(o, x);
    let nr = o.neg(r);
    let r = o.sel(xneg, nr, r);
    remainder_specials(o, x, y, r)
}

/// `1 / sqrt(pi)`.
const FRAC_1_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI / 2.0;

/// `exp(a^2) erfc(a)` for `a >= 0` (NaN for NaN, 0 at +inf): `ERFCX` for `a <= 12`, above the
/// asymptotic series `(1 / (a sqrt pi)) sum_k (-1)^k (2k - 1)!! / (2 a^2)^k` to k = 11, whose
/// first term left out is below 2^-59 of the sum at 12. Relative error near 2^-52; no `exp`.
fn erfcx_pos<O: MathOps>(o: &mut O, a: O::F) -> O::F {
    let top = o.c(12.0);
    let big = o.gt(a, top);
    let ac = o.sel(big, top, a);
    let num = addc(o, ac, -4.0);
    let den = addc(o, ac, 4.0);
    let t = o.div(num, den);
    let g = horner(o, t, &ERFCX);
    let ab = o.sel(big, a, top);
    let one = o.c(1.0);
    let inv = o.div(one, ab);
    let inv2 = o.mul(inv, inv);
    let u = mulc(o, inv2, 0.5);
    let mut c = Vec::new();
    let mut f = 1.0f64;
    for k in 0..12 {
        if k > 0 {
            f *= (2 * k - 1) as f64;
        }
        c.push(if k % 2 == 0 { f } else { -f });
    }
    let p = horner(o, u, &c);
    let w = mulc(o, inv, FRAC_1_SQRT_PI);
    let asym = o.mul(w, p);
    o.sel(big, asym, g)
}

/// `exp(x^2)` for an `x` of any precision: `exp(hi) (1 + lo)` with `x^2 = hi + lo` split
/// exactly by an fma (`exp_core` saturates past `x^2 = 200`).
fn exp_sq<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let hi = o.mul(x, x);
    let nhi = o.neg(hi);
    let lo = o.fma(x, x, nhi);
    let e = exp_core(o, hi);
    o.fma(e, lo, e)
}

/// The scaled complementary error function `exp(x^2) erfc(x)` (`libdevice.erfcx`):
/// `erfcx_pos` for `x >= 0`, `2 exp(x^2) - erfcx(-x)` below (no cancellation: the first term
/// is at least twice the second). 1 at `+-0`, +0 at +inf, +inf at -inf and below about -9.38
/// (where `exp(x^2)` overflows f32; `x` is clamped to -20 there).
fn erfcx<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let a = o.abs(x);
    let g = erfcx_pos(o, a);
    // Past -20 the f32 result is +inf anyway; the clamp keeps exp(x^2)'s split finite.
    let m20 = o.c(-20.0);
    let far = o.lt(x, m20);
    let xc = o.sel(far, m20, x);
    let e = exp_sq(o, xc);
    let e2 = o.add(e, e);
    let flipped = o.sub(e2, g);
    let zero = o.c(0.0);
    let neg = o.lt(x, zero);
    o.sel(neg, flipped, g)
}

/// `erf x` for `|x| <= 1/2`: the Maclaurin series
/// `(2 / sqrt pi) sum_n (-1)^n x^(2n + 1) / (n! (2n + 1))` to n = 14 (the next term is below
/// 2^-66 of the sum).
fn erf_small<O: MathOps>(o: &mut O, x: O::F) -> O::F {
    let f = inv_factorials(15);
    let c: Vec<f64> = (0..15)
        .map(|n| {
            let v = std::f64::consts::FRAC_2_SQRT_PI * f[n] / (2 * n + 1) as f64;
            if n % 2 == 0 {
                v
            } else {
                -v
            }
        })
        .collect();
    let x2 = o.mul(x, x);
    let p = horner(o, x2, &c);
    o.mul(x, p)
}

/// `erfcinv s` for `s` in (0, 1] (so `x >= 0`), with a relative error near 2^-50. The start:
/// Giles' single-precision `erfinv(1 - s)` (see `erfinv`) with `w = -log(s (2 - s))`, where
/// `1 - x^2 = s (2 - s)` keeps the small `s` that `1 - s` would lose, for `w <= 16`; beyond
/// (`s` below about 1e-7), the asymptotic `x^2 = L - log(sqrt(pi) x)`, `L = -log s`,
/// iterated twice from `x = sqrt L` (relative error below 2e-3). Then three steps of Halley's
/// method on `erfc x = s`, `x <- x - u / (1 + x u)` with `u = (s exp(x^2) - erfcx(x)) sqrt(pi)/2`
/// (the residual scaled by `exp(x^2)`, so that no factor underflows in the tail), or, for
/// `s > 1/2` (`x < 0.477`), `u = (erf(x) - (1 - s)) exp(x^2) sqrt(pi)/2` with the exact `1 - s`
/// and the series `erf_small`, so that the residual keeps its relative error where `x` is
/// near 0. Each step cubes the relative error.
fn erfcinv_unit<O: MathOps>(o: &mut O, s: O::F) -> O::F {
    let two = o.c(2.0);
    let one = o.c(1.0);
    let ts = o.sub(two, s);
    let st = o.mul(s, ts);
    let l = log_core(o, st);
    let w = o.neg(l);
    let five = o.c(5.0);
    let central = o.lt(w, five);
    let wc = addc(o, w, -2.5);
    let pc = horner(o, wc, &GILES_CENTRAL);
    let ws = o.sqrt(w);
    let wt = addc(o, ws, -3.0);
    let pt = horner(o, wt, &GILES_TAIL);
    let p = o.sel(central, pc, pt);
    let oms = o.sub(one, s);
    let giles = o.mul(p, oms);
    // The asymptotic start.
    let ls = log_core(o, s);
    let big_l = o.neg(ls);
    let mut xa = o.sqrt(big_l);
    for _ in 0..2 {
        let sx = mulc(o, xa, 1.0 / FRAC_1_SQRT_PI);
        let lx = log_core(o, sx);
        let d = o.sub(big_l, lx);
        xa = o.sqrt(d);
    }
    let sixteen = o.c(16.0);
    let deep = o.gt(w, sixteen);
    let mut x = o.sel(deep, xa, giles);
    let half = o.c(0.5);
    let near1 = o.gt(s, half);
    for _ in 0..3 {
        let e = exp_sq(o, x);
        let g = erfcx_pos(o, x);
        let se = o.mul(s, e);
        let far_u = o.sub(se, g);
        let ef = erf_small(o, x);
        let dn = o.sub(ef, oms);
        let near_u = o.mul(dn, e);
        let u = o.sel(near1, near_u, far_u);
        let u = mulc(o, u, 0.5 / FRAC_1_SQRT_PI);
        let xu = o.fma(x, u, one);
        let step = o.div(u, xu);
        x = o.sub(x, step);
    }
    x
}

/// Giles' central polynomial (`w < 5`, in `w - 2.5`), shared by `erfinv` and `erfcinv`.
const GILES_CENTRAL: [f64; 9] = [
    1.501_409_41,
    0.246_640_727,
    -0.004_177_681_64,
    -0.001_253_725_03,
    0.000_218_580_87,
    -4.391_506_54e-06,
    -3.523_387_7e-06,
    3.432_739_39e-07,
    2.810_226_36e-08,
];
/// Giles' tail polynomial (`w >= 5`, in `sqrt w - 3`).
const GILES_TAIL: [f64; 9] = [
    2.832_976_82,
    1.001_674_06,
    0.009_438_870_47,
    -0.007_622_461_3,
    0.005_739_507_73,
    -0.003_673_428_44,
    0.001_349_343_22,
    0.000_100_950_558,
    -0.000_200_214_257,
];

/// The inverse complementary error function (`libdevice.erfcinv`) on [0, 2]:
/// `erfcinv_unit(y)` for `y <= 1`, `-erfcinv_unit(2 - y)` above (`2 - y` exact). +inf at 0,
/// -inf at 2, +0 at 1, NaN outside [0, 2] and for NaN.
fn erfcinv<O: MathOps>(o: &mut O, y: O::F) -> O::F {
    let one = o.c(1.0);
    let two = o.c(2.0);
    let upper = o.gt(y, one);
    let ty = o.sub(two, y);
    let s = o.sel(upper, ty, y);
    let x = erfcinv_unit(o, s);
    let nx = o.neg(x);
    let r = o.sel(upper, nx, x);
    let zero = o.c(0.0);
    let at0 = o.eq(y, zero);
    let inf = o.c(f64::INFINITY);
    let r = o.sel(at0, inf, r);
    let at2 = o.eq(y, two);
    let ninf = o.c(f64::NEG_INFINITY);
    let r = o.sel(at2, ninf, r);
    let below = o.lt(y, zero);
    let above = o.gt(y, two);
    let out = o.or(below, above);
    let nan = o.c(f64::NAN);
    let r = o.sel(out, nan, r);
    let yn = o.isnan(y);
    o.sel(yn, y, r)
}

/// The inverse of the standard normal distribution function (`libdevice.normcdfinv`) on
/// [0, 1]: `-sqrt(2) erfcinv(2p)` (`2p` exact), +0 at 1/2, -inf at 0, +inf at 1, NaN outside
/// [0, 1] and for NaN.
fn normcdfinv<O: MathOps>(o: &mut O, p: O::F) -> O::F {
    let two_p = o.add(p, p);
    let x = erfcinv(o, two_p);
    let r = mulc(o, x, -std::f64::consts::SQRT_2);
    // -0 (at p = 1/2) + 0 is +0.
    addc(o, r, 0.0)
}

/// The modified Bessel function of the first kind `I_nu(x)`, `nu` 0 or 1
/// (`libdevice.cyl_bessel_i0`, `cyl_bessel_i1`; unscaled). `|x| <= 20`: the power series
/// `(x/2)^nu sum_k q^k / (k! (k + nu)!)`, `q = x^2 / 4` (exact), to k = 35, every term
/// positive (the next is below 2^-56 of the sum at 20). Above: Hankel's asymptotic series
/// `exp(|x|) / sqrt(2 pi |x|) sum_k t_k`, `t_k = t_(k-1) ((2k - 1)^2 - 4 nu^2) / (8 k |x|)`,
/// to k = 26 (the next term below 2^-56 at 20). `I_0` is even, `I_1` odd (`-0` stays `-0`);
/// +inf past about 91.9 in f32 and at +-inf (`I_1(-inf) = -inf`); NaN for NaN.
fn bessel_i<O: MathOps>(o: &mut O, x: O::F, nu: u32) -> O::F {
    let a = o.abs(x);
    let top = o.c(20.0);
    let big = o.gt(a, top);
    let ac = o.sel(big, top, a);
    let h = mulc(o, ac, 0.5);
    let q = o.mul(h, h);
    let mut c = Vec::new();
    let (mut f, mut g) = (1.0f64, (1..=nu).map(|k| k as f64).product::<f64>());
    for k in 0..36u32 {
        if k > 0 {
            f *= k as f64;
            g *= (k + nu) as f64;
        }
        c.push(1.0 / f / g);
    }
    let p = horner(o, q, &c);
    let series = if nu == 1 { o.mul(h, p) } else { p };
    // The asymptotic series in 1 / |x|.
    let ab = o.sel(big, a, top);
    let one = o.c(1.0);
    let inv = o.div(one, ab);
    let mu = (4 * nu * nu) as f64;
    let mut t = vec![1.0f64];
    for k in 1..27u32 {
        let m = ((2 * k - 1) as f64).powi(2) - mu;
        let prev = t[t.len() - 1];
        t.push(prev * m / (8 * k) as f64);
    }
    let s = horner(o, inv, &t);
    let e = exp_core(o, ab);
    let tp = mulc(o, ab, 2.0 * PI);
    let r = o.sqrt(tp);
    let es = o.mul(e, s);
    let asym = o.div(es, r);
    let inf = o.c(f64::INFINITY);
    let ai = isinf(o, a);
    let asym = o.sel(ai, inf, asym);
    let v = o.sel(big, asym, series);
    if nu == 1 {
        copysign(o, v, x)
    } else {
        v
    }
}

/// `(s, e)` with `s + e = a + b` exactly, for `|a| >= |b|` or `a = 0` (Fast2Sum).
fn fast_two_sum<O: MathOps>(o: &mut O, a: O::F, b: O::F) -> (O::F, O::F) {
    let s = o.add(a, b);
    let d = o.sub(s, a);
    (s, o.sub(b, d))
}

/// The double-double coefficients `(-1)^k / (k! (k + nu)!)`, k < `len`, computed in Rust by
/// exact divisions of double-doubles (a relative error near 2^-100 after 48 steps).
fn bessel_j_coefficients(len: usize, nu: u32) -> Vec<(f64, f64)> {
    let div = |(h, l): (f64, f64), d: f64| {
        let q = h / d;
        let r = (-q).mul_add(d, h);
        let ql = (r + l) / d;
        let s = q + ql;
        (s, ql - (s - q))
    };
    let mut c = (1.0f64, 0.0f64);
    for k in 1..=nu {
        c = div(c, k as f64);
    }
    let mut out = Vec::new();
    for k in 0..len {
        if k > 0 {
            c = div(c, (k * (k + nu as usize)) as f64);
        }
        out.push(if k % 2 == 0 { c } else { (-c.0, -c.1) });
    }
    out
}

/// The Bessel function of the first kind `J_nu(x)`, `nu` 0 or 1 (`libdevice.j0`, `j1`).
///
/// `|x| <= 20`: the power series `(x/2)^nu sum_k (-1)^k q^k / (k! (k + nu)!)`, `q = x^2 / 4`
/// (exact), to k = 47, by Horner's rule in double-double arithmetic: the terms reach 2^23
/// at 20 and cancel to the result, and near the function's zeros the result is as small as
/// about 1e-8 for an f32 `x`, so the sum needs about 2^-100 relative precision, not f64's
/// 2^-53. Above 20: Hankel's asymptotic form
/// `sqrt(2 / (pi x)) (P cos w - Q sin w)`, `w = x - (2 nu + 1) pi / 4`, with
/// `P = sum_k (-1)^k a_2k / x^2k`, `Q = sum_k (-1)^k a_(2k+1) / x^(2k+1)`,
/// `a_k = prod_(j <= k) (4 nu^2 - (2j - 1)^2) / (k! 8^k)`, to k = 25 (the next term below
/// 2^-56 at 20), and `w` reduced exactly: `x 2/pi = n + r` mod 4 by the pieces of 2/pi as in
/// `tan`, `w = (n - nu) pi/2 + (r - 1/2) pi/2`, sine and cosine by Taylor series on
/// `[-pi/2, 0]`. The absolute error there is near 2^-53 of the amplitude, and an f32 `x` above
/// 20 lies at least about 3e-7 (relative to the amplitude) from a zero. `J_0` is even,
/// `J_1` odd; +0 at +-inf (`-0` for `J_1(-inf)`), NaN for NaN.
fn bessel_j<O: MathOps>(o: &mut O, x: O::F, nu: u32) -> O::F {
    let a = o.abs(x);
    let top = o.c(20.0);
    let big = o.gt(a, top);
    let ac = o.sel(big, top, a);
    let h = mulc(o, ac, 0.5);
    let q = o.mul(h, h);
    let (ph, pl) = dd_horner(o, q, &bessel_j_coefficients(48, nu));
    let p = o.add(ph, pl);
    let series = if nu == 1 { o.mul(h, p) } else { p };
    let ab = o.sel(big, a, top);
    let hk = hankel(o, ab, nu);
    let pcw = o.mul(hk.p, hk.cos_w);
    let nq = o.neg(hk.q);
    let comb = o.fma(nq, hk.sin_w, pcw);
    let asym = o.mul(hk.amp, comb);
    let ai = isinf(o, a);
    let zero = o.c(0.0);
    let asym = o.sel(ai, zero, asym);
    let v = o.sel(big, asym, series);
    if nu == 1 {
        let neg = signbit(o, x);
        let nv = o.neg(v);
        o.sel(neg, nv, v)
    } else {
        v
    }
}

/// Horner's rule in double-double arithmetic for a polynomial in an f64 `q` with
/// double-double coefficients: `p <- p q + c_k`, the product's error by fma.
fn dd_horner<O: MathOps>(o: &mut O, q: O::F, cs: &[(f64, f64)]) -> (O::F, O::F) {
    let last = cs[cs.len() - 1];
    let (mut ph, mut pl) = (o.c(last.0), o.c(last.1));
    for &(ch, cl) in cs.iter().rev().skip(1) {
        let m = o.mul(ph, q);
        let nm = o.neg(m);
        let me = o.fma(ph, q, nm);
        let me = o.fma(pl, q, me);
        let ch = o.c(ch);
        let (s, e) = two_sum(o, m, ch);
        let cl = o.c(cl);
        let e = o.add(e, me);
        let e = o.add(e, cl);
        let (s, e) = fast_two_sum(o, s, e);
        ph = s;
        pl = e;
    }
    (ph, pl)
}

/// The pieces of Hankel's asymptotic forms for `x > 20` (see `bessel_j`):
/// `J_nu = amp (P cos w - Q sin w)`, `Y_nu = amp (P sin w + Q cos w)`.
struct Hankel<O: MathOps> {
    amp: O::F,
    p: O::F,
    q: O::F,
    cos_w: O::F,
    sin_w: O::F,
}

fn hankel<O: MathOps>(o: &mut O, ab: O::F, nu: u32) -> Hankel<O> {
    let one = o.c(1.0);
    let u = o.div(one, ab);
    let w2 = o.mul(u, u);
    let mu = (4 * nu * nu) as f64;
    let mut ak = vec![1.0f64];
    for k in 1..26u32 {
        let m = mu - ((2 * k - 1) as f64).powi(2);
        let prev = ak[ak.len() - 1];
        ak.push(prev * m / (8 * k) as f64);
    }
    let sign = |k: usize| if k % 4 < 2 { 1.0 } else { -1.0 };
    let pc: Vec<f64> = (0..13).map(|k| sign(2 * k) * ak[2 * k]).collect();
    let qc: Vec<f64> = (0..13).map(|k| sign(2 * k) * ak[2 * k + 1]).collect();
    let pp = horner(o, w2, &pc);
    let qp = horner(o, w2, &qc);
    let qq = o.mul(u, qp);
    // ab 2/pi mod 4 in double-double (each exact product reduced mod 4 exactly).
    let (quarter, m4) = (o.c(0.25), o.c(-4.0));
    let (mut hi, mut lo) = (o.c(0.0), o.c(0.0));
    for &c in &TWO_OVER_PI {
        let pr = mulc(o, ab, c);
        let hq = o.mul(pr, quarter);
        let k = o.rint(hq);
        let f = o.fma(m4, k, pr);
        let (s, e) = two_sum(o, hi, f);
        hi = s;
        lo = o.add(lo, e);
    }
    let n = o.rint(hi);
    let r0 = o.sub(hi, n);
    let (rh, rl) = two_sum(o, r0, lo);
    // t = (r - 1/2) pi/2 in [-pi/2, 0].
    let nhalf = o.c(-0.5);
    let (th, te) = two_sum(o, rh, nhalf);
    let tl = o.add(te, rl);
    let t = times_half_pi(o, th, tl);
    let tt = o.mul(t, t);
    let sp = horner(o, tt, &sin_coefficients(12));
    let st = o.mul(t, sp);
    let ct = horner(o, tt, &cos_coefficients(12));
    // The quadrant (n - nu) mod 4, from n - 4 rint(n / 4) in [-2, 2].
    let nq = o.mul(n, quarter);
    let nr = o.rint(nq);
    let m = o.fma(m4, nr, n);
    let m = addc(o, m, -(nu as f64));
    let quadrant = |o: &mut O, v: f64| {
        let (c1, c2) = (o.c(v), o.c(v - 4.0));
        let e1 = o.eq(m, c1);
        let e2 = o.eq(m, c2);
        o.or(e1, e2)
    };
    let (q1, q2, q3) = (quadrant(o, 1.0), quadrant(o, 2.0), quadrant(o, 3.0));
    let (nst, nct) = (o.neg(st), o.neg(ct));
    // cos w and sin w by quadrant: (c, s), (-s, c), (-c, -s), (s, -c).
    let cw = o.sel(q1, nst, ct);
    let cw = o.sel(q2, nct, cw);
    let cw = o.sel(q3, st, cw);
    let sw = o.sel(q1, ct, st);
    let sw = o.sel(q2, nst, sw);
    let sw = o.sel(q3, nct, sw);
    let amp = mulc(o, u, 2.0 / PI);
    let amp = o.sqrt(amp);
    Hankel {
        amp,
        p: pp,
        q: qq,
        cos_w: cw,
        sin_w: sw,
    }
}

/// Euler's constant.
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;

/// Double-double product of two double-doubles (in Rust, for coefficients).
fn dd_mul_rs((ah, al): (f64, f64), (bh, bl): (f64, f64)) -> (f64, f64) {
    let p = ah * bh;
    let e = ah.mul_add(bh, -p) + (ah * bl + al * bh);
    let s = p + e;
    (s, e - (s - p))
}

/// The double-double coefficients of the logarithmic Bessel series: `H_k (-1)^k / (k!)^2`
/// for `nu = 0`, `(H_k + H_(k+1)) (-1)^k / (k! (k + 1)!)` for `nu = 1` (`H_k` the harmonic
/// numbers, `H_0 = 0`).
fn bessel_y_coefficients(len: usize, nu: u32) -> Vec<(f64, f64)> {
    let two_sum = |a: f64, b: f64| {
        let s = a + b;
        let bb = s - a;
        (s, (a - (s - bb)) + (b - bb))
    };
    let add = |(ah, al): (f64, f64), (bh, bl): (f64, f64)| {
        let (s, e) = two_sum(ah, bh);
        let e = e + al + bl;
        let t = s + e;
        (t, e - (t - s))
    };
    let mut h = vec![(0.0f64, 0.0f64)];
    for j in 1..=len {
        let r = 1.0 / j as f64;
        let rl = (-r).mul_add(j as f64, 1.0) / j as f64;
        let prev = h[j - 1];
        h.push(add(prev, (r, rl)));
    }
    let js = bessel_j_coefficients(len, nu);
    (0..len)
        .map(|k| {
            let hk = if nu == 0 { h[k] } else { add(h[k], h[k + 1]) };
            dd_mul_rs(hk, js[k])
        })
        .collect()
}

/// The Bessel function of the second kind `Y_nu(x)`, `nu` 0 or 1 (`libdevice.y0`, `y1`).
///
/// `x <= 20`: the series of Abramowitz and Stegun 9.1.11 in double-double arithmetic,
/// `Y_0 = (2/pi) (L J_0 - D_0)` and `Y_1 = (1/pi) (x (L P_1 - D_1 / 2) - 2 / x)` with
/// `L = log(x / 2) + gamma` (f64), `J_1 = (x/2) P_1`, `D_nu` the sums of
/// `bessel_y_coefficients` in `q = x^2 / 4` (to k = 47); the products and differences that
/// cancel near the zeros are double-double, `L` and the final scaling are f64. Above 20:
/// Hankel's form `sqrt(2 / (pi x)) (P sin w + Q cos w)` (`hankel`). -inf at +-0, NaN below
/// 0 and for NaN, +0 at +inf.
fn bessel_y<O: MathOps>(o: &mut O, x: O::F, nu: u32) -> O::F {
    let top = o.c(20.0);
    let big = o.gt(x, top);
    let xc = o.sel(big, top, x);
    let h = mulc(o, xc, 0.5);
    let q = o.mul(h, h);
    let (jh, jl) = dd_horner(o, q, &bessel_j_coefficients(48, nu));
    let (dh, dl) = dd_horner(o, q, &bessel_y_coefficients(48, nu));
    let lg = log_core(o, h);
    let l = addc(o, lg, EULER_GAMMA);
    // L (jh + jl) - d, in double-double (d = D_0, or D_1 / 2).
    let (dh, dl) = if nu == 1 {
        (mulc(o, dh, 0.5), mulc(o, dl, 0.5))
    } else {
        (dh, dl)
    };
    let m = o.mul(l, jh);
    let nm = o.neg(m);
    let me = o.fma(l, jh, nm);
    let me = o.fma(l, jl, me);
    let ndh = o.neg(dh);
    let (s, e) = two_sum(o, m, ndh);
    let e = o.add(e, me);
    let e = o.sub(e, dl);
    let (bh, bl) = fast_two_sum(o, s, e);
    let series = if nu == 0 {
        let b = o.add(bh, bl);
        mulc(o, b, 2.0 / PI)
    } else {
        // x (bh + bl) - 2 / x in double-double, then / pi.
        let m = o.mul(xc, bh);
        let nm = o.neg(m);
        let me = o.fma(xc, bh, nm);
        let me = o.fma(xc, bl, me);
        let two = o.c(2.0);
        let r = o.div(two, xc);
        let nr = o.neg(r);
        let re = o.fma(nr, xc, two);
        let re = o.div(re, xc);
        let (s, e) = two_sum(o, m, nr);
        let e = o.add(e, me);
        let e = o.sub(e, re);
        let b = o.add(s, e);
        let b = mulc(o, b, 1.0 / PI);
        // Below about 1e-38 the product and the correction are not finite; -2 / (pi x) is
        // the value (and overflows f32 there).
        let tiny = o.c(1e-30);
        let small = o.lt(xc, tiny);
        let lead = mulc(o, r, -1.0 / PI);
        o.sel(small, lead, b)
    };
    let ab = o.sel(big, x, top);
    let hk = hankel(o, ab, nu);
    let psw = o.mul(hk.p, hk.sin_w);
    let comb = o.fma(hk.q, hk.cos_w, psw);
    let asym = o.mul(hk.amp, comb);
    let xi = isinf(o, x);
    let zero = o.c(0.0);
    let asym = o.sel(xi, zero, asym);
    let v = o.sel(big, asym, series);
    let at0 = o.eq(x, zero);
    let ninf = o.c(f64::NEG_INFINITY);
    let v = o.sel(at0, ninf, v);
    let neg = o.lt(x, zero);
    let nan = o.c(f64::NAN);
    o.sel(neg, nan, v)
}

/// One step `J_(m+1) = (2m / x) J_m - J_(m-1)` (`m = k + 1`) of the three-term recurrence
/// that `J_n` and `Y_n` satisfy, taken where `k < count` (else `a`, `b` unchanged); a `b` of
/// +-inf stays (`Y_n` past the f64 range, where the next step would be inf - inf).
fn bessel_forward_step<O: MathOps>(
    o: &mut O,
    x: O::F,
    k: O::F,
    count: O::F,
    v: &[O::F],
) -> Vec<O::F> {
    let (a, b) = (v[0], v[1]);
    let two = o.c(2.0);
    let m2 = o.fma(k, two, two);
    let t = o.div(m2, x);
    let na = o.neg(a);
    let c = o.fma(t, b, na);
    let bi = isinf(o, b);
    let c = o.sel(bi, b, c);
    let on = o.lt(k, count);
    let a = o.sel(on, b, a);
    let b = o.sel(on, c, b);
    vec![a, b]
}

/// `J_n(x)` for an integer `n` (held in an f64) by the recurrence from this library's f64
/// `J_0` and `J_1` of `|x|`: forward (`|n| - 1` steps, stable while the index stays below
/// `|x|`) when `|n| <= |x|`, else backward (Miller's algorithm, the minimal solution: from
/// `f_(M+1) = 0`, `f_M = 1` at `M = |n| + 16 + trunc(sqrt(40 |n|))` down to `f_0`, rescaled
/// by 2^-600 past 2^600), normalized by `J_0 / f_0` or `J_1 / f_1`, whichever of `J_0`,
/// `J_1` is larger in magnitude (they have no common zero). `J_(-n) = (-1)^n J_n` and
/// `J_n(-x) = (-1)^n J_n(x)`; `J_0(0) = 1`, `J_n(0) = +-0` otherwise, +-0 at +-inf, NaN for
/// NaN.
fn bessel_jn<O: MathOps>(o: &mut O, n: O::F, x: O::F) -> O::F {
    let zero = o.c(0.0);
    let one = o.c(1.0);
    let na = o.abs(n);
    let ax = o.abs(x);
    let j0 = bessel_j(o, ax, 0);
    let j1 = bessel_j(o, ax, 1);
    // No steps at 0, +-inf and NaN, whose values are selected below.
    let inf = o.c(f64::INFINITY);
    let fin = o.lt(ax, inf);
    let x0 = o.eq(ax, zero);
    let nx0 = o.not(x0);
    let regular = o.and(fin, nx0);
    let backward = o.gt(na, ax);
    let nm1 = o.sub(na, one);
    let fcount = o.sel(backward, zero, nm1);
    let fcount = o.sel(fin, fcount, zero);
    let fw = o.repeat(fcount, vec![j0, j1], |o, k, v| {
        bessel_forward_step(o, ax, k, fcount, v)
    });
    // Miller's start and its step count (0 when forward).
    let r40 = mulc(o, na, 40.0);
    let r40 = o.sqrt(r40);
    let r40 = o.trunc(r40);
    let m = addc(o, na, 16.0);
    let m = o.add(m, r40);
    let bcount = o.sel(backward, m, zero);
    let bcount = o.sel(regular, bcount, zero);
    let bw = o.repeat(bcount, vec![zero, one, zero], |o, i, v| {
        let (p, q, fnv) = (v[0], v[1], v[2]);
        // The top index kt = M - i; f_(kt-1) = (2 kt / x) f_kt - f_(kt+1).
        let kt = o.sub(m, i);
        let two = o.c(2.0);
        let t2 = o.mul(kt, two);
        let t = o.div(t2, ax);
        let np = o.neg(p);
        let nq = o.fma(t, q, np);
        let below = o.sub(kt, one);
        let at_n = o.eq(below, na);
        let fnv = o.sel(at_n, nq, fnv);
        let anq = o.abs(nq);
        let lim = o.c(2f64.powi(600));
        let big = o.gt(anq, lim);
        let s = o.c(2f64.powi(-600));
        let one = o.c(1.0);
        let s = o.sel(big, s, one);
        let p2 = o.mul(q, s);
        let q2 = o.mul(nq, s);
        let f2 = o.mul(fnv, s);
        let on = o.lt(i, bcount);
        vec![o.sel(on, p2, p), o.sel(on, q2, q), o.sel(on, f2, fnv)]
    });
    let (f1, f0, fnv) = (bw[0], bw[1], bw[2]);
    let a0 = o.abs(j0);
    let a1 = o.abs(j1);
    let use1 = o.gt(a1, a0);
    let jj = o.sel(use1, j1, j0);
    let ff = o.sel(use1, f1, f0);
    let ratio = o.div(fnv, ff);
    let jb = o.mul(ratio, jj);
    let n0 = o.eq(na, zero);
    let jf = o.sel(n0, j0, fw[1]);
    let v = o.sel(backward, jb, jf);
    let at0 = o.sel(n0, one, zero);
    let v = o.sel(x0, at0, v);
    // (-1)^n for a negative order or a negative x (not both).
    let flip = bessel_order_odd(o, na);
    let nn = o.lt(n, zero);
    let nx = signbit(o, x);
    let nnx = o.not(nx);
    let nxn = o.not(nn);
    let one_neg = o.and(nn, nnx);
    let other_neg = o.and(nxn, nx);
    let either = o.or(one_neg, other_neg);
    let flip = o.and(flip, either);
    let nv = o.neg(v);
    o.sel(flip, nv, v)
}

/// Whether the integer `na >= 0` is odd.
fn bessel_order_odd<O: MathOps>(o: &mut O, na: O::F) -> O::P {
    let h = mulc(o, na, 0.5);
    let t = o.trunc(h);
    let f = o.eq(h, t);
    o.not(f)
}

/// `Y_n(x)` for an integer `n` (held in an f64) by the forward recurrence (the dominant
/// solution: stable) from this library's f64 `Y_0` and `Y_1`, `|n| - 1` steps; `-inf` stays
/// once reached. `Y_(-n) = (-1)^n Y_n`; -inf at +-0 (+inf for a negative odd order, the
/// reflection's limit), NaN below 0 and for NaN, +0 at +inf.
fn bessel_yn<O: MathOps>(o: &mut O, n: O::F, x: O::F) -> O::F {
    let zero = o.c(0.0);
    let one = o.c(1.0);
    let inf = o.c(f64::INFINITY);
    let na = o.abs(n);
    let y0 = bessel_y(o, x, 0);
    let y1 = bessel_y(o, x, 1);
    let pos = o.gt(x, zero);
    let fin = o.lt(x, inf);
    let ok = o.and(pos, fin);
    let nm1 = o.sub(na, one);
    let count = o.sel(ok, nm1, zero);
    let fw = o.repeat(count, vec![y0, y1], |o, k, v| {
        bessel_forward_step(o, x, k, count, v)
    });
    let n0 = o.eq(na, zero);
    let v = o.sel(n0, y0, fw[1]);
    let odd = bessel_order_odd(o, na);
    let nn = o.lt(n, zero);
    let flip = o.and(odd, nn);
    let nv = o.neg(v);
    o.sel(flip, nv, v)
}
