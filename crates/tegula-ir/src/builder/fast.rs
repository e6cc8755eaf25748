//! The rest of libdevice's float set: the `fast_*` approximations, `saturatef`, `rsqrt_rn`
//! and the norms of three and four values (`norm3d`, `rnorm3d`, `norm4d`, `rnorm4d`).
//!
//! - `fast_expf`, `fast_exp10f`, `fast_logf`, `fast_log2f`, `fast_log10f`, `fast_sinf`,
//!   `fast_cosf`, `fast_tanf`, `fast_powf`, `fast_dividef` (f32 only, as in libdevice) are
//!   the hardware approximations on the GPU, composed as CUDA composes its `__expf`,
//!   `__exp10f`, `__logf`, `__log2f`, `__log10f`, `__sinf`, `__cosf`, `__tanf`, `__powf` and
//!   `__fdividef`: `ex2.approx` and `lg2.approx` with a constant scale, `sin.approx`,
//!   `cos.approx`, their quotient, `ex2(y lg2 x)`, and tegula's f32 `/` (`div.full.f32`,
//!   within 2 ulp, which stays correct where `__fdividef` returns 0 for `2^126 < |y|`). The
//!   interpreter evaluates the same compositions with each function correctly rounded
//!   (docs/semantics.md, "Floating point"), so the two agree to the approximations' bounds,
//!   not bit for bit.
//! - `saturatef` clamps to [0, 1] (+0 at NaN and at -0); exact.
//! - `rsqrt_rn` is `1 / sqrt(x)` correctly rounded in f32: the square root and the reciprocal
//!   in f64 (`sqrt.rn.f64`, `rcp.rn.f64`), then one rounding to f32; two f64 roundings leave
//!   the result within 2^-51 relative of the exact value, closer than any f32 rounding
//!   boundary comes to `1 / sqrt(x)` for an f32 `x` (tegula-interp's `tests/libdevice_rest.rs`
//!   checks the rounding exactly).
//! - `norm3d`, `norm4d` (`sqrt` of the sum of squares) and `rnorm3d`, `rnorm4d` (its
//!   reciprocal), f32, f16 and bf16 computed in f64 (squares of f32 values are exact there,
//!   the sum and root rounded at 2^-53) and rounded once: within a hair over half an ulp.
//!   f64 operands are scaled by the largest magnitude first, so that nothing overflows or
//!   underflows in between (2 eps measured). Any
//!   infinite operand gives +inf (+0 for the reciprocals) even beside a NaN, as C's `hypot`.
//!   Every step is an IEEE operation rounded on its own, so both backends give the same bits.

use super::ops::select_at;
use super::rounded::rounded;
use super::tile::{binary, materialize};
use super::{report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::{BinaryOp, CmpOp, RoundedOp, Rounding, UnaryOp};

/// `1 / x` correctly rounded.
fn rcp_rn(x: Tile, loc: Loc) -> Tile {
    rounded(
        RoundedOp::Rcp,
        Rounding::NearestEven,
        vec![Operand::Tile(x)],
        loc,
    )
}

/// `x` as an f32 tile (a literal is made in f32; another dtype is a trace error).
fn f32_operand(x: impl IntoOperand, what: &str, loc: Loc) -> Tile {
    match x.into_operand() {
        Operand::Tile(t) if t.is_ptr() || t.dtype() != DType::F32 => {
            report(
                loc,
                format!(
                    "`{what}` takes an f32 operand, got {} (convert first with `.to::<f32>()`)",
                    t.ty()
                ),
            );
            materialize(Operand::Float(0.0), DType::F32, loc)
        }
        Operand::Int(v) => materialize(Operand::Float(v as f64), DType::F32, loc),
        o => materialize(o, DType::F32, loc),
    }
}

fn scaled(x: Tile, op: UnaryOp, scale: Option<f64>, loc: Loc) -> Tile {
    let t = Operand::Tile;
    let x = match scale {
        Some(s) if op == UnaryOp::Exp2 => binary(BinaryOp::Mul, t(x), Operand::Float(s), loc),
        _ => x,
    };
    let r = x.unary_at(op, loc);
    match scale {
        Some(s) if op != UnaryOp::Exp2 => binary(BinaryOp::Mul, t(r), Operand::Float(s), loc),
        _ => r,
    }
}

macro_rules! fast_unary {
    ($($(#[$m:meta])* $name:ident => $op:ident $(* $scale:expr)?;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl IntoOperand) -> Tile {
            let loc = Loc::caller();
            let x = f32_operand(x, stringify!($name), loc);
            #[allow(unused_mut, unused_assignments)]
            let mut scale = None;
            $(scale = Some($scale);)?
            scaled(x, UnaryOp::$op, scale, loc)
        }
    )*};
}

fast_unary! {
    /// `e^x`, approximately (`libdevice.fast_expf`, CUDA's `__expf`): [`super::exp`].
    fast_expf => Exp;
    /// `10^x`, approximately (`libdevice.fast_exp10f`, `__exp10f`): `ex2.approx(x log2 10)`.
    fast_exp10f => Exp2 * std::f64::consts::LOG2_10;
    /// The natural logarithm, approximately (`libdevice.fast_logf`, `__logf`): [`super::log`].
    fast_logf => Log;
    /// The base-2 logarithm, approximately (`libdevice.fast_log2f`, `__log2f`): one
    /// `lg2.approx`.
    fast_log2f => Log2;
    /// The base-10 logarithm, approximately (`libdevice.fast_log10f`, `__log10f`):
    /// `lg2.approx(x) log10 2`.
    fast_log10f => Log2 * std::f64::consts::LOG10_2;
    /// The sine, approximately (`libdevice.fast_sinf`, `__sinf`): one `sin.approx`, accurate
    /// for moderate arguments only.
    fast_sinf => Sin;
    /// The cosine, approximately (`libdevice.fast_cosf`, `__cosf`): one `cos.approx`.
    fast_cosf => Cos;
}

/// The tangent, approximately (`libdevice.fast_tanf`, `__tanf`): `fast_sinf(x) / fast_cosf(x)`.
#[track_caller]
pub fn fast_tanf(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let x = f32_operand(x, "fast_tanf", loc);
    let (s, c) = (x.unary_at(UnaryOp::Sin, loc), x.unary_at(UnaryOp::Cos, loc));
    binary(BinaryOp::Div, Operand::Tile(s), Operand::Tile(c), loc)
}

/// `x^y`, approximately (`libdevice.fast_powf`, `__powf`): `ex2.approx(y lg2.approx(x))`, so
/// NaN for negative `x` whatever `y`.
#[track_caller]
pub fn fast_powf(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (x, y) = (
        f32_operand(x, "fast_powf", loc),
        f32_operand(y, "fast_powf", loc),
    );
    let l = x.unary_at(UnaryOp::Log2, loc);
    binary(BinaryOp::Mul, Operand::Tile(y), Operand::Tile(l), loc).unary_at(UnaryOp::Exp2, loc)
}

/// `x / y` (`libdevice.fast_dividef`, `__fdividef`): tegula's f32 `/`, `div.full.f32` on the
/// GPU (within 2 ulp), IEEE on the interpreter.
#[track_caller]
pub fn fast_dividef(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (x, y) = (
        f32_operand(x, "fast_dividef", loc),
        f32_operand(y, "fast_dividef", loc),
    );
    binary(BinaryOp::Div, Operand::Tile(x), Operand::Tile(y), loc)
}

/// `x` clamped to [0, 1] (`libdevice.saturatef`, CUDA's `__saturatef`): +0 at NaN and at -0.
/// f32 only; exact.
#[track_caller]
pub fn saturatef(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let x = f32_operand(x, "saturatef", loc);
    let t = Operand::Tile;
    let below_one = binary(BinaryOp::Min, t(x), Operand::Float(1.0), loc);
    // Unordered at NaN, false at -0 and +0: those give +0.
    let positive = x.compare(CmpOp::Gt, Operand::Float(0.0), loc);
    select_at(positive, t(below_one), Operand::Float(0.0), loc)
}

/// `1 / sqrt(x)` correctly rounded (`libdevice.rsqrt_rn`): +inf at +0, -inf at -0, +0 at
/// +inf, NaN below 0. f32 only; computed in f64 and rounded once (see the module docs).
#[track_caller]
pub fn rsqrt_rn(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let x = f32_operand(x, "rsqrt_rn", loc);
    let w = x.cast_at(DType::F64, Rounding::NearestEven, loc);
    let s = w.unary_at(UnaryOp::Sqrt, loc);
    rcp_rn(s, loc).cast_at(DType::F32, Rounding::NearestEven, loc)
}

/// `sqrt(a^2 + b^2 + c^2)` (`libdevice.norm3d`), without overflow or underflow in between;
/// see the module docs for the rounding.
#[track_caller]
pub fn norm3d(a: impl IntoOperand, b: impl IntoOperand, c: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let ops = [a.into_operand(), b.into_operand(), c.into_operand()];
    norm(&ops, false, "norm3d", loc)
}

/// `1 / sqrt(a^2 + b^2 + c^2)` (`libdevice.rnorm3d`): +inf where all three are zero.
#[track_caller]
pub fn rnorm3d(a: impl IntoOperand, b: impl IntoOperand, c: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let ops = [a.into_operand(), b.into_operand(), c.into_operand()];
    norm(&ops, true, "rnorm3d", loc)
}

/// `sqrt(a^2 + b^2 + c^2 + d^2)` (`libdevice.norm4d`).
#[track_caller]
pub fn norm4d(
    a: impl IntoOperand,
    b: impl IntoOperand,
    c: impl IntoOperand,
    d: impl IntoOperand,
) -> Tile {
    let loc = Loc::caller();
    let ops = [
        a.into_operand(),
        b.into_operand(),
        c.into_operand(),
        d.into_operand(),
    ];
    norm(&ops, false, "norm4d", loc)
}

/// `1 / sqrt(a^2 + b^2 + c^2 + d^2)` (`libdevice.rnorm4d`).
#[track_caller]
pub fn rnorm4d(
    a: impl IntoOperand,
    b: impl IntoOperand,
    c: impl IntoOperand,
    d: impl IntoOperand,
) -> Tile {
    let loc = Loc::caller();
    let ops = [
        a.into_operand(),
        b.into_operand(),
        c.into_operand(),
        d.into_operand(),
    ];
    norm(&ops, true, "rnorm4d", loc)
}

fn norm(ops: &[Operand], reciprocal: bool, what: &str, loc: Loc) -> Tile {
    let t = Operand::Tile;
    let lit = |o: Operand| match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    };
    // One dtype and shape for all: promote pairwise, then broadcast each to the result.
    let mut acc = super::tile::unify(lit(ops[0]), lit(ops[1]), what, loc).0;
    for &o in &ops[2..] {
        acc = super::tile::unify(t(acc), lit(o), what, loc).0;
    }
    let (d, shape) = (acc.dtype(), acc.shape());
    if acc.is_ptr() || !d.is_float() {
        report(
            loc,
            format!("{what} needs float operands, got {}", acc.ty()),
        );
        return acc;
    }
    let xs: Vec<Tile> = ops
        .iter()
        .map(|&o| {
            let (x, _) = super::tile::unify(lit(o), t(acc), what, loc);
            x.broadcast_at(shape, loc)
                .cast_at(DType::F64, Rounding::NearestEven, loc)
        })
        .collect();
    let abs: Vec<Tile> = xs.iter().map(|x| x.unary_at(UnaryOp::Abs, loc)).collect();
    let mut any_inf = abs[0].compare(CmpOp::Eq, Operand::Float(f64::INFINITY), loc);
    for a in &abs[1..] {
        let inf = a.compare(CmpOp::Eq, Operand::Float(f64::INFINITY), loc);
        any_inf = binary(BinaryOp::Or, t(any_inf), t(inf), loc);
    }
    // Each product and sum rounded on its own (`mul.rn`, `add.rn`: never contracted into an
    // fma), so that the GPU computes the interpreter's bits.
    let rn =
        |op: RoundedOp, a: Tile, b: Tile| rounded(op, Rounding::NearestEven, vec![t(a), t(b)], loc);
    let sum_of_squares = |xs: &[Tile]| {
        let mut s = rn(RoundedOp::Mul, xs[0], xs[0]);
        for &x in &xs[1..] {
            let sq = rn(RoundedOp::Mul, x, x);
            s = rn(RoundedOp::Add, s, sq);
        }
        s
    };
    let r = if d == DType::F64 {
        // Scaled by the largest magnitude m (a NaN operand makes the sum NaN below), so that
        // the squares lie in [0, 1] and the largest is 1.
        let mut m = abs[0];
        for &a in &abs[1..] {
            m = binary(BinaryOp::Max, t(m), t(a), loc);
        }
        let zero = m.compare(CmpOp::Eq, Operand::Float(0.0), loc);
        let div = select_at(zero, Operand::Float(1.0), t(m), loc);
        let ys: Vec<Tile> = xs
            .iter()
            .map(|&x| binary(BinaryOp::Div, t(x), t(div), loc))
            .collect();
        let root = sum_of_squares(&ys).unary_at(UnaryOp::Sqrt, loc);
        if reciprocal {
            let inv = rcp_rn(root, loc);
            let rm = rcp_rn(div, loc);
            rn(RoundedOp::Mul, inv, rm)
        } else {
            rn(RoundedOp::Mul, root, div)
        }
    } else {
        let root = sum_of_squares(&xs).unary_at(UnaryOp::Sqrt, loc);
        if reciprocal {
            rcp_rn(root, loc)
        } else {
            root
        }
    };
    let inf = if reciprocal { 0.0 } else { f64::INFINITY };
    let r = select_at(any_inf, Operand::Float(inf), t(r), loc);
    r.cast_at(d, Rounding::NearestEven, loc)
}
