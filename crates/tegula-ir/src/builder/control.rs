//! Loops and branches over run-time values, as builder calls with closures.
//!
//! Loops over Rust values need none of this: a Rust `for` in the body simply unrolls.

use super::tile::{materialize, to_tile};
use super::{emit, in_new_block, report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::Op;
use crate::types::TileType;

/// A set of tiles that flows through a loop or out of a branch: a tile, a tuple, an array or a
/// vector of them.
pub trait Carry: Sized {
    /// The tiles in a fixed order.
    fn tiles(&self) -> Vec<Tile>;
    /// A value of the same structure as `self` built from `tiles` (taken in the same order).
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self;
}

impl Carry for Tile {
    fn tiles(&self) -> Vec<Tile> {
        vec![*self]
    }
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
        tiles.next().unwrap_or(*self)
    }
}

impl Carry for () {
    fn tiles(&self) -> Vec<Tile> {
        Vec::new()
    }
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tile>) -> Self {}
}

impl<C: Carry, const N: usize> Carry for [C; N] {
    fn tiles(&self) -> Vec<Tile> {
        self.iter().flat_map(|c| c.tiles()).collect()
    }
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
        std::array::from_fn(|i| self[i].rebuild(tiles))
    }
}

impl<C: Carry> Carry for Vec<C> {
    fn tiles(&self) -> Vec<Tile> {
        self.iter().flat_map(|c| c.tiles()).collect()
    }
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
        self.iter().map(|c| c.rebuild(tiles)).collect()
    }
}

macro_rules! carry_tuple {
    ($($name:ident $idx:tt),*) => {
        impl<$($name: Carry),*> Carry for ($($name,)*) {
            fn tiles(&self) -> Vec<Tile> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.tiles());)*
                v
            }
            fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
                ($(self.$idx.rebuild(tiles),)*)
            }
        }
    };
}
carry_tuple!(A 0);
carry_tuple!(A 0, B 1);
carry_tuple!(A 0, B 1, C 2);
carry_tuple!(A 0, B 1, C 2, D 3);
carry_tuple!(A 0, B 1, C 2, D 3, E 4);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

fn types_of(tiles: &[Tile]) -> Vec<TileType> {
    tiles.iter().map(|t| t.ty()).collect()
}

/// Checks that a region produced the types its construct declared.
fn check_types(what: &str, expected: &[TileType], got: &[Tile], loc: Loc) -> bool {
    if expected.len() != got.len() {
        report(
            loc,
            format!(
                "{what}: {} values expected, the body produced {}",
                expected.len(),
                got.len()
            ),
        );
        return false;
    }
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        if *e != g.ty() {
            report(
                loc,
                format!(
                    "{what}: value {i} enters as {e} but the body makes it {}; \
                     a loop-carried or branch value must keep its dtype and shape \
                     (cast with `.to::<T>()` or broadcast it first)",
                    g.ty()
                ),
            );
            return false;
        }
    }
    true
}

/// A loop over `lo, lo + step, .. < hi` (run-time bounds) carrying `init` through `body`.
///
/// `body(i, carried)` returns the next carried values; the loop returns the final ones.
/// The induction variable is i32, or i64 when a bound is i64.
#[track_caller]
pub fn for_range<C: Carry>(
    lo: impl IntoOperand,
    hi: impl IntoOperand,
    step: impl IntoOperand,
    init: C,
    body: impl FnOnce(Tile, C) -> C,
) -> C {
    let loc = Loc::caller();
    let bounds = [lo.into_operand(), hi.into_operand(), step.into_operand()];
    let mut iv_dtype = DType::I32;
    for b in &bounds {
        if let Operand::Tile(t) = b {
            if !t.shape().is_scalar() || !t.dtype().is_int() || t.dtype().is_bool() || t.is_ptr() {
                report(
                    loc,
                    format!("loop bounds must be integer scalars, got {}", t.ty()),
                );
            } else {
                iv_dtype = DType::promote(iv_dtype, t.dtype());
            }
        }
    }
    if let Operand::Int(0) = bounds[2] {
        report(loc, "the loop step must not be zero");
    }
    let bounds: Vec<Tile> = bounds
        .iter()
        .map(|&b| materialize(b, iv_dtype, loc))
        .collect();
    let init_tiles = init.tiles();
    let carried_types = types_of(&init_tiles);
    let mut block_types = vec![TileType::scalar(iv_dtype)];
    block_types.extend(&carried_types);
    let (block, out) = in_new_block(&block_types, |args| {
        let carried = init.rebuild(&mut args[1..].iter().copied());
        let next = body(args[0], carried);
        let next_tiles = next.tiles();
        check_types("for_range", &carried_types, &next_tiles, loc);
        emit(
            Op::Yield,
            next_tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
        next
    });
    let mut args: Vec<_> = bounds.iter().map(|t| t.value()).collect();
    args.extend(init_tiles.iter().map(|t| t.value()));
    let results = emit(Op::For, args, &carried_types, vec![block], loc);
    let result_tiles: Vec<Tile> = results
        .iter()
        .zip(&carried_types)
        .map(|(&v, &ty)| Tile::from_raw(v, ty))
        .collect();
    out.rebuild(&mut result_tiles.into_iter())
}

fn check_cond(cond: Tile, what: &str, loc: Loc) {
    if cond.dtype() != DType::I1 || !cond.shape().is_scalar() || cond.is_ptr() {
        report(
            loc,
            format!(
                "{what} needs a scalar i1 condition, got {}; reduce a tile condition first",
                cond.ty()
            ),
        );
    }
}

/// `if cond { then_() } else { else_() }` on a run-time scalar condition; both branches return
/// values of the same types.
#[track_caller]
pub fn if_else<C: Carry>(cond: Tile, then_: impl FnOnce() -> C, else_: impl FnOnce() -> C) -> C {
    let loc = Loc::caller();
    check_cond(cond, "if_else", loc);
    let (then_block, then_out) = in_new_block(&[], |_| {
        let out = then_();
        let tiles = out.tiles();
        emit(
            Op::Yield,
            tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
        out
    });
    let types = types_of(&then_out.tiles());
    let (else_block, _) = in_new_block(&[], |_| {
        let out = else_();
        let tiles = out.tiles();
        check_types("if_else (else branch)", &types, &tiles, loc);
        emit(
            Op::Yield,
            tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
    });
    let results = emit(
        Op::If,
        vec![cond.value()],
        &types,
        vec![then_block, else_block],
        loc,
    );
    let tiles: Vec<Tile> = results
        .iter()
        .zip(&types)
        .map(|(&v, &ty)| Tile::from_raw(v, ty))
        .collect();
    then_out.rebuild(&mut tiles.into_iter())
}

/// `if cond { then_() }` with no results.
#[track_caller]
pub fn if_then(cond: Tile, then_: impl FnOnce()) {
    let loc = Loc::caller();
    check_cond(cond, "if_then", loc);
    let (then_block, _) = in_new_block(&[], |_| {
        then_();
        emit(Op::Yield, vec![], &[], vec![], loc);
    });
    let (else_block, _) = in_new_block(&[], |_| {
        emit(Op::Yield, vec![], &[], vec![], loc);
    });
    emit(
        Op::If,
        vec![cond.value()],
        &[],
        vec![then_block, else_block],
        loc,
    );
}

/// `while cond(carried) { carried = body(carried) }` on run-time values.
#[track_caller]
pub fn while_loop<C: Carry>(init: C, cond: impl FnOnce(C) -> Tile, body: impl FnOnce(C) -> C) -> C {
    let loc = Loc::caller();
    let init_tiles = init.tiles();
    let types = types_of(&init_tiles);
    let (before, _) = in_new_block(&types, |args| {
        let c = cond(init.rebuild(&mut args.iter().copied()));
        check_cond(c, "while_loop", loc);
        emit(Op::Condition, vec![c.value()], &[], vec![], loc);
    });
    let (after, _) = in_new_block(&types, |args| {
        let next = body(init.rebuild(&mut args.iter().copied()));
        let tiles = next.tiles();
        check_types("while_loop", &types, &tiles, loc);
        emit(
            Op::Yield,
            tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
    });
    let results = emit(
        Op::While,
        init_tiles.iter().map(|t| t.value()).collect(),
        &types,
        vec![before, after],
        loc,
    );
    let tiles: Vec<Tile> = results
        .iter()
        .zip(&types)
        .map(|(&v, &ty)| Tile::from_raw(v, ty))
        .collect();
    init.rebuild(&mut tiles.into_iter())
}

/// A scalar tile from a Rust value or tile (helper for generated code).
#[track_caller]
pub fn scalar(x: impl IntoOperand) -> Tile {
    to_tile(x.into_operand(), Loc::caller())
}
