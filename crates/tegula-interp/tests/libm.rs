//! The libdevice-style math ops through kernels on the interpreter: f32 results are the math
//! library's (`tegula_ir::mathlib`, the GPU's algorithm) bit for bit, f16/bf16 round that f32
//! result once more, f64 is std's; the rounding family, classification and `copysign` are
//! exact in every float dtype. (The ulp bounds are measured in tegula-ir's `tests/mathlib.rs`.)

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
    let cases: [(Fn2, BinaryFn); 3] = [
        (Fn2::Atan2, |a, b| atan2(a, b)),
        (Fn2::Pow, |a, b| pow(a, b)),
        (Fn2::Hypot, |a, b| hypot(a, b)),
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
    let cases: [(f32, f32, UnaryFn); 12] = [
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
