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
use crate::op::{Op, RoundMode, RoundedOp};

fn lit(o: Operand) -> Operand {
    match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    }
}

fn rounded(op: RoundedOp, mode: RoundMode, args: Vec<Operand>, loc: Loc) -> Tile {
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
                RoundMode::$mode,
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
            rounded(RoundedOp::$op, RoundMode::$mode, vec![x.into_operand()], Loc::caller())
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
                RoundMode::$mode,
                vec![x.into_operand(), y.into_operand(), z.into_operand()],
                Loc::caller(),
            )
        }
    )*};
}

rounded2! {
    /// `x + y` rounded to nearest, ties to even (`libdevice.add_rn`; PTX `add.rn`, never
    /// contracted into an `fma`).
    add_rn => Add, Rn;
    /// `x + y` rounded toward zero (`libdevice.add_rz`; PTX `add.rz`).
    add_rz => Add, Rz;
    /// `x + y` rounded down (`libdevice.add_rd`; PTX `add.rm`).
    add_rd => Add, Rd;
    /// `x + y` rounded up (`libdevice.add_ru`; PTX `add.rp`).
    add_ru => Add, Ru;
    /// `x - y` rounded to nearest (`libdevice.sub_rn`; PTX `sub.rn`).
    sub_rn => Sub, Rn;
    /// `x - y` rounded toward zero (`libdevice.sub_rz`).
    sub_rz => Sub, Rz;
    /// `x - y` rounded down (`libdevice.sub_rd`).
    sub_rd => Sub, Rd;
    /// `x - y` rounded up (`libdevice.sub_ru`).
    sub_ru => Sub, Ru;
    /// `x * y` rounded to nearest (`libdevice.mul_rn`; PTX `mul.rn`).
    mul_rn => Mul, Rn;
    /// `x * y` rounded toward zero (`libdevice.mul_rz`).
    mul_rz => Mul, Rz;
    /// `x * y` rounded down (`libdevice.mul_rd`).
    mul_rd => Mul, Rd;
    /// `x * y` rounded up (`libdevice.mul_ru`).
    mul_ru => Mul, Ru;
    /// `x / y` rounded toward zero (`libdevice.div_rz`; PTX `div.rz`).
    div_rz => Div, Rz;
    /// `x / y` rounded down (`libdevice.div_rd`; PTX `div.rm`).
    div_rd => Div, Rd;
    /// `x / y` rounded up (`libdevice.div_ru`; PTX `div.rp`).
    div_ru => Div, Ru;
}

rounded1! {
    /// The square root rounded to nearest (`libdevice.sqrt_rn`; PTX `sqrt.rn`): NaN below
    /// -0, `-0` at `-0`.
    sqrt_rn => Sqrt, Rn;
    /// The square root rounded toward zero (`libdevice.sqrt_rz`).
    sqrt_rz => Sqrt, Rz;
    /// The square root rounded down (`libdevice.sqrt_rd`).
    sqrt_rd => Sqrt, Rd;
    /// The square root rounded up (`libdevice.sqrt_ru`).
    sqrt_ru => Sqrt, Ru;
    /// `1 / x` rounded to nearest (`libdevice.rcp_rn`; PTX `rcp.rn`): +-inf at +-0.
    rcp_rn => Rcp, Rn;
    /// `1 / x` rounded toward zero (`libdevice.rcp_rz`).
    rcp_rz => Rcp, Rz;
    /// `1 / x` rounded down (`libdevice.rcp_rd`).
    rcp_rd => Rcp, Rd;
    /// `1 / x` rounded up (`libdevice.rcp_ru`).
    rcp_ru => Rcp, Ru;
}

rounded3! {
    /// `x * y + z` rounded once to nearest (`libdevice.fma_rn`; PTX `fma.rn`), as [`super::fma`].
    fma_rn => Rn;
    /// `x * y + z` rounded once toward zero (`libdevice.fma_rz`).
    fma_rz => Rz;
    /// `x * y + z` rounded once down (`libdevice.fma_rd`).
    fma_rd => Rd;
    /// `x * y + z` rounded once up (`libdevice.fma_ru`).
    fma_ru => Ru;
}
