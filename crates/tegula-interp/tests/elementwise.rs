//! Elementwise arithmetic, dtype by dtype, against hand-computed values.

mod common;
use common::*;
use half::{bf16, f16};
use tegula_ir::prelude::*;

#[test]
fn integer_add_sub_mul_wrap_to_width() {
    let a = buf(&[100i8, -128, 127, 5]);
    let b = buf(&[100i8, -1, 1, -6]);
    let out = eval(&[a.clone(), b.clone()], |t| t[0] + t[1]);
    assert_eq!(out.to_vec::<i8>().unwrap(), vec![-56, 127, -128, -1]);
    let out = eval(&[a, b], |t| t[0] * t[1]);
    assert_eq!(out.to_vec::<i8>().unwrap(), vec![16, -128, 127, -30]);
    let out = eval(&[buf(&[0u8, 5]), buf(&[1u8, 10])], |t| t[0] - t[1]);
    assert_eq!(out.to_vec::<u8>().unwrap(), vec![255, 251]);
    let out = eval(&[buf(&[65536i32, -3])], |t| t[0] * t[0]);
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![0, 9]);
    let out = eval(&[buf(&[u64::MAX, 3])], |t| t[0] + 2u64);
    assert_eq!(out.to_vec::<u64>().unwrap(), vec![1, 5]);
}

#[test]
fn signed_division_truncates_and_unsigned_divides_the_bits() {
    let a = buf(&[-7i32, 7, -7, i32::MIN, 9]);
    let b = buf(&[2i32, -2, -2, -1, 3]);
    let q = eval(&[a.clone(), b.clone()], |t| t[0] / t[1]);
    assert_eq!(q.to_vec::<i32>().unwrap(), vec![-3, -3, 3, i32::MIN, 3]);
    let r = eval(&[a, b], |t| t[0] % t[1]);
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![-1, 1, -1, 0, 0]);
    let q = eval(&[buf(&[0xFFFF_FFFEu32, 7])], |t| t[0] / 2u32);
    assert_eq!(q.to_vec::<u32>().unwrap(), vec![0x7FFF_FFFF, 3]);
    let r = eval(&[buf(&[0xFFFF_FFFFu32, 7])], |t| t[0] % 10u32);
    assert_eq!(r.to_vec::<u32>().unwrap(), vec![5, 7]);
    let q = eval(&[buf(&[200u8, 255])], |t| t[0] / 3u32);
    assert_eq!(q.to_vec::<u8>().unwrap(), vec![66, 85]);
}

#[test]
fn integer_division_by_zero_is_an_error_naming_the_line() {
    let a = buf(&[1i32, 2, 3]);
    let b = buf(&[1i32, 0, 3]);
    let line = std::cell::Cell::new(0);
    let e = eval_err(&[a, b], |t| {
        let (q, l) = (t[0] / t[1], line!());
        line.set(l);
        q
    });
    let msg = e.to_string();
    assert!(msg.contains("division by zero"), "{msg}");
    assert!(
        msg.contains(&format!("elementwise.rs:{}", line.get())),
        "{msg}"
    );
    assert!(msg.contains("program (0, 0, 0)"), "{msg}");
}

#[test]
fn shifts_clamp_amounts_at_the_width() {
    let ones = buf(&[1i32; 6]);
    let amt = buf(&[0i32, 1, 31, 32, 40, -1]);
    let out = eval(&[ones, amt.clone()], |t| t[0] << t[1]);
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![1, 2, i32::MIN, 0, 0, 0]);
    let neg = buf(&[-8i32; 6]);
    let out = eval(&[neg, amt], |t| t[0] >> t[1]);
    // Arithmetic: sign fill when the amount reaches the width.
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![-8, -4, -1, -1, -1, -1]);
    let out = eval(&[buf(&[8i32, 8])], |t| t[0] >> 32);
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![0, 0]);
    let hi = buf(&[0x8000_0000u32; 4]);
    let amt = buf(&[1u32, 31, 32, 33]);
    let out = eval(&[hi, amt], |t| t[0] >> t[1]);
    // Logical for unsigned.
    assert_eq!(out.to_vec::<u32>().unwrap(), vec![0x4000_0000, 1, 0, 0]);
    let out = eval(&[buf(&[0x81u8, 0x81])], |t| t[0] << 1u32);
    assert_eq!(out.to_vec::<u8>().unwrap(), vec![0x02, 0x02]);
}

#[test]
fn bitwise_ops_and_not() {
    let out = eval(&[buf(&[0b1100i32, -1]), buf(&[0b1010i32, 5])], |t| {
        (t[0] & t[1]) | ((t[0] ^ t[1]) << 8)
    });
    assert_eq!(
        out.to_vec::<i32>().unwrap(),
        vec![0b1000 | (0b0110 << 8), 5 | ((-1 ^ 5) << 8)]
    );
    let out = eval(&[buf(&[5i32, -1])], |t| !t[0]);
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![-6, 0]);
    let out = eval(&[buf(&[0x0Fu8, 0])], |t| !t[0]);
    assert_eq!(out.to_vec::<u8>().unwrap(), vec![0xF0, 0xFF]);
    let out = eval(&[buf(&[true, false])], |t| !t[0]);
    assert_eq!(out.to_vec::<bool>().unwrap(), vec![false, true]);
}

#[test]
fn integer_max_min_respect_signedness() {
    let out = eval(&[buf(&[-1i32, 3]), buf(&[1i32, -5])], |t| {
        maximum(t[0], t[1])
    });
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![1, 3]);
    let out = eval(&[buf(&[0xFFFF_FFFFu32, 3]), buf(&[1u32, 5])], |t| {
        maximum(t[0], t[1])
    });
    assert_eq!(out.to_vec::<u32>().unwrap(), vec![0xFFFF_FFFF, 5]);
    let out = eval(&[buf(&[0xFFFF_FFFFu32, 3]), buf(&[1u32, 5])], |t| {
        minimum(t[0], t[1])
    });
    assert_eq!(out.to_vec::<u32>().unwrap(), vec![1, 3]);
}

#[test]
fn float_max_min_nan_and_signed_zero_rules() {
    let nan = f32::NAN;
    let a = buf(&[nan, 1.0, -0.0, 2.0, nan]);
    let b = buf(&[3.0f32, nan, 0.0, 1.0, nan]);
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mx = eval(&[a.clone(), b.clone()], |t| maximum(t[0], t[1]));
    let mx = mx.to_vec::<f32>().unwrap();
    assert_eq!(bits(mx[..4].to_vec()), bits(vec![3.0, 1.0, 0.0, 2.0]));
    assert!(mx[4].is_nan());
    let mn = eval(&[a.clone(), b.clone()], |t| minimum(t[0], t[1]));
    let mn = mn.to_vec::<f32>().unwrap();
    assert_eq!(bits(mn[..4].to_vec()), bits(vec![3.0, 1.0, -0.0, 1.0]));
    let mxn = eval(&[a.clone(), b.clone()], |t| maximum_nan(t[0], t[1]));
    let mxn = mxn.to_vec::<f32>().unwrap();
    assert!(mxn[0].is_nan() && mxn[1].is_nan() && mxn[4].is_nan());
    assert_eq!(mxn[2].to_bits(), 0.0f32.to_bits());
    assert_eq!(mxn[3], 2.0);
    let mnn = eval(&[a, b], |t| minimum_nan(t[0], t[1]));
    let mnn = mnn.to_vec::<f32>().unwrap();
    assert!(mnn[0].is_nan() && mnn[1].is_nan());
    assert_eq!(mnn[2].to_bits(), (-0.0f32).to_bits());
    assert_eq!(mnn[3], 1.0);
}

#[test]
fn f16_and_bf16_arithmetic_rounds_ties_to_even_and_overflows_to_inf() {
    let h = |x: f64| f16::from_f64(x);
    let a = buf(&[h(1.0), h(1.0), h(60000.0), h(300.0)]);
    let b = buf(&[h(pow2(-11)), h(3.0 * pow2(-11)), h(10000.0), h(300.0)]);
    let sum = eval(&[a.clone(), b.clone()], |t| t[0] + t[1]);
    let sum: Vec<f64> = sum.to_f64();
    // 1 + 2^-11 is a tie -> 1.0 (even); 1 + 3*2^-11 is a tie -> 1 + 2^-9 (even).
    assert_eq!(sum[0], 1.0);
    assert_eq!(sum[1], 1.0 + pow2(-9));
    assert_eq!(sum[2], f64::INFINITY);
    let prod = eval(&[a, b], |t| t[0] * t[1]);
    assert_eq!(prod.to_f64()[3], f64::INFINITY); // 90000 > f16 max
    let g = |x: f64| bf16::from_f64(x);
    let a = buf(&[g(1.0), g(1.0), g(3.0)]);
    let b = buf(&[g(pow2(-8)), g(3.0 * pow2(-8)), g(7.0)]);
    let sum = eval(&[a.clone(), b.clone()], |t| t[0] + t[1]).to_f64();
    assert_eq!(sum, vec![1.0, 1.0 + pow2(-6), 10.0]);
    // 3/7 rounded to bf16 (8 significant bits, ulp 2^-9 in [1/4, 1/2)): 219.43/512 -> 219/512.
    let q = eval(&[a, b], |t| t[0] / t[1]).to_f64();
    assert_eq!(q[2], 219.0 / 512.0);
}

#[test]
fn f32_ops_match_ieee_single_precision_bit_for_bit() {
    let mut rng = Rng::new(7);
    let n = 1001;
    let mut a = rng.f32s(n, -1e3, 1e3);
    let b = rng.f32s(n, -1e-2, 1e4);
    a[0] = 1.0;
    let (ba, bb) = (buf(&a), buf(&b));
    let check = |got: Vec<f32>, want: &dyn Fn(f32, f32) -> f32, what: &str| {
        for i in 0..n {
            assert_eq!(
                got[i].to_bits(),
                want(a[i], b[i]).to_bits(),
                "{what} at {i}: {} vs {}",
                got[i],
                want(a[i], b[i])
            );
        }
    };
    let add = eval(&[ba.clone(), bb.clone()], |t| t[0] + t[1]);
    check(add.to_vec().unwrap(), &|x, y| x + y, "add");
    let sub = eval(&[ba.clone(), bb.clone()], |t| t[0] - t[1]);
    check(sub.to_vec().unwrap(), &|x, y| x - y, "sub");
    let mul = eval(&[ba.clone(), bb.clone()], |t| t[0] * t[1]);
    check(mul.to_vec().unwrap(), &|x, y| x * y, "mul");
    let div = eval(&[ba.clone(), bb.clone()], |t| t[0] / t[1]);
    check(div.to_vec().unwrap(), &|x, y| x / y, "div");
    let sq = eval(&[bb.clone(), ba.clone()], |t| sqrt(abs(t[0])));
    let want: Vec<f32> = b.iter().map(|x| x.abs().sqrt()).collect();
    assert_eq!(sq.to_vec::<f32>().unwrap(), want);
}

#[test]
fn fma_rounds_once_like_a_hardware_fma() {
    let mut rng = Rng::new(11);
    let n = 777;
    let a = rng.f32s(n, -4.0, 4.0);
    let b = rng.f32s(n, -4.0, 4.0);
    // c cancels the product's leading bits, where a separate multiply and add would differ.
    let c: Vec<f32> = a
        .iter()
        .zip(&b)
        .enumerate()
        .map(|(i, (x, y))| {
            if i % 2 == 0 {
                -(x * y)
            } else {
                (i as f32) * 0.37
            }
        })
        .collect();
    let out = eval(&[buf(&a), buf(&b), buf(&c)], |t| fma(t[0], t[1], t[2]));
    let out = out.to_vec::<f32>().unwrap();
    let mut differs_from_unfused = 0;
    for i in 0..n {
        let want = a[i].mul_add(b[i], c[i]);
        assert_eq!(out[i].to_bits(), want.to_bits(), "fma at {i}");
        if want != a[i] * b[i] + c[i] {
            differs_from_unfused += 1;
        }
    }
    assert!(differs_from_unfused > 100, "the test must exercise fusion");
}

#[test]
fn float_comparisons_are_ordered_except_ne() {
    let a = buf(&[f32::NAN, 1.0, 2.0]);
    let b = buf(&[f32::NAN, 1.0, 3.0]);
    let eq = eval(&[a.clone(), b.clone()], |t| t[0].eq(t[1]));
    assert_eq!(eq.to_vec::<bool>().unwrap(), vec![false, true, false]);
    let ne = eval(&[a.clone(), b.clone()], |t| t[0].ne(t[1]));
    assert_eq!(ne.to_vec::<bool>().unwrap(), vec![true, false, true]);
    let lt = eval(&[a.clone(), b.clone()], |t| t[0].lt(t[1]));
    assert_eq!(lt.to_vec::<bool>().unwrap(), vec![false, false, true]);
    let ge = eval(&[a, b], |t| t[0].ge(t[1]));
    assert_eq!(ge.to_vec::<bool>().unwrap(), vec![false, true, false]);
    // Unsigned comparison: 0xFFFFFFFF is large, not -1.
    let gt = eval(&[buf(&[0xFFFF_FFFFu32]), buf(&[1u32])], |t| t[0].gt(t[1]));
    assert_eq!(gt.to_vec::<bool>().unwrap(), vec![true]);
    let gt = eval(&[buf(&[-1i32]), buf(&[1i32])], |t| t[0].gt(t[1]));
    assert_eq!(gt.to_vec::<bool>().unwrap(), vec![false]);
}

#[test]
fn unary_math_rounds_once_to_the_dtype() {
    let x = buf(&[3.0f32, 0.5, -2.5, 1.0]);
    let e2 = eval(std::slice::from_ref(&x), |t| exp2(t[0]))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(e2, vec![8.0, 2f32.sqrt(), 2f32.powf(-2.5), 2.0]);
    let ex = eval(std::slice::from_ref(&x), |t| exp(t[0]))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(ex[3], std::f64::consts::E as f32);
    let lg = eval(&[buf(&[8.0f32, 0.25])], |t| log2(t[0]));
    assert_eq!(lg.to_vec::<f32>().unwrap(), vec![3.0, -2.0]);
    let er = eval(std::slice::from_ref(&x), |t| erf(t[0]))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(er[1], 0.520_499_877_813_046_5f64 as f32);
    let fl = eval(std::slice::from_ref(&x), |t| {
        floor(t[0]) + ceil(t[0]) * 10.0
    });
    assert_eq!(fl.to_vec::<f32>().unwrap(), vec![33.0, 10.0, -23.0, 11.0]);
    let rs = eval(&[buf(&[4.0f32, 0.25])], |t| rsqrt(t[0]));
    assert_eq!(rs.to_vec::<f32>().unwrap(), vec![0.5, 2.0]);
    let th = eval(std::slice::from_ref(&x), |t| tanh(t[0]))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(th[1], 0.5f64.tanh() as f32);
    let sc = eval(&[x], |t| sin(t[0]) + cos(t[0]))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(
        sc[3],
        ((1f64.sin() as f32) as f64 + (1f64.cos() as f32) as f64) as f32
    );
    let ab = eval(&[buf(&[i32::MIN, -3, 4])], |t| abs(t[0]));
    assert_eq!(ab.to_vec::<i32>().unwrap(), vec![i32::MIN, 3, 4]);
    let ng = eval(&[buf(&[1u8, 0])], |t| -t[0]);
    assert_eq!(ng.to_vec::<u8>().unwrap(), vec![255, 0]);
    let h = eval(&[buf(&[f16::from_f64(0.1)])], |t| exp(t[0])).to_f64();
    assert_eq!(
        h[0],
        f16::from_f32((f16::from_f64(0.1).to_f64().exp()) as f32).to_f64()
    );
}

#[test]
fn float_rem_is_fmod_and_select_picks_per_lane() {
    let r = eval(&[buf(&[-7.5f32, 7.5]), buf(&[2.0f32, -2.0])], |t| {
        t[0] % t[1]
    });
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![-1.5, 1.5]);
    let s = eval(&[buf(&[1i32, 2, 3, 4]), buf(&[10i32, 20, 30, 40])], |t| {
        select(t[0].gt(2), t[0], t[1])
    });
    assert_eq!(s.to_vec::<i32>().unwrap(), vec![10, 20, 3, 4]);
}

#[test]
fn bitcast_reinterprets_bits() {
    let out = eval(&[buf(&[1.0f32, -2.0])], |t| t[0].bitcast::<i32>());
    assert_eq!(
        out.to_vec::<i32>().unwrap(),
        vec![0x3F80_0000, 0xC000_0000u32 as i32]
    );
    let out = eval(&[buf(&[0x3C00i16, 0x7C00])], |t| t[0].bitcast::<f16>());
    assert_eq!(out.to_f64(), vec![1.0, f64::INFINITY]);
    let out = eval(&[buf(&[-1i64])], |t| t[0].bitcast::<u64>());
    assert_eq!(out.to_vec::<u64>().unwrap(), vec![u64::MAX]);
}
