//! The operation set of the Tile IR.
//!
//! Every op is one [`Op`] value plus its operands, results and regions in
//! [`crate::InstData`]. The operand list of each op is documented on its variant; the
//! verifier (`verify.rs`) is the executable form of those comments.

use std::fmt;

/// A compile-time constant; the result type of its [`Op::Const`] gives its dtype and shape
/// (a constant tile is a splat).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Constant {
    /// Integers of any width, and i1 (0 or 1). Unsigned 64-bit values keep their bit pattern.
    Int(i64),
    Float(f64),
}

impl fmt::Display for Constant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Constant::Int(v) => write!(f, "{v}"),
            Constant::Float(v) if v.is_nan() => f.write_str("nan"),
            Constant::Float(v) if v.is_infinite() => {
                f.write_str(if *v > 0.0 { "inf" } else { "-inf" })
            }
            Constant::Float(v) => write!(f, "{v:?}"),
        }
    }
}

/// Elementwise binary ops; both operands and the result share one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Floats: division. The interpreter rounds it IEEE-style; on the GPU f32 (and f16/bf16,
    /// through f32) is `div.full.f32`, within 2 ulp, as Triton's `/` is; f64 is IEEE.
    /// Integers: truncating (like Rust and C).
    Div,
    /// Floats: IEEE division rounded to nearest on every backend (Triton's `div_rn`).
    DivRn,
    /// Floats: `fmod` (sign of the dividend). Integers: truncating remainder.
    Rem,
    And,
    Or,
    Xor,
    Shl,
    /// Arithmetic for signed integers, logical for unsigned.
    Shr,
    /// Floats: the non-NaN operand if only one is NaN (IEEE maxNum, PTX `max`).
    Max,
    Min,
    /// Floats: NaN if either operand is NaN (PTX `max.NaN`).
    MaxNan,
    MinNan,
    /// Floats: `atan2(a, b)`, the angle of the point `(b, a)`, in `[-pi, pi]`.
    Atan2,
    /// Floats: `a` to the power `b` (C99's `pow`, special values included).
    Pow,
    /// Floats: `sqrt(a^2 + b^2)` without overflow or underflow in between.
    Hypot,
    /// Floats: IEEE 754's `remainder`, `a - n b` with `n` the integer nearest `a / b`
    /// (halfway cases to even); exact.
    Remainder,
    /// Floats: `1 / sqrt(a^2 + b^2)`.
    Rhypot,
    /// Floats: the Bessel function of the first kind `J_a(b)` of an integer order `a` (held
    /// in the float; the builder's `jn` converts an integer tile).
    Jn,
    /// Floats: the Bessel function of the second kind `Y_a(b)`, the order `a` likewise.
    Yn,
    /// Integers of 32 or 64 bits: the high half of the full product of the operands' bit
    /// patterns read as unsigned (Triton's `umulhi`, PTX `mul.hi.u32`/`mul.hi.u64`), whatever
    /// the dtype's signedness.
    UMulHi,
    /// Integers of 32 or 64 bits: the high half of the full product, signed or unsigned as
    /// the dtype is (libdevice's `mulhi`, `umulhi`, `mul64hi`, `umul64hi`; PTX
    /// `mul.hi.s32/u32/s64/u64`).
    MulHi,
    /// 32-bit integers: the low 32 bits of the product of the operands' low 24 bits, those
    /// read as signed 24-bit integers for i32, unsigned for u32 (libdevice's `mul24`,
    /// `umul24`; PTX `mul24.lo.s32/u32`).
    Mul24,
}

impl BinaryOp {
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            DivRn => "div_rn",
            Rem => "rem",
            And => "and",
            Or => "or",
            Xor => "xor",
            Shl => "shl",
            Shr => "shr",
            Max => "max",
            Min => "min",
            MaxNan => "max.nan",
            MinNan => "min.nan",
            UMulHi => "umulhi",
            MulHi => "mulhi",
            Mul24 => "mul24",
            Atan2 => "atan2",
            Pow => "pow",
            Hypot => "hypot",
            Remainder => "remainder",
            Rhypot => "rhypot",
            Jn => "jn",
            Yn => "yn",
        }
    }

    /// The math library's ops and `div_rn` accept floats only.
    pub fn float_only(self) -> bool {
        self.libm().is_some() || self == BinaryOp::DivRn
    }

    /// The function of `crate::mathlib` that computes this op on f32 (and f16/bf16).
    pub fn libm(self) -> Option<crate::mathlib::Fn2> {
        use crate::mathlib::Fn2;
        Some(match self {
            BinaryOp::Atan2 => Fn2::Atan2,
            BinaryOp::Pow => Fn2::Pow,
            BinaryOp::Hypot => Fn2::Hypot,
            BinaryOp::Remainder => Fn2::Remainder,
            BinaryOp::Rhypot => Fn2::Rhypot,
            BinaryOp::Jn => Fn2::Jn,
            BinaryOp::Yn => Fn2::Yn,
            _ => return None,
        })
    }

    /// Bit ops and shifts accept integers only.
    pub fn int_only(self) -> bool {
        use BinaryOp::*;
        matches!(self, And | Or | Xor | Shl | Shr | UMulHi | MulHi | Mul24)
    }

    /// The integer widths an integer-only op accepts beyond the rest (`None`: any).
    pub fn int_bits(self) -> Option<&'static [u32]> {
        use BinaryOp::*;
        match self {
            UMulHi | MulHi => Some(&[32, 64]),
            Mul24 => Some(&[32]),
            _ => None,
        }
    }
}

/// Elementwise unary ops; operand and result share one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    /// Bitwise not (logical not for i1).
    Not,
    Abs,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Erf,
    Tanh,
    Floor,
    Ceil,
    /// Round to the nearest integer, halfway cases away from zero (C's `round`).
    Round,
    /// Round to the nearest integer, halfway cases to even (C's `rint`, `nearbyint`).
    Rint,
    /// Round toward zero (C's `trunc`).
    Trunc,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    /// `log(1 + x)`, accurate near 0.
    Log1p,
    /// `exp(x) - 1`, accurate near 0.
    Expm1,
    /// The inverse of `erf` on (-1, 1).
    Erfinv,
    /// The real cube root.
    Cbrt,
    /// The tangent, with an exact argument reduction for every magnitude.
    Tan,
    /// The base-10 logarithm.
    Log10,
    /// `10^x`.
    Exp10,
    /// `1 - erf x`, accurate in the tail (a small relative error where it is near 0).
    Erfc,
    /// `log |gamma x|`.
    Lgamma,
    /// The gamma function.
    Tgamma,
    /// `1 / cbrt x`.
    Rcbrt,
    /// The standard normal distribution function.
    Normcdf,
    /// `sin(pi x)`, reduced exactly.
    Sinpi,
    /// `cos(pi x)`, reduced exactly.
    Cospi,
    /// The scaled complementary error function `exp(x^2) erfc(x)`.
    Erfcx,
    /// The inverse of `erfc` on [0, 2].
    Erfcinv,
    /// The inverse of the standard normal distribution function on [0, 1].
    Normcdfinv,
    /// The modified Bessel function of the first kind of order 0, `I_0`.
    CylBesselI0,
    /// The modified Bessel function of the first kind of order 1, `I_1`.
    CylBesselI1,
    /// The Bessel function of the first kind of order 0, `J_0`.
    J0,
    /// The Bessel function of the first kind of order 1, `J_1`.
    J1,
    /// The Bessel function of the second kind of order 0, `Y_0`.
    Y0,
    /// The Bessel function of the second kind of order 1, `Y_1`.
    Y1,
    /// Integers of 32 or 64 bits: the number of leading zero bits, 0 to the width
    /// (libdevice's `clz`, `clzll`; PTX `clz.b32/b64`), in the operand's dtype.
    Clz,
    /// Integers of 32 or 64 bits: the number of set bits (libdevice's `popc`, `popcll`; PTX
    /// `popc.b32/b64`), in the operand's dtype.
    Popc,
    /// Integers of 32 or 64 bits: the bits in reverse order (libdevice's `brev`, `brevll`;
    /// PTX `brev.b32/b64`).
    Brev,
}

impl UnaryOp {
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Not => "not",
            Abs => "abs",
            Exp => "exp",
            Exp2 => "exp2",
            Log => "log",
            Log2 => "log2",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Sin => "sin",
            Cos => "cos",
            Erf => "erf",
            Tanh => "tanh",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Rint => "rint",
            Trunc => "trunc",
            Asin => "asin",
            Acos => "acos",
            Atan => "atan",
            Sinh => "sinh",
            Cosh => "cosh",
            Asinh => "asinh",
            Acosh => "acosh",
            Atanh => "atanh",
            Log1p => "log1p",
            Expm1 => "expm1",
            Erfinv => "erfinv",
            Cbrt => "cbrt",
            Tan => "tan",
            Log10 => "log10",
            Exp10 => "exp10",
            Erfc => "erfc",
            Lgamma => "lgamma",
            Tgamma => "tgamma",
            Rcbrt => "rcbrt",
            Normcdf => "normcdf",
            Sinpi => "sinpi",
            Cospi => "cospi",
            Erfcx => "erfcx",
            Erfcinv => "erfcinv",
            Normcdfinv => "normcdfinv",
            CylBesselI0 => "cyl_bessel_i0",
            CylBesselI1 => "cyl_bessel_i1",
            J0 => "j0",
            J1 => "j1",
            Y0 => "y0",
            Y1 => "y1",
            Clz => "clz",
            Popc => "popc",
            Brev => "brev",
        }
    }

    /// The function of `crate::mathlib` that computes this op on f32 (and f16/bf16).
    pub fn libm(self) -> Option<crate::mathlib::Fn1> {
        use crate::mathlib::Fn1;
        use UnaryOp::*;
        Some(match self {
            Asin => Fn1::Asin,
            Acos => Fn1::Acos,
            Atan => Fn1::Atan,
            Sinh => Fn1::Sinh,
            Cosh => Fn1::Cosh,
            Asinh => Fn1::Asinh,
            Acosh => Fn1::Acosh,
            Atanh => Fn1::Atanh,
            Log1p => Fn1::Log1p,
            Expm1 => Fn1::Expm1,
            Erfinv => Fn1::Erfinv,
            Cbrt => Fn1::Cbrt,
            Tan => Fn1::Tan,
            Log10 => Fn1::Log10,
            Exp10 => Fn1::Exp10,
            Erfc => Fn1::Erfc,
            Lgamma => Fn1::Lgamma,
            Tgamma => Fn1::Tgamma,
            Rcbrt => Fn1::Rcbrt,
            Normcdf => Fn1::Normcdf,
            Sinpi => Fn1::Sinpi,
            Cospi => Fn1::Cospi,
            Erfcx => Fn1::Erfcx,
            Erfcinv => Fn1::Erfcinv,
            Normcdfinv => Fn1::Normcdfinv,
            CylBesselI0 => Fn1::CylBesselI0,
            CylBesselI1 => Fn1::CylBesselI1,
            J0 => Fn1::J0,
            J1 => Fn1::J1,
            Y0 => Fn1::Y0,
            Y1 => Fn1::Y1,
            _ => return None,
        })
    }

    /// Transcendental and rounding ops accept floats only.
    pub fn float_only(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Not | UnaryOp::Abs) && !self.int_only()
    }

    pub fn int_only(self) -> bool {
        use UnaryOp::*;
        matches!(self, Not | Clz | Popc | Brev)
    }

    /// The integer widths an integer-only op accepts (`None`: any).
    pub fn int_bits(self) -> Option<&'static [u32]> {
        use UnaryOp::*;
        match self {
            Clz | Popc | Brev => Some(&[32, 64]),
            _ => None,
        }
    }
}

/// "32- or 64-bit", "32-bit": the integer widths an op accepts, in words.
pub(crate) fn width_words(bits: &[u32]) -> String {
    let w: Vec<String> = bits.iter().map(|b| b.to_string()).collect();
    format!("{}-bit", w.join("- or "))
}

/// Elementwise integer ops of three operands; the operands and the result share one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TernaryOp {
    /// Integers of 32 or 64 bits: `|a - b| + c`, the difference's magnitude exact (as an
    /// unsigned number of the width) and the sum wrapping (libdevice's `sad`, `usad`; PTX
    /// `sad.s32/u32/s64/u64`); `a < b` compares as the dtype is signed or not.
    Sad,
    /// 32-bit integers: CUDA's `__byte_perm(a, b, s)`, PTX `prmt.b32` in its default mode:
    /// byte `n` of the result is byte `s[4n+2 : 4n]` of the eight bytes `b:a` (`a`'s bytes
    /// 0-3, `b`'s 4-7), and where bit `4n+3` of `s` is set, that byte's top bit copied into
    /// all eight bits; `s`'s upper 16 bits are not read.
    BytePerm,
}

impl TernaryOp {
    pub fn name(self) -> &'static str {
        match self {
            TernaryOp::Sad => "sad",
            TernaryOp::BytePerm => "byte_perm",
        }
    }

    /// The integer widths the op accepts.
    pub fn int_bits(self) -> &'static [u32] {
        match self {
            TernaryOp::Sad => &[32, 64],
            TernaryOp::BytePerm => &[32],
        }
    }
}

/// Comparisons; the result is i1 of the operands' shape. Float comparisons are ordered
/// (false when either side is NaN) except `Ne`, which is true when either side is NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// The IEEE 754 rounding direction of a float result that does not fit its format exactly:
/// of a [`Op::Cast`] into a float dtype (from a wider float or an integer; a cast to an
/// integer truncates whatever the direction) and of the directed arithmetic of
/// [`Op::Rounded`] (libdevice's `_rn`, `_rz`, `_rd`, `_ru`; PTX `.rn`, `.rz`, `.rm`, `.rp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Rounding {
    /// To nearest, ties to even (the default everywhere).
    #[default]
    NearestEven,
    /// Toward zero (Triton's `fp_downcast_rounding="rtz"`).
    TowardZero,
    /// Down, toward -inf.
    Down,
    /// Up, toward +inf.
    Up,
}

impl Rounding {
    /// libdevice's suffix: `rn`, `rz`, `rd`, `ru`.
    pub fn name(self) -> &'static str {
        match self {
            Rounding::NearestEven => "rn",
            Rounding::TowardZero => "rz",
            Rounding::Down => "rd",
            Rounding::Up => "ru",
        }
    }

    /// PTX's modifier: `rn`, `rz`, `rm`, `rp`.
    pub fn ptx(self) -> &'static str {
        match self {
            Rounding::NearestEven => "rn",
            Rounding::TowardZero => "rz",
            Rounding::Down => "rm",
            Rounding::Up => "rp",
        }
    }
}

/// The correctly rounded float ops of [`Op::Rounded`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoundedOp {
    /// `(a, b)`: `a + b`.
    Add,
    /// `(a, b)`: `a - b`.
    Sub,
    /// `(a, b)`: `a * b`.
    Mul,
    /// `(a, b)`: `a / b`.
    Div,
    /// `(a, b, c)`: `a * b + c`.
    Fma,
    /// `(a)`: the square root.
    Sqrt,
    /// `(a)`: `1 / a`.
    Rcp,
}

impl RoundedOp {
    pub fn name(self) -> &'static str {
        match self {
            RoundedOp::Add => "add",
            RoundedOp::Sub => "sub",
            RoundedOp::Mul => "mul",
            RoundedOp::Div => "div",
            RoundedOp::Fma => "fma",
            RoundedOp::Sqrt => "sqrt",
            RoundedOp::Rcp => "rcp",
        }
    }

    /// The number of operands.
    pub fn arity(self) -> usize {
        match self {
            RoundedOp::Sqrt | RoundedOp::Rcp => 1,
            RoundedOp::Fma => 3,
            _ => 2,
        }
    }
}

/// Reduction (and scan) combiners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Index (i32) of the largest element; the first one on ties; NaN counts as largest.
    ArgMax,
    /// Index (i32) of the smallest element; the first one on ties; NaN counts as smallest.
    ArgMin,
    And,
    Or,
    Xor,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        use ReduceOp::*;
        match self {
            Sum => "sum",
            Prod => "prod",
            Max => "max",
            Min => "min",
            ArgMax => "argmax",
            ArgMin => "argmin",
            And => "and",
            Or => "or",
            Xor => "xor",
        }
    }

    pub fn is_arg(self) -> bool {
        matches!(self, ReduceOp::ArgMax | ReduceOp::ArgMin)
    }
}

/// How `dot` treats f32 operands (ignored for f16/bf16, which are exact on tensor cores).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum InputPrecision {
    /// Operands rounded to tf32 (10-bit mantissa) before multiplying; f32 accumulation.
    #[default]
    Tf32,
    /// Three tf32 products recover close to f32 accuracy.
    Tf32x3,
    /// Exact f32 products, fused multiply-adds.
    Ieee,
}

impl InputPrecision {
    pub fn name(self) -> &'static str {
        match self {
            InputPrecision::Tf32 => "tf32",
            InputPrecision::Tf32x3 => "tf32x3",
            InputPrecision::Ieee => "ieee",
        }
    }
}

/// Cache modifier of a load or store (PTX `.ca`, `.cg`, `.cs`, `.wb`, `.wt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CacheModifier {
    #[default]
    None,
    /// Cache at all levels.
    Ca,
    /// Cache in L2 only.
    Cg,
    /// Streaming: likely accessed once.
    Cs,
    /// Write-back (stores).
    Wb,
    /// Write-through (stores).
    Wt,
}

/// L2 eviction priority hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum EvictionPolicy {
    #[default]
    Normal,
    First,
    Last,
}

/// Read-modify-write atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    Add,
    Max,
    Min,
    And,
    Or,
    Xor,
    /// Exchange: store the new value, return the old.
    Xchg,
}

impl AtomicOp {
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Max => "max",
            AtomicOp::Min => "min",
            AtomicOp::And => "and",
            AtomicOp::Or => "or",
            AtomicOp::Xor => "xor",
            AtomicOp::Xchg => "xchg",
        }
    }
}

/// Memory ordering of an atomic (Triton's `sem=`; the default is Triton's, `acq_rel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MemSem {
    /// Only the read-modify-write itself is atomic; no other access is ordered by it.
    Relaxed,
    /// Accesses after it in program order are not performed before it.
    Acquire,
    /// Accesses before it in program order are performed before it.
    Release,
    /// Both acquire and release.
    #[default]
    AcqRel,
}

impl MemSem {
    /// Triton's spelling (`"acq_rel"`), which is also PTX's qualifier without the dot.
    pub fn name(self) -> &'static str {
        match self {
            MemSem::Relaxed => "relaxed",
            MemSem::Acquire => "acquire",
            MemSem::Release => "release",
            MemSem::AcqRel => "acq_rel",
        }
    }
}

/// The threads an atomic's atomicity and ordering are promised to (Triton's `scope=`; the
/// default is Triton's, `gpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MemScope {
    /// The threads of one program (a CTA).
    Cta,
    /// Every thread of the device.
    #[default]
    Gpu,
    /// Every thread of the system: this device, other devices and the host.
    Sys,
}

impl MemScope {
    /// Triton's spelling (`"gpu"`), which is also PTX's qualifier without the dot.
    pub fn name(self) -> &'static str {
        match self {
            MemScope::Cta => "cta",
            MemScope::Gpu => "gpu",
            MemScope::Sys => "sys",
        }
    }
}

/// Every operation of the Tile IR. Operand order is fixed per variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    // --- indices -------------------------------------------------------------------------
    /// `() -> i32`: this program's index along grid axis 0, 1 or 2.
    ProgramId { axis: u8 },
    /// `() -> i32`: the grid's size along an axis.
    NumPrograms { axis: u8 },
    /// `() -> i32[end - start]`: `start, start + 1, .., end - 1`.
    Arange { start: i64, end: i64 },
    /// `() -> T`: a constant splatted over the result's shape.
    Const(Constant),

    // --- shapes --------------------------------------------------------------------------
    /// `(scalar) -> tile`: the scalar repeated over the result's shape.
    Splat,
    /// `(x) -> y`: same rank; axes of size 1 in `x` stretch to the result's size.
    Broadcast,
    /// `(x) -> y`: inserts a size-1 axis at `axis`.
    ExpandDims { axis: u8 },
    /// `(x) -> y`: same elements in row-major order, another shape of equal size.
    Reshape,
    /// `(x) -> y`: result axis `i` is operand axis `perm[i]` (`trans` is `[1, 0]`).
    Permute { perm: Vec<u8> },
    /// `(x) -> y`: the elements of `x` in reverse order along `axis` (`tl.flip`), same type.
    Flip { axis: u8 },
    /// `(src, index) -> y` (`tl.gather`): `y[.., i, ..] = src[.., index[.., i, ..], ..]`, the
    /// index replacing the coordinate along `axis`. `src` and the integer tile `index` have
    /// one rank and equal sizes on every axis but `axis`; `y` has `src`'s element type and
    /// `index`'s shape. An index outside `0..src.shape[axis]` is an error on the interpreter;
    /// on the GPU it reads an unspecified element of `src` (never outside it).
    Gather { axis: u8 },

    // --- elementwise ---------------------------------------------------------------------
    /// `(a, b) -> c`, all one type.
    Binary(BinaryOp),
    /// `(a) -> b`, one type.
    Unary(UnaryOp),
    /// `(a, b) -> i1`, operands of one type.
    Compare(CmpOp),
    /// `(cond: i1, a, b) -> c`: `a` where `cond`, else `b`; one shape throughout.
    Select,
    /// `(a, b, c) -> a * b + c` with one rounding (floats only).
    Fma,
    /// `(a, b, c) -> d`, all one integer type.
    Ternary(TernaryOp),
    /// `(a[, b[, c]]) -> d`, all one f32 or f64 type: the exact result of `op` rounded once in
    /// direction `mode` (IEEE 754), on every backend.
    Rounded { op: RoundedOp, mode: Rounding },
    /// `(x) -> y`: value conversion to the result's dtype. Float to int truncates toward zero
    /// and saturates; `rounding` applies to float results that lose precision.
    Cast { rounding: Rounding },
    /// `(x) -> y`: reinterpret the bits as another dtype of the same width; also between a
    /// pointer tile and an i64/u64 tile of one shape (its addresses: `int_to_ptr`, `to_int`).
    Bitcast,
    /// `(ptr, offset: int) -> ptr`: advance a pointer by `offset` elements of its pointee.
    AddPtr,

    // --- memory --------------------------------------------------------------------------
    /// `(ptr[, mask][, other]) -> value`: masked-off lanes read nothing and yield `other`
    /// (zero when absent).
    Load {
        has_mask: bool,
        has_other: bool,
        cache: CacheModifier,
        evict: EvictionPolicy,
        volatile: bool,
    },
    /// `(ptr, value[, mask]) -> ()`.
    Store {
        has_mask: bool,
        cache: CacheModifier,
        evict: EvictionPolicy,
    },
    /// `(ptr, value[, mask]) -> old`: atomic read-modify-write per element.
    Atomic {
        op: AtomicOp,
        has_mask: bool,
        sem: MemSem,
        scope: MemScope,
    },
    /// `(ptr, cmp, value) -> old`: store `value` where the current value equals `cmp`.
    AtomicCas { sem: MemSem, scope: MemScope },

    // --- tensor descriptors --------------------------------------------------------------
    /// `(base, shape0, shape1, stride0, stride1, offset0, offset1) -> block` (`desc.load`, of
    /// Triton's `tl.make_tensor_descriptor`): the block of the result's 2-D shape whose first
    /// element is `[offset0, offset1]` of the tensor at the scalar pointer `base` (`shape` and
    /// `strides` in elements; integer scalars), with elements outside `shape` read as zero.
    /// Its one region (no arguments) computes the same block with ordinary ops and ends in
    /// `Yield(block)`: the interpreter runs it, and so does a GPU backend that does not move
    /// the block with the tensor memory accelerator.
    DescLoad,
    /// `(base, shape0, shape1, stride0, stride1, offset0, offset1, value) -> ()` (`desc.store`):
    /// writes the 2-D block `value` at `[offset0, offset1]`, nothing outside `shape`. Its
    /// region does the same with ordinary ops and ends in `Yield()`.
    DescStore,

    // --- reductions and matmul -----------------------------------------------------------
    /// `(x) -> y`: reduces `axis` away. Arg-reductions return i32 indices.
    Reduce { op: ReduceOp, axis: u8 },
    /// `(x) -> y`: inclusive prefix combination along `axis` (same shape).
    Scan {
        op: ReduceOp,
        axis: u8,
        reverse: bool,
    },
    /// `(x0, .., x(n-1)) -> (y0, .., y(n-1))` (`tl.reduce` with a combine function): reduces
    /// `axis` away from n tiles of one shape together. One region, the combine function: block
    /// arguments `(l0, .., l(n-1), r0, .., r(n-1))`, rank-0 values of the operands' element
    /// types (the left and the right element), ending in `Yield` of n such values. Each output
    /// element combines the axis's elements as a balanced tree of adjacent pairs in index order
    /// (docs/semantics.md, "Reductions and scans with a combine function").
    ReduceWith { axis: u8 },
    /// `(x0, .., x(n-1)) -> (y0, .., y(n-1))` (`tl.associative_scan`): inclusive scan along
    /// `axis` of n tiles of one shape with the combine region of [`Op::ReduceWith`]; results
    /// have the operands' types. `reverse`: from the last element to the first.
    ScanWith { axis: u8, reverse: bool },
    /// `(a[M,K], b[K,N], acc[M,N]) -> acc'`: `acc + a @ b`.
    Dot { precision: InputPrecision },

    // --- structured control flow ---------------------------------------------------------
    /// `(lo, hi, step, init..) -> final..`; one region with block arguments
    /// `(iv, carried..)` ending in `Yield(next..)`. `iv` runs over `lo, lo+step, .. < hi`.
    /// `num_stages`: the loop's own pipelining depth (`range(..).num_stages(s)`, Triton's
    /// `tl.range(.., num_stages=s)`), which the GPU backend takes instead of the launch's;
    /// at least 1 when set. It changes no result.
    For { num_stages: Option<u32> },
    /// `(cond: i1) -> results..`; regions `then` and `else`, each ending in `Yield`.
    If,
    /// `(init..) -> final..`; region `before(carried..)` ends in `Condition(cond)`,
    /// region `after(carried..)` ends in `Yield(next..)`; loops while `cond` holds.
    While,
    /// `(values..) -> ()`: terminator of a `For` body, an `If` branch or a `While` body.
    Yield,
    /// `(cond: i1) -> ()`: terminator of a `While`'s `before` region.
    Condition,

    // --- hints and debugging -------------------------------------------------------------
    /// `(x) -> x`: the compiler may assume the elements of `x` are multiples of `n[i]` along
    /// axis `i` (the first element of each contiguous run along the axis, for an offset
    /// tile); one entry per axis (one for a scalar).
    MultipleOf { n: Vec<u32> },
    /// `(x) -> x`: the compiler may assume runs of `n[i]` consecutive elements along axis
    /// `i` are contiguous (each the previous plus one); one entry per axis (one for a scalar).
    MaxContiguous { n: Vec<u32> },
    /// `(x) -> x`: the compiler may assume runs of `n[i]` consecutive elements along axis `i`
    /// are equal; one entry per axis (one for a scalar).
    MaxConstancy { n: Vec<u32> },
    /// `(cond: i1) -> ()`: the compiler may assume every element of `cond` is true
    /// (`tl.assume`). The interpreter checks it and reports `message` where it is false; the
    /// GPU emits nothing.
    Assume { message: String },
    /// `() -> ()`: every thread of the program waits here for all the others (`bar.sync` on
    /// the GPU, `tl.debug_barrier`); a no-op on the interpreter, whose program is one thread.
    Barrier,
    /// `(values..) -> ()`: prints values with a prefix, per program. The interpreter prints a
    /// line per program; the GPU a line per element, `pid (x, y, z) idx (i..) prefix value..`,
    /// through `vprintf` (docs/semantics.md, "Printing"). `hex`: each value's bit pattern in
    /// hexadecimal, zero-padded to its dtype's width (`tl.device_print(.., hex=True)`).
    Print { prefix: String, hex: bool },
    /// `(cond: i1) -> ()`: reports `message` when any element of `cond` is false.
    Assert { message: String },
}

impl Op {
    /// Whether each element of the result comes from the elements at the same position of the
    /// operands (of the result's shape; lower-rank operands are scalars): such an op can run
    /// in whatever layout its operands are held in. The compiler hints pass their operand on.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Binary(_)
                | Op::Unary(_)
                | Op::Compare(_)
                | Op::Select
                | Op::Fma
                | Op::Ternary(_)
                | Op::Rounded { .. }
                | Op::Cast { .. }
                | Op::Bitcast
                | Op::AddPtr
                | Op::MultipleOf { .. }
                | Op::MaxContiguous { .. }
                | Op::MaxConstancy { .. }
        )
    }

    /// The mnemonic the printer uses.
    pub fn name(&self) -> String {
        match self {
            Op::ProgramId { .. } => "program_id".into(),
            Op::NumPrograms { .. } => "num_programs".into(),
            Op::Arange { .. } => "arange".into(),
            Op::Const(_) => "const".into(),
            Op::Splat => "splat".into(),
            Op::Broadcast => "broadcast".into(),
            Op::ExpandDims { .. } => "expand_dims".into(),
            Op::Reshape => "reshape".into(),
            Op::Permute { .. } => "permute".into(),
            Op::Flip { .. } => "flip".into(),
            Op::Gather { .. } => "gather".into(),
            Op::Binary(b) => b.name().into(),
            Op::Unary(u) => u.name().into(),
            Op::Compare(c) => format!("cmp.{}", c.name()),
            Op::Select => "select".into(),
            Op::Fma => "fma".into(),
            Op::Ternary(t) => t.name().into(),
            Op::Rounded { op, mode } => format!("{}.{}", op.name(), mode.name()),
            Op::Cast { .. } => "cast".into(),
            Op::Bitcast => "bitcast".into(),
            Op::AddPtr => "addptr".into(),
            Op::Load { .. } => "load".into(),
            Op::Store { .. } => "store".into(),
            Op::Atomic { op, .. } => format!("atomic.{}", op.name()),
            Op::AtomicCas { .. } => "atomic.cas".into(),
            Op::DescLoad => "desc_load".into(),
            Op::DescStore => "desc_store".into(),
            Op::Reduce { op, .. } => format!("reduce.{}", op.name()),
            Op::Scan { op, .. } => format!("scan.{}", op.name()),
            Op::ReduceWith { .. } => "reduce_with".into(),
            Op::ScanWith { .. } => "scan_with".into(),
            Op::Dot { .. } => "dot".into(),
            Op::For { .. } => "for".into(),
            Op::If => "if".into(),
            Op::While => "while".into(),
            Op::Yield => "yield".into(),
            Op::Condition => "condition".into(),
            Op::MultipleOf { .. } => "multiple_of".into(),
            Op::MaxContiguous { .. } => "max_contiguous".into(),
            Op::MaxConstancy { .. } => "max_constancy".into(),
            Op::Print { .. } => "print".into(),
            Op::Assert { .. } => "assert".into(),
            Op::Assume { .. } => "assume".into(),
            Op::Barrier => "debug_barrier".into(),
        }
    }

    /// Ops a combine region ([`Op::ReduceWith`], [`Op::ScanWith`]) may hold besides its
    /// `Yield`: pure scalar computations, which every backend can repeat at each combine step.
    pub fn allowed_in_combine(&self) -> bool {
        self.is_elementwise() || matches!(self, Op::Const(_) | Op::Splat)
    }

    /// Ops that end a region.
    pub fn is_terminator(&self) -> bool {
        matches!(self, Op::Yield | Op::Condition)
    }

    /// Ops with effects beyond their results (never removed by dead-code elimination).
    pub fn has_side_effects(&self) -> bool {
        matches!(
            self,
            Op::Store { .. }
                | Op::Atomic { .. }
                | Op::AtomicCas { .. }
                | Op::DescStore
                | Op::Print { .. }
                | Op::Assert { .. }
                | Op::Assume { .. }
                | Op::Barrier
                | Op::Yield
                | Op::Condition
        ) || (matches!(self, Op::Load { volatile: true, .. }))
    }
}
