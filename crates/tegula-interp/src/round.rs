//! Exact rounding of f64 values to the narrower float formats, and the integer wrap rules.
//!
//! Float tiles hold f64 values that are always representable in their dtype. An op computes in
//! f64 and rounds once. For `+ - * / sqrt` that is exactly the IEEE result in the narrow format,
//! because f64's 53 bits exceed 2p+2 for p = 24 (f32), 11 (f16) and 8 (bf16). Where a result
//! is not exact in f64 (fma, dot accumulation, 64-bit integer conversions) it is first
//! rounded *to odd* in f64, which makes the final rounding exact as well.

use tegula_ir::fp8::{fp8_bits, fp8_value, round_fp8};
use tegula_ir::{DType, Rounding};

/// `2^k` for `-1022 <= k <= 1023`.
#[inline(always)]
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// Rounds `x` to nearest even in a binary format with `mant` explicit mantissa bits, smallest
/// normal exponent `emin` and largest exponent `emax` (subnormals and overflow to inf included).
///
/// `half`'s f64 conversions drop the low 32 mantissa bits before rounding, which misrounds
/// values just above a tie, so f16 and bf16 are rounded here.
#[inline(always)]
pub(crate) fn round_narrow(x: f64, mant: i32, emin: i32, emax: i32) -> f64 {
    let a = x.abs();
    // NaN, infinities and zeros are their own rounding.
    if a.is_nan() || a == f64::INFINITY || a == 0.0 {
        return x;
    }
    let e = ((a.to_bits() >> 52) as i32 - 1023).max(emin);
    if e > emax {
        return f64::INFINITY.copysign(x);
    }
    let ulp = e - mant;
    // `scaled` < 2^(mant+1), so adding and removing 2^52 rounds it to an integer, ties to even.
    let scaled = a * pow2(-ulp);
    let magic = 4503599627370496.0; // 2^52
    let r = ((scaled + magic) - magic) * pow2(ulp);
    let max = (2.0 - pow2(-mant)) * pow2(emax);
    let r = if r > max { f64::INFINITY } else { r };
    r.copysign(x)
}

#[inline(always)]
pub(crate) fn round_f16(x: f64) -> f64 {
    round_narrow(x, 10, -14, 15)
}

#[inline(always)]
pub(crate) fn round_bf16(x: f64) -> f64 {
    round_narrow(x, 7, -126, 127)
}

#[inline(always)]
pub(crate) fn round_f32(x: f64) -> f64 {
    x as f32 as f64
}

/// Rounds to nearest even in `d` (identity for f64 and non-floats).
#[inline(always)]
pub(crate) fn round_to(d: DType, x: f64) -> f64 {
    match d {
        DType::F32 => round_f32(x),
        DType::F16 => round_f16(x),
        DType::BF16 => round_bf16(x),
        DType::F8E4M3 | DType::F8E5M2 => round_fp8(d == DType::F8E5M2, x),
        _ => x,
    }
}

/// Rounds every element to nearest even in `d`; the dtype is matched once, outside the loop.
pub(crate) fn round_slice(d: DType, v: &mut [f64]) {
    match d {
        DType::F32 => v.iter_mut().for_each(|x| *x = round_f32(*x)),
        DType::F16 => v.iter_mut().for_each(|x| *x = round_f16(*x)),
        DType::BF16 => v.iter_mut().for_each(|x| *x = round_bf16(*x)),
        DType::F8E4M3 | DType::F8E5M2 => {
            let e5m2 = d == DType::F8E5M2;
            v.iter_mut().for_each(|x| *x = round_fp8(e5m2, *x))
        }
        _ => {}
    }
}

/// The bits of `x` (already representable in float dtype `d`) in memory.
#[inline(always)]
pub(crate) fn float_to_bits(d: DType, x: f64) -> u64 {
    match d {
        DType::F16 => half::f16::from_f64(x).to_bits() as u64,
        DType::BF16 => half::bf16::from_f64(x).to_bits() as u64,
        DType::F8E4M3 | DType::F8E5M2 => fp8_bits(d == DType::F8E5M2, x) as u64,
        DType::F32 => (x as f32).to_bits() as u64,
        _ => x.to_bits(),
    }
}

/// The value of float dtype `d` stored as `bits`.
#[inline(always)]
pub(crate) fn float_from_bits(d: DType, bits: u64) -> f64 {
    match d {
        DType::F16 => half::f16::from_bits(bits as u16).to_f64(),
        DType::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        DType::F8E4M3 | DType::F8E5M2 => fp8_value(d == DType::F8E5M2, bits as u8),
        DType::F32 => f32::from_bits(bits as u32) as f64,
        _ => f64::from_bits(bits),
    }
}

/// Rounds `x` (exact, or rounded to odd in f64) into float dtype `d` with `mode`. The
/// directed modes start from the nearest value and step one unit of the target format back
/// when it lies on the wrong side of `x` (from an infinity this gives the largest finite
/// value, as PTX `cvt.rz` / `.rm` / `.rp` do).
pub(crate) fn round_with(d: DType, mode: Rounding, x: f64) -> f64 {
    let r = round_to(d, x);
    if d == DType::F64 || x.is_nan() {
        return r;
    }
    match mode {
        Rounding::NearestEven => r,
        Rounding::TowardZero if r.abs() > x.abs() => step_toward_zero(d, r),
        Rounding::Down if r > x => step(d, r, false),
        Rounding::Up if r < x => step(d, r, true),
        _ => r,
    }
}

/// The neighbour of `r` in float dtype `d` one unit nearer zero (`r` nonzero).
fn step_toward_zero(d: DType, r: f64) -> f64 {
    float_from_bits(d, float_to_bits(d, r) - 1)
}

/// The neighbour of `r` in float dtype `d` above it (`up`) or below it.
fn step(d: DType, r: f64, up: bool) -> f64 {
    if r == 0.0 {
        // The smallest subnormal of the sign the step goes to.
        let tiny = float_from_bits(d, 1);
        return if up { tiny } else { -tiny };
    }
    if (r > 0.0) == up {
        // Away from zero: one unit more magnitude.
        float_from_bits(d, float_to_bits(d, r) + 1)
    } else {
        step_toward_zero(d, r)
    }
}

/// `a + b` rounded to odd in f64: exact when representable, else the neighbour whose last
/// mantissa bit is 1. Rounding that to any format of at most 51 bits is then exact.
#[inline]
pub(crate) fn add_odd(a: f64, b: f64) -> f64 {
    let s = a + b;
    if !s.is_finite() {
        return s;
    }
    // TwoSum: `s + err` equals `a + b` exactly.
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    let bits = s.to_bits();
    if err == 0.0 || bits & 1 == 1 {
        return s;
    }
    let away_from_zero = (err > 0.0) == (s > 0.0);
    f64::from_bits(if away_from_zero { bits + 1 } else { bits - 1 })
}

/// `c + p` rounded once to f32 (`p` an exact product). The common case is one f64 add and one
/// conversion; double rounding can only differ when the f64 sum lands exactly on an f32
/// midpoint or below the f32 normal range, and those take the exact path.
#[inline(always)]
pub(crate) fn add_round_f32(c: f64, p: f64) -> f64 {
    let s = c + p;
    let bits = s.to_bits();
    if bits & 0x1FFF_FFFF != 0x1000_0000 && (s.abs() >= f32::MIN_POSITIVE as f64 || s == 0.0) {
        round_f32(s)
    } else {
        round_f32(add_odd(c, p))
    }
}

/// `a * b + c` rounded once into float dtype `d`. For f32/f16/bf16 the product is exact in f64
/// (at most 48 significant bits), and the sum is rounded to odd before the final rounding, so
/// the result is the correctly rounded fma (as PTX `fma.rn`). f64 uses the platform fma.
pub(crate) fn fma_round(d: DType, a: f64, b: f64, c: f64) -> f64 {
    if d == DType::F64 {
        return a.mul_add(b, c);
    }
    let p = a * b;
    if !p.is_finite() {
        return round_to(d, p + c);
    }
    round_to(d, add_odd(p, c))
}

/// An f32 value rounded to tf32 (10 mantissa bits), to nearest with ties away from zero, as
/// PTX `cvt.rna.tf32.f32` does; NaN and infinities pass through.
#[inline(always)]
pub(crate) fn round_tf32(x: f64) -> f64 {
    let f = x as f32;
    if !f.is_finite() {
        return x;
    }
    f32::from_bits((f.to_bits() + 0x1000) & !0x1FFF) as f64
}

/// An integer as f64, rounded to odd when it needs more than 53 bits (see [`add_odd`]).
pub(crate) fn int_to_f64_odd(v: i128) -> f64 {
    let r = v as f64;
    let back = r as i128;
    if back == v || r.to_bits() & 1 == 1 {
        return r;
    }
    let bits = r.to_bits();
    f64::from_bits(if v.abs() > back.abs() {
        bits + 1
    } else {
        bits - 1
    })
}

/// An integer converted to float dtype `d` with `mode`.
pub(crate) fn int_to_float(d: DType, mode: Rounding, v: i128) -> f64 {
    if d == DType::F64 {
        // Nearest, then one step back when it lies on the wrong side of `v` (every integer
        // of at most 65 bits, u64 and i64 included, is within f64's range).
        let r = v as f64;
        let back = r as i128;
        let wrong = match mode {
            Rounding::NearestEven => false,
            Rounding::TowardZero => back.abs() > v.abs(),
            Rounding::Down => back > v,
            Rounding::Up => back < v,
        };
        if !wrong {
            return r;
        }
        let toward_zero = (back > v) == (r > 0.0);
        let bits = r.to_bits();
        return f64::from_bits(if toward_zero { bits - 1 } else { bits + 1 });
    }
    round_with(d, mode, int_to_f64_odd(v))
}

/// `v` wrapped to the width of integer dtype `d`: sign-extended for signed types, zero-extended
/// for unsigned ones (u64 keeps its bit pattern), 0 or 1 for i1.
#[inline(always)]
pub(crate) fn wrap(d: DType, v: i64) -> i64 {
    match d {
        DType::I1 => v & 1,
        DType::I8 => v as i8 as i64,
        DType::I16 => v as i16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U8 => v as u8 as i64,
        DType::U16 => v as u16 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

/// [`wrap`] over a slice, the dtype matched once.
pub(crate) fn wrap_slice(d: DType, v: &mut [i64]) {
    match d {
        DType::I1 => v.iter_mut().for_each(|x| *x &= 1),
        DType::I8 => v.iter_mut().for_each(|x| *x = *x as i8 as i64),
        DType::I16 => v.iter_mut().for_each(|x| *x = *x as i16 as i64),
        DType::I32 => v.iter_mut().for_each(|x| *x = *x as i32 as i64),
        DType::U8 => v.iter_mut().for_each(|x| *x = *x as u8 as i64),
        DType::U16 => v.iter_mut().for_each(|x| *x = *x as u16 as i64),
        DType::U32 => v.iter_mut().for_each(|x| *x = *x as u32 as i64),
        _ => {}
    }
}

/// i1 counts as unsigned (true is 1, not -1), as in Triton.
#[inline(always)]
pub(crate) fn is_unsigned(d: DType) -> bool {
    d.is_unsigned_int() || d == DType::I1
}

/// The integer value of a canonical element as i128 (unsigned types by value).
#[inline(always)]
pub(crate) fn int_value(d: DType, v: i64) -> i128 {
    if is_unsigned(d) {
        v as u64 as i128
    } else {
        v as i128
    }
}

/// A float converted to integer dtype `d`: truncation toward zero, saturation, NaN to 0
/// (PTX `cvt.rzi.sat`). Conversion to i1 is `x != 0` (true for NaN), as Triton lowers it.
#[inline(always)]
pub(crate) fn float_to_int(d: DType, x: f64) -> i64 {
    match d {
        DType::I1 => (x != 0.0) as i64,
        DType::I8 => x as i8 as i64,
        DType::I16 => x as i16 as i64,
        DType::I32 => x as i32 as i64,
        DType::I64 => x as i64,
        DType::U8 => x as u8 as i64,
        DType::U16 => x as u16 as i64,
        DType::U32 => x as u32 as i64,
        _ => x as u64 as i64,
    }
}

/// Integer element from memory bits.
#[inline(always)]
pub(crate) fn int_from_bits(d: DType, bits: u64) -> i64 {
    wrap(d, bits as i64)
}

/// Memory bits of an integer element.
#[inline(always)]
pub(crate) fn int_to_bits(d: DType, v: i64) -> u64 {
    let bits = d.bits();
    if bits >= 64 {
        v as u64
    } else {
        (v as u64) & ((1u64 << bits) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_rounding_handles_sticky_bits_below_half_precision() {
        // 1 + 2^-11 is a tie (to 1.0); 1 + 2^-11 + 2^-40 is above it and rounds up.
        assert_eq!(round_f16(1.0 + 2f64.powi(-11)), 1.0);
        assert_eq!(
            round_f16(1.0 + 2f64.powi(-11) + 2f64.powi(-40)),
            1.0 + 2f64.powi(-10)
        );
        assert_eq!(round_f16(65520.0), f64::INFINITY);
        assert_eq!(round_f16(65519.99), 65504.0);
        assert_eq!(round_f16(2f64.powi(-25)), 0.0);
        assert_eq!(round_f16(2f64.powi(-25) * 1.5), 2f64.powi(-24));
        assert_eq!(round_bf16(1.0 + 2f64.powi(-8)), 1.0);
        assert_eq!(round_bf16(1.0 + 3.0 * 2f64.powi(-8)), 1.0 + 2f64.powi(-6));
    }

    #[test]
    fn add_odd_makes_double_rounding_exact() {
        // 1 + 2^-24 + 2^-60: f64 rounds to 1 + 2^-24 (an f32 tie, then to 1.0); exact is above.
        let c = 1.0 + 2f64.powi(-24);
        let p = 2f64.powi(-60);
        assert_eq!((c + p) as f32, 1.0);
        assert_eq!(
            add_round_f32(1.0, 2f64.powi(-24) + 2f64.powi(-53)),
            1.0 + 2f64.powi(-23)
        );
        assert_eq!(add_odd(c, p) as f32, 1.0 + 2f32.powi(-23));
        assert_eq!(add_round_f32(c, p), 1.0 + 2f64.powi(-23));
    }
}
