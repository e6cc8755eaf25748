//! libdevice's integer intrinsics (`tl.extra.cuda.libdevice`): `clz`, `popc`, `brev`, `ffs`,
//! `byte_perm`, `mulhi`, `mul24`/`umul24`, `sad`/`usad`, `hadd`/`uhadd` and `rhadd`/`urhadd`.
//!
//! Integer operands only, of 32 or 64 bits (`byte_perm` and `mul24` 32 only, as libdevice);
//! anything else is a trace error naming the function. Rust literals take the other operand's
//! dtype; the operands of a function of two or three are promoted to one dtype. Every result is
//! exact, the same bits on the interpreter and on the GPU, where each is one PTX instruction
//! (`clz`, `popc`, `brev`, `prmt`, `mul.hi`, `mul24.lo`, `sad`) or a few exact integer ops
//! (`ffs`, `hadd`, `rhadd`). The `u`-prefixed forms read the bits as unsigned whatever the
//! dtype, as [`umulhi`](super::umulhi) does, and return the dtype's bits.

use super::tile::{binary, broadcast_pair, materialize, to_tile, unify};
use super::{emit1, report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::{BinaryOp, Op, TernaryOp, UnaryOp};

/// Whether `t` is an integer tile of one of the widths, reporting at `loc` if not.
fn check_int(t: Tile, what: &str, bits: &[u32], loc: Loc) -> bool {
    let d = t.dtype();
    if t.is_ptr() || !d.is_int() || !bits.contains(&d.bits()) {
        report(
            loc,
            format!(
                "{what} needs {} integer operands, got {}",
                crate::op::width_words(bits),
                t.ty()
            ),
        );
        return false;
    }
    true
}

/// The unsigned dtype of `d`'s width (32 or 64).
fn unsigned_of(d: DType) -> DType {
    if d.bits() == 64 {
        DType::U64
    } else {
        DType::U32
    }
}

fn unary_int(x: impl IntoOperand, op: UnaryOp, loc: Loc) -> Option<Tile> {
    let t = to_tile(x.into_operand(), loc);
    check_int(t, op.name(), &[32, 64], loc).then(|| t.unary_at(op, loc))
}

/// The number of leading zero bits of a 32- or 64-bit integer, 0 to its width, an i32 tile
/// (`libdevice.clz`, `clzll`); one `clz.b32` / `clz.b64`.
#[track_caller]
pub fn clz(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    match unary_int(x, UnaryOp::Clz, loc) {
        Some(t) => t.cast_at(DType::I32, Default::default(), loc),
        None => to_tile(Operand::Int(0), loc),
    }
}

/// The number of set bits of a 32- or 64-bit integer, an i32 tile (`libdevice.popc`,
/// `popcll`); one `popc.b32` / `popc.b64`.
#[track_caller]
pub fn popc(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    match unary_int(x, UnaryOp::Popc, loc) {
        Some(t) => t.cast_at(DType::I32, Default::default(), loc),
        None => to_tile(Operand::Int(0), loc),
    }
}

/// The bits of a 32- or 64-bit integer in reverse order, of its dtype (`libdevice.brev`,
/// `brevll`); one `brev.b32` / `brev.b64`.
#[track_caller]
pub fn brev(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = to_tile(x.into_operand(), loc);
    match unary_int(Operand::Tile(t), UnaryOp::Brev, loc) {
        Some(r) => r,
        None => t,
    }
}

/// The 1-based position of the least significant set bit of a 32- or 64-bit integer, 0 for
/// 0, an i32 tile (`libdevice.ffs`, `ffsll`): `width - clz(x & -x)`, exact at 0 too.
#[track_caller]
pub fn ffs(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let x = to_tile(x.into_operand(), loc);
    if !check_int(x, "ffs", &[32, 64], loc) {
        return to_tile(Operand::Int(0), loc);
    }
    let t = Operand::Tile;
    let neg = binary(BinaryOp::Sub, Operand::Int(0), t(x), loc);
    let low = binary(BinaryOp::And, t(x), t(neg), loc);
    let lz = low
        .unary_at(UnaryOp::Clz, loc)
        .cast_at(DType::I32, Default::default(), loc);
    binary(
        BinaryOp::Sub,
        Operand::Int(x.dtype().bits() as i64),
        t(lz),
        loc,
    )
}

/// Three operands promoted to one dtype and broadcast to one shape.
fn unify3(a: Operand, b: Operand, c: Operand, what: &str, loc: Loc) -> (Tile, Tile, Tile) {
    let (x, y) = unify(a, b, what, loc);
    let (x, z) = unify(Operand::Tile(x), c, what, loc);
    let (y, _) = broadcast_pair(y, z, what, loc);
    let y = y.cast_at(x.dtype(), Default::default(), loc);
    (x, y, z)
}

/// `sad`'s operands: `x` and `y` promoted to one dtype, which `z` is converted to (its bits
/// kept at one width), as libdevice's `__nv_sad(int, int, unsigned)` adds an unsigned `z` to
/// the magnitude of a signed difference; all broadcast to one shape.
fn unify_sad(x: Operand, y: Operand, z: Operand, what: &str, loc: Loc) -> (Tile, Tile, Tile) {
    let (a, b) = unify(x, y, what, loc);
    let c = match z {
        Operand::Tile(t) => t,
        lit => materialize(lit, a.dtype(), loc),
    };
    let c = c.cast_at(a.dtype(), Default::default(), loc);
    let (a, c) = broadcast_pair(a, c, what, loc);
    let (b, c) = broadcast_pair(b, c, what, loc);
    (a, b, c)
}

fn ternary(op: TernaryOp, a: Operand, b: Operand, c: Operand, loc: Loc) -> Tile {
    let (x, y, z) = match op {
        TernaryOp::Sad => unify_sad(a, b, c, op.name(), loc),
        TernaryOp::BytePerm => unify3(a, b, c, op.name(), loc),
    };
    if !check_int(x, op.name(), op.int_bits(), loc) {
        return x;
    }
    emit1(
        Op::Ternary(op),
        vec![x.value(), y.value(), z.value()],
        x.ty(),
        loc,
    )
}

/// `x` and `y` as their dtype's unsigned twin of one width, or `None` (reported).
fn as_unsigned(x: Tile, what: &str, bits: &[u32], loc: Loc) -> Option<Tile> {
    check_int(x, what, bits, loc).then(|| x.bitcast_at(unsigned_of(x.dtype()), loc))
}

/// CUDA's `__byte_perm(x, y, s)` on 32-bit integers (`libdevice.byte_perm`; PTX `prmt.b32`):
/// byte `n` of the result is byte `s[4n+2 : 4n]` of the eight bytes of `y:x` (`x`'s bytes
/// 0-3, `y`'s 4-7), sign-replicated where bit `4n+3` of `s` is set (what `prmt` and so the GPU
/// do); the upper 16 bits of `s` are not read.
#[track_caller]
pub fn byte_perm(x: impl IntoOperand, y: impl IntoOperand, s: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    ternary(
        TernaryOp::BytePerm,
        x.into_operand(),
        y.into_operand(),
        s.into_operand(),
        loc,
    )
}

/// `|x - y| + z` (`libdevice.sad`, which is `__nv_sad` or `__nv_usad` by dtype; PTX `sad`):
/// the difference's magnitude exact as an unsigned number of the width (`x < y` signed or
/// unsigned as the dtype of `x` and `y` is), the sum wrapping; 32- or 64-bit integers. `x`
/// and `y` are promoted to one dtype, the result's; `z` is converted to it (an unsigned `z`
/// beside signed `x` and `y`, as libdevice's, keeps its bits).
#[track_caller]
pub fn sad(x: impl IntoOperand, y: impl IntoOperand, z: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    ternary(
        TernaryOp::Sad,
        x.into_operand(),
        y.into_operand(),
        z.into_operand(),
        loc,
    )
}

/// [`sad`] with the bits read as unsigned whatever the dtype (`libdevice.usad`).
#[track_caller]
pub fn usad(x: impl IntoOperand, y: impl IntoOperand, z: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b, c) = unify_sad(
        x.into_operand(),
        y.into_operand(),
        z.into_operand(),
        "usad",
        loc,
    );
    let d = a.dtype();
    let Some(ua) = as_unsigned(a, "usad", &[32, 64], loc) else {
        return a;
    };
    let u = ua.dtype();
    let t = Operand::Tile;
    ternary(
        TernaryOp::Sad,
        t(ua),
        t(b.bitcast_at(u, loc)),
        t(c.bitcast_at(u, loc)),
        loc,
    )
    .bitcast_at(d, loc)
}

fn binary_checked(op: BinaryOp, what: &str, x: Operand, y: Operand, loc: Loc) -> Tile {
    let (a, b) = unify(x, y, what, loc);
    let bits = op.int_bits().unwrap_or(&[32, 64]);
    if !check_int(a, what, bits, loc) {
        return a;
    }
    binary(op, Operand::Tile(a), Operand::Tile(b), loc)
}

/// The high half of the full product of two 32- or 64-bit integers, signed or unsigned as
/// their dtype is (`libdevice.mulhi`, which is `__nv_mulhi`, `__nv_umulhi`, `__nv_mul64hi` or
/// `__nv_umul64hi` by dtype); one `mul.hi.s32/u32/s64/u64`. [`umulhi`](super::umulhi) reads
/// the bits as unsigned whatever the dtype.
#[track_caller]
pub fn mulhi(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    binary_checked(
        BinaryOp::MulHi,
        "mulhi",
        x.into_operand(),
        y.into_operand(),
        loc,
    )
}

/// The low 32 bits of the product of the low 24 bits of two 32-bit integers, those read as
/// signed 24-bit integers for i32 and unsigned for u32 (`libdevice.mul24`, which is
/// `__nv_mul24` or `__nv_umul24` by dtype); one `mul24.lo.s32/u32`.
#[track_caller]
pub fn mul24(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    binary_checked(
        BinaryOp::Mul24,
        "mul24",
        x.into_operand(),
        y.into_operand(),
        loc,
    )
}

/// Unsigned operands through `op`, the result bitcast back to their dtype.
fn unsigned_binary(
    what: &str,
    x: Operand,
    y: Operand,
    bits: &[u32],
    loc: Loc,
    f: impl FnOnce(Tile, Tile) -> Tile,
) -> Tile {
    let (a, b) = unify(x, y, what, loc);
    let d = a.dtype();
    let Some(ua) = as_unsigned(a, what, bits, loc) else {
        return a;
    };
    let ub = b.bitcast_at(ua.dtype(), loc);
    f(ua, ub).bitcast_at(d, loc)
}

/// [`mul24`] with the low 24 bits read as unsigned whatever the dtype (`__nv_umul24`).
#[track_caller]
pub fn umul24(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    unsigned_binary(
        "umul24",
        x.into_operand(),
        y.into_operand(),
        &[32],
        loc,
        |a, b| binary(BinaryOp::Mul24, Operand::Tile(a), Operand::Tile(b), loc),
    )
}

/// `floor((x + y) / 2)` without overflow, the sum taken exactly (`libdevice.hadd`, which is
/// `__nv_hadd` or `__nv_uhadd` by dtype): `(x & y) + ((x ^ y) >> 1)`, the shift arithmetic for
/// signed dtypes; 32- or 64-bit integers.
#[track_caller]
pub fn hadd(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = unify(x.into_operand(), y.into_operand(), "hadd", loc);
    if !check_int(a, "hadd", &[32, 64], loc) {
        return a;
    }
    hadd_at(a, b, false, loc)
}

/// `ceil((x + y) / 2)` without overflow (`libdevice.rhadd`, `__nv_rhadd` or `__nv_urhadd` by
/// dtype): `(x | y) - ((x ^ y) >> 1)`; 32- or 64-bit integers.
#[track_caller]
pub fn rhadd(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = unify(x.into_operand(), y.into_operand(), "rhadd", loc);
    if !check_int(a, "rhadd", &[32, 64], loc) {
        return a;
    }
    hadd_at(a, b, true, loc)
}

/// [`hadd`] with the bits read as unsigned whatever the dtype (`__nv_uhadd`).
#[track_caller]
pub fn uhadd(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    unsigned_binary(
        "uhadd",
        x.into_operand(),
        y.into_operand(),
        &[32, 64],
        loc,
        |a, b| hadd_at(a, b, false, loc),
    )
}

/// [`rhadd`] with the bits read as unsigned whatever the dtype (`__nv_urhadd`).
#[track_caller]
pub fn urhadd(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    unsigned_binary(
        "urhadd",
        x.into_operand(),
        y.into_operand(),
        &[32, 64],
        loc,
        |a, b| hadd_at(a, b, true, loc),
    )
}

/// `x + y = 2 (x & y) + (x ^ y) = 2 (x | y) - (x ^ y)`, so halving the `^` part alone (with
/// the dtype's shift) floors, and subtracting it from `|` ceils; neither step overflows.
fn hadd_at(a: Tile, b: Tile, round_up: bool, loc: Loc) -> Tile {
    let t = Operand::Tile;
    let x = binary(BinaryOp::Xor, t(a), t(b), loc);
    let half = binary(BinaryOp::Shr, t(x), Operand::Int(1), loc);
    if round_up {
        let o = binary(BinaryOp::Or, t(a), t(b), loc);
        binary(BinaryOp::Sub, t(o), t(half), loc)
    } else {
        let n = binary(BinaryOp::And, t(a), t(b), loc);
        binary(BinaryOp::Add, t(n), t(half), loc)
    }
}
