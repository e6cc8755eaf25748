//! The math library's f32 results against float64 references, in units in the last place of
//! the f32 result, over dense inputs (a stride through every f32 bit pattern, uniform samples
//! of the interesting ranges) and edge values (zeros, subnormals, 1, -1, infinities, NaN,
//! the largest finite values). The interpreter evaluates exactly these functions, and the GPU
//! the same operations, so the bounds hold on both; docs/semantics.md lists them.

mod ulps;

use tegula_ir::mathlib::{eval2_f32, eval_f32, Fn1, Fn2};
use ulps::ulps;

fn edges() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::from_bits(0x007F_FFFF),
        f32::MIN_POSITIVE,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        1.0 - f32::EPSILON / 2.0,
        1.0 + f32::EPSILON,
        -1.0 + f32::EPSILON / 2.0,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-30,
        1e30,
        88.72,
        89.5,
        -103.9,
        -88.0,
        10.0,
        100.0,
        // tan: near pi/2, close to a multiple of pi/2 (16367173 * 2^72), huge values.
        1.570_796_4,
        16_367_173.0 * 2f32.powi(72),
        1e38,
        // exp10 and erfc at the edges of f32's range, lgamma near its negative zeros,
        // tgamma near its overflow.
        38.53,
        38.54,
        -44.85,
        -45.6,
        9.2,
        10.05,
        10.06,
        2.457_024_8,
        3.143_5,
        35.04,
        35.05,
        42.5,
        // cyl_bessel_i0/i1: where the series gives way to the asymptotic one, and overflow.
        20.0,
        20.000_002,
        19.999_998,
        91.9,
        91.91,
        // erfcinv and normcdfinv near 1 and 2 and 1/2.
        1.000_000_1,
        1.999_999_9,
        0.500_000_06,
        0.499_999_97,
    ];
    v.extend(v.clone().iter().map(|x| -x));
    v
}

/// A stride through every finite f32 of both signs, plus uniform samples of [-4, 4].
fn dense() -> Vec<f32> {
    let mut v = Vec::new();
    let mut bits = 0u32;
    while bits < 0x7F80_0000 {
        let x = f32::from_bits(bits);
        v.push(x);
        v.push(-x);
        bits += 4093;
    }
    let mut s = 0x1234_5678_9ABC_DEF0u64;
    let samples = 200_000;
    for _ in 0..samples {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push(((s >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0) as f32);
    }
    v.extend(edges());
    v
}

fn erf64(x: f64) -> f64 {
    // Series below 2.5, continued fraction of erfc above (as the interpreter's erf).
    let a = x.abs();
    if a >= 6.0 {
        return 1f64.copysign(x);
    }
    if a < 2.5 {
        let x2 = a * a;
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        return (sum * std::f64::consts::FRAC_2_SQRT_PI).copysign(x);
    }
    let mut f = a;
    for k in (1..=60).rev() {
        f = a + (k as f64 / 2.0) / f;
    }
    (1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())).copysign(x)
}

/// erfinv in f64 by Newton's method on erf from a close start.
fn erfinv64(x: f64, start: f64) -> f64 {
    if x.abs() >= 1.0 || x.is_nan() || !start.is_finite() {
        return if x.abs() == 1.0 {
            f64::INFINITY.copysign(x)
        } else {
            f64::NAN
        };
    }
    let mut y = start;
    for _ in 0..4 {
        let d = (erf64(y) - x) / (std::f64::consts::FRAC_2_SQRT_PI * (-y * y).exp());
        y -= d;
    }
    y
}

fn reference(f: Fn1, x: f64) -> f64 {
    match f {
        Fn1::Asin => x.asin(),
        Fn1::Acos => x.acos(),
        Fn1::Atan => x.atan(),
        Fn1::Sinh => x.sinh(),
        Fn1::Cosh => x.cosh(),
        Fn1::Asinh => x.asinh(),
        Fn1::Acosh => x.acosh(),
        Fn1::Atanh => x.atanh(),
        Fn1::Log1p => x.ln_1p(),
        Fn1::Expm1 => x.exp_m1(),
        Fn1::Cbrt => x.cbrt(),
        Fn1::Tan => x.tan(),
        Fn1::Log10 => x.log10(),
        Fn1::Exp10 => libm::exp10(x),
        Fn1::Erfc => libm::erfc(x),
        Fn1::Lgamma => libm::lgamma(x),
        Fn1::Tgamma => libm::tgamma(x),
        Fn1::Rcbrt => 1.0 / x.cbrt(),
        Fn1::Normcdf => 0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2),
        Fn1::Sinpi => sinpi64(x),
        Fn1::Cospi => cospi64(x),
        Fn1::Erfcx => erfcx64(x),
        Fn1::Erfcinv => erfcinv64(x),
        Fn1::Normcdfinv => normcdfinv64(x),
        Fn1::CylBesselI0 => bessel_i64(x, 0),
        Fn1::CylBesselI1 => bessel_i64(x, 1),
        Fn1::J0 => libm::j0(x),
        Fn1::J1 => libm::j1(x),
        Fn1::Y0 => libm::y0(x),
        Fn1::Y1 => libm::y1(x),
        Fn1::Erfinv => unreachable!(),
    }
}

/// `x - 2 rint(x / 2)` in [-1, 1], exact for every finite f64.
fn reduce2(x: f64) -> f64 {
    x - 2.0 * (x / 2.0).round_ties_even()
}

/// `sin(pi x)` by std's `sin` and `cos` after the exact reduction, with IEEE 754's zeros.
fn sinpi64(x: f64) -> f64 {
    use std::f64::consts::PI;
    if !x.is_finite() {
        return f64::NAN;
    }
    let r = reduce2(x);
    let a = r.abs();
    let v = if a <= 0.3 {
        (PI * a).sin()
    } else if a <= 0.7 {
        (PI * (0.5 - a)).cos()
    } else {
        (PI * (1.0 - a)).sin()
    };
    if v == 0.0 {
        0f64.copysign(x)
    } else {
        v.copysign(r)
    }
}

/// `cos(pi x)` likewise (split at other points than the library's).
fn cospi64(x: f64) -> f64 {
    use std::f64::consts::PI;
    if !x.is_finite() {
        return f64::NAN;
    }
    let a = reduce2(x).abs();
    if a <= 0.3 {
        (PI * a).cos()
    } else if a <= 0.7 {
        (PI * (0.5 - a)).sin()
    } else {
        -(PI * (1.0 - a)).cos()
    }
}

/// `exp(x^2) erfc(x)`: the product of libm's functions (`x^2` exact for an f32 `x`) below 26,
/// Laplace's continued fraction above.
fn erfcx64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 26.0 {
        return (x * x).exp() * libm::erfc(x);
    }
    let mut f = x;
    for k in (1..=60).rev() {
        f = x + (k as f64 / 2.0) / f;
    }
    1.0 / (f * std::f64::consts::PI.sqrt())
}

/// `erfcinv y` by bisection over the bit patterns of `x >= 0` on libm's `erfc` (or, for
/// `y > 1/2`, `erf` against the exact `1 - y`), then the symmetry `erfcinv(2 - y)`.
fn erfcinv64(y: f64) -> f64 {
    if y.is_nan() || !(0.0..=2.0).contains(&y) {
        return f64::NAN;
    }
    if y > 1.0 {
        return -erfcinv64(2.0 - y);
    }
    if y == 0.0 {
        return f64::INFINITY;
    }
    // g decreases from positive (x = 0, unless y = 1) to negative.
    let g = |x: f64| {
        if y > 0.5 {
            (1.0 - y) - libm::erf(x)
        } else {
            libm::erfc(x) - y
        }
    };
    let (mut lo, mut hi) = (0u64, 27f64.to_bits());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if g(f64::from_bits(mid)) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    f64::from_bits(lo)
}

/// `I_nu(x)` by its power series summed in f64 until the terms vanish (every term positive,
/// so the sum keeps a relative error near 2^-45 even where the terms peak near `|x| / 2`;
/// the library switches to the asymptotic series above 20).
fn bessel_i64(x: f64, nu: u32) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a > 100.0 {
        return f64::INFINITY.copysign(if nu == 1 { x } else { 1.0 });
    }
    let q = a * a / 4.0;
    let mut term = if nu == 1 { a / 2.0 } else { 1.0 };
    let (mut sum, mut comp) = (0.0f64, 0.0f64);
    let mut k = 0u32;
    loop {
        // Kahan's compensated sum.
        let y = term - comp;
        let t = sum + y;
        comp = (t - sum) - y;
        sum = t;
        k += 1;
        term *= q / (k as f64 * (k + nu) as f64);
        if term < 1e-18 * sum || term == 0.0 {
            break;
        }
    }
    if nu == 1 {
        sum.copysign(x)
    } else {
        sum
    }
}

fn normcdfinv64(p: f64) -> f64 {
    -std::f64::consts::SQRT_2 * erfcinv64(2.0 * p) + 0.0
}

/// The largest error of `f` over the inputs, and the input where it occurs.
fn worst1(f: Fn1, xs: &[f32]) -> (f64, f32) {
    let mut worst = (0.0, 0.0f32);
    for &x in xs {
        let got = eval_f32(f, x);
        let want = if f == Fn1::Erfinv {
            erfinv64(x as f64, got as f64)
        } else {
            reference(f, x as f64)
        };
        let e = ulps(got, want);
        if e > worst.0 || e.is_nan() {
            worst = (e, x);
        }
    }
    worst
}

#[test]
fn unary_functions_within_their_ulp_bounds() {
    let xs = dense();
    let bounds = [
        (Fn1::Asin, 0.5477),
        (Fn1::Acos, 0.5451),
        (Fn1::Atan, 0.5001),
        (Fn1::Sinh, 0.5001),
        (Fn1::Cosh, 0.5001),
        (Fn1::Asinh, 0.5001),
        (Fn1::Acosh, 0.5001),
        (Fn1::Atanh, 0.5001),
        (Fn1::Log1p, 0.5001),
        (Fn1::Expm1, 0.5001),
        (Fn1::Cbrt, 0.5001),
        (Fn1::Erfinv, 2.5),
        (Fn1::Tan, 0.5001),
        (Fn1::Log10, 0.5001),
        (Fn1::Exp10, 0.5001),
        (Fn1::Erfc, 0.5001),
        (Fn1::Lgamma, 0.5001),
        (Fn1::Tgamma, 0.5001),
        (Fn1::Rcbrt, 0.5001),
        (Fn1::Normcdf, 0.5001),
        (Fn1::Sinpi, 0.5001),
        (Fn1::Cospi, 0.5001),
        (Fn1::Erfcx, 0.5001),
        (Fn1::Erfcinv, 0.5001),
        (Fn1::Normcdfinv, 0.5001),
        (Fn1::CylBesselI0, 0.5001),
        (Fn1::CylBesselI1, 0.5001),
        (Fn1::J0, 0.5001),
        (Fn1::J1, 0.5001),
        (Fn1::Y0, 0.5001),
        (Fn1::Y1, 0.5001),
    ];
    let mut report = Vec::new();
    for (f, bound) in bounds {
        let (e, x) = worst1(f, &xs);
        report.push(format!("{f:?}: {e:.4} ulp at {x:e}"));
        assert!(
            e <= bound,
            "{f:?}: {e} ulp at {x:e} (bound {bound})\n{report:#?}"
        );
    }
    eprintln!("{}", report.join("\n"));
}

/// `J_0`, `J_1`, `Y_0` and `Y_1` at the f32 values nearest their first zeros (up to 200, where the
/// relative error of a sum that cancels is largest), against the `libm` crate's f64
/// functions: the zeros by bisection of libm's sign changes, then the three f32s on each
/// side.
#[test]
fn bessel_functions_near_their_zeros() {
    let mut report = Vec::new();
    for (f, g) in [
        (Fn1::J0, libm::j0 as fn(f64) -> f64),
        (Fn1::J1, libm::j1),
        (Fn1::Y0, libm::y0),
        (Fn1::Y1, libm::y1),
    ] {
        let mut worst = (0.0, 0.0f32);
        let mut zeros = 0;
        let mut x = 0.5f64;
        while x < 200.0 {
            let (mut lo, mut hi) = (x, x + 0.05);
            if g(lo).signum() != g(hi).signum() {
                for _ in 0..80 {
                    let mid = 0.5 * (lo + hi);
                    if g(mid).signum() == g(lo).signum() {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                zeros += 1;
                let z = lo as f32;
                let mut v = vec![z];
                let (mut up, mut down) = (z, z);
                for _ in 0..3 {
                    up = f32::from_bits(up.to_bits() + 1);
                    down = f32::from_bits(down.to_bits() - 1);
                    v.extend([up, down, -up, -down]);
                }
                for x in v {
                    let e = ulps(eval_f32(f, x), reference(f, x as f64));
                    if e > worst.0 {
                        worst = (e, x);
                    }
                }
            }
            x += 0.05;
        }
        assert!(zeros > 60, "{f:?}: {zeros} zeros");
        report.push(format!(
            "{f:?}: {:.4} ulp at {:e} ({zeros} zeros)",
            worst.0, worst.1
        ));
        assert!(worst.0 <= 0.5001, "{f:?}: {worst:?}");
    }
    eprintln!("{}", report.join("\n"));
}

/// `J_n(x)` or `Y_n(x)` by the `libm` crate's f64 `jn`, `yn` of `|n|` and the reflection
/// `(-1)^n` for a negative order (`libm`'s `yn` is -inf at 0 whatever the order).
fn bessel_n64(f: fn(i32, f64) -> f64, n: f64, x: f64) -> f64 {
    let v = f(n.abs() as i32, x);
    if n < 0.0 && n % 2.0 != 0.0 {
        -v
    } else {
        v
    }
}

fn reference2(f: Fn2, x: f64, y: f64) -> f64 {
    match f {
        Fn2::Atan2 => x.atan2(y),
        Fn2::Pow => x.powf(y),
        Fn2::Hypot => x.hypot(y),
        Fn2::Remainder => libm::remainder(x, y),
        Fn2::Fmod => x % y,
        Fn2::Rhypot => 1.0 / x.hypot(y),
        Fn2::Jn => bessel_n64(libm::jn, x, y),
        Fn2::Yn => bessel_n64(libm::yn, x, y),
    }
}

#[test]
fn binary_functions_within_their_ulp_bounds() {
    let mut xs = edges();
    let mut s = 0x0F1E_2D3C_4B5A_6978u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut pairs: Vec<(f32, f32)> = Vec::new();
    for &a in &xs {
        for &b in &xs {
            pairs.push((a, b));
        }
    }
    let samples = 300_000;
    for _ in 0..samples {
        // Random bit patterns (every magnitude) and moderate values.
        let a = f32::from_bits(next() as u32);
        let b = f32::from_bits(next() as u32);
        pairs.push((a, b));
        let u = ((next() >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0) as f32;
        let v = ((next() >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0) as f32;
        pairs.push((u, v));
        pairs.push((u.abs(), v.round()));
    }
    xs.clear();
    let mut report = Vec::new();
    for (f, bound) in [
        (Fn2::Atan2, 0.5001),
        (Fn2::Pow, 0.5001),
        (Fn2::Hypot, 0.5001),
        (Fn2::Remainder, 0.0),
        (Fn2::Fmod, 0.0),
        (Fn2::Rhypot, 0.5001),
    ] {
        let mut worst = (0.0, (0.0f32, 0.0f32));
        for &(a, b) in &pairs {
            let got = eval2_f32(f, a, b);
            let e = ulps(got, reference2(f, a as f64, b as f64));
            if e > worst.0 {
                worst = (e, (a, b));
            }
        }
        report.push(format!("{f:?}: {:.4} ulp at {:?}", worst.0, worst.1));
        assert!(
            worst.0 <= bound,
            "{f:?}: {worst:?} (bound {bound})\n{report:#?}"
        );
    }
    eprintln!("{}", report.join("\n"));
}

/// The orders the tests of `jn` and `yn` take: every order to 12 of both signs, then larger
/// ones (Miller's start and the forward recurrence's length).
fn bessel_orders() -> Vec<i32> {
    let mut ns: Vec<i32> = (-12..=12).collect();
    ns.extend([17, 20, 33, 50, 100, -101, 300, 1000]);
    ns
}

/// `jn` and `yn` in f32 against the `libm` crate's f64 `jn` and `yn` (the reflection for
/// negative orders): for each order, 4,000 uniform samples of `[-(2|n| + 40), 2|n| + 40]`
/// (forward and backward recurrence, the switch at `|n| = |x|`), 1,000 log-uniform ones of
/// `[1e-40, 1]` (the tiny values where `J_n` underflows and `Y_n` overflows) and the edge
/// values.
#[test]
fn bessel_jn_yn_within_their_ulp_bounds() {
    let mut s = 0x1234_5678_9ABC_DEF1u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut report = Vec::new();
    for (f, g) in [
        (Fn2::Jn, libm::jn as fn(i32, f64) -> f64),
        (Fn2::Yn, libm::yn),
    ] {
        let mut worst = (0.0, (0, 0.0f32));
        for n in bessel_orders() {
            let top = 2.0 * n.abs() as f64 + 40.0;
            let mut xs = edges();
            for _ in 0..4000 {
                xs.push(((2.0 * next() - 1.0) * top) as f32);
            }
            for _ in 0..1000 {
                xs.push(10f64.powf(-40.0 * next()) as f32);
            }
            for x in xs {
                let got = eval2_f32(f, n as f32, x);
                let want = bessel_n64(g, n as f64, x as f64);
                let e = ulps(got, want);
                if e > worst.0 || e.is_nan() {
                    worst = (e, (n, x));
                }
            }
        }
        report.push(format!("{f:?}: {:.4} ulp at {:?}", worst.0, worst.1));
        assert!(worst.0 <= 0.5001, "{f:?}: {worst:?}");
    }
    eprintln!("{}", report.join("\n"));
}

/// `jn` and `yn` at the three f32s on each side of their zeros below 100, for orders 2, 3,
/// 5, 10, 20 and -3 (the forward recurrence cancels there): the zeros by bisection of the
/// `libm` crate's sign changes, as for `j0` .. `y1`.
#[test]
fn bessel_jn_yn_near_their_zeros() {
    let mut report = Vec::new();
    for (f, g) in [
        (Fn2::Jn, libm::jn as fn(i32, f64) -> f64),
        (Fn2::Yn, libm::yn),
    ] {
        let mut worst = (0.0, (0, 0.0f32));
        let mut zeros = 0;
        for n in [2, 3, 5, 10, 20, -3] {
            let h = |x: f64| bessel_n64(g, n as f64, x);
            let mut x = 0.5f64;
            while x < 100.0 {
                let (mut lo, mut hi) = (x, x + 0.05);
                if h(lo).signum() != h(hi).signum() {
                    for _ in 0..80 {
                        let mid = 0.5 * (lo + hi);
                        if h(mid).signum() == h(lo).signum() {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    zeros += 1;
                    let z = lo as f32;
                    let mut v = vec![z];
                    let (mut up, mut down) = (z, z);
                    for _ in 0..3 {
                        up = f32::from_bits(up.to_bits() + 1);
                        down = f32::from_bits(down.to_bits() - 1);
                        v.extend([up, down]);
                        if f == Fn2::Jn {
                            v.extend([-up, -down]);
                        }
                    }
                    for x in v {
                        let e = ulps(eval2_f32(f, n as f32, x), h(x as f64));
                        if e > worst.0 {
                            worst = (e, (n, x));
                        }
                    }
                }
                x += 0.05;
            }
        }
        assert!(zeros > 150, "{f:?}: {zeros} zeros");
        report.push(format!(
            "{f:?}: {:.4} ulp at {:?} ({zeros} zeros)",
            worst.0, worst.1
        ));
        assert!(worst.0 <= 0.5001, "{f:?}: {worst:?}");
    }
    eprintln!("{}", report.join("\n"));
}

/// The special values of `jn` and `yn`.
#[test]
fn bessel_jn_yn_special_values() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let cases: [(Fn2, i32, f32, f32); 22] = [
        (Fn2::Jn, 0, 0.0, 1.0),
        (Fn2::Jn, 0, -0.0, 1.0),
        (Fn2::Jn, 3, 0.0, 0.0),
        (Fn2::Jn, 3, -0.0, -0.0),
        (Fn2::Jn, -3, 0.0, -0.0),
        (Fn2::Jn, -3, -0.0, 0.0),
        (Fn2::Jn, 4, -0.0, 0.0),
        (Fn2::Jn, 5, inf, 0.0),
        (Fn2::Jn, 5, -inf, -0.0),
        (Fn2::Jn, 2, nan, nan),
        (Fn2::Jn, 100, 1e-30, 0.0),
        (Fn2::Jn, -1, 2.0, -0.576_724_8),
        (Fn2::Yn, 0, 0.0, -inf),
        (Fn2::Yn, 4, 0.0, -inf),
        (Fn2::Yn, 4, -0.0, -inf),
        (Fn2::Yn, -3, 0.0, inf),
        (Fn2::Yn, 3, -1.0, nan),
        (Fn2::Yn, 3, inf, 0.0),
        (Fn2::Yn, 3, nan, nan),
        (Fn2::Yn, 50, 1.0, -inf),
        (Fn2::Yn, -50, 1.0, -inf),
        (Fn2::Yn, -51, 1.0, inf),
    ];
    for (f, n, x, want) in cases {
        let got = eval2_f32(f, n as f32, x);
        assert!(
            same(got, want),
            "{f:?}({n}, {x:e}) = {got:e}, want {want:e}"
        );
    }
}
