//! libdevice's IEEE arithmetic in a chosen rounding direction: `add_rn`, `add_rz`, `add_rd`,
//! `add_ru` and likewise `sub_*`, `mul_*`, `div_*` (`div_rn` is [`super::div_rn`]), `fma_*`,
//! `sqrt_*` and `rcp_*`, on f32 and f64 tiles.
//!
//! Each result is the exact value of the operation rounded once in its direction (IEEE 754,
//! subnormals kept, no flush to zero): to nearest (ties to even), toward zero, down or up,
//! overflowing to +-inf or stopping at +-MAX as the direction says, with IEEE 754's signed
//! zeros (an exact zero sum is -0 rounding down, +0 otherwise). On the GPU each is one PTX
//! instruction (`add.rz.f32`, `div.rm.f64`, `fma.rp.f32`, `sqrt.rz.f64`, `rcp.rn.f32`, ..);
//! the interpreter computes the same bits exactly. Operands are promoted to one dtype; Rust
//! literals take the other operand's; an integer, f16 or bf16 tile is a trace error naming
//! the function (convert with `.to::<f32>()`).

use super::tile::{broadcast_pair, to_tile, unify};
use super::{emit1, report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::{Op, RoundedOp, Rounding};

fn lit(o: Operand) -> Operand {
    match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    }
}

pub(crate) fn rounded(op: RoundedOp, mode: Rounding, args: Vec<Operand>, loc: Loc) -> Tile {
    let what = format!("{}_{}", op.name(), mode.name());
    let tiles: Vec<Tile> = match args.len() {
        1 => vec![to_tile(lit(args[0]), loc)],
        2 => {
            let (a, b) = unify(lit(args[0]), lit(args[1]), &what, loc);
            vec![a, b]
        }
        _ => {
            let (x, y) = unify(lit(args[0]), lit(args[1]), &what, loc);
            let (x, z) = unify(Operand::Tile(x), lit(args[2]), &what, loc);
            let (y, _) = broadcast_pair(y, z, &what, loc);
            let y = y.cast_at(x.dtype(), Default::default(), loc);
            vec![x, y, z]
        }
    };
    let x = tiles[0];
    if x.is_ptr() || !matches!(x.dtype(), DType::F32 | DType::F64) {
        report(
            loc,
            format!(
                "{what} needs f32 or f64 operands, got {} (convert with `.to::<f32>()`)",
                x.ty()
            ),
        );
        return x;
    }
    emit1(
        Op::Rounded { op, mode },
        tiles.iter().map(|t| t.value()).collect(),
        x.ty(),
        loc,
    )
}

macro_rules! rounded2 {
    ($($(#[$m:meta])* $name:ident => $op:ident, $mode:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
            rounded(
                RoundedOp::$op,
                Rounding::$mode,
                vec![x.into_operand(), y.into_operand()],
                Loc::caller(),
            )
        }
    )*};
}

macro_rules! rounded1 {
    ($($(#[$m:meta])* $name:ident => $op:ident, $mode:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl IntoOperand) -> Tile {
            rounded(RoundedOp::$op, Rounding::$mode, vec![x.into_operand()], Loc::caller())
        }
    )*};
}

macro_rules! rounded3 {
    ($($(#[$m:meta])* $name:ident => $mode:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl IntoOperand, y: impl IntoOperand, z: impl IntoOperand) -> Tile {
            rounded(
                RoundedOp::Fma,
                Rounding::$mode,
                vec![x.into_operand(), y.into_operand(), z.into_operand()],
                Loc::caller(),
            )
        }
    )*};
}

rounded2! {
    /// `x + y` rounded to nearest, ties to even (`libdevice.add_rn`; PTX `add.rn`, never
    /// contracted into an `fma`).
    add_rn => Add, NearestEven;
    /// `x + y` rounded toward zero (`libdevice.add_rz`; PTX `add.rz`).
    add_rz => Add, TowardZero;
    /// `x + y` rounded down (`libdevice.add_rd`; PTX `add.rm`).
    add_rd => Add, Down;
    /// `x + y` rounded up (`libdevice.add_ru`; PTX `add.rp`).
    add_ru => Add, Up;
    /// `x - y` rounded to nearest (`libdevice.sub_rn`; PTX `sub.rn`).
    sub_rn => Sub, NearestEven;
    /// `x - y` rounded toward zero (`libdevice.sub_rz`).
    sub_rz => Sub, TowardZero;
    /// `x - y` rounded down (`libdevice.sub_rd`).
    sub_rd => Sub, Down;
    /// `x - y` rounded up (`libdevice.sub_ru`).
    sub_ru => Sub, Up;
    /// `x * y` rounded to nearest (`libdevice.mul_rn`; PTX `mul.rn`).
    mul_rn => Mul, NearestEven;
    /// `x * y` rounded toward zero (`libdevice.mul_rz`).
    mul_rz => Mul, TowardZero;
    /// `x * y` rounded down (`libdevice.mul_rd`).
    mul_rd => Mul, Down;
    /// `x * y` rounded up (`libdevice.mul_ru`).
    mul_ru => Mul, Up;
    /// `x / y` rounded toward zero (`libdevice.div_rz`; PTX `div.rz`).
    div_rz => Div, TowardZero;
    /// `x / y` rounded down (`libdevice.div_rd`; PTX `div.rm`).
    div_rd => Div, Down;
    /// `x / y` rounded up (`libdevice.div_ru`; PTX `div.rp`).
    div_ru => Div, Up;
}

rounded1! {
    /// The square root rounded to nearest (`libdevice.sqrt_rn`; PTX `sqrt.rn`): NaN below
    /// -0, `-0` at `-0`.
    sqrt_rn => Sqrt, NearestEven;
    /// The square root rounded toward zero (`libdevice.sqrt_rz`).
    sqrt_rz => Sqrt, TowardZero;
    /// The square root rounded down (`libdevice.sqrt_rd`).
    sqrt_rd => Sqrt, Down;
    /// The square root rounded up (`libdevice.sqrt_ru`).
    sqrt_ru => Sqrt, Up;
    /// `1 / x` rounded to nearest (`libdevice.rcp_rn`; PTX `rcp.rn`): +-inf at +-0.
    rcp_rn => Rcp, NearestEven;
    /// `1 / x` rounded toward zero (`libdevice.rcp_rz`).
    rcp_rz => Rcp, TowardZero;
    /// `1 / x` rounded down (`libdevice.rcp_rd`).
    rcp_rd => Rcp, Down;
    /// `1 / x` rounded up (`libdevice.rcp_ru`).
    rcp_ru => Rcp, Up;
}

rounded3! {
    /// `x * y + z` rounded once to nearest (`libdevice.fma_rn`; PTX `fma.rn`), as [`super::fma`].
    fma_rn => NearestEven;
    /// `x * y + z` rounded once toward zero (`libdevice.fma_rz`).
    fma_rz => TowardZero;
    /// `x * y + z` rounded once down (`libdevice.fma_rd`).
    fma_rd => Down;
    /// `x * y + z` rounded once up (`libdevice.fma_ru`).
    fma_ru => Up;
}
