//! Reductions and scans with a combine function (`tl.reduce`, `tl.associative_scan`): the
//! closure is traced once, over rank-0 tiles, into the region of an `Op::ReduceWith` or
//! `Op::ScanWith`.

use super::control::Carry;
use super::{emit, in_new_block, report, Tile};
use crate::kernel::Loc;
use crate::op::Op;
use crate::types::TileType;

/// Reduces `axis` away from the tiles of `x` together, combining elements with `combine`
/// (`tl.reduce(x, axis, combine_fn)`): `x` is one tile or a tuple (array, Vec) of tiles of
/// one shape; `combine(left, right)` receives two values of that structure made of rank-0
/// tiles, `left` from lower indices along the axis, and returns the combined one.
///
/// ```
/// use tegula_ir::prelude::*;
/// let k = trace("row_argmax", |p| {
///     let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::I32));
///     let (rows, cols) = (arange(0, 4).col(), arange(0, 8).row());
///     let v = load_unmasked(x + rows * 8 + cols);
///     let idx = cols.broadcast_to([4, 8]);
///     let (_best, at) = reduce_with((v, idx), 1, |(v0, i0), (v1, i1)| {
///         let take = v1.gt(v0) | (v1.eq(v0) & i1.lt(i0));
///         (select(take, v1, v0), select(take, i1, i0))
///     });
///     store_unmasked(out + arange(0, 4), at);
/// })
/// .unwrap();
/// assert!(k.to_string().contains("reduce_with"));
/// ```
///
/// `combine` must be associative: the elements are combined as a balanced tree of adjacent
/// pairs in index order, the same tree on every backend (docs/semantics.md).
#[track_caller]
pub fn reduce_with<C: Carry>(x: C, axis: usize, combine: impl FnOnce(C, C) -> C) -> C {
    combined(x, axis, None, combine, Loc::caller())
}

/// The inclusive scan of the tiles of `x` along `axis` with `combine`
/// (`tl.associative_scan(x, axis, combine_fn, reverse)`); `x` and `combine` as for
/// [`reduce_with`]. `reverse`: each element combines itself with everything after it, the
/// later elements on the right.
#[track_caller]
pub fn scan_with<C: Carry>(x: C, axis: usize, reverse: bool, combine: impl FnOnce(C, C) -> C) -> C {
    combined(x, axis, Some(reverse), combine, Loc::caller())
}

/// `reduce_with` (`scan: None`) or `scan_with` (`scan: Some(reverse)`).
fn combined<C: Carry>(
    x: C,
    axis: usize,
    scan: Option<bool>,
    combine: impl FnOnce(C, C) -> C,
    loc: Loc,
) -> C {
    let what = if scan.is_some() {
        "scan_with"
    } else {
        "reduce_with"
    };
    let tiles = x.tiles();
    let Some(first) = tiles.first() else {
        report(loc, format!("{what} needs at least one tile to combine"));
        return x;
    };
    let shape = first.shape();
    for (i, t) in tiles.iter().enumerate() {
        if t.is_ptr() {
            report(
                loc,
                format!("{what} cannot combine pointers (tile {i} is {})", t.ty()),
            );
            return x;
        }
        if t.shape() != shape {
            report(
                loc,
                format!(
                    "{what} combines tiles of one shape, but tile 0 is {} and tile {i} is {}",
                    first.ty(),
                    t.ty()
                ),
            );
            return x;
        }
    }
    if axis >= shape.rank() {
        report(
            loc,
            format!(
                "{what}: axis {axis} does not exist in {} (rank {})",
                first.ty(),
                shape.rank()
            ),
        );
        return x;
    }
    let n = tiles.len();
    let elems: Vec<TileType> = tiles.iter().map(|t| TileType::scalar(t.dtype())).collect();
    let pair: Vec<TileType> = elems.iter().chain(&elems).copied().collect();
    let (block, ()) = in_new_block(&pair, |args| {
        let left = x.rebuild(&mut args[..n].iter().copied());
        let right = x.rebuild(&mut args[n..].iter().copied());
        let out = combine(left, right);
        let out_tiles = out.tiles();
        check_combine_result(what, &elems, &out_tiles, loc);
        if let Some(m) = x.static_mismatch(&out) {
            report(
                loc,
                format!("{what}: the combine function's result {m}; it must return tiles"),
            );
        }
        emit(
            Op::Yield,
            out_tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
    });
    let (op, out_shape) = match scan {
        None => (
            Op::ReduceWith { axis: axis as u8 },
            shape.without_axis(axis),
        ),
        Some(reverse) => (
            Op::ScanWith {
                axis: axis as u8,
                reverse,
            },
            shape,
        ),
    };
    let result_types: Vec<TileType> = tiles
        .iter()
        .map(|t| TileType::tile(t.dtype(), out_shape))
        .collect();
    let results = emit(
        op,
        tiles.iter().map(|t| t.value()).collect(),
        &result_types,
        vec![block],
        loc,
    );
    let result_tiles: Vec<Tile> = results
        .iter()
        .zip(&result_types)
        .map(|(&v, &ty)| Tile::from_raw(v, ty))
        .collect();
    x.rebuild(&mut result_tiles.into_iter())
}

/// Reports a combine function that returns other than one rank-0 value of each input's
/// element type.
fn check_combine_result(what: &str, elems: &[TileType], got: &[Tile], loc: Loc) {
    if got.len() != elems.len() {
        report(
            loc,
            format!(
                "{what}: the combine function must return {} values (one per combined tile), \
                 but returns {}",
                elems.len(),
                got.len()
            ),
        );
        return;
    }
    for (i, (e, g)) in elems.iter().zip(got).enumerate() {
        if g.ty() != *e {
            report(
                loc,
                format!(
                    "{what}: the combine function returns {} as value {i}, which must be {e} \
                     (the element type of tile {i}); cast it with `.to::<T>()`",
                    g.ty()
                ),
            );
            return;
        }
    }
}
