//! Scalar element types and the rules that combine them (Triton's promotion rules).

use std::fmt;

/// The element type of a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Boolean; the type of comparisons and masks.
    I1,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    /// 8-bit float with 4 exponent and 3 mantissa bits, no infinities, one NaN pattern per
    /// sign, largest finite 448 (Triton's `float8e4nv`, PTX `e4m3`, OCP's E4M3FN).
    F8E4M3,
    /// 8-bit float with 5 exponent and 2 mantissa bits, IEEE 754-style infinities and NaNs,
    /// largest finite 57344 (Triton's `float8e5`, PTX `e5m2`, OCP's E5M2).
    F8E5M2,
}

impl DType {
    pub const ALL: [DType; 15] = [
        DType::I1,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// Width in bits (i1 counts as 1).
    pub fn bits(self) -> u32 {
        use DType::*;
        match self {
            I1 => 1,
            I8 | U8 | F8E4M3 | F8E5M2 => 8,
            I16 | U16 | F16 | BF16 => 16,
            I32 | U32 | F32 => 32,
            I64 | U64 | F64 => 64,
        }
    }

    /// Bytes one element occupies in memory (i1 is stored as one byte).
    pub fn size_bytes(self) -> usize {
        (self.bits() as usize).div_ceil(8)
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 | DType::F8E4M3 | DType::F8E5M2
        )
    }

    /// The 8-bit floats.
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// Integers, including i1.
    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    pub fn is_bool(self) -> bool {
        self == DType::I1
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// The short name used by the printer and in error messages.
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            I1 => "i1",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            U8 => "u8",
            U16 => "u16",
            U32 => "u32",
            U64 => "u64",
            F16 => "f16",
            BF16 => "bf16",
            F32 => "f32",
            F64 => "f64",
            F8E4M3 => "f8e4m3",
            F8E5M2 => "f8e5m2",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The common type two operands are converted to before a binary arithmetic op.
    ///
    /// Follows Triton's `computation_type_impl`: any f64 wins, then f32; f16 with bf16 meets at
    /// f32; an fp8 with a wider float is that float, e4m3 with e5m2 meets at f16; a float with
    /// an integer is the float; two integers of the same signedness take the
    /// wider; of mixed signedness the unsigned one wins unless the signed one is strictly wider.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        if a == F64 || b == F64 {
            return F64;
        }
        if a == F32 || b == F32 {
            return F32;
        }
        // An fp8 beside a wider float is that float (exact); the two fp8 formats meet at f16,
        // which holds both exactly.
        match (a.is_fp8(), b.is_fp8()) {
            (true, true) => return F16,
            (true, false) if b.is_float() => return b,
            (false, true) if a.is_float() => return a,
            _ => {}
        }
        match (a.is_float(), b.is_float()) {
            (true, true) => F32, // f16 with bf16
            (true, false) => a,
            (false, true) => b,
            (false, false) => {
                if a == I1 {
                    return b;
                }
                if b == I1 {
                    return a;
                }
                if a.is_signed_int() == b.is_signed_int() {
                    if a.bits() >= b.bits() {
                        a
                    } else {
                        b
                    }
                } else {
                    let (s, u) = if a.is_signed_int() { (a, b) } else { (b, a) };
                    if s.bits() > u.bits() {
                        s
                    } else {
                        u
                    }
                }
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be a tile element: the bridge from `to::<f16>()`, `Ptr<f32>` and
/// `Tensor<bf16>` to a [`DType`], and to the raw bits that buffers store.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + 'static {
    const DTYPE: DType;
    /// The value's bits, zero-extended to 64 (i1: 0 or 1).
    fn to_bits(self) -> u64;
    /// The value from the low [`DType::bits`] bits of `bits`.
    fn from_bits(bits: u64) -> Self;
    /// The value as f64 (exact for every dtype but the 64-bit integers beyond 2^53).
    fn to_f64(self) -> f64;
    /// `v` converted to this type: floats round to nearest even, integers truncate toward zero
    /// and saturate, NaN becomes 0.
    fn from_f64(v: f64) -> Self;
}

macro_rules! int_element {
    ($($t:ty => $d:ident, $u:ty);* $(;)?) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn to_bits(self) -> u64 { self as $u as u64 }
            fn from_bits(bits: u64) -> Self { bits as $u as $t }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
int_element!(
    i8 => I8, u8; i16 => I16, u16; i32 => I32, u32; i64 => I64, u64;
    u8 => U8, u8; u16 => U16, u16; u32 => U32, u32; u64 => U64, u64;
);

impl Element for bool {
    const DTYPE: DType = DType::I1;
    fn to_bits(self) -> u64 {
        self as u64
    }
    fn from_bits(bits: u64) -> Self {
        bits & 1 != 0
    }
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0 && !v.is_nan()
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_bits(self) -> u64 {
        f32::to_bits(self) as u64
    }
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// `v` as f32 rounded to odd: truncated toward zero, with the last bit set when inexact. A
/// second rounding from it to any format of at most 22 significant bits is then exactly the
/// one rounding from `v` (the classic cure for double rounding).
fn f32_round_to_odd(v: f64) -> f32 {
    let nearest = v as f32;
    if !nearest.is_finite() || nearest as f64 == v {
        return nearest;
    }
    let toward_zero = if (nearest as f64).abs() > v.abs() {
        f32::from_bits(nearest.to_bits() - 1)
    } else {
        nearest
    };
    f32::from_bits(toward_zero.to_bits() | 1)
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_bits(self) -> u64 {
        half::f16::to_bits(self) as u64
    }
    fn from_bits(bits: u64) -> Self {
        half::f16::from_bits(bits as u16)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        // `half::f16::from_f64` truncates to f32 first, which misrounds just above a tie.
        half::f16::from_f32(f32_round_to_odd(v))
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_bits(self) -> u64 {
        half::bf16::to_bits(self) as u64
    }
    fn from_bits(bits: u64) -> Self {
        half::bf16::from_bits(bits as u16)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f32(f32_round_to_odd(v))
    }
}

macro_rules! fp8_element {
    ($($t:ident => $d:ident),*) => {$(
        impl Element for crate::fp8::$t {
            const DTYPE: DType = DType::$d;
            fn to_bits(self) -> u64 {
                crate::fp8::$t::to_bits(self) as u64
            }
            fn from_bits(bits: u64) -> Self {
                crate::fp8::$t::from_bits(bits as u8)
            }
            fn to_f64(self) -> f64 {
                crate::fp8::$t::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                crate::fp8::$t::from_f64(v)
            }
        }
    )*};
}
fp8_element!(f8e4m3 => F8E4M3, f8e5m2 => F8E5M2);

#[cfg(test)]
mod tests {
    use super::DType::*;
    use super::*;

    #[test]
    fn promotion_follows_triton() {
        assert_eq!(DType::promote(F16, BF16), F32);
        assert_eq!(DType::promote(F16, I64), F16);
        assert_eq!(DType::promote(F32, F64), F64);
        assert_eq!(DType::promote(I32, I64), I64);
        assert_eq!(DType::promote(I32, U32), U32);
        assert_eq!(DType::promote(I64, U32), I64);
        assert_eq!(DType::promote(I8, U16), U16);
        assert_eq!(DType::promote(I1, I8), I8);
        assert_eq!(DType::promote(BF16, BF16), BF16);
    }

    #[test]
    fn element_conversions_round_to_nearest_even() {
        // 1 + 2^-11 is halfway between two f16 values; ties go to the even one (1.0).
        assert_eq!(half::f16::from_f64(1.0 + 2f64.powi(-11)).to_f64(), 1.0);
        assert_eq!(
            <half::f16 as Element>::from_f64(1.0 + 3.0 * 2f64.powi(-11)).to_f64(),
            1.0 + 2.0 * 2f64.powi(-10)
        );
        // Just above a tie rounds up, even when the f32 nearest to it is the tie itself.
        let above_tie = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(
            <half::f16 as Element>::from_f64(above_tie).to_f64(),
            1.0 + 2f64.powi(-10)
        );
        let above_tie = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(
            <half::bf16 as Element>::from_f64(above_tie).to_f64(),
            1.0 + 2f64.powi(-7)
        );
        assert_eq!(
            <half::f16 as Element>::from_f64(-1e6).to_f64(),
            f64::NEG_INFINITY
        );
        assert_eq!(<i8 as Element>::from_f64(300.0), 127);
        assert_eq!(<i32 as Element>::from_f64(-2.7), -2);
        assert_eq!(<u8 as Element>::from_f64(f64::NAN), 0);
        assert_eq!(<i16 as Element>::from_bits((-5i16).to_bits()), -5);
        assert_eq!((-1i8).to_bits(), 0xff);
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f8"), None);
    }
}
