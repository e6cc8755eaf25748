//! Triton's indexing and sorting ops: `swizzle2d`, `gather`, `flip`, `sort`, `topk`,
//! `histogram`.
//!
//! `gather` and `flip` are ops of the IR ([`Op::Gather`], [`Op::Flip`]); `swizzle2d` is
//! integer arithmetic over existing ops, `sort` a bitonic network of gathers and selects and
//! `histogram` a comparison of every element with every bin summed per bin, so both backends
//! run them as those ops.

use super::ops::{reduce_at, select_at};
use super::tile::binary;
use super::{constant, emit1, report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::{BinaryOp, CmpOp, Constant, Op, ReduceOp};
use crate::types::{Shape, TileType};

/// Triton's `tl.swizzle2d`: the indices `(i, j)` of a row-major `size_i x size_j` grid,
/// renumbered column-major within each group of `size_g` rows (the last group may have fewer).
/// Matmul kernels use it to visit output tiles group by group, so that the tiles a group of
/// programs computes share their rows of A and columns of B in L2.
///
/// With `ij = i * size_j + j`, `group = ij / (size_g * size_j)`, `off_i = group * size_g` and
/// `g = minimum(size_i - off_i, size_g)`, the result is
/// `(off_i + (ij % (size_g * size_j)) % g, (ij % (size_g * size_j)) / g)`, Triton's formula
/// with its integer division and remainder (which truncate; the indices are non-negative).
/// For `size_i = size_j = 4`, `size_g = 2` the grid's linear indices land at
///
/// ```text
/// [[0, 2,  4,  6],
///  [1, 3,  5,  7],
///  [8, 10, 12, 14],
///  [9, 11, 13, 15]]
/// ```
///
/// The operands are integer tiles or Rust integers, promoted to one dtype and broadcast to one
/// shape (docs/semantics.md). `size_g` must be positive and `(i, j)` inside the grid: past its
/// last row the group has no rows and the division by its row count divides by zero (an error
/// on the interpreter, in every lane of a tile, so mask such lanes' indices to 0 first).
#[track_caller]
pub fn swizzle2d(
    i: impl IntoOperand,
    j: impl IntoOperand,
    size_i: impl IntoOperand,
    size_j: impl IntoOperand,
    size_g: impl IntoOperand,
) -> (Tile, Tile) {
    let loc = Loc::caller();
    let ops = [
        i.into_operand(),
        j.into_operand(),
        size_i.into_operand(),
        size_j.into_operand(),
        size_g.into_operand(),
    ];
    let names = ["i", "j", "size_i", "size_j", "size_g"];
    for (op, name) in ops.iter().zip(names) {
        let bad = match op {
            Operand::Tile(t) => t.is_ptr() || !t.dtype().is_int() || t.dtype().is_bool(),
            Operand::Int(_) => false,
            Operand::Float(_) | Operand::Bool(_) => true,
        };
        if bad {
            let what = match op {
                Operand::Tile(t) => t.ty().to_string(),
                Operand::Float(f) => format!("the float {f}"),
                Operand::Bool(b) => format!("the bool {b}"),
                Operand::Int(v) => v.to_string(),
            };
            report(
                loc,
                format!("swizzle2d needs integer operands, but `{name}` is {what}"),
            );
        }
    }
    let [i, j, size_i, size_j, size_g] = ops;
    let t = Operand::Tile;
    let ij = binary(
        BinaryOp::Add,
        t(binary(BinaryOp::Mul, i, size_j, loc)),
        j,
        loc,
    );
    let size_gj = binary(BinaryOp::Mul, size_g, size_j, loc);
    let group_id = binary(BinaryOp::Div, t(ij), t(size_gj), loc);
    let off_i = binary(BinaryOp::Mul, t(group_id), size_g, loc);
    let rows = binary(BinaryOp::Sub, size_i, t(off_i), loc);
    let size_g = binary(BinaryOp::Min, t(rows), size_g, loc);
    let ij = binary(BinaryOp::Rem, t(ij), t(size_gj), loc);
    let new_i = binary(
        BinaryOp::Add,
        t(off_i),
        t(binary(BinaryOp::Rem, t(ij), t(size_g), loc)),
        loc,
    );
    let new_j = binary(BinaryOp::Div, t(ij), t(size_g), loc);
    (new_i, new_j)
}

/// The elements of `src` at `index` along `axis` (`tl.gather`):
/// `out[.., i, ..] = src[.., index[.., i, ..], ..]`, where the index takes the place of the
/// coordinate along `axis`.
///
/// - `src`: a tile of rank 1 or more (numbers or pointers);
/// - `index`: an integer tile of `src`'s rank whose size equals `src`'s on every axis but
///   `axis` (along `axis` it may have any size); its values must lie in
///   `0..src.shape()[axis]`;
/// - the result has `src`'s dtype and `index`'s shape.
///
/// An index out of range is an error on the interpreter naming this line; on the GPU it reads
/// an unspecified element of `src` (never memory outside it). The GPU lowering stages `src`
/// in shared memory and each thread reads the elements its indices name, so a `src` larger
/// than the shared memory one block may use is refused by the compiler, at this line.
#[track_caller]
pub fn gather(src: Tile, index: Tile, axis: usize) -> Tile {
    gather_at(src, index, axis, Loc::caller())
}

pub(crate) fn gather_at(src: Tile, index: Tile, axis: usize, loc: Loc) -> Tile {
    let (ss, is) = (src.shape(), index.shape());
    let rank = ss.rank();
    if index.is_ptr() || !index.dtype().is_int() || index.dtype().is_bool() {
        report(
            loc,
            format!("gather needs an integer index tile, got {}", index.ty()),
        );
        return src;
    }
    if is.rank() != rank || axis >= rank {
        report(
            loc,
            format!(
                "gather along axis {axis} needs a source and an index of one rank with that \
                 axis, got {} and {}",
                src.ty(),
                index.ty()
            ),
        );
        return src;
    }
    if let Some(d) = (0..rank).find(|&d| d != axis && is.dim(d) != ss.dim(d)) {
        report(
            loc,
            format!(
                "gather along axis {axis}: the index {} and the source {} differ on axis {d}; \
                 they may differ only on the gathered axis",
                index.ty(),
                src.ty()
            ),
        );
        return src;
    }
    emit1(
        Op::Gather { axis: axis as u8 },
        vec![src.value(), index.value()],
        src.ty().with_shape(is),
        loc,
    )
}

/// `x` with its elements in reverse order along `dim` (`tl.flip`; Triton's default `dim` is
/// the last axis). Any dtype, pointers too, and any size along `dim`.
#[track_caller]
pub fn flip(x: Tile, dim: usize) -> Tile {
    flip_at(x, dim, Loc::caller())
}

fn flip_at(x: Tile, dim: usize, loc: Loc) -> Tile {
    let rank = x.shape().rank();
    if dim >= rank {
        report(
            loc,
            format!("flip: dim {dim} is not an axis of {} (rank {rank})", x.ty()),
        );
        return x;
    }
    emit1(Op::Flip { axis: dim as u8 }, vec![x.value()], x.ty(), loc)
}

/// `x` sorted along `dim`, ascending or `descending` (`tl.sort`; Triton's default `dim` is the
/// last axis). The size along `dim` must be a power of two.
///
/// A bitonic sorting network: `log2(n) * (log2(n) + 1) / 2` rounds in which each element is
/// compared with the one whose index along `dim` differs in one bit (a [`gather`]) and the
/// pair is exchanged where it is out of order (a `select`). It moves values without changing
/// them, so every backend gives the same bits. Comparisons are the ordinary ones: `-0.0` and
/// `+0.0` are equal (their order among themselves is the network's), and a NaN, unordered with
/// everything, is never exchanged, so a tile holding NaNs comes out as the network leaves it,
/// not sorted.
#[track_caller]
pub fn sort(x: Tile, dim: usize, descending: bool) -> Tile {
    sort_at(x, dim, descending, Loc::caller())
}

fn sort_at(x: Tile, dim: usize, descending: bool, loc: Loc) -> Tile {
    let shape = x.shape();
    let rank = shape.rank();
    if dim >= rank {
        report(
            loc,
            format!("sort: dim {dim} is not an axis of {} (rank {rank})", x.ty()),
        );
        return x;
    }
    if x.is_ptr() {
        report(loc, format!("sort needs numbers, got {}", x.ty()));
        return x;
    }
    let n = shape.dim(dim);
    if !n.is_power_of_two() {
        report(
            loc,
            format!(
                "sort: axis {dim} of {} has {n} elements; the sorting network needs a power \
                 of two",
                x.ty()
            ),
        );
        return x;
    }
    // The index along `dim`, as a rank-1 tile and stretched to the tile's shape.
    let along = emit1(
        Op::Arange {
            start: 0,
            end: n as i64,
        },
        vec![],
        TileType::tile(DType::I32, Shape::new(&[n]).expect("one axis")),
        loc,
    );
    let spread = |t: Tile| -> Tile {
        let mut t = t;
        for a in 0..rank {
            if a != dim {
                t = t.expand_dims_at(a, loc);
            }
        }
        t.broadcast_at(shape, loc)
    };
    let int = |v: usize| Operand::Int(v as i64);
    let mut x = x;
    let mut k = 2;
    while k <= n {
        let mut j = k / 2;
        while j >= 1 {
            let partner = binary(BinaryOp::Xor, Operand::Tile(along), int(j), loc);
            let p = gather_at(x, spread(partner), dim, loc);
            // Within each run of `k` the order is ascending where bit `k` of the index is
            // clear (the last round's single run: everywhere), reversed for `descending`. An
            // element takes its partner where the pair is out of order: the lower element of
            // an ascending pair (bit `j` clear) when the partner is smaller, the upper one when
            // the partner is larger, and the other way round in a descending pair.
            let bit = |b: usize| {
                let shifted = binary(
                    BinaryOp::Shr,
                    Operand::Tile(along),
                    int(b.trailing_zeros() as usize),
                    loc,
                );
                binary(BinaryOp::And, Operand::Tile(shifted), int(1), loc)
            };
            let bits = binary(
                BinaryOp::Xor,
                Operand::Tile(bit(j)),
                Operand::Tile(bit(k)),
                loc,
            );
            let wants_smaller = bits.compare(CmpOp::Eq, int(descending as usize), loc);
            let smaller = p.compare(CmpOp::Lt, Operand::Tile(x), loc);
            let larger = p.compare(CmpOp::Gt, Operand::Tile(x), loc);
            let swap = select_at(
                spread(wants_smaller),
                Operand::Tile(smaller),
                Operand::Tile(larger),
                loc,
            );
            x = select_at(swap, Operand::Tile(p), Operand::Tile(x), loc);
            j /= 2;
        }
        k *= 2;
    }
    x
}

/// The `k` largest elements of `x` along `dim`, largest first (`tl.topk`; Triton's default
/// `dim` is the last axis): [`sort`] descending, then the first `k` along `dim` (a [`gather`]).
/// The result has `x`'s shape with `k` along `dim`. The size along `dim` must be a power of two
/// (the sort's), and `k` one no larger than it.
#[track_caller]
pub fn topk(x: Tile, k: usize, dim: usize) -> Tile {
    topk_at(x, k, dim, Loc::caller())
}

fn topk_at(x: Tile, k: usize, dim: usize, loc: Loc) -> Tile {
    let shape = x.shape();
    let rank = shape.rank();
    if dim >= rank {
        report(
            loc,
            format!("topk: dim {dim} is not an axis of {} (rank {rank})", x.ty()),
        );
        return x;
    }
    let n = shape.dim(dim);
    if !k.is_power_of_two() || k > n {
        report(
            loc,
            format!(
                "topk: k = {k} must be a power of two no larger than axis {dim} of {} ({n})",
                x.ty()
            ),
        );
        return x;
    }
    let sorted = sort_at(x, dim, true, loc);
    // The first `k` indices along `dim`, spread over the other axes of the result.
    let dims: Vec<usize> = (0..rank)
        .map(|a| if a == dim { k } else { shape.dim(a) })
        .collect();
    let Some(out_shape) = Shape::new(&dims) else {
        report(
            loc,
            format!("topk: result shape {dims:?} is not a tile shape"),
        );
        return x;
    };
    let mut first = emit1(
        Op::Arange {
            start: 0,
            end: k as i64,
        },
        vec![],
        TileType::tile(DType::I32, Shape::new(&[k]).expect("one axis")),
        loc,
    );
    for a in 0..rank {
        if a != dim {
            first = first.expand_dims_at(a, loc);
        }
    }
    gather_at(sorted, first.broadcast_at(out_shape, loc), dim, loc)
}

/// The histogram of the 1-D integer tile `x` over `num_bins` bins of width 1 starting at 0
/// (`tl.histogram(x, num_bins)`): an i32 tile of `[num_bins]` whose element `b` counts the
/// elements of `x` equal to `b`. Values outside `0..num_bins` (negative ones included) are
/// not counted. Any integer dtype, signed or unsigned (an i1 counts as 0 or 1); the counts
/// are exact.
///
/// Every element of `x` counts, so the lanes a masked load filled with `other` count too: use
/// [`histogram_masked`] with the load's mask (or an `other` outside the bins) to leave them out.
///
/// `num_bins` must be a positive power of two: it is the length of the result, and GPU tiles
/// (Triton's too) have power-of-two sizes. Errors, at this line: `x` not an integer tile or
/// not of rank 1, `num_bins` not a positive power of two, or `n * num_bins` (`n` the length of
/// `x`) more elements than a tile holds.
///
/// Cost: `x` is compared with `arange(0, num_bins)` as an `[n, num_bins]` tile and the hits
/// are summed along `n`, so a histogram costs `n * num_bins` comparisons and additions
/// (`n * num_bins / (32 * num_warps)` per thread on the GPU, as straight-line code), where
/// Triton's lowering (warp ballots and shared-memory atomics) does work that grows with `n`,
/// not with `n * num_bins`. It is made of ops every backend runs exactly (compare, cast,
/// sum), so the GPU gives the interpreter's counts; for a large `n * num_bins`, histogram the
/// input in chunks (a loop of loads) and add the counts. A lowering with shared-memory
/// atomics, which the backend does not have yet, is what a plan rule could pick later.
#[track_caller]
pub fn histogram(x: Tile, num_bins: usize) -> Tile {
    histogram_at(x, num_bins, None, Loc::caller())
}

/// [`histogram`] of the elements of `x` where `mask` is true (`tl.histogram(x, num_bins,
/// mask)`): a masked-off element is not counted, whatever its value. `mask` is an i1 tile of
/// `x`'s shape, or one that broadcasts to it (a scalar); another dtype or shape is an error at
/// this line.
#[track_caller]
pub fn histogram_masked(x: Tile, num_bins: usize, mask: Tile) -> Tile {
    histogram_at(x, num_bins, Some(mask), Loc::caller())
}

fn histogram_at(x: Tile, num_bins: usize, mask: Option<Tile>, loc: Loc) -> Tile {
    let bins_shape = Shape::new(&[num_bins.max(1)]).unwrap_or(Shape::SCALAR);
    let failed = || constant(Constant::Int(0), DType::I32, bins_shape, loc);
    if x.is_ptr() || !x.dtype().is_int() {
        report(
            loc,
            format!("histogram needs an integer tile, got {}", x.ty()),
        );
        return failed();
    }
    if x.shape().rank() != 1 {
        report(loc, format!("histogram needs a 1-D tile, got {}", x.ty()));
        return failed();
    }
    if !num_bins.is_power_of_two() || i32::try_from(num_bins).is_err() {
        report(
            loc,
            format!(
                "histogram: num_bins = {num_bins} must be a positive power of two (of at most \
                 2^30), the length of the result tile"
            ),
        );
        return failed();
    }
    let n = x.shape().dim(0);
    let Some(pairs) = Shape::new(&[n, num_bins]) else {
        report(
            loc,
            format!(
                "histogram of {} into {num_bins} bins compares {n} x {num_bins} elements, more \
                 than a tile holds (2^32 - 1); histogram it in chunks and add the counts",
                x.ty()
            ),
        );
        return failed();
    };
    let mask = match mask {
        None => None,
        Some(m) => {
            if m.is_ptr() || m.dtype() != DType::I1 {
                report(
                    loc,
                    format!("the mask of a histogram must be i1, got {}", m.ty()),
                );
                return failed();
            }
            match Shape::broadcast(m.shape(), x.shape()) {
                Some(s) if s == x.shape() => Some(m.broadcast_at(s, loc)),
                _ => {
                    report(
                        loc,
                        format!(
                            "the mask {} of a histogram does not broadcast to the input's \
                             shape {}",
                            m.ty(),
                            x.shape()
                        ),
                    );
                    return failed();
                }
            }
        }
    };
    // Element i of x against bin b, at [i, b]: equal, and counted (the mask). The comparison
    // is in the promotion of x's dtype and i32 (i32, u32, i64 or u64), which holds every bin
    // (below 2^30) and every value of x, so an element matches its own bin only.
    let dtype = DType::promote(x.dtype(), DType::I32);
    let bins = emit1(
        Op::Arange {
            start: 0,
            end: num_bins as i64,
        },
        vec![],
        TileType::tile(DType::I32, bins_shape),
        loc,
    )
    .cast_at(dtype, Default::default(), loc)
    .expand_dims_at(0, loc)
    .broadcast_at(pairs, loc);
    let column = |t: Tile| t.expand_dims_at(1, loc).broadcast_at(pairs, loc);
    let x = x.cast_at(dtype, Default::default(), loc);
    let mut hit = column(x).compare(CmpOp::Eq, Operand::Tile(bins), loc);
    if let Some(m) = mask {
        hit = binary(
            BinaryOp::And,
            Operand::Tile(hit),
            Operand::Tile(column(m)),
            loc,
        );
    }
    let ones = hit.cast_at(DType::I32, Default::default(), loc);
    reduce_at(ones, ReduceOp::Sum, 0, loc)
}

impl Tile {
    /// [`histogram`] as a method: `x.histogram(num_bins)`.
    #[track_caller]
    pub fn histogram(self, num_bins: usize) -> Tile {
        histogram_at(self, num_bins, None, Loc::caller())
    }

    /// [`histogram_masked`] as a method: `x.histogram_masked(num_bins, mask)`.
    #[track_caller]
    pub fn histogram_masked(self, num_bins: usize, mask: Tile) -> Tile {
        histogram_at(self, num_bins, Some(mask), Loc::caller())
    }

    /// [`topk`] as a method: `x.topk(k, dim)`.
    #[track_caller]
    pub fn topk(self, k: usize, dim: usize) -> Tile {
        topk_at(self, k, dim, Loc::caller())
    }

    /// [`gather`] as a method: `src.gather(index, axis)`.
    #[track_caller]
    pub fn gather(self, index: Tile, axis: usize) -> Tile {
        gather_at(self, index, axis, Loc::caller())
    }

    /// [`flip`] as a method: `x.flip(dim)`.
    #[track_caller]
    pub fn flip(self, dim: usize) -> Tile {
        flip_at(self, dim, Loc::caller())
    }

    /// [`sort`] as a method: `x.sort(dim, descending)`.
    #[track_caller]
    pub fn sort(self, dim: usize, descending: bool) -> Tile {
        sort_at(self, dim, descending, Loc::caller())
    }
}
