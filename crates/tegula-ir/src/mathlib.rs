//! The math library behind `asin`, `acos`, `atan`, `atan2`, `sinh`, `cosh`, `asinh`, `acosh`,
//! `atanh`, `pow`, `log1p`, `expm1`, `erfinv`, `cbrt` and `hypot` on f32 (and f16/bf16, which
//! compute through f32), written once over [`MathOps`] so that both backends run the same
//! algorithm: the interpreter evaluates it on Rust `f64`s ([`Eval`]), the GPU lowering emits
//! one PTX instruction per operation (`tegula-ptx`'s `emit/libm.rs`). Every operation is an
//! IEEE operation rounded to nearest (`add.rn.f64`, `fma.rn.f64`, `div.rn.f64`,
//! `sqrt.rn.f64`, `cvt.rni.f64.f64`, integer bit operations), so the two produce the same
//! bits (NaN payloads aside).
//!
//! An f32 argument is widened to f64 exactly (f32 subnormals are normal f64s), the function
//! is computed in f64 by range reduction and polynomial (Taylor series of known
//! coefficients, which converge fast on the reduced ranges, or for `asin` and `acos` a
//! Chebyshev fit, half the terms) to a relative error of about
//! 2^-45 or better, and the caller rounds once to f32. The f32 result is therefore correctly
//! rounded except when the exact value lies within about 2^-20 ulp of a rounding boundary
//! (`erfinv`, an approximation of Giles, is the exception: a few ulp). The bounds measured by
//! the tests are in docs/semantics.md.
//!
//! Every branch is computed and selected (no control flow), so the PTX is straight-line.
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
}

/// The binary functions of this library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fn2 {
    Atan2,
    Pow,
    Hypot,
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
    }
}

/// `f(x, y)` for f64s holding f32 values; the caller rounds the result to f32.
pub fn binary<O: MathOps>(o: &mut O, f: Fn2, x: O::F, y: O::F) -> O::F {
    match f {
        Fn2::Atan2 => atan2(o, x, y),
        Fn2::Pow => pow(o, x, y),
        Fn2::Hypot => hypot(o, x, y),
    }
}

/// `f(x)` in f32 on the interpreter: exactly what the GPU computes.
pub fn eval_f32(f: Fn1, x: f32) -> f32 {
    unary(&mut Eval, f, x as f64) as f32
}

/// `f(x, y)` in f32 on the interpreter: exactly what the GPU computes.
pub fn eval2_f32(f: Fn2, x: f32, y: f32) -> f32 {
    binary(&mut Eval, f, x as f64, y as f64) as f32
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

/// `1 / n!` for n = 0..=13.
fn inv_factorials() -> [f64; 14] {
    let mut c = [1.0; 14];
    let mut f = 1.0f64;
    for (n, k) in c.iter_mut().enumerate().skip(1) {
        f *= n as f64;
        *k = 1.0 / f;
    }
    c
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
    let p = horner(o, r, &inv_factorials());
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
    let c = inv_factorials();
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
    let pc = horner(
        o,
        wc,
        &[
            1.501_409_41,
            0.246_640_727,
            -0.004_177_681_64,
            -0.001_253_725_03,
            0.000_218_580_87,
            -4.391_506_54e-06,
            -3.523_387_7e-06,
            3.432_739_39e-07,
            2.810_226_36e-08,
        ],
    );
    let ws = o.sqrt(w);
    let wt = addc(o, ws, -3.0);
    let pt = horner(
        o,
        wt,
        &[
            2.832_976_82,
            1.001_674_06,
            0.009_438_870_47,
            -0.007_622_461_3,
            0.005_739_507_73,
            -0.003_673_428_44,
            0.001_349_343_22,
            0.000_100_950_558,
            -0.000_200_214_257,
        ],
    );
    let p = o.sel(central, pc, pt);
    let r = o.mul(p, x);
    // erfinv(+-1) = +-inf (the tail polynomial at w = inf is not).
    let ax = o.abs(x);
    let at1 = o.eq(ax, one);
    let inf = o.c(f64::INFINITY);
    let sinf = copysign(o, inf, x);
    o.sel(at1, sinf, r)
}
