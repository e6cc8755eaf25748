//! Counter-based pseudo-random numbers: Philox 4x32-10, bit for bit Triton's
//! `triton.language.random` (`randint4x`, `randint`, `rand`, `rand4x`, `randn`, `randn4x`).
//!
//! Every function is a composition of exact integer ops (`*`, [`umulhi`], `^`, `+`, casts), so
//! the interpreter and the GPU produce the same bits, and the same `(seed, offset)` always
//! gives the same numbers: no generator state flows through a kernel. Draws for different
//! offsets are independent; a kernel usually passes `program_id(0) * block + arange(0, block)`.
//!
//! The seed is any integer (a Rust integer or an integer scalar tile), read as a u64 (signed
//! seeds sign-extend, as `seed.to(tl.uint64)` does): its low 32 bits are the first Philox key
//! word, its high 32 bits the second. An offset is an integer tile: its low 32 bits are the
//! first counter word and, for a 64-bit offset, its high 32 bits the second; the other counter
//! words are zero.

use super::tile::{binary, materialize};
use super::{constant, cos, log, maximum, report, sin, sqrt, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::BinaryOp;
use crate::op::Constant;
use crate::types::Shape;

/// Philox's first key increment (the golden ratio), `0x9E3779B9`.
pub const PHILOX_KEY_A: u32 = 0x9E37_79B9;
/// Philox's second key increment (`sqrt(3) - 1`), `0xBB67AE85`.
pub const PHILOX_KEY_B: u32 = 0xBB67_AE85;
/// The multiplier of counter words 0 and 1, `0xD2511F53`.
pub const PHILOX_ROUND_A: u32 = 0xD251_1F53;
/// The multiplier of counter words 2 and 3, `0xCD9E8D57`.
pub const PHILOX_ROUND_B: u32 = 0xCD9E_8D57;
/// Philox 4x64's key increments and round multipliers (Random123's `PHILOX_W64_0`,
/// `PHILOX_W64_1`, `PHILOX_M4x64_0`, `PHILOX_M4x64_1`), for 64-bit counters.
pub const PHILOX_KEY_A_64: u64 = 0x9E37_79B9_7F4A_7C15;
pub const PHILOX_KEY_B_64: u64 = 0xBB67_AE85_84CA_A73B;
pub const PHILOX_ROUND_A_64: u64 = 0xD2E7_470E_E14C_6C93;
pub const PHILOX_ROUND_B_64: u64 = 0xCA5A_8263_9512_1157;

/// The number of rounds of [`randint4x`] and the functions built on it (Triton's
/// `N_ROUNDS_DEFAULT`).
pub const N_ROUNDS_DEFAULT: usize = 10;

/// The seed as a u64 scalar (signed seeds sign-extend), checked to be an integer.
fn seed_word(seed: Operand, loc: Loc) -> Tile {
    if let Operand::Tile(t) = seed {
        if t.is_ptr() || !t.dtype().is_int() || t.dtype().is_bool() {
            report(
                loc,
                format!("a Philox seed must be an integer, got {}", t.ty()),
            );
        }
    }
    if matches!(seed, Operand::Float(_) | Operand::Bool(_)) {
        report(loc, "a Philox seed must be an integer");
    }
    materialize(seed, DType::U64, loc)
}

/// `(low, high)` 32-bit key words of a seed, as u32 scalars.
fn seed_words(seed: Operand, loc: Loc) -> (Tile, Tile) {
    let s = seed_word(seed, loc);
    let lo = s.cast_at(DType::U32, Default::default(), loc);
    let hi = binary(BinaryOp::Shr, Operand::Tile(s), Operand::Int(32), loc).cast_at(
        DType::U32,
        Default::default(),
        loc,
    );
    (lo, hi)
}

/// A counter word as an unsigned integer of `bits` bits (the same bits).
fn counter_word(c: Operand, bits: u32, loc: Loc) -> Tile {
    let d = if bits == 64 { DType::U64 } else { DType::U32 };
    if let Operand::Tile(t) = c {
        if t.is_ptr() || !t.dtype().is_int() || t.dtype().is_bool() || t.dtype().bits() != bits {
            report(
                loc,
                format!(
                    "Philox counters must be integers of one width, 32 or 64 bits (the first \
                     is {bits}-bit), got {}",
                    t.ty()
                ),
            );
        }
    }
    materialize(c, d, loc)
}

/// Philox's constants for counters of one width: key increments A and B, round multipliers
/// A and B.
fn philox_constants(bits: u32) -> [i64; 4] {
    if bits == 64 {
        // The bit patterns, as the u64 literals they stand for.
        [
            PHILOX_KEY_A_64 as i64,
            PHILOX_KEY_B_64 as i64,
            PHILOX_ROUND_A_64 as i64,
            PHILOX_ROUND_B_64 as i64,
        ]
    } else {
        [
            PHILOX_KEY_A as i64,
            PHILOX_KEY_B as i64,
            PHILOX_ROUND_A as i64,
            PHILOX_ROUND_B as i64,
        ]
    }
}

fn philox_at(seed: Operand, c: [Operand; 4], n_rounds: usize, loc: Loc) -> [Tile; 4] {
    // The counters' width is the first's (a Rust integer counts as 32-bit), as Triton's
    // `philox` decides on `c0`'s bitwidth: 64-bit counters run Philox 4x64, keyed by the
    // whole seed and a zero word.
    let bits = match c[0] {
        Operand::Tile(t) if t.dtype().bits() == 64 => 64,
        _ => 32,
    };
    let (mut k0, mut k1) = if bits == 64 {
        let s = seed_word(seed, loc);
        (
            s,
            constant(Constant::Int(0), DType::U64, Shape::SCALAR, loc),
        )
    } else {
        seed_words(seed, loc)
    };
    let mut c: [Tile; 4] = c.map(|w| counter_word(w, bits, loc));
    // One shape for the four words, so each output has the counters' broadcast shape.
    let mut shape = Shape::SCALAR;
    for w in &c {
        match Shape::broadcast(shape, w.shape()) {
            Some(s) => shape = s,
            None => report(
                loc,
                format!(
                    "Philox counters of shapes {shape} and {} do not broadcast",
                    w.shape()
                ),
            ),
        }
    }
    c = c.map(|w| w.broadcast_at(shape, loc));
    let [key_a, key_b, round_a, round_b] = philox_constants(bits).map(Operand::Int);
    let t = Operand::Tile;
    let xor = |a: Tile, b: Tile| binary(BinaryOp::Xor, t(a), t(b), loc);
    for _ in 0..n_rounds {
        let [c0, c1, c2, c3] = c;
        let hi_b = umulhi_at(round_b, t(c2), loc);
        let hi_a = umulhi_at(round_a, t(c0), loc);
        c = [
            xor(xor(hi_b, c1), k0),
            binary(BinaryOp::Mul, round_b, t(c2), loc),
            xor(xor(hi_a, c3), k1),
            binary(BinaryOp::Mul, round_a, t(c0), loc),
        ];
        k0 = binary(BinaryOp::Add, t(k0), key_a, loc);
        k1 = binary(BinaryOp::Add, t(k1), key_b, loc);
    }
    c
}

fn umulhi_at(a: Operand, b: Operand, loc: Loc) -> Tile {
    binary(BinaryOp::UMulHi, a, b, loc)
}

/// `n_rounds` rounds of Philox on the counter words `c` under the key `seed` (Triton's
/// `triton.language.random.philox`): four tiles of the counters' broadcast shape, u32 for
/// 32-bit counters, u64 for 64-bit ones.
///
/// - `seed`: an integer. With 32-bit counters its low 32 bits are key word 0 and its high 32
///   bits key word 1; with 64-bit counters it is key word 0 whole and key word 1 is 0.
/// - `c`: four integer counters of one width, 32 or 64 bits, the first's (tiles, or Rust
///   integers, which take the first tile's width and count as 32-bit in its place; signed ones
///   are read as their bits).
/// - `n_rounds`: 10 is Philox 4x32-10 / 4x64-10, the standard strength ([`N_ROUNDS_DEFAULT`]).
///
/// With `n_rounds = 10` this is Random123's `philox4x32_10(ctr, [seed_lo, seed_hi])`, or
/// `philox4x64_10(ctr, [seed, 0])` for 64-bit counters (round multipliers
/// [`PHILOX_ROUND_A_64`], [`PHILOX_ROUND_B_64`], key increments [`PHILOX_KEY_A_64`],
/// [`PHILOX_KEY_B_64`]).
#[track_caller]
pub fn philox(seed: impl IntoOperand, c: [Operand; 4], n_rounds: usize) -> [Tile; 4] {
    philox_at(seed.into_operand(), c, n_rounds, Loc::caller())
}

/// Four blocks of random u32 for `seed` and the integer tile `offset` (`tl.randint4x`): the
/// maximally efficient entry point, one Philox 4x32-10 evaluation per element.
///
/// - `seed`: an integer (Rust integer or scalar tile); see the module docs.
/// - `offset`: an integer tile; its low 32 bits are counter word 0 and, for 64-bit offsets,
///   its high 32 bits counter word 1 (`offset >> 32`, arithmetic for signed offsets).
///
/// Returns four u32 tiles of `offset`'s shape.
#[track_caller]
pub fn randint4x(seed: impl IntoOperand, offset: Tile) -> [Tile; 4] {
    randint4x_at(seed.into_operand(), offset, Loc::caller())
}

fn randint4x_at(seed: Operand, offset: Tile, loc: Loc) -> [Tile; 4] {
    if offset.is_ptr() || !offset.dtype().is_int() || offset.dtype().is_bool() {
        report(
            loc,
            format!(
                "a random offset must be an integer tile, got {}",
                offset.ty()
            ),
        );
    }
    let lo = offset.cast_at(DType::U32, Default::default(), loc);
    let zero = binary(BinaryOp::Mul, Operand::Tile(lo), Operand::Int(0), loc);
    let hi = if offset.dtype().bits() > 32 {
        binary(BinaryOp::Shr, Operand::Tile(offset), Operand::Int(32), loc).cast_at(
            DType::U32,
            Default::default(),
            loc,
        )
    } else {
        zero
    };
    let t = Operand::Tile;
    philox_at(
        seed,
        [t(lo), t(hi), t(zero), t(zero)],
        N_ROUNDS_DEFAULT,
        loc,
    )
}

/// One block of random u32 for `seed` and `offset` (`tl.randint`): the first word of
/// [`randint4x`]. Calling [`randint4x`] once is faster than four `randint`s with different
/// offsets.
#[track_caller]
pub fn randint(seed: impl IntoOperand, offset: Tile) -> Tile {
    randint4x_at(seed.into_operand(), offset, Loc::caller())[0]
}

/// A random 32- or 64-bit integer tile mapped to f32 uniform in [0, 1)
/// (`tl.random.uint_to_uniform_float`).
///
/// The bits are read as a signed integer `i` and folded onto the non-negative range
/// (`i < 0 ? -i - 1 : i`); the result is `f32(i) * 4.6566127342e-10` (32-bit; `2^-31` just
/// below, so that `i32::MAX` maps below 1.0 after rounding) or `f32(i) * 1.0842020432385337e-19`
/// (64-bit), with the int-to-f32 conversion and the product rounded to nearest even.
#[track_caller]
pub fn uint_to_uniform_float(x: Tile) -> Tile {
    uniform_at(x, Loc::caller())
}

fn uniform_at(x: Tile, loc: Loc) -> Tile {
    let (signed, scale) = match x.dtype() {
        DType::I32 | DType::U32 => (DType::I32, 4.6566127342e-10),
        DType::I64 | DType::U64 => (DType::I64, 1.0842020432385337e-19),
        _ => {
            report(
                loc,
                format!(
                    "uint_to_uniform_float needs 32- or 64-bit integers, got {}",
                    x.ty()
                ),
            );
            (DType::I32, 4.6566127342e-10)
        }
    };
    let i = x.cast_at(signed, Default::default(), loc);
    let neg = i.compare(crate::op::CmpOp::Lt, Operand::Int(0), loc);
    let minus = binary(
        BinaryOp::Sub,
        Operand::Tile(i.unary_at(crate::op::UnaryOp::Neg, loc)),
        Operand::Int(1),
        loc,
    );
    let folded = super::select_at(neg, Operand::Tile(minus), Operand::Tile(i), loc);
    let f = folded.cast_at(DType::F32, Default::default(), loc);
    binary(BinaryOp::Mul, Operand::Tile(f), Operand::Float(scale), loc)
}

/// A block of f32 uniform in [0, 1) for `seed` and `offset` (`tl.rand`):
/// `uint_to_uniform_float(randint(seed, offset))`.
#[track_caller]
pub fn rand(seed: impl IntoOperand, offset: Tile) -> Tile {
    let loc = Loc::caller();
    uniform_at(randint4x_at(seed.into_operand(), offset, loc)[0], loc)
}

/// Four blocks of f32 uniform in [0, 1) for `seed` and `offset` (`tl.rand4x`): each word of
/// [`randint4x`] through [`uint_to_uniform_float`].
#[track_caller]
pub fn rand4x(seed: impl IntoOperand, offset: Tile) -> [Tile; 4] {
    let loc = Loc::caller();
    randint4x_at(seed.into_operand(), offset, loc).map(|w| uniform_at(w, loc))
}

/// The Box-Muller transform of two f32 uniforms into two standard normals
/// (`tl.random.pair_uniform_to_normal`):
/// `u1 = max(1e-7, u1)`, `th = 6.283185307179586 * u2`, `r = sqrt(-2 * log(u1))`,
/// `(r * cos(th), r * sin(th))`, every step in f32.
///
/// `log`, `cos` and `sin` are tegula's ([`log`], [`cos`], [`sin`]): correctly rounded on the
/// interpreter, the GPU's approximations on the GPU (docs/semantics.md bounds them), so the
/// normals agree between the backends and with Triton's to a few units in the last place,
/// not bit for bit; the uniforms they come from are bit-identical.
#[track_caller]
pub fn pair_uniform_to_normal(u1: Tile, u2: Tile) -> (Tile, Tile) {
    let u1 = maximum(1.0e-7f32, u1);
    let th = std::f64::consts::TAU * u2;
    let r = sqrt(-2.0 * log(u1));
    (r * cos(th), r * sin(th))
}

/// A block of f32 standard normals for `seed` and `offset` (`tl.randn`): the first normal of
/// [`pair_uniform_to_normal`] of the first two uniforms of [`randint4x`].
#[track_caller]
pub fn randn(seed: impl IntoOperand, offset: Tile) -> Tile {
    let loc = Loc::caller();
    let [i1, i2, _, _] = randint4x_at(seed.into_operand(), offset, loc);
    pair_uniform_to_normal(uniform_at(i1, loc), uniform_at(i2, loc)).0
}

/// Four blocks of f32 standard normals for `seed` and `offset` (`tl.randn4x`): both normals of
/// [`pair_uniform_to_normal`] for uniforms (0, 1) and (2, 3) of [`rand4x`].
#[track_caller]
pub fn randn4x(seed: impl IntoOperand, offset: Tile) -> [Tile; 4] {
    let [u1, u2, u3, u4] = rand4x(seed, offset);
    let (n1, n2) = pair_uniform_to_normal(u1, u2);
    let (n3, n4) = pair_uniform_to_normal(u3, u4);
    [n1, n2, n3, n4]
}
