//! libdevice's conversions between floats and integers with a rounding direction
//! (`double2float_rn`, `float2int_rz`, `ll2double_rd`, `uint2float_ru`, .. for `_rn`, `_rz`,
//! `_rd`, `_ru`), `llrint`, `llround`, and the words of an f64 (`double2hiint`,
//! `double2loint`, `hiloint2double`).
//!
//! Each function takes the source dtype its name says (`float` f32, `double` f64, `int` i32,
//! `uint` u32, `ll` i64, `ull` u64): a tile of another dtype is a trace error naming the
//! function (convert first with `.to::<T>()`); a Rust literal is taken in that dtype.
//!
//! - To a float (`double2float_*`, `int2float_*`, `uint2float_*`, `ll2float_*`,
//!   `ull2float_*`, `ll2double_*`, `ull2double_*`, `int2double_rn`, `uint2double_rn`): the
//!   exact value rounded once in the direction ([`Tile::cast_rounded`]): overflow of an f64
//!   into f32 gives +-inf to nearest and away from zero, +-MAX toward it; subnormals are kept.
//!   One PTX `cvt` (`cvt.rm.f32.f64`, `cvt.rp.f32.s64`, ..).
//! - To an integer (`float2int_*`, `float2uint_*`, `float2ll_*`, `float2ull_*`,
//!   `double2int_*`, .., `llrint`, `llround`): the value rounded to an integer in the
//!   direction (`rint`, `trunc`, `floor`, `ceil`; `round`, halfway cases away from zero, for
//!   `llround`), then converted, saturating at the integer dtype's range (a negative value
//!   to an unsigned type gives 0); NaN gives 0 (docs/semantics.md, "Casts").
//!
//! Exact on both backends, bit for bit.

use super::tile::{binary, materialize};
use super::{report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::{BinaryOp, Rounding, UnaryOp};

/// `x` as a tile of dtype `want`: a literal is made in it, a tile must have it.
fn source(x: impl IntoOperand, want: DType, what: &str, loc: Loc) -> Option<Tile> {
    match x.into_operand() {
        Operand::Tile(t) if t.is_ptr() || t.dtype() != want => {
            report(
                loc,
                format!(
                    "`{what}` takes a {want} operand, got {} (convert first with `.to::<{want}>()`)",
                    t.ty()
                ),
            );
            None
        }
        o => Some(materialize(o, want, loc)),
    }
}

/// `x` (of dtype `from`) rounded in `mode` into float dtype `to`.
#[track_caller]
fn to_float(x: impl IntoOperand, from: DType, to: DType, mode: Rounding, what: &str) -> Tile {
    let loc = Loc::caller();
    match source(x, from, what, loc) {
        Some(t) => t.cast_at(to, mode, loc),
        None => materialize(Operand::Float(0.0), to, loc),
    }
}

/// `x` (of float dtype `from`) rounded to an integer in `mode` (`None`: halfway cases away
/// from zero) and converted, saturating, into integer dtype `to`.
#[track_caller]
fn to_int(x: impl IntoOperand, from: DType, to: DType, mode: Option<Rounding>, what: &str) -> Tile {
    let loc = Loc::caller();
    let Some(t) = source(x, from, what, loc) else {
        return materialize(Operand::Int(0), to, loc);
    };
    let op = match mode {
        Some(Rounding::NearestEven) => UnaryOp::Rint,
        Some(Rounding::TowardZero) => UnaryOp::Trunc,
        Some(Rounding::Down) => UnaryOp::Floor,
        Some(Rounding::Up) => UnaryOp::Ceil,
        None => UnaryOp::Round,
    };
    // The cast truncates, which keeps the integral value; it saturates and maps NaN to 0.
    t.unary_at(op, loc).cast_at(to, Rounding::NearestEven, loc)
}

macro_rules! conversions {
    ($($name:ident: $from:ident -> $to:ident, $mode:ident, $dir:literal;)*) => {$(
        #[doc = concat!(
            "`", stringify!($from), "` to `", stringify!($to), "` rounded ", $dir,
            " (`libdevice.", stringify!($name), "`); exact. See the module docs."
        )]
        #[track_caller]
        pub fn $name(x: impl IntoOperand) -> Tile {
            conversions!(@call x, $from, $to, $mode, stringify!($name))
        }
    )*};
    (@call $x:ident, $from:ident, $to:ident, $mode:ident, $what:expr) => {
        if DType::$to.is_float() {
            to_float($x, DType::$from, DType::$to, Rounding::$mode, $what)
        } else {
            to_int($x, DType::$from, DType::$to, Some(Rounding::$mode), $what)
        }
    };
}

conversions! {
    double2float_rn: F64 -> F32, NearestEven, "to nearest, ties to even";
    double2float_rz: F64 -> F32, TowardZero, "toward zero";
    double2float_rd: F64 -> F32, Down, "down";
    double2float_ru: F64 -> F32, Up, "up";
    int2float_rn: I32 -> F32, NearestEven, "to nearest, ties to even";
    int2float_rz: I32 -> F32, TowardZero, "toward zero";
    int2float_rd: I32 -> F32, Down, "down";
    int2float_ru: I32 -> F32, Up, "up";
    uint2float_rn: U32 -> F32, NearestEven, "to nearest, ties to even";
    uint2float_rz: U32 -> F32, TowardZero, "toward zero";
    uint2float_rd: U32 -> F32, Down, "down";
    uint2float_ru: U32 -> F32, Up, "up";
    ll2float_rn: I64 -> F32, NearestEven, "to nearest, ties to even";
    ll2float_rz: I64 -> F32, TowardZero, "toward zero";
    ll2float_rd: I64 -> F32, Down, "down";
    ll2float_ru: I64 -> F32, Up, "up";
    ull2float_rn: U64 -> F32, NearestEven, "to nearest, ties to even";
    ull2float_rz: U64 -> F32, TowardZero, "toward zero";
    ull2float_rd: U64 -> F32, Down, "down";
    ull2float_ru: U64 -> F32, Up, "up";
    ll2double_rn: I64 -> F64, NearestEven, "to nearest, ties to even";
    ll2double_rz: I64 -> F64, TowardZero, "toward zero";
    ll2double_rd: I64 -> F64, Down, "down";
    ll2double_ru: I64 -> F64, Up, "up";
    ull2double_rn: U64 -> F64, NearestEven, "to nearest, ties to even";
    ull2double_rz: U64 -> F64, TowardZero, "toward zero";
    ull2double_rd: U64 -> F64, Down, "down";
    ull2double_ru: U64 -> F64, Up, "up";
    int2double_rn: I32 -> F64, NearestEven, "(always exact)";
    uint2double_rn: U32 -> F64, NearestEven, "(always exact)";
    float2int_rn: F32 -> I32, NearestEven, "to the nearest integer, ties to even";
    float2int_rz: F32 -> I32, TowardZero, "toward zero";
    float2int_rd: F32 -> I32, Down, "down";
    float2int_ru: F32 -> I32, Up, "up";
    float2uint_rn: F32 -> U32, NearestEven, "to the nearest integer, ties to even";
    float2uint_rz: F32 -> U32, TowardZero, "toward zero";
    float2uint_rd: F32 -> U32, Down, "down";
    float2uint_ru: F32 -> U32, Up, "up";
    float2ll_rn: F32 -> I64, NearestEven, "to the nearest integer, ties to even";
    float2ll_rz: F32 -> I64, TowardZero, "toward zero";
    float2ll_rd: F32 -> I64, Down, "down";
    float2ll_ru: F32 -> I64, Up, "up";
    float2ull_rn: F32 -> U64, NearestEven, "to the nearest integer, ties to even";
    float2ull_rz: F32 -> U64, TowardZero, "toward zero";
    float2ull_rd: F32 -> U64, Down, "down";
    float2ull_ru: F32 -> U64, Up, "up";
    double2int_rn: F64 -> I32, NearestEven, "to the nearest integer, ties to even";
    double2int_rz: F64 -> I32, TowardZero, "toward zero";
    double2int_rd: F64 -> I32, Down, "down";
    double2int_ru: F64 -> I32, Up, "up";
    double2uint_rn: F64 -> U32, NearestEven, "to the nearest integer, ties to even";
    double2uint_rz: F64 -> U32, TowardZero, "toward zero";
    double2uint_rd: F64 -> U32, Down, "down";
    double2uint_ru: F64 -> U32, Up, "up";
    double2ll_rn: F64 -> I64, NearestEven, "to the nearest integer, ties to even";
    double2ll_rz: F64 -> I64, TowardZero, "toward zero";
    double2ll_rd: F64 -> I64, Down, "down";
    double2ll_ru: F64 -> I64, Up, "up";
    double2ull_rn: F64 -> U64, NearestEven, "to the nearest integer, ties to even";
    double2ull_rz: F64 -> U64, TowardZero, "toward zero";
    double2ull_rd: F64 -> U64, Down, "down";
    double2ull_ru: F64 -> U64, Up, "up";
}

/// `x` (f32 or f64) rounded to the nearest integer, ties to even, as an i64
/// (`libdevice.llrint`): saturating, NaN to 0.
#[track_caller]
pub fn llrint(x: impl IntoOperand) -> Tile {
    float_to_i64(x, Some(Rounding::NearestEven), "llrint")
}

/// `x` (f32 or f64) rounded to the nearest integer, halfway cases away from zero, as an i64
/// (`libdevice.llround`): saturating, NaN to 0.
#[track_caller]
pub fn llround(x: impl IntoOperand) -> Tile {
    float_to_i64(x, None, "llround")
}

#[track_caller]
fn float_to_i64(x: impl IntoOperand, mode: Option<Rounding>, what: &str) -> Tile {
    let x = x.into_operand();
    let from = match x {
        Operand::Tile(t) if t.dtype() == DType::F64 => DType::F64,
        _ => DType::F32,
    };
    to_int(x, from, DType::I64, mode, what)
}

/// The high 32 bits of an f64's bit pattern as an i32 (`libdevice.double2hiint`): its sign,
/// exponent and the top 20 bits of its mantissa.
#[track_caller]
pub fn double2hiint(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let Some(t) = source(x, DType::F64, "double2hiint", loc) else {
        return materialize(Operand::Int(0), DType::I32, loc);
    };
    let bits = t.bitcast_at(DType::I64, loc);
    let hi = binary(BinaryOp::Shr, Operand::Tile(bits), Operand::Int(32), loc);
    hi.cast_at(DType::I32, Rounding::NearestEven, loc)
}

/// The low 32 bits of an f64's bit pattern as an i32 (`libdevice.double2loint`).
#[track_caller]
pub fn double2loint(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let Some(t) = source(x, DType::F64, "double2loint", loc) else {
        return materialize(Operand::Int(0), DType::I32, loc);
    };
    // An integer cast keeps the value modulo 2^32: the low word.
    t.bitcast_at(DType::I64, loc)
        .cast_at(DType::I32, Rounding::NearestEven, loc)
}

/// The f64 whose bit pattern has `hi` (i32) as its high 32 bits and `lo` (i32) as its low 32
/// bits (`libdevice.hiloint2double`); the inverse of [`double2hiint`] and [`double2loint`].
#[track_caller]
pub fn hiloint2double(hi: impl IntoOperand, lo: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (Some(h), Some(l)) = (
        source(hi, DType::I32, "hiloint2double", loc),
        source(lo, DType::I32, "hiloint2double", loc),
    ) else {
        return materialize(Operand::Float(0.0), DType::F64, loc);
    };
    let t = Operand::Tile;
    let h = h.cast_at(DType::I64, Rounding::NearestEven, loc);
    let h = binary(BinaryOp::Shl, t(h), Operand::Int(32), loc);
    // Through u32, so that the low word is zero-extended.
    let l = l.cast_at(DType::U32, Rounding::NearestEven, loc).cast_at(
        DType::I64,
        Rounding::NearestEven,
        loc,
    );
    binary(BinaryOp::Or, t(h), t(l), loc).bitcast_at(DType::F64, loc)
}
