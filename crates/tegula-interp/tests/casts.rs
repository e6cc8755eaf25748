//! Casts: float narrowing with both roundings, saturation, integer conversions, i1.

mod common;
use common::*;
use half::{bf16, f16};
use tegula_ir::prelude::*;

#[test]
fn f32_to_f16_rounds_to_nearest_even_with_subnormals_and_overflow() {
    let x: Vec<f32> = vec![
        (1.0 + pow2(-11)) as f32,             // tie -> 1.0
        (1.0 + 3.0 * pow2(-11)) as f32,       // tie -> 1 + 2^-9
        (1.0 + pow2(-11) + pow2(-20)) as f32, // just above the tie -> 1 + 2^-10
        65519.0,                              // below the overflow threshold -> 65504
        65520.0,                              // the threshold itself (a tie) -> inf
        -65520.0,
        pow2(-25) as f32,         // half the smallest subnormal: tie -> 0
        (3.0 * pow2(-26)) as f32, // above half -> 2^-24
    ];
    let out = eval(&[buf(&x)], |t| t[0].to::<f16>()).to_f64();
    assert_eq!(
        out,
        vec![
            1.0,
            1.0 + pow2(-9),
            1.0 + pow2(-10),
            65504.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            pow2(-24)
        ]
    );
}

#[test]
fn f32_to_bf16_rounds_to_nearest_even() {
    let x: Vec<f32> = vec![
        (1.0 + pow2(-8)) as f32,
        (1.0 + 3.0 * pow2(-8)) as f32,
        (1.0 + pow2(-8) + pow2(-23)) as f32,
        f32::MAX,
        -3.0,
    ];
    let out = eval(&[buf(&x)], |t| t[0].to::<bf16>()).to_f64();
    assert_eq!(
        out,
        vec![1.0, 1.0 + pow2(-6), 1.0 + pow2(-7), f64::INFINITY, -3.0]
    );
}

#[test]
fn toward_zero_rounding_truncates_and_never_overflows_to_inf() {
    let x: Vec<f32> = vec![
        (1.0 + pow2(-10) + pow2(-11)) as f32,
        -(1.0 + 3.0 * pow2(-11)) as f32,
        70000.0,
        (1.0 + pow2(-10)) as f32, // exact: unchanged
    ];
    let out = eval(&[buf(&x)], |t| {
        t[0].cast_rounded(DType::F16, Rounding::TowardZero)
    })
    .to_f64();
    assert_eq!(
        out,
        vec![
            1.0 + pow2(-10),
            -(1.0 + pow2(-10)),
            65504.0,
            1.0 + pow2(-10)
        ]
    );
    let out = eval(&[buf(&[(1.0 + pow2(-7) - pow2(-20)) as f32])], |t| {
        t[0].cast_rounded(DType::BF16, Rounding::TowardZero)
    });
    assert_eq!(out.to_f64(), vec![1.0]);
    let out = eval(&[buf(&[1.0 + pow2(-30), -(1.0 + pow2(-30))])], |t| {
        t[0].cast_rounded(DType::F32, Rounding::TowardZero)
    });
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![1.0, -1.0]);
}

#[test]
fn float_to_int_truncates_saturates_and_maps_nan_to_zero() {
    let x = buf(&[
        2.7f32,
        -2.7,
        300.0,
        -300.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    let i8s = eval(std::slice::from_ref(&x), |t| t[0].to::<i8>());
    assert_eq!(
        i8s.to_vec::<i8>().unwrap(),
        vec![2, -2, 127, -128, 0, 127, -128]
    );
    let u8s = eval(std::slice::from_ref(&x), |t| t[0].to::<u8>());
    assert_eq!(u8s.to_vec::<u8>().unwrap(), vec![2, 0, 255, 0, 0, 255, 0]);
    let big = buf(&[3e9f32, -1.0, 5e19]);
    let i32s = eval(std::slice::from_ref(&big), |t| t[0].to::<i32>());
    assert_eq!(i32s.to_vec::<i32>().unwrap(), vec![i32::MAX, -1, i32::MAX]);
    let u32s = eval(std::slice::from_ref(&big), |t| t[0].to::<u32>());
    assert_eq!(
        u32s.to_vec::<u32>().unwrap(),
        vec![3_000_000_000, 0, u32::MAX]
    );
    let u64s = eval(&[big], |t| t[0].to::<u64>());
    assert_eq!(
        u64s.to_vec::<u64>().unwrap(),
        vec![3_000_000_000, 0, 5e19f32 as u64]
    );
}

#[test]
fn int_to_float_rounds_to_nearest_even_without_double_rounding() {
    let x = buf(&[16_777_217i32, 16_777_219, -16_777_217]);
    let out = eval(&[x], |t| t[0].to::<f32>());
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        vec![16_777_216.0, 16_777_220.0, -16_777_216.0]
    );
    // 2^62 + 2^38 + 1 is just above an f32 tie; via f64 first it would become the tie and
    // round down to 2^62.
    let v = (1i64 << 62) + (1 << 38) + 1;
    let out = eval(&[buf(&[v, -v])], |t| t[0].to::<f32>());
    let want = (pow2(62) + pow2(39)) as f32;
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![want, -want]);
    let out = eval(&[buf(&[u32::MAX])], |t| t[0].to::<f32>());
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![pow2(32) as f32]);
    let out = eval(&[buf(&[u64::MAX])], |t| t[0].to::<f16>());
    assert_eq!(out.to_f64(), vec![f64::INFINITY]);
    let out = eval(&[buf(&[2049i32, 2051])], |t| t[0].to::<f16>());
    assert_eq!(out.to_f64(), vec![2048.0, 2052.0]);
}

#[test]
fn integer_casts_wrap_and_extend_by_source_signedness() {
    let out = eval(&[buf(&[-1i32, 256, 511])], |t| t[0].to::<u8>());
    assert_eq!(out.to_vec::<u8>().unwrap(), vec![255, 0, 255]);
    let out = eval(&[buf(&[255u8, 128])], |t| t[0].to::<i8>());
    assert_eq!(out.to_vec::<i8>().unwrap(), vec![-1, -128]);
    let out = eval(&[buf(&[0xFFFFu16])], |t| t[0].to::<i32>());
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![65535]);
    let out = eval(&[buf(&[-1i32])], |t| t[0].to::<u64>());
    assert_eq!(out.to_vec::<u64>().unwrap(), vec![u64::MAX]);
    let out = eval(&[buf(&[-2i8])], |t| t[0].to::<i64>());
    assert_eq!(out.to_vec::<i64>().unwrap(), vec![-2]);
}

#[test]
fn i1_casts_are_nonzero_tests_and_true_is_one() {
    let out = eval(&[buf(&[0i32, 5, -3])], |t| t[0].to::<bool>());
    assert_eq!(out.to_vec::<bool>().unwrap(), vec![false, true, true]);
    let out = eval(&[buf(&[0.0f32, 0.5, f32::NAN, -0.0])], |t| {
        t[0].to::<bool>()
    });
    assert_eq!(
        out.to_vec::<bool>().unwrap(),
        vec![false, true, true, false]
    );
    let out = eval(&[buf(&[true, false])], |t| t[0].to::<i32>());
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![1, 0]);
    let out = eval(&[buf(&[true, false])], |t| t[0].to::<f32>());
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![1.0, 0.0]);
}

#[test]
fn widening_float_casts_are_exact() {
    let h = f16::from_f64(1.0 + pow2(-10));
    let out = eval(&[buf(&[h])], |t| t[0].to::<f32>());
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![(1.0 + pow2(-10)) as f32]);
    let b = bf16::from_f64(1e10);
    let out = eval(&[buf(&[b, bf16::from_f64(1.0 + pow2(-7))])], |t| {
        t[0].to::<f16>()
    });
    assert_eq!(out.to_f64(), vec![f64::INFINITY, 1.0 + pow2(-7)]);
}
