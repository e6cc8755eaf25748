//! The fp8 formats' codecs against references written here: every bit pattern decoded by a
//! formula of its own, and encoding (nearest, ties to the even pattern, saturating, NaN to
//! 0x7f) against the nearest of all 256 decoded values, over dense f32 inputs: every
//! representable value, its neighbours, the midpoints between consecutive values and random
//! magnitudes across the whole range.

use tegula_ir::fp8::{f8e4m3, f8e5m2};

/// `(mantissa bits, smallest normal exponent, whether the top exponent is inf/NaN)`.
fn value(bits: u8, e5m2: bool) -> f64 {
    let s = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    if e5m2 {
        let (e, m) = ((bits >> 2) & 0x1f, bits & 3);
        match (e, m) {
            (31, 0) => s * f64::INFINITY,
            (31, _) => f64::NAN,
            (0, m) => s * m as f64 / 65536.0,
            (e, m) => s * (4 + m) as f64 * 2f64.powi(e as i32 - 17),
        }
    } else {
        let (e, m) = ((bits >> 3) & 0xf, bits & 7);
        match (e, m) {
            (15, 7) => f64::NAN,
            (0, m) => s * m as f64 / 512.0,
            (e, m) => s * (8 + m) as f64 * 2f64.powi(e as i32 - 10),
        }
    }
}

fn decode(bits: u8, e5m2: bool) -> f64 {
    if e5m2 {
        f8e5m2::from_bits(bits).to_f64()
    } else {
        f8e4m3::from_bits(bits).to_f64()
    }
}

fn encode(x: f64, e5m2: bool) -> u8 {
    if e5m2 {
        f8e5m2::from_f64(x).to_bits()
    } else {
        f8e4m3::from_f64(x).to_bits()
    }
}

/// The nearest finite value's pattern (ties to the even pattern), -0 kept, NaN to 0x7f.
fn reference(x: f64, e5m2: bool) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs();
    let mut best = (f64::INFINITY, 0u8);
    let max = if e5m2 { 57344.0 } else { 448.0 };
    if a >= max {
        // Saturation (and the distances below would all round to one f64 here).
        return sign | if e5m2 { 0x7b } else { 0x7e };
    }
    for b in 0..0x80u8 {
        let v = value(b, e5m2);
        if !v.is_finite() {
            continue;
        }
        let d = (v - a).abs();
        if d < best.0 || (d == best.0 && b & 1 == 0) {
            best = (d, b);
        }
    }
    sign | best.1
}

#[test]
fn every_pattern_decodes_to_its_value() {
    for e5m2 in [false, true] {
        for b in 0..=255u8 {
            let (got, want) = (decode(b, e5m2), value(b, e5m2));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{b:#04x} e5m2={e5m2}: {got} vs {want}"
            );
        }
    }
    assert_eq!(f8e4m3::MAX, 448.0);
    assert_eq!(f8e5m2::MAX, 57344.0);
    // e5m2 is the high byte of the f16 of the same value.
    for b in 0..=255u8 {
        let h = half::f16::from_bits((b as u16) << 8).to_f64();
        let v = value(b, true);
        assert!(h == v || (h.is_nan() && v.is_nan()), "{b:#04x}");
    }
}

#[test]
fn encoding_rounds_to_nearest_even_and_saturates() {
    let mut inputs: Vec<f64> = Vec::new();
    for e5m2 in [false, true] {
        let mut finite: Vec<f64> = (0..0x80u8)
            .map(|b| value(b, e5m2))
            .filter(|v| v.is_finite())
            .collect();
        finite.sort_by(f64::total_cmp);
        for w in finite.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            let eps = (w[1] - w[0]) * 1e-6;
            inputs.extend([w[0], mid, mid - eps, mid + eps, w[1] - eps]);
        }
        let max = *finite.last().unwrap();
        inputs.extend([
            max * 1.03,
            max * 1.1,
            max * 2.0,
            1e30,
            f64::INFINITY,
            f64::NAN,
        ]);
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Random f32 patterns of magnitude up to 2^17 and down to f32's subnormals.
        let bits = (state as u32) & 0x7fff_ffff;
        let x = f32::from_bits(bits % 0x4800_0000) as f64;
        inputs.push(x);
    }
    let n = inputs.len();
    for i in 0..n {
        inputs.push(-inputs[i]);
    }
    inputs.push(0.0);
    inputs.push(-0.0);
    for e5m2 in [false, true] {
        for &x in &inputs {
            let (got, want) = (encode(x, e5m2), reference(x, e5m2));
            assert_eq!(got, want, "{x:e} e5m2={e5m2}: {got:#04x} vs {want:#04x}");
        }
    }
}

/// `dot` takes the two fp8 formats together (as Triton does; the tensor cores have
/// `.e4m3.e5m2`), and still refuses other mixed pairs at the user's line.
#[test]
fn dot_takes_mixed_fp8_and_refuses_other_mixed_pairs() {
    use tegula_ir::prelude::*;
    let with = |da: DType, db: DType| {
        trace("mixed", |p| {
            let (a, b, c) = (p.ptr("a", da), p.ptr("b", db), p.ptr("c", DType::F32));
            let r = arange(0, 32);
            let x = load_unmasked(a + (r.col() * 32 + r.row()));
            let y = load_unmasked(b + (r.col() * 32 + r.row()));
            store_unmasked(c + (r.col() * 32 + r.row()), dot(x, y));
        })
    };
    assert!(with(DType::F8E4M3, DType::F8E5M2).is_ok());
    assert!(with(DType::F8E5M2, DType::F8E4M3).is_ok());
    let err = with(DType::F16, DType::F8E4M3).unwrap_err();
    assert!(err.message.contains("share a dtype"), "{}", err.message);
    assert!(err.loc.file.ends_with("fp8.rs"), "{:?}", err.loc);
}
