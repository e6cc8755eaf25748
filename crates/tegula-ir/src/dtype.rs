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
}

impl DType {
    pub const ALL: [DType; 13] = [
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
    ];

    /// Width in bits (i1 counts as 1).
    pub fn bits(self) -> u32 {
        use DType::*;
        match self {
            I1 => 1,
            I8 | U8 => 8,
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
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
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
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The common type two operands are converted to before a binary arithmetic op.
    ///
    /// Follows Triton's `computation_type_impl`: any f64 wins, then f32; f16 with bf16 meets at
    /// f32; a float with an integer is the float; two integers of the same signedness take the
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

/// A Rust type that can be a tile element: the bridge from `to::<f16>()` and `Ptr<f32>` to a
/// [`DType`].
pub trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
element!(
    bool => I1, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64,
);

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
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f8"), None);
    }
}
