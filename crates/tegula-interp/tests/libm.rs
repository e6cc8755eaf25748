//! The libdevice-style math ops through kernels on the interpreter: f32 results are the math
//! library's (`tegula_ir::mathlib`, the GPU's algorithm) bit for bit, f16/bf16 round that f32
//! result once more, f64 is std's (the `libm` crate's where std has none); the rounding
//! family, classification, `copysign`, `ldexp`, `frexp`, `nextafter` and `ilogb` are exact in
//! every float dtype. (The ulp bounds are measured in tegula-ir's `tests/mathlib.rs`.)

mod common;
use common::*;
use half::{bf16, f16};
use tegula_ir::mathlib::{eval2_f32, eval_f32, Fn1, Fn2};
use tegula_ir::prelude::*;

fn inputs() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1e-40,
        -1e-40,
        1e-8,
        0.3,
        -0.7,
        0.5,
        1.0,
        -1.0,
        1.5,
        2.5,
        -2.5,
        3.7,
        10.0,
        -20.0,
        -2.4570248,
        35.5,
        38.6,
        -45.5,
        88.0,
        100.0,
        1e20,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut r = Rng::new(7);
    v.extend(r.f32s(100, -3.0, 3.0));
    v
}

fn same(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

type UnaryFn = fn(Tile) -> Tile;

fn unary_cases() -> Vec<(Fn1, UnaryFn)> {
    vec![
        (Fn1::Asin, |t| asin(t)),
        (Fn1::Acos, |t| acos(t)),
        (Fn1::Atan, |t| atan(t)),
        (Fn1::Sinh, |t| sinh(t)),
        (Fn1::Cosh, |t| cosh(t)),
        (Fn1::Asinh, |t| asinh(t)),
        (Fn1::Acosh, |t| acosh(t)),
        (Fn1::Atanh, |t| atanh(t)),
        (Fn1::Log1p, |t| log1p(t)),
        (Fn1::Expm1, |t| expm1(t)),
        (Fn1::Erfinv, |t| erfinv(t)),
        (Fn1::Cbrt, |t| cbrt(t)),
        (Fn1::Tan, |t| tan(t)),
        (Fn1::Log10, |t| log10(t)),
        (Fn1::Exp10, |t| exp10(t)),
        (Fn1::Erfc, |t| erfc(t)),
        (Fn1::Lgamma, |t| lgamma(t)),
        (Fn1::Tgamma, |t| tgamma(t)),
        (Fn1::Rcbrt, |t| rcbrt(t)),
        (Fn1::Normcdf, |t| normcdf(t)),
        (Fn1::Sinpi, |t| sinpi(t)),
        (Fn1::Cospi, |t| cospi(t)),
        (Fn1::Erfcx, |t| erfcx(t)),
        (Fn1::Erfcinv, |t| erfcinv(t)),
        (Fn1::Normcdfinv, |t| normcdfinv(t)),
        (Fn1::CylBesselI0, |t| cyl_bessel_i0(t)),
        (Fn1::CylBesselI1, |t| cyl_bessel_i1(t)),
        (Fn1::J0, |t| j0(t)),
        (Fn1::J1, |t| j1(t)),
        (Fn1::Y0, |t| y0(t)),
        (Fn1::Y1, |t| y1(t)),
    ]
}

#[test]
fn f32_results_are_the_math_librarys_bits() {
    let xs = inputs();
    for (f, op) in unary_cases() {
        let out = eval(&[buf(&xs)], |t| op(t[0])).to_vec::<f32>().unwrap();
        for (x, g) in xs.iter().zip(&out) {
            assert!(same(*g, eval_f32(f, *x)), "{f:?}({x}) = {g}");
        }
    }
    let ys: Vec<f32> = xs.iter().rev().copied().collect();
    type BinaryFn = fn(Tile, Tile) -> Tile;
    let cases: [(Fn2, BinaryFn); 5] = [
        (Fn2::Atan2, |a, b| atan2(a, b)),
        (Fn2::Pow, |a, b| pow(a, b)),
        (Fn2::Hypot, |a, b| hypot(a, b)),
        (Fn2::Remainder, |a, b| remainder(a, b)),
        (Fn2::Rhypot, |a, b| rhypot(a, b)),
    ];
    for (f, op) in cases {
        let out = eval(&[buf(&xs), buf(&ys)], |t| op(t[0], t[1]))
            .to_vec::<f32>()
            .unwrap();
        for ((x, y), g) in xs.iter().zip(&ys).zip(&out) {
            assert!(same(*g, eval2_f32(f, *x, *y)), "{f:?}({x}, {y}) = {g}");
        }
    }
}

#[test]
fn known_values_and_special_cases() {
    let pi = std::f32::consts::PI;
    let cases: [(f32, f32, UnaryFn); 91] = [
        (1.0, pi / 2.0, |t| asin(t)),
        (-1.0, pi, |t| acos(t)),
        (f32::INFINITY, pi / 2.0, |t| atan(t)),
        (-0.0, -0.0, |t| sinh(t)),
        (0.0, 1.0, |t| cosh(t)),
        (-0.0, -0.0, |t| asinh(t)),
        (1.0, 0.0, |t| acosh(t)),
        (1.0, f32::INFINITY, |t| atanh(t)),
        (-1.0, f32::NEG_INFINITY, |t| log1p(t)),
        (f32::NEG_INFINITY, -1.0, |t| expm1(t)),
        (-1.0, f32::NEG_INFINITY, |t| erfinv(t)),
        (-27.0, -3.0, |t| cbrt(t)),
        (-0.0, f32::NEG_INFINITY, |t| rcbrt(t)),
        (-8.0, -0.5, |t| rcbrt(t)),
        (f32::INFINITY, 0.0, |t| rcbrt(t)),
        (0.0, 0.5, |t| normcdf(t)),
        (f32::NEG_INFINITY, 0.0, |t| normcdf(t)),
        (f32::INFINITY, 1.0, |t| normcdf(t)),
        (-0.0, -0.0, |t| tan(t)),
        (f32::INFINITY, f32::NAN, |t| tan(t)),
        (1000.0, 3.0, |t| log10(t)),
        (0.0, f32::NEG_INFINITY, |t| log10(t)),
        (2.0, 100.0, |t| exp10(t)),
        (39.0, f32::INFINITY, |t| exp10(t)),
        (-46.0, 0.0, |t| exp10(t)),
        (0.0, 1.0, |t| erfc(t)),
        (f32::NEG_INFINITY, 2.0, |t| erfc(t)),
        (f32::INFINITY, 0.0, |t| erfc(t)),
        (2.0, 0.0, |t| lgamma(t)),
        (-3.0, f32::INFINITY, |t| lgamma(t)),
        (5.0, 24.0, |t| tgamma(t)),
        (-0.0, f32::NEG_INFINITY, |t| tgamma(t)),
        (-2.0, f32::NAN, |t| tgamma(t)),
        // IEEE 754's sinPi and cosPi: signed zeros at the integers and half-integers.
        (0.5, 1.0, |t| sinpi(t)),
        (-1.5, 1.0, |t| sinpi(t)),
        (1.0 / 6.0, 0.5, |t| sinpi(t)),
        (-0.0, -0.0, |t| sinpi(t)),
        (3.0, 0.0, |t| sinpi(t)),
        (2.0, 0.0, |t| sinpi(t)),
        (-3.0, -0.0, |t| sinpi(t)),
        (-2.0, -0.0, |t| sinpi(t)),
        (1e30, 0.0, |t| sinpi(t)),
        (-16777215.0, -0.0, |t| sinpi(t)),
        (f32::INFINITY, f32::NAN, |t| sinpi(t)),
        (f32::NAN, f32::NAN, |t| sinpi(t)),
        (-0.0, 1.0, |t| cospi(t)),
        (1.0, -1.0, |t| cospi(t)),
        (-16777215.0, -1.0, |t| cospi(t)),
        (16777216.0, 1.0, |t| cospi(t)),
        (0.5, 0.0, |t| cospi(t)),
        (-2.5, 0.0, |t| cospi(t)),
        (8388607.5, 0.0, |t| cospi(t)),
        (-0.25, std::f32::consts::FRAC_1_SQRT_2, |t| cospi(t)),
        (f32::NEG_INFINITY, f32::NAN, |t| cospi(t)),
        (0.0, 1.0, |t| erfcx(t)),
        (-0.0, 1.0, |t| erfcx(t)),
        (f32::INFINITY, 0.0, |t| erfcx(t)),
        (f32::NEG_INFINITY, f32::INFINITY, |t| erfcx(t)),
        (-9.5, f32::INFINITY, |t| erfcx(t)),
        (1.0, 0.0, |t| erfcinv(t)),
        (0.0, f32::INFINITY, |t| erfcinv(t)),
        (2.0, f32::NEG_INFINITY, |t| erfcinv(t)),
        (-0.0, f32::INFINITY, |t| erfcinv(t)),
        (0.5, 0.0, |t| normcdfinv(t)),
        (0.0, f32::NEG_INFINITY, |t| normcdfinv(t)),
        (1.0, f32::INFINITY, |t| normcdfinv(t)),
        (0.0, 1.0, |t| cyl_bessel_i0(t)),
        (-0.0, 1.0, |t| cyl_bessel_i0(t)),
        (f32::NEG_INFINITY, f32::INFINITY, |t| cyl_bessel_i0(t)),
        (92.0, f32::INFINITY, |t| cyl_bessel_i0(t)),
        (-0.0, -0.0, |t| cyl_bessel_i1(t)),
        (f32::NEG_INFINITY, f32::NEG_INFINITY, |t| cyl_bessel_i1(t)),
        (f32::INFINITY, f32::INFINITY, |t| cyl_bessel_i1(t)),
        (-92.0, f32::NEG_INFINITY, |t| cyl_bessel_i1(t)),
        (0.0, 1.0, |t| j0(t)),
        (f32::NEG_INFINITY, 0.0, |t| j0(t)),
        (f32::INFINITY, 0.0, |t| j0(t)),
        (-0.0, -0.0, |t| j1(t)),
        (f32::INFINITY, 0.0, |t| j1(t)),
        (f32::NEG_INFINITY, -0.0, |t| j1(t)),
        (f32::NAN, f32::NAN, |t| j0(t)),
        (0.0, f32::NEG_INFINITY, |t| y0(t)),
        (-0.0, f32::NEG_INFINITY, |t| y0(t)),
        (-1.0, f32::NAN, |t| y0(t)),
        (f32::NEG_INFINITY, f32::NAN, |t| y0(t)),
        (f32::INFINITY, 0.0, |t| y0(t)),
        (0.0, f32::NEG_INFINITY, |t| y1(t)),
        (-0.0, f32::NEG_INFINITY, |t| y1(t)),
        (1e-39, f32::NEG_INFINITY, |t| y1(t)),
        (-1e-30, f32::NAN, |t| y1(t)),
        (f32::INFINITY, 0.0, |t| y1(t)),
    ];
    for (x, want, f) in cases {
        let got = eval(&[buf(&[x])], |t| f(t[0])).to_vec::<f32>().unwrap()[0];
        assert!(same(got, want), "{x} -> {got}, want {want}");
    }
    // pow's C99 special values.
    let pw = |x: f32, y: f32| {
        eval(&[buf(&[x]), buf(&[y])], |t| pow(t[0], t[1]))
            .to_vec::<f32>()
            .unwrap()[0]
    };
    assert_eq!(pw(f32::NAN, 0.0), 1.0);
    assert_eq!(pw(1.0, f32::NAN), 1.0);
    assert_eq!(pw(-1.0, f32::INFINITY), 1.0);
    assert!(pw(-2.0, 0.5).is_nan());
    assert_eq!(pw(-2.0, 3.0), -8.0);
    assert_eq!(pw(-0.0, -3.0), f32::NEG_INFINITY);
    assert_eq!(pw(-0.0, 2.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(pw(-f32::INFINITY, 0.5), f32::INFINITY);
    assert_eq!(pw(2.0, 10.0), 1024.0);
    assert_eq!(pw(10.0, -2.0), 0.01);
    let h = eval(&[buf(&[f32::INFINITY, 3e38])], |t| hypot(t[0], f32::NAN))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(h[0], f32::INFINITY);
    let a = eval(&[buf(&[-0.0f32, 0.0])], |t| atan2(t[0], -1.0))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(a, vec![-pi, pi]);
    // Outside their domains erfcinv and normcdfinv are NaN; rhypot is +0 at an infinite
    // side even next to a NaN, +inf at two zeros.
    let un = |f: UnaryFn, xs: &[f32]| eval(&[buf(xs)], |t| f(t[0])).to_vec::<f32>().unwrap();
    for g in un(
        |t| erfcinv(t),
        &[-1e-30, 2.000_000_2, f32::INFINITY, f32::NAN],
    ) {
        assert!(g.is_nan(), "erfcinv outside [0, 2]: {g}");
    }
    for g in un(
        |t| normcdfinv(t),
        &[-1e-45, 1.000_000_1, f32::NEG_INFINITY, f32::NAN],
    ) {
        assert!(g.is_nan(), "normcdfinv outside [0, 1]: {g}");
    }
    let rh = eval(&[buf(&[f32::INFINITY, f32::NAN, 0.0, -0.0])], |t| {
        rhypot(t[0], select(isnan(t[0]), f32::NEG_INFINITY, f32::NAN))
    })
    .to_vec::<f32>()
    .unwrap();
    assert!(same(rh[0], 0.0) && same(rh[1], 0.0), "{rh:?}");
    let rz = eval(&[buf(&[0.0f32, -0.0])], |t| rhypot(t[0], -0.0))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(rz, vec![f32::INFINITY, f32::INFINITY]);
}

/// Pairs for `remainder`: special values, exact ties `(n + 1/2) y` (to even), multiples of
/// `y` of both signs (signed zeros), the widest exponent gaps, and random bit patterns.
fn remainder_pairs() -> (Vec<f32>, Vec<f32>) {
    let special = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        3.0,
        f32::from_bits(1),
        -f32::from_bits(3),
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for &x in &special {
        for &y in &special {
            xs.push(x);
            ys.push(y);
        }
    }
    for y in [1.0f32, 3.0, -0.75, 1e-40, 2.5e30, f32::from_bits(1)] {
        for n in -41i32..41 {
            let tie = (n as f64 + 0.5) * y as f64;
            let mult = n as f64 * y as f64;
            for v in [tie, mult] {
                if (v as f32) as f64 == v {
                    xs.push(v as f32);
                    ys.push(y);
                }
            }
        }
    }
    let mut r = Rng::new(13);
    for i in 0..6000 {
        let x = f32::from_bits(r.next_u64() as u32);
        let y = if i % 3 == 0 {
            // Nearby exponents: quotients that need one reduction step or none.
            x * (r.f32s(1, 0.01, 100.0)[0])
        } else {
            f32::from_bits(r.next_u64() as u32)
        };
        xs.push(x);
        ys.push(y);
    }
    (xs, ys)
}

#[test]
fn remainder_is_ieee_remainder_exactly() {
    let (xs, ys) = remainder_pairs();
    let out = eval(&[buf(&xs), buf(&ys)], |t| remainder(t[0], t[1]))
        .to_vec::<f32>()
        .unwrap();
    let mut ties = 0;
    for ((x, y), g) in xs.iter().zip(&ys).zip(&out) {
        let want = libm::remainderf(*x, *y);
        assert!(
            same(*g, want),
            "remainder({x:e}, {y:e}) = {g:e}, want {want:e}"
        );
        if g.abs() == y.abs() / 2.0 {
            ties += 1;
        }
    }
    assert!(ties > 50, "{ties} ties");
    // f16 rounds nothing (the remainder of two f16 values is an f16); f64 is libm's.
    let h: Vec<f16> = xs.iter().map(|&x| f16::from_f32(x)).collect();
    let hy: Vec<f16> = ys.iter().map(|&y| f16::from_f32(y)).collect();
    let out = eval(&[buf(&h), buf(&hy)], |t| remainder(t[0], t[1]))
        .to_vec::<f16>()
        .unwrap();
    for ((x, y), g) in h.iter().zip(&hy).zip(&out) {
        let want = libm::remainderf(x.to_f32(), y.to_f32());
        assert!(same(g.to_f32(), want), "remainder({x}, {y}) f16 = {g}");
    }
    let d: Vec<f64> = xs.iter().map(|&x| x as f64 * 1e200).collect();
    let dy: Vec<f64> = ys.iter().map(|&y| y as f64 * 1e-100).collect();
    let out = eval(&[buf(&d), buf(&dy)], |t| remainder(t[0], t[1]))
        .to_vec::<f64>()
        .unwrap();
    for ((x, y), g) in d.iter().zip(&dy).zip(&out) {
        let want = libm::remainder(*x, *y);
        assert!(
            g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
            "remainder({x:e}, {y:e}) f64 = {g:e}"
        );
    }
}

#[test]
fn narrow_floats_round_the_f32_result_and_f64_uses_std() {
    let xs: Vec<f32> = inputs().into_iter().filter(|x| x.abs() < 60000.0).collect();
    let h: Vec<f16> = xs.iter().map(|&x| f16::from_f32(x)).collect();
    let b: Vec<bf16> = xs.iter().map(|&x| bf16::from_f32(x)).collect();
    let d: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    for (f, op) in unary_cases() {
        let out = eval(&[buf(&h)], |t| op(t[0])).to_vec::<f16>().unwrap();
        for (x, g) in h.iter().zip(&out) {
            let want = f16::from_f32(eval_f32(f, x.to_f32()));
            assert!(same(g.to_f32(), want.to_f32()), "{f:?}({x}) f16 = {g}");
        }
        let out = eval(&[buf(&b)], |t| op(t[0])).to_vec::<bf16>().unwrap();
        for (x, g) in b.iter().zip(&out) {
            let want = bf16::from_f32(eval_f32(f, x.to_f32()));
            assert!(same(g.to_f32(), want.to_f32()), "{f:?}({x}) bf16 = {g}");
        }
        let out = eval(&[buf(&d)], |t| op(t[0])).to_vec::<f64>().unwrap();
        for (x, g) in d.iter().zip(&out) {
            let want = match f {
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
                Fn1::Exp10 => libm::exp10(*x),
                Fn1::Erfc => libm::erfc(*x),
                Fn1::Lgamma => libm::lgamma(*x),
                Fn1::Tgamma => libm::tgamma(*x),
                Fn1::Rcbrt => 1.0 / x.cbrt(),
                Fn1::J0 => libm::j0(*x),
                Fn1::J1 => libm::j1(*x),
                Fn1::Y0 => libm::y0(*x),
                Fn1::Y1 => libm::y1(*x),
                Fn1::Normcdf => 0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2),
                // Computed in f64 by the interpreter's own routes: within a few f64 ulps of
                // the exact values, which the f32 results (correctly rounded) bracket.
                Fn1::Sinpi
                | Fn1::Cospi
                | Fn1::Erfcx
                | Fn1::Erfcinv
                | Fn1::Normcdfinv
                | Fn1::CylBesselI0
                | Fn1::CylBesselI1 => {
                    let e = eval_f32(f, *x as f32);
                    let ok = if e.is_nan() || e.is_infinite() || e == 0.0 {
                        same(*g as f32, e) || (e.is_infinite() && g.abs() > 3e38)
                    } else {
                        // Within the f32 rounding of the f64 value (subnormals: absolute).
                        let ulp = (e.abs() as f64 * 2f64.powi(-23)).max(2f64.powi(-149));
                        (g - e as f64).abs() <= 0.5 * ulp * 1.0001
                    };
                    assert!(ok, "{f:?}({x}) f64 = {g}, f32 {e}");
                    continue;
                }
                // Newton-refined: within 1e-12 relative of the exact value.
                Fn1::Erfinv => {
                    let e = eval_f32(f, *x as f32) as f64;
                    assert!(
                        (g - e).abs() <= 1e-6 * e.abs().max(1e-30) || g.is_nan() == e.is_nan(),
                        "erfinv f64 {x}: {g} vs {e}"
                    );
                    continue;
                }
            };
            assert!(
                *g == want || (g.is_nan() && want.is_nan()),
                "{f:?}({x}) f64 = {g}"
            );
        }
    }
}

#[test]
fn rounding_family_is_exact() {
    let xs = [
        0.5f32, 1.5, 2.5, -0.5, -2.5, -0.3, 0.49999997, 8388609.0, -1e30, 3.7,
    ];
    let r = |op: fn(Tile) -> Tile| eval(&[buf(&xs)], |t| op(t[0])).to_vec::<f32>().unwrap();
    let round_want: Vec<f32> = xs.iter().map(|x| x.round()).collect();
    let rint_want: Vec<f32> = xs.iter().map(|x| x.round_ties_even()).collect();
    let trunc_want: Vec<f32> = xs.iter().map(|x| x.trunc()).collect();
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(r(|t| round(t))), bits(round_want));
    assert_eq!(bits(r(|t| rint(t))), bits(rint_want.clone()));
    assert_eq!(bits(r(|t| nearbyint(t))), bits(rint_want));
    assert_eq!(bits(r(|t| trunc(t))), bits(trunc_want));
    let h = [
        f16::from_f32(2.5),
        f16::from_f32(-3.5),
        f16::from_f32(65504.0),
    ];
    let out = eval(&[buf(&h)], |t| round(t[0])).to_vec::<f16>().unwrap();
    assert_eq!(
        out,
        vec![
            f16::from_f32(3.0),
            f16::from_f32(-4.0),
            f16::from_f32(65504.0)
        ]
    );
    let d = [2.5f64, -0.5, 4503599627370497.0];
    let out = eval(&[buf(&d)], |t| rint(t[0])).to_vec::<f64>().unwrap();
    assert_eq!(out, vec![2.0, -0.0, 4503599627370497.0]);
}

#[test]
fn classification_and_copysign() {
    let xs = [
        0.0f32,
        -0.0,
        1.0,
        -2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
    ];
    let b = |op: fn(Tile) -> Tile| {
        eval(&[buf(&xs)], |t| op(t[0]).to::<i32>())
            .to_vec::<i32>()
            .unwrap()
    };
    assert_eq!(b(|t| isnan(t)), vec![0, 0, 0, 0, 0, 0, 1, 1]);
    assert_eq!(b(|t| isinf(t)), vec![0, 0, 0, 0, 1, 1, 0, 0]);
    assert_eq!(b(|t| isfinite(t)), vec![1, 1, 1, 1, 0, 0, 0, 0]);
    assert_eq!(b(|t| signbit(t)), vec![0, 1, 0, 1, 0, 1, 0, 1]);
    let out = eval(&[buf(&xs)], |t| copysign(3.0, t[0]))
        .to_vec::<f32>()
        .unwrap();
    let want: Vec<f32> = xs.iter().map(|x| 3.0f32.copysign(*x)).collect();
    assert_eq!(out, want);
    let h = [f16::from_f32(-1.5), f16::from_f32(2.0)];
    let out = eval(&[buf(&h)], |t| copysign(t[0], -0.0))
        .to_vec::<f16>()
        .unwrap();
    assert_eq!(out, vec![f16::from_f32(-1.5), f16::from_f32(-2.0)]);
    let d = [1.0f64, -1.0];
    let out = eval(&[buf(&d)], |t| copysign(t[0], t[0] * -1.0))
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(out, vec![-1.0, 1.0]);
    // Integers are a trace error naming the op.
    let e = trace("k", |p| {
        let x = p.scalar("x", DType::I32);
        let _ = pow(x, x);
    })
    .unwrap_err();
    assert!(e.message.contains("pow"), "{e}");
}

/// ldexp's exact result for an f32 through f64 (where `x * 2^n` is exact for |n| <= 300),
/// rounded once; beyond, the clamped exponent gives the same 0 or inf.
fn ldexp_ref(x: f32, n: i32) -> f32 {
    (x as f64 * 2f64.powi(n.clamp(-300, 300))) as f32
}

#[test]
fn ldexp_is_exact_with_gradual_underflow_and_overflow() {
    let xs = [
        1.0f32,
        -1.5,
        3.0,
        0.75,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(3),
        -f32::from_bits(0x007F_FFFF),
        f32::MAX,
        f32::MIN,
        1.000_000_1,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let ns = [
        0i32,
        1,
        -1,
        23,
        -23,
        100,
        -126,
        -127,
        -149,
        -150,
        -151,
        127,
        128,
        254,
        -254,
        277,
        278,
        -277,
        -278,
        -300,
        1000,
        -1000,
        i32::MAX,
        i32::MIN,
    ];
    let mut r = Rng::new(11);
    let mut px = Vec::new();
    let mut pn = Vec::new();
    for &x in &xs {
        for &n in &ns {
            px.push(x);
            pn.push(n);
        }
    }
    for _ in 0..4000 {
        px.push(f32::from_bits(r.next_u64() as u32));
        pn.push((r.next_u64() % 640) as i32 - 320);
    }
    let out = eval(&[buf(&px), buf(&pn)], |t| ldexp(t[0], t[1]))
        .to_vec::<f32>()
        .unwrap();
    for ((x, n), g) in px.iter().zip(&pn).zip(&out) {
        assert!(same(*g, ldexp_ref(*x, *n)), "ldexp({x:e}, {n}) = {g:e}");
    }
    // Halfway cases round to even once: 3 * 2^-150 is 1.5 subnormal ulps, 2 of them.
    let g = eval(&[buf(&[3.0f32, 5.0])], |t| ldexp(t[0], -150))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(g, vec![f32::from_bits(2), f32::from_bits(2)]);
    // f64 against libm's scalbn, with exponents of every width; f16 and bf16.
    let dx: Vec<f64> = px.iter().map(|&x| x as f64 * 1e-300).collect();
    let dn: Vec<i64> = pn.iter().map(|&n| n as i64 * 7).collect();
    let out = eval(&[buf(&dx), buf(&dn)], |t| ldexp(t[0], t[1]))
        .to_vec::<f64>()
        .unwrap();
    for ((x, n), g) in dx.iter().zip(&dn).zip(&out) {
        let want = libm::scalbn(*x, (*n).clamp(-5000, 5000) as i32);
        assert!(
            g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
            "ldexp({x:e}, {n}) f64 = {g:e}, want {want:e}"
        );
    }
    let big = eval(&[buf(&[1.0f64, 1e-300])], |t| ldexp(t[0], i64::MIN))
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(big, vec![0.0, 0.0]);
    let un = eval(&[buf(&[1.0f32, -3.0]), buf(&[u64::MAX, 1 << 40])], |t| {
        ldexp(t[0], t[1])
    })
    .to_vec::<f32>()
    .unwrap();
    assert_eq!(un, vec![f32::INFINITY, f32::NEG_INFINITY]);
    let h: Vec<f16> = [1.0f32, 65504.0, 6e-8, -0.1]
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    for n in [-30i32, -24, -14, 0, 1, 15, 16] {
        let out = eval(&[buf(&h)], |t| ldexp(t[0], n))
            .to_vec::<f16>()
            .unwrap();
        for (x, g) in h.iter().zip(&out) {
            let want = f16::from_f64(x.to_f64() * 2f64.powi(n));
            assert_eq!(g.to_bits(), want.to_bits(), "ldexp({x}, {n}) f16");
        }
    }
    let b = [bf16::from_f32(1.5), bf16::from_f32(-3e38)];
    let out = eval(&[buf(&b)], |t| ldexp(t[0], -133))
        .to_vec::<bf16>()
        .unwrap();
    let want: Vec<bf16> = b
        .iter()
        .map(|x| bf16::from_f64(x.to_f64() * 2f64.powi(-133)))
        .collect();
    assert_eq!(out, want);
    let e = trace("k", |p| {
        let x = p.scalar("x", DType::F32);
        let _ = ldexp(x, 1.5);
    })
    .unwrap_err();
    assert!(e.message.contains("ldexp"), "{e}");
}

#[test]
fn nextafter_steps_one_representable_value() {
    let vals = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        2.0,
        0.3,
    ];
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for &x in &vals {
        for &y in &vals {
            xs.push(x);
            ys.push(y);
        }
    }
    let mut r = Rng::new(5);
    for _ in 0..2000 {
        xs.push(f32::from_bits(r.next_u64() as u32));
        ys.push(f32::from_bits(r.next_u64() as u32));
    }
    let out = eval(&[buf(&xs), buf(&ys)], |t| nextafter(t[0], t[1]))
        .to_vec::<f32>()
        .unwrap();
    for ((x, y), g) in xs.iter().zip(&ys).zip(&out) {
        let want = libm::nextafterf(*x, *y);
        assert!(
            same(*g, want),
            "nextafter({x:e}, {y:e}) = {g:e}, want {want:e}"
        );
    }
    let dx: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    let dy: Vec<f64> = ys.iter().map(|&y| y as f64).collect();
    let out = eval(&[buf(&dx), buf(&dy)], |t| nextafter(t[0], t[1]))
        .to_vec::<f64>()
        .unwrap();
    for ((x, y), g) in dx.iter().zip(&dy).zip(&out) {
        let want = libm::nextafter(*x, *y);
        assert!(
            g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
            "nextafter({x:e}, {y:e}) f64 = {g:e}"
        );
    }
    // f16 steps f16's own ulps (not f32's).
    let h = [
        f16::from_f32(1.0),
        f16::from_f32(0.0),
        f16::MAX,
        f16::from_f32(-2.0),
    ];
    let out = eval(&[buf(&h)], |t| nextafter(t[0], f32::INFINITY))
        .to_vec::<f16>()
        .unwrap();
    let want: Vec<u16> = vec![0x3C01, 0x0001, 0x7C00, 0xBFFF];
    assert_eq!(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
    let b = [bf16::from_f32(1.0), bf16::from_f32(-0.0)];
    let out = eval(&[buf(&b)], |t| nextafter(t[0], -1.0))
        .to_vec::<bf16>()
        .unwrap();
    assert_eq!(
        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        vec![0x3F7F, 0x8001]
    );
}

#[test]
fn ilogb_is_the_exponent_and_cudas_special_values() {
    let mut xs = vec![
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.75,
        3.0,
        1024.0,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x007F_FFFF),
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut r = Rng::new(3);
    xs.extend((0..2000).map(|_| f32::from_bits(r.next_u64() as u32)));
    let out = eval(&[buf(&xs)], |t| ilogb(t[0])).to_vec::<i32>().unwrap();
    for (x, g) in xs.iter().zip(&out) {
        assert_eq!(*g, libm::ilogbf(*x), "ilogb({x:e})");
    }
    assert_eq!(&out[..4], &[i32::MIN, i32::MIN, 0, 0]);
    assert_eq!(&out[11..14], &[i32::MAX, i32::MAX, i32::MIN]);
    assert_eq!((out[8], out[9]), (-149, -127));
    let d: Vec<f64> = xs.iter().map(|&x| x as f64 * 1e-300).collect();
    let out = eval(&[buf(&d)], |t| ilogb(t[0])).to_vec::<i32>().unwrap();
    for (x, g) in d.iter().zip(&out) {
        assert_eq!(*g, libm::ilogb(*x), "ilogb({x:e}) f64");
    }
    let h = [
        f16::from_bits(1),
        f16::from_bits(0x03FF),
        f16::from_f32(1.0),
        f16::MAX,
        f16::INFINITY,
    ];
    let out = eval(&[buf(&h)], |t| ilogb(t[0])).to_vec::<i32>().unwrap();
    assert_eq!(out, vec![-24, -15, 0, 15, i32::MAX]);
    let b = [bf16::from_bits(1), bf16::from_f32(-3.0e38), bf16::NAN];
    let out = eval(&[buf(&b)], |t| ilogb(t[0])).to_vec::<i32>().unwrap();
    assert_eq!(out, vec![-133, 127, i32::MIN]);
}

#[test]
fn frexp_splits_mantissa_and_exponent() {
    let mut xs = vec![
        0.0f32,
        -0.0,
        1.0,
        -0.75,
        3.0,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut r = Rng::new(9);
    xs.extend((0..2000).map(|_| f32::from_bits(r.next_u64() as u32)));
    let m = eval(&[buf(&xs)], |t| frexp(t[0]).0)
        .to_vec::<f32>()
        .unwrap();
    let e = eval(&[buf(&xs)], |t| frexp(t[0]).1)
        .to_vec::<i32>()
        .unwrap();
    for (i, x) in xs.iter().enumerate() {
        let (wm, we) = libm::frexpf(*x);
        // C leaves the exponent of inf and NaN unspecified; here it is 0, as libm's.
        assert!(
            same(m[i], wm) && e[i] == we,
            "frexp({x:e}) = ({:e}, {}), want ({wm:e}, {we})",
            m[i],
            e[i]
        );
    }
    let h = [f16::from_bits(1), f16::from_f32(-48.0)];
    let m = eval(&[buf(&h)], |t| frexp(t[0]).0).to_vec::<f16>().unwrap();
    let e = eval(&[buf(&h)], |t| frexp(t[0]).1).to_vec::<i32>().unwrap();
    assert_eq!(m, vec![f16::from_f32(0.5), f16::from_f32(-0.75)]);
    assert_eq!(e, vec![-23, 6]);
}

/// C's `logb` from `ilogb`: the exponent, -inf at zeros, +inf at infinities, NaN at NaN.
fn logb_ref(x: f64, ilogb: i32) -> f64 {
    match x {
        _ if x.is_nan() => f64::NAN,
        0.0 => f64::NEG_INFINITY,
        _ if x.is_infinite() => f64::INFINITY,
        _ => ilogb as f64,
    }
}

#[test]
fn logb_is_the_exponent_as_a_float() {
    let mut xs = vec![
        0.0f32,
        -0.0,
        1.0,
        -0.75,
        3.0,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut r = Rng::new(5);
    xs.extend((0..2000).map(|_| f32::from_bits(r.next_u64() as u32)));
    let out = eval(&[buf(&xs)], |t| logb(t[0])).to_vec::<f32>().unwrap();
    for (x, g) in xs.iter().zip(&out) {
        let want = logb_ref(*x as f64, libm::ilogbf(*x)) as f32;
        assert!(
            g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
            "logb({x:e}) = {g}, want {want}"
        );
    }
    assert_eq!(&out[..3], &[f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0]);
    assert_eq!(
        (out[6], out[8], out[9]),
        (-149.0, f32::INFINITY, f32::INFINITY)
    );
    let d: Vec<f64> = xs.iter().map(|&x| x as f64 * 1e-300).collect();
    let out = eval(&[buf(&d)], |t| logb(t[0])).to_vec::<f64>().unwrap();
    for (x, g) in d.iter().zip(&out) {
        let want = logb_ref(*x, libm::ilogb(*x));
        assert!(
            g == &want || (g.is_nan() && want.is_nan()),
            "logb({x:e}) f64"
        );
    }
    let h = [f16::from_bits(1), f16::MAX, f16::from_f32(0.0)];
    let out = eval(&[buf(&h)], |t| logb(t[0])).to_vec::<f16>().unwrap();
    assert_eq!(
        out.iter().map(|v| v.to_f32()).collect::<Vec<_>>(),
        vec![-24.0, 15.0, f32::NEG_INFINITY]
    );
}

#[test]
fn fdim_is_the_positive_difference() {
    let mut r = Rng::new(6);
    let mut xs = vec![
        1.0f32,
        2.0,
        -0.0,
        0.0,
        f32::INFINITY,
        f32::NAN,
        1.0,
        f32::MAX,
    ];
    let mut ys = vec![
        2.0f32,
        1.0,
        0.0,
        -0.0,
        f32::INFINITY,
        1.0,
        f32::NAN,
        -f32::MAX,
    ];
    for _ in 0..2000 {
        xs.push(f32::from_bits(r.next_u64() as u32));
        ys.push(f32::from_bits(r.next_u64() as u32));
    }
    let out = eval(&[buf(&xs), buf(&ys)], |t| fdim(t[0], t[1]))
        .to_vec::<f32>()
        .unwrap();
    for ((x, y), g) in xs.iter().zip(&ys).zip(&out) {
        let want = libm::fdimf(*x, *y);
        assert!(
            g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
            "fdim({x:e}, {y:e}) = {g}, want {want}"
        );
    }
    assert_eq!(&out[..5], &[0.0, 1.0, 0.0, 0.0, 0.0]);
    assert!(out[5].is_nan() && out[6].is_nan());
    assert_eq!(out[7], f32::INFINITY);
}

/// Orders and arguments for `jn` and `yn`: every order to 12 of both signs and larger ones,
/// each beside random arguments of `[-60, 60]`, tiny ones and the special values.
fn bessel_n_pairs() -> (Vec<i32>, Vec<f32>) {
    let mut r = Rng::new(29);
    let (mut ns, mut xs) = (Vec::new(), Vec::new());
    let special = [
        0.0f32,
        -0.0,
        1e-40,
        1e-8,
        1.0,
        -1.0,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let orders: Vec<i32> = (-12..=12).chain([20, 50, -51, 200]).collect();
    for &n in &orders {
        let mut v = special.to_vec();
        v.extend(r.f32s(24, -60.0, 60.0));
        v.push(r.uniform(0.0, 1.5 * n.abs() as f64) as f32);
        for x in v {
            ns.push(n);
            xs.push(x);
        }
    }
    (ns, xs)
}

#[test]
fn jn_and_yn_are_the_math_librarys_bits() {
    let (ns, xs) = bessel_n_pairs();
    type BesselN = fn(Tile, Tile) -> Tile;
    type Libm = fn(i32, f64) -> f64;
    let cases: [(Fn2, BesselN, Libm); 2] = [
        (Fn2::Jn, |n, x| jn(n, x), libm::jn),
        (Fn2::Yn, |n, x| yn(n, x), libm::yn),
    ];
    for (f, op, g) in cases {
        // An i32 tile of orders, elementwise.
        let out = eval(&[buf(&ns), buf(&xs)], |t| op(t[0], t[1]))
            .to_vec::<f32>()
            .unwrap();
        for ((n, x), got) in ns.iter().zip(&xs).zip(&out) {
            let want = eval2_f32(f, *n as f32, *x);
            assert!(
                same(*got, want),
                "{f:?}({n}, {x:e}) = {got:e}, want {want:e}"
            );
        }
        // A literal order, and an i64 one.
        let out = eval(&[buf(&xs)], |t| match f {
            Fn2::Jn => jn(-5, t[0]),
            _ => yn(-5, t[0]),
        })
        .to_vec::<f32>()
        .unwrap();
        for (x, got) in xs.iter().zip(&out) {
            assert!(same(*got, eval2_f32(f, -5.0, *x)), "{f:?}(-5, {x:e})");
        }
        let out = eval(&[buf(&xs)], |t| op(full::<i64>([1], 7), t[0]))
            .to_vec::<f32>()
            .unwrap();
        for (x, got) in xs.iter().zip(&out) {
            assert!(same(*got, eval2_f32(f, 7.0, *x)), "{f:?}(7, {x:e})");
        }
        // f16 and bf16 compute in f32 and round once; f64 is the libm crate's.
        let h: Vec<f16> = xs.iter().map(|&x| f16::from_f32(x)).collect();
        let out = eval(&[buf(&ns), buf(&h)], |t| op(t[0], t[1]))
            .to_vec::<f16>()
            .unwrap();
        for ((n, x), got) in ns.iter().zip(&h).zip(&out) {
            let want = f16::from_f32(eval2_f32(f, *n as f32, x.to_f32()));
            assert!(same(got.to_f32(), want.to_f32()), "{f:?}({n}, {x}) f16");
        }
        let b: Vec<bf16> = xs.iter().map(|&x| bf16::from_f32(x)).collect();
        let out = eval(&[buf(&ns), buf(&b)], |t| op(t[0], t[1]))
            .to_vec::<bf16>()
            .unwrap();
        for ((n, x), got) in ns.iter().zip(&b).zip(&out) {
            let want = bf16::from_f32(eval2_f32(f, *n as f32, x.to_f32()));
            assert!(same(got.to_f32(), want.to_f32()), "{f:?}({n}, {x}) bf16");
        }
        let d: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        let out = eval(&[buf(&ns), buf(&d)], |t| op(t[0], t[1]))
            .to_vec::<f64>()
            .unwrap();
        for ((n, x), got) in ns.iter().zip(&d).zip(&out) {
            let v = if f == Fn2::Yn && *x == 0.0 {
                f64::NEG_INFINITY
            } else {
                g(n.abs(), *x)
            };
            let want = if *n < 0 && n % 2 != 0 { -v } else { v };
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{f:?}({n}, {x:e}) f64 = {got:e}, want {want:e}"
            );
        }
    }
}

#[test]
fn jn_and_yn_special_values_and_errors() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let xs = [0.0f32, -0.0, inf, -inf, nan, -1.0];
    let cases: [(i32, [f32; 6]); 4] = [
        (0, [1.0, 1.0, 0.0, 0.0, nan, 0.765_197_7]),
        (3, [0.0, -0.0, 0.0, -0.0, nan, -0.019_563_355]),
        (-3, [-0.0, 0.0, -0.0, 0.0, nan, 0.019_563_355]),
        (-4, [0.0, 0.0, 0.0, 0.0, nan, 0.002_476_638_9]),
    ];
    for (n, want) in cases {
        let out = eval(&[buf(&xs)], |t| jn(n, t[0])).to_vec::<f32>().unwrap();
        for ((x, got), w) in xs.iter().zip(&out).zip(want) {
            assert!(same(*got, w), "jn({n}, {x}) = {got:e}, want {w:e}");
        }
    }
    let ys = eval(&[buf(&xs)], |t| yn(-3, t[0])).to_vec::<f32>().unwrap();
    for (got, w) in ys.iter().zip([inf, inf, -0.0, nan, nan, nan]) {
        assert!(same(*got, w), "yn(-3, ..) = {ys:?}");
    }
    let ys = eval(&[buf(&xs)], |t| yn(2, t[0])).to_vec::<f32>().unwrap();
    for (got, w) in ys.iter().zip([-inf, -inf, 0.0, nan, nan, nan]) {
        assert!(same(*got, w), "yn(2, ..) = {ys:?}");
    }
    // A float order is a trace error at the caller's line.
    let mut line = 0;
    let e = trace("bad", |p| {
        let x = p.ptr("x", DType::F32);
        let offs = arange(0, 16);
        let t = load(x + offs, offs.lt(16), 0.0);
        line = line!() + 1;
        let y = jn(t, t);
        store(x + offs, y, offs.lt(16));
    })
    .unwrap_err();
    assert!(
        e.message.contains("jn needs an integer order, got f32[16]"),
        "{e}"
    );
    assert_eq!(e.loc.line, line, "{e}");
}

/// `quo` of `remquo` against the `libm` crate's (musl's, which keeps 31 bits): the same
/// three low bits of the magnitude and the same sign where they are not 0.
fn quo_agrees(got: i32, want: i32) -> bool {
    got.unsigned_abs() == want.unsigned_abs() % 8 && (got == 0 || (got < 0) == (want < 0))
}

#[test]
fn remquo_is_remainder_and_the_quotients_low_bits() {
    let (xs, ys) = remainder_pairs();
    let out = eval(&[buf(&xs), buf(&ys)], |t| remquo(t[0], t[1]).0)
        .to_vec::<f32>()
        .unwrap();
    let quo = eval(&[buf(&xs), buf(&ys)], |t| remquo(t[0], t[1]).1)
        .to_vec::<i32>()
        .unwrap();
    let mut odd = [0; 8];
    for (((x, y), r), q) in xs.iter().zip(&ys).zip(&out).zip(&quo) {
        let (wr, wq) = libm::remquof(*x, *y);
        assert!(same(*r, wr), "remquo({x:e}, {y:e}).0 = {r:e}, want {wr:e}");
        if r.is_nan() {
            assert_eq!(*q, 0, "remquo({x:e}, {y:e}).1 beside a NaN");
        } else {
            assert!(
                quo_agrees(*q, wq),
                "remquo({x:e}, {y:e}).1 = {q}, libm's {wq}"
            );
            odd[q.unsigned_abs() as usize] += 1;
        }
    }
    assert!(odd.iter().all(|&c| c > 20), "every low quotient: {odd:?}");
    // f16 goes through f32 (both results exact); f64 against libm's remquo.
    let h: Vec<f16> = xs.iter().map(|&x| f16::from_f32(x)).collect();
    let hy: Vec<f16> = ys.iter().map(|&y| f16::from_f32(y)).collect();
    let out = eval(&[buf(&h), buf(&hy)], |t| remquo(t[0], t[1]).0)
        .to_vec::<f16>()
        .unwrap();
    let quo = eval(&[buf(&h), buf(&hy)], |t| remquo(t[0], t[1]).1)
        .to_vec::<i32>()
        .unwrap();
    for (((x, y), r), q) in h.iter().zip(&hy).zip(&out).zip(&quo) {
        let (wr, wq) = libm::remquof(x.to_f32(), y.to_f32());
        assert!(same(r.to_f32(), wr), "remquo({x}, {y}) f16");
        assert!(
            r.is_nan() || quo_agrees(*q, wq),
            "remquo({x}, {y}).1 f16 = {q}, {wq}"
        );
    }
    let d: Vec<f64> = xs.iter().map(|&x| x as f64 * 1e200).collect();
    let dy: Vec<f64> = ys.iter().map(|&y| y as f64 * 1e-100).collect();
    let out = eval(&[buf(&d), buf(&dy)], |t| remquo(t[0], t[1]).0)
        .to_vec::<f64>()
        .unwrap();
    let quo = eval(&[buf(&d), buf(&dy)], |t| remquo(t[0], t[1]).1)
        .to_vec::<i32>()
        .unwrap();
    for (((x, y), r), q) in d.iter().zip(&dy).zip(&out).zip(&quo) {
        let (wr, wq) = libm::remquo(*x, *y);
        assert!(
            r.to_bits() == wr.to_bits() || (r.is_nan() && wr.is_nan()),
            "remquo({x:e}, {y:e}) f64 = {r:e}"
        );
        assert!(
            r.is_nan() || quo_agrees(*q, wq),
            "remquo({x:e}, {y:e}).1 f64 = {q}, {wq}"
        );
    }
    // A literal takes the tile's dtype.
    let q = eval(&[buf(&[7.0f32, -7.0, 2.5, 3.5])], |t| remquo(t[0], 2).1)
        .to_vec::<i32>()
        .unwrap();
    assert_eq!(q, vec![4, -4, 1, 2]);
}

#[test]
fn sincospi_is_sinpi_and_cospi() {
    let xs = inputs();
    let s = eval(&[buf(&xs)], |t| sincospi(t[0]).0)
        .to_vec::<f32>()
        .unwrap();
    let c = eval(&[buf(&xs)], |t| sincospi(t[0]).1)
        .to_vec::<f32>()
        .unwrap();
    for ((x, s), c) in xs.iter().zip(&s).zip(&c) {
        assert!(same(*s, eval_f32(Fn1::Sinpi, *x)), "sincospi({x}).0 = {s}");
        assert!(same(*c, eval_f32(Fn1::Cospi, *x)), "sincospi({x}).1 = {c}");
    }
    let d: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    let s = eval(&[buf(&d)], |t| sincospi(t[0]).0)
        .to_vec::<f64>()
        .unwrap();
    let s1 = eval(&[buf(&d)], |t| sinpi(t[0])).to_vec::<f64>().unwrap();
    let c = eval(&[buf(&d)], |t| sincospi(t[0]).1)
        .to_vec::<f64>()
        .unwrap();
    let c1 = eval(&[buf(&d)], |t| cospi(t[0])).to_vec::<f64>().unwrap();
    for i in 0..d.len() {
        assert!(s[i].to_bits() == s1[i].to_bits() || s[i].is_nan() && s1[i].is_nan());
        assert!(c[i].to_bits() == c1[i].to_bits() || c[i].is_nan() && c1[i].is_nan());
    }
    // IEEE 754's signed zeros and ones at the integers and half-integers.
    let v = [1.0f32, -1.0, 0.5, -0.5];
    let s = eval(&[buf(&v)], |t| sincospi(t[0]).0)
        .to_vec::<f32>()
        .unwrap();
    let c = eval(&[buf(&v)], |t| sincospi(t[0]).1)
        .to_vec::<f32>()
        .unwrap();
    for (got, want) in s.iter().zip([0.0f32, -0.0, 1.0, -1.0]) {
        assert!(same(*got, want), "sincospi({v:?}).0 = {s:?}");
    }
    for (got, want) in c.iter().zip([-1.0f32, -1.0, 0.0, 0.0]) {
        assert!(same(*got, want), "sincospi({v:?}).1 = {c:?}");
    }
}
