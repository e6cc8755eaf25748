//! The libdevice functions Triton users call (`tl.extra.cuda.libdevice` / `tl.math`): inverse
//! trigonometric and hyperbolic functions, `pow`, `log1p`, `expm1`, `erfinv`, `cbrt`,
//! `hypot`, the rounding family, classification and `copysign`.
//!
//! Float operands only (f16, bf16, f32, f64); integers are a trace error (convert first with
//! `.to::<f32>()`). Rust literals take the other operand's dtype. f32 results are correctly
//! rounded or within the bound docs/semantics.md gives per function; f16/bf16 compute in f32
//! and round once more; f64 runs on the interpreter only (std's functions), except the
//! rounding family, classification and `copysign`, which are exact everywhere. The interpreter
//! and the GPU compute the same bits (`tegula_ir::mathlib`).

use super::tile::{binary, to_tile, unify};
use super::{report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::{BinaryOp, CmpOp, UnaryOp};

fn float_unary(x: impl IntoOperand, op: UnaryOp, loc: Loc) -> Tile {
    let t = match x.into_operand() {
        // A bare integer literal means a float here: asin(1) is asin(1.0) in f32.
        Operand::Int(v) => to_tile(Operand::Float(v as f64), loc),
        o => to_tile(o, loc),
    };
    t.unary_at(op, loc)
}

macro_rules! float_unary_fns {
    ($($(#[$m:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl IntoOperand) -> Tile {
            float_unary(x, UnaryOp::$op, Loc::caller())
        }
    )*};
}

float_unary_fns! {
    /// The arc sine, in `[-pi/2, pi/2]`; NaN outside `[-1, 1]` (`libdevice.asin`).
    asin => Asin;
    /// The arc cosine, in `[0, pi]`; NaN outside `[-1, 1]` (`libdevice.acos`).
    acos => Acos;
    /// The arc tangent, in `[-pi/2, pi/2]` (`libdevice.atan`).
    atan => Atan;
    /// The hyperbolic sine (`libdevice.sinh`); overflows to +-inf past about +-89.4 in f32.
    sinh => Sinh;
    /// The hyperbolic cosine (`libdevice.cosh`).
    cosh => Cosh;
    /// The inverse hyperbolic sine (`libdevice.asinh`).
    asinh => Asinh;
    /// The inverse hyperbolic cosine, for `x >= 1`; NaN below (`libdevice.acosh`).
    acosh => Acosh;
    /// The inverse hyperbolic tangent: +-inf at +-1, NaN outside `[-1, 1]` (`libdevice.atanh`).
    atanh => Atanh;
    /// `log(1 + x)`, accurate for `x` near 0 (`libdevice.log1p`).
    log1p => Log1p;
    /// `exp(x) - 1`, accurate for `x` near 0 (`libdevice.expm1`).
    expm1 => Expm1;
    /// The inverse error function on `(-1, 1)`: +-inf at +-1, NaN outside (`libdevice.erfinv`).
    erfinv => Erfinv;
    /// The real cube root (`libdevice.cbrt`); negative for negative `x`.
    cbrt => Cbrt;
    /// The nearest integer, halfway cases away from zero (`libdevice.round`); exact.
    round => Round;
    /// The nearest integer, halfway cases to even (`libdevice.rint`); exact.
    rint => Rint;
    /// The nearest integer, halfway cases to even (`libdevice.nearbyint`, the same as `rint`:
    /// there are no floating-point exception flags to leave untouched); exact.
    nearbyint => Rint;
    /// The integer part, rounding toward zero (`libdevice.trunc`); exact.
    trunc => Trunc;
}

fn float_binary(op: BinaryOp, a: impl IntoOperand, b: impl IntoOperand, loc: Loc) -> Tile {
    // Integer literals beside each other mean floats: pow(2, 10) is f32.
    let lit = |o: Operand| match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    };
    binary(op, lit(a.into_operand()), lit(b.into_operand()), loc)
}

/// `atan2(y, x)`: the angle of the point `(x, y)` from the positive x axis, in `[-pi, pi]`, with
/// C99's values at zeros and infinities (`libdevice.atan2`).
#[track_caller]
pub fn atan2(y: impl IntoOperand, x: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Atan2, y, x, Loc::caller())
}

/// `x` to the power `y` (`libdevice.pow`), with C99's special values: `pow(x, 0) = 1` and
/// `pow(1, y) = 1` even for NaN, a negative finite `x` needs an integer `y` (else NaN), odd
/// integer powers keep the sign.
#[track_caller]
pub fn pow(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Pow, x, y, Loc::caller())
}

/// `x / y` rounded to nearest as IEEE 754 says, on the GPU too, where `/` on f32 is Triton's
/// faster `div.full` (within 2 ulp) (`tl.math.div_rn`).
#[track_caller]
pub fn div_rn(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::DivRn, x, y, Loc::caller())
}

/// `sqrt(x^2 + y^2)` without intermediate overflow or underflow; +inf when either is infinite,
/// even if the other is NaN (`libdevice.hypot`).
#[track_caller]
pub fn hypot(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Hypot, x, y, Loc::caller())
}

/// The remainder of `x / y` with the sign of `x`, `x - trunc(x / y) * y` computed exactly
/// (`libdevice.fmod`; the same op as `x % y` on floats).
#[track_caller]
pub fn fmod(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    binary(
        BinaryOp::Rem,
        x.into_operand(),
        y.into_operand(),
        Loc::caller(),
    )
}

fn float_tile(x: impl IntoOperand, what: &str, loc: Loc) -> Tile {
    let t = to_tile(x.into_operand(), loc);
    if t.is_ptr() || !t.dtype().is_float() {
        report(loc, format!("{what} needs a float tile, got {}", t.ty()));
    }
    t
}

/// The unsigned integer dtype of `d`'s width.
fn bits_dtype(d: DType) -> DType {
    match d.bits() {
        16 => DType::U16,
        64 => DType::U64,
        _ => DType::U32,
    }
}

/// Whether each element is NaN, an i1 tile (`libdevice.isnan`).
#[track_caller]
pub fn isnan(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "isnan", loc);
    t.compare(CmpOp::Ne, Operand::Tile(t), loc)
}

/// Whether each element is +inf or -inf, an i1 tile (`libdevice.isinf`).
#[track_caller]
pub fn isinf(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "isinf", loc);
    t.unary_at(UnaryOp::Abs, loc)
        .compare(CmpOp::Eq, Operand::Float(f64::INFINITY), loc)
}

/// Whether each element is finite (neither infinite nor NaN), an i1 tile
/// (`libdevice.isfinited`).
#[track_caller]
pub fn isfinite(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "isfinite", loc);
    t.unary_at(UnaryOp::Abs, loc)
        .compare(CmpOp::Lt, Operand::Float(f64::INFINITY), loc)
}

/// Whether the sign bit is set, an i1 tile: true for negative numbers, -0.0, -inf and NaNs
/// with the sign bit (`libdevice.signbit`).
#[track_caller]
pub fn signbit(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "signbit", loc);
    let signed = match t.dtype().bits() {
        16 => DType::I16,
        64 => DType::I64,
        _ => DType::I32,
    };
    t.bitcast_at(signed, loc)
        .compare(CmpOp::Lt, Operand::Int(0), loc)
}

/// The magnitude of `x` with the sign bit of `y` (`libdevice.copysign`); exact, NaNs included.
/// The operands are promoted to one float dtype first.
#[track_caller]
pub fn copysign(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let lit = |o: Operand| match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    };
    let (a, b) = unify(
        lit(x.into_operand()),
        lit(y.into_operand()),
        "copysign",
        loc,
    );
    if a.is_ptr() || !a.dtype().is_float() {
        report(
            loc,
            format!("copysign needs float operands, got {}", a.ty()),
        );
        return a;
    }
    let d = a.dtype();
    let u = bits_dtype(d);
    let sign: i64 = match d.bits() {
        16 => 0x8000,
        64 => i64::MIN,
        _ => 0x8000_0000,
    };
    let mag = if d.bits() == 64 { i64::MAX } else { sign - 1 };
    let t = Operand::Tile;
    let ma = binary(
        BinaryOp::And,
        t(a.bitcast_at(u, loc)),
        Operand::Int(mag),
        loc,
    );
    let sb = binary(
        BinaryOp::And,
        t(b.bitcast_at(u, loc)),
        Operand::Int(sign),
        loc,
    );
    binary(BinaryOp::Or, t(ma), t(sb), loc).bitcast_at(d, loc)
}
