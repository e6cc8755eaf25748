//! Layer norm (forward and backward) and RMS norm over the last axis of a 2-D tensor, after
//! Triton tutorial 05.
//!
//! One program per row; each kernel loops over the row in blocks of `block` columns, so any
//! row length works (a row that fits one block takes one trip). Inputs are f16, bf16 or f32;
//! statistics and accumulation are f32; outputs have the input dtype, `mean` and `rstd` are f32.
//!
//! The backward pass is deterministic: `dx` comes from one program per row, and `dw`, `db` from
//! programs that each own a block of columns and a group of rows (fixed summation order), whose
//! partial sums a second kernel adds up in a fixed order. No atomics.

use crate::check;
use crate::{CheckReport, LibraryKernel};
use tegula::autotune::Config;
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::{Error, Result};

/// The largest block of columns a program holds at once.
pub const MAX_BLOCK: usize = 4096;

const DTYPES: &[DType] = &[DType::F16, DType::BF16, DType::F32];

// --- kernels -----------------------------------------------------------------------------

/// `y = (x - mean) * rstd * w + b` per row; stores `mean` and `rstd = 1 / sqrt(var + eps)`.
///
/// The statistics take one pass over the row (see [`shifted_moments`]), the output a second.
/// Each trip of either pass covers `unroll` blocks of `block` columns (see [`row_blocks`]).
#[tegula::kernel]
pub fn layer_norm_fwd<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    w: Ptr<T>,
    b: Ptr<T>,
    mean: Ptr<f32>,
    rstd: Ptr<f32>,
    x_row_stride: i32,
    y_row_stride: i32,
    n: i32,
    inv_n: f32,
    eps: f32,
    #[constexpr] block: usize,
    #[constexpr] unroll: usize,
) {
    let row = program_id(0);
    let x_row = x + row * x_row_stride;
    let y_row = y + row * y_row_stride;
    let offsets = arange(0, block as i64);
    let shift = row_shift(x_row, n, None);
    let mut acc1 = zeros::<f32>([block]);
    let mut acc2 = zeros::<f32>([block]);
    // The trips that cover whole blocks need no masks: without the per-element selects ptxas
    // keeps a trip's loads together instead of sinking each to its first use. The last, partial
    // trip (if any) runs in the second loop.
    let step = (block * unroll) as i64;
    let whole = n / step * step;
    for start in range(0, whole, step) {
        let blocks = row_blocks(start, offsets, block, n, unroll);
        let xs: Vec<Tile> = blocks
            .iter()
            .map(|&(cols, _)| load_block(x_row + cols, None, EvictionPolicy::Last))
            .collect();
        for v in xs {
            let s = v.to::<f32>() - shift;
            acc1 += s;
            acc2 = fma(s, s, acc2);
        }
    }
    for start in range(whole, n, step) {
        let blocks = row_blocks(start, offsets, block, n, unroll);
        let xs: Vec<Tile> = blocks
            .iter()
            .map(|&(cols, mask)| load_block(x_row + cols, Some(mask), EvictionPolicy::Last))
            .collect();
        for (v, &(_, mask)) in xs.into_iter().zip(&blocks) {
            let s = select(mask, v.to::<f32>() - shift, 0.0);
            acc1 += s;
            acc2 = fma(s, s, acc2);
        }
    }
    let (centre, r) = shifted_moments(sum(acc1, 0), sum(acc2, 0), inv_n, eps);
    store_unmasked(mean + row, shift + centre);
    store_unmasked(rstd + row, r);
    // `(x - mean) * rstd` as `(x - shift) * rstd - centre * rstd`: `x - shift` is exact (both
    // are values of the row, within a factor of two of each other for any row whose spread
    // is below its mean), and `centre * rstd` is order 1. The mean rounded to f32 would put
    // up to half an ulp of the mean into every element (5e-4 at a mean of 1e4: 0.5% of a
    // standard deviation of 0.1), as the one-tile kernels never did.
    let neg_centre_r = -(centre * r);
    // Three instructions an element (sub, fma, fma) besides the conversions: at rows of 32768
    // the loops issue about half the SM's instruction slots, so each one counts.
    for start in range(0, n, block * unroll) {
        let blocks = row_blocks(start, offsets, block, n, unroll);
        let loads: Vec<(Tile, Tile, Tile)> = blocks
            .iter()
            .map(|&(cols, mask)| {
                (
                    load_block(x_row + cols, Some(mask), EvictionPolicy::First),
                    load_kept(w + cols, mask),
                    load_kept(b + cols, mask),
                )
            })
            .collect();
        for ((v, wv, bv), &(cols, mask)) in loads.into_iter().zip(&blocks) {
            let (v, wv, bv) = (v.to::<f32>(), wv.to::<f32>(), bv.to::<f32>());
            let xhat = fma(v - shift, r, neg_centre_r);
            store_streamed(y_row + cols, fma(xhat, wv, bv), mask);
        }
    }
}

/// The `unroll` blocks of columns `start + k * block + offsets` of one trip of a looping
/// kernel, with their masks at `n`. A trip issues all its blocks' loads before it uses the
/// first, so a thread has `unroll` blocks in flight against one accumulator of one block (a
/// larger block would grow the accumulators instead: registers that hold no bytes in flight).
fn row_blocks(
    start: Tile,
    offsets: Tile,
    block: usize,
    n: Tile,
    unroll: usize,
) -> Vec<(Tile, Tile)> {
    (0..unroll)
        .map(|k| {
            let cols = start + (k * block) as i64 + offsets;
            (cols, cols.lt(n))
        })
        .collect()
}

/// A load, masked if `mask` is given, with an L2 eviction policy: `x` read for the last time
/// is evicted first ([`EvictionPolicy::First`]); what is read again stays
/// ([`EvictionPolicy::Last`]): the vectors every row reads (`w`, `b`), and a looping kernel's
/// row blocks between its statistics pass and its output pass.
fn load_block(ptr: Tile, mask: Option<Tile>, evict: EvictionPolicy) -> Tile {
    load_with(
        ptr,
        LoadOptions {
            mask,
            evict,
            ..Default::default()
        },
    )
}

/// A store of an output written once and not read again (evicted first), so that it does not
/// push out of L2 the rows the looping kernels read twice.
pub(crate) fn store_streamed(ptr: Tile, value: Tile, mask: Tile) {
    store_with(
        ptr,
        value,
        StoreOptions {
            mask: Some(mask),
            evict: EvictionPolicy::First,
            ..Default::default()
        },
    );
}

/// The shift of a row's statistics (see [`shifted_moments`]): the median of its first three
/// elements (fewer in shorter rows), as f32, so that one outlying element is never the
/// shift. `rows` is `Some((row offsets, mask))` for a tile of rows starting at `x_rows`.
fn row_shift(x_rows: Tile, n: Tile, rows: Option<(Tile, Tile)>) -> Tile {
    let element = |k: i64| {
        let col = minimum(n - 1, k);
        match rows {
            None => load_unmasked(x_rows + col),
            Some((offsets, mask)) => load(x_rows + offsets + col, mask, 0),
        }
        .to::<f32>()
    };
    let (a, b, c) = (element(0), element(1), element(2));
    maximum(minimum(a, b), minimum(maximum(a, b), c))
}

/// Layer norm statistics from sums over a row shifted by `x0`, a value of the row:
/// `s1 = sum(x - x0)` and `s2 = sum((x - x0)^2)` over `n` elements (two sums that need no
/// mean first, so they reduce together in one round), with `inv_n = 1 / n` (an f32 argument
/// the host computes: no division in the kernel). Returns `(mean - x0, rstd)`.
///
/// `var = s2 / n - (s1 / n)^2` cancels only the shift's distance to the mean:
/// the relative error of `var` is about `f32 eps * (1 + (mean - x0)^2 / var)` (times the
/// summation's growth), so with `x0` taken from the row it stays near f32 rounding however
/// large the mean (`E[x^2] - mean^2` would lose everything at `mean^2 / var > 1 / eps`). A
/// shift many standard deviations from the mean costs digits: an outlier holding most of the
/// variance makes `(mean - x0)^2 / var` about `n`, hence [`row_shift`]'s median of three
/// (tests/norm.rs measures both cases against float64).
///
/// `rstd` is `rsqrt.approx` (relative error under 2^-22, one instruction): the correctly
/// rounded `1 / sqrt` took a square root and a division, each with a slow-path call, and the
/// one-tile kernels computed the chain twice (once for the `mean`/`rstd` stores, once in the
/// output's layout).
fn shifted_moments(s1: Tile, s2: Tile, inv_n: Tile, eps: Tile) -> (Tile, Tile) {
    let centre = s1 * inv_n;
    let var = maximum_nan(s2 * inv_n - centre * centre, 0.0);
    (centre, rsqrt(var + eps))
}

/// `dx` for one row: with `xhat = (x - mean) * rstd` and `g = w * dy`,
/// `dx = (g - (xhat * mean(xhat * g) + mean(g))) * rstd`.
#[tegula::kernel]
pub fn layer_norm_bwd_dx<T: Element>(
    x: Ptr<T>,
    dy: Ptr<T>,
    w: Ptr<T>,
    mean: Ptr<f32>,
    rstd: Ptr<f32>,
    dx: Ptr<T>,
    x_row_stride: i32,
    dy_row_stride: i32,
    dx_row_stride: i32,
    n: i32,
    #[constexpr] block: usize,
) {
    let row = program_id(0);
    let x_row = x + row * x_row_stride;
    let dy_row = dy + row * dy_row_stride;
    let dx_row = dx + row * dx_row_stride;
    let mu = load_unmasked(mean + row);
    let r = load_unmasked(rstd + row);
    let offsets = arange(0, block as i64);
    let mut acc_xg = zeros::<f32>([block]);
    let mut acc_g = zeros::<f32>([block]);
    for start in range(0, n, block) {
        let cols = start + offsets;
        let mask = cols.lt(n);
        let xhat = (load(x_row + cols, mask, 0).to::<f32>() - mu) * r;
        let g = load(w + cols, mask, 0).to::<f32>() * load(dy_row + cols, mask, 0).to::<f32>();
        // Masked lanes have g = 0, so they add nothing.
        acc_xg += xhat * g;
        acc_g += g;
    }
    let c1 = sum(acc_xg, 0) / n;
    let c2 = sum(acc_g, 0) / n;
    for start in range(0, n, block) {
        let cols = start + offsets;
        let mask = cols.lt(n);
        let xhat = (load(x_row + cols, mask, 0).to::<f32>() - mu) * r;
        let g = load(w + cols, mask, 0).to::<f32>() * load(dy_row + cols, mask, 0).to::<f32>();
        store(dx_row + cols, (g - (xhat * c1 + c2)) * r, mask);
    }
}

/// Partial `dw = sum dy * xhat` and `db = sum dy` over the rows `[group * rows_per_group, ..)`
/// for one block of columns; program `(column block, group)` writes row `group` of the f32
/// partial buffers `[groups, n]`.
#[tegula::kernel]
pub fn layer_norm_bwd_dwdb<T: Element>(
    x: Ptr<T>,
    dy: Ptr<T>,
    mean: Ptr<f32>,
    rstd: Ptr<f32>,
    dw_partial: Ptr<f32>,
    db_partial: Ptr<f32>,
    x_row_stride: i32,
    dy_row_stride: i32,
    m: i32,
    n: i32,
    rows_per_group: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
) {
    let pid_n = program_id(0);
    let group = program_id(1);
    let cols = pid_n * block_n + arange(0, block_n as i64);
    let col_mask = cols.lt(n);
    let first_row = group * rows_per_group;
    let last_row = minimum(first_row + rows_per_group, m);
    let row_offsets = arange(0, block_m as i64);
    let mut dw = zeros::<f32>([block_m, block_n]);
    let mut db = zeros::<f32>([block_m, block_n]);
    for start in range(first_row, last_row, block_m) {
        let rows = start + row_offsets;
        let row_mask = rows.lt(last_row);
        let mask = row_mask.col() & col_mask.row();
        let xv = load(x + rows.col() * x_row_stride + cols.row(), mask, 0).to::<f32>();
        let dyv = load(dy + rows.col() * dy_row_stride + cols.row(), mask, 0).to::<f32>();
        let mu = load(mean + rows, row_mask, 0);
        let r = load(rstd + rows, row_mask, 0);
        let xhat = (xv - mu.col()) * r.col();
        dw += dyv * xhat;
        db += dyv;
    }
    store(dw_partial + group * n + cols, sum(dw, 0), col_mask);
    store(db_partial + group * n + cols, sum(db, 0), col_mask);
}

/// Adds the `groups` rows of the partial sums, in order, into `dw` and `db`.
#[tegula::kernel]
pub fn layer_norm_bwd_reduce<T: Element>(
    dw_partial: Ptr<f32>,
    db_partial: Ptr<f32>,
    dw: Ptr<T>,
    db: Ptr<T>,
    groups: i32,
    n: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
) {
    let cols = program_id(0) * block_n + arange(0, block_n as i64);
    let col_mask = cols.lt(n);
    let row_offsets = arange(0, block_m as i64);
    let mut acc_w = zeros::<f32>([block_m, block_n]);
    let mut acc_b = zeros::<f32>([block_m, block_n]);
    for start in range(0, groups, block_m) {
        let rows = start + row_offsets;
        let mask = rows.lt(groups).col() & col_mask.row();
        let offs = rows.col() * n + cols.row();
        acc_w += load(dw_partial + offs, mask, 0);
        acc_b += load(db_partial + offs, mask, 0);
    }
    store(dw + cols, sum(acc_w, 0), col_mask);
    store(db + cols, sum(acc_b, 0), col_mask);
}

/// `y = x / sqrt(mean(x^2) + eps) * w` per row, in two passes whose trips cover `unroll`
/// blocks of `block` columns (see [`row_blocks`]).
#[tegula::kernel]
pub fn rms_norm_fwd<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    w: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    n: i32,
    eps: f32,
    #[constexpr] block: usize,
    #[constexpr] unroll: usize,
) {
    let row = program_id(0);
    let x_row = x + row * x_row_stride;
    let y_row = y + row * y_row_stride;
    let offsets = arange(0, block as i64);
    let mut acc = zeros::<f32>([block]);
    for start in range(0, n, block * unroll) {
        let blocks = row_blocks(start, offsets, block, n, unroll);
        let xs: Vec<Tile> = blocks
            .iter()
            .map(|&(cols, mask)| load_block(x_row + cols, Some(mask), EvictionPolicy::Last))
            .collect();
        for v in xs {
            let v = v.to::<f32>();
            acc += v * v;
        }
    }
    let r = 1.0 / sqrt(sum(acc, 0) / n + eps);
    for start in range(0, n, block * unroll) {
        let blocks = row_blocks(start, offsets, block, n, unroll);
        let loads: Vec<(Tile, Tile)> = blocks
            .iter()
            .map(|&(cols, mask)| {
                (
                    load_block(x_row + cols, Some(mask), EvictionPolicy::First),
                    load_kept(w + cols, mask),
                )
            })
            .collect();
        for ((v, wv), &(cols, mask)) in loads.into_iter().zip(&blocks) {
            store_streamed(y_row + cols, v.to::<f32>() * r * wv.to::<f32>(), mask);
        }
    }
}

/// [`layer_norm_fwd`] for rows that fit one tile: `block_m` rows per program, each read once
/// and held in registers; both statistics in one reduction round (`shifted_moments`).
///
/// Kept lean so that many programs fit an SM (each has its tile of `x` in flight only until
/// the reduction): `whole` (set by the host when `n == block` and `block_m` divides `m`) drops
/// every mask and select; `w` and `b` load after the reduction round (L2 hits, as RMS norm's
/// `w`), so their registers are not held while `x` is in flight.
#[tegula::kernel]
pub fn layer_norm_fwd_rows<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    w: Ptr<T>,
    b: Ptr<T>,
    mean: Ptr<f32>,
    rstd: Ptr<f32>,
    x_row_stride: i32,
    y_row_stride: i32,
    m: i32,
    n: i32,
    inv_n: f32,
    eps: f32,
    #[constexpr] block_m: usize,
    #[constexpr] block: usize,
    #[constexpr] whole: bool,
) {
    let rows = program_id(0) * block_m + arange(0, block_m as i64);
    let cols = arange(0, block as i64);
    let row_mask = rows.lt(m);
    let col_mask = cols.lt(n);
    let mask = row_mask.col() & col_mask.row();
    let x_tile = x + rows.col() * x_row_stride + cols.row();
    let y_tile = y + rows.col() * y_row_stride + cols.row();
    let v = load_block(x_tile, (!whole).then_some(mask), EvictionPolicy::First).to::<f32>();
    let shift = row_shift(x, n, Some((rows * x_row_stride, row_mask)));
    let s = if whole {
        v - shift.col()
    } else {
        select(mask, v - shift.col(), 0.0)
    };
    let (centre, r) = shifted_moments(sum(s, 1), sum(s * s, 1), inv_n, eps);
    store(mean + rows, shift + centre, row_mask);
    store(rstd + rows, r, row_mask);
    let col_mask = (!whole).then_some(col_mask);
    let wv = load_block(w + cols, col_mask, EvictionPolicy::Last).to::<f32>();
    let bv = load_block(b + cols, col_mask, EvictionPolicy::Last).to::<f32>();
    let out = (s - centre.col()) * r.col() * wv.row() + bv.row();
    if whole {
        store_unmasked(y_tile, out);
    } else {
        store(y_tile, out, mask);
    }
}

/// [`rms_norm_fwd`] for rows that fit one tile: `block_m` rows per program, each read once.
#[tegula::kernel]
pub fn rms_norm_fwd_rows<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    w: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    m: i32,
    n: i32,
    eps: f32,
    #[constexpr] block_m: usize,
    #[constexpr] block: usize,
) {
    let rows = program_id(0) * block_m + arange(0, block_m as i64);
    let cols = arange(0, block as i64);
    let col_mask = cols.lt(n);
    let mask = rows.lt(m).col() & col_mask.row();
    let v = load(x + rows.col() * x_row_stride + cols.row(), mask, 0).to::<f32>();
    let wv = load(w + cols, col_mask, 0).to::<f32>();
    let r: Tile = 1.0 / sqrt(sum(v * v, 1) / n + eps);
    store(
        y + rows.col() * y_row_stride + cols.row(),
        v * r.col() * wv.row(),
        mask,
    );
}

/// The rows `[first_row, row_end)` of a pipelined row program: `tiles_per_program`
/// consecutive tiles of `block_m` rows from its first tile, cut at `m`.
pub(crate) fn program_rows(tiles_per_program: Tile, block_m: usize, m: Tile) -> (Tile, Tile) {
    let first_tile = program_id(0) * tiles_per_program;
    let row_end = minimum((first_tile + tiles_per_program) * block_m, m);
    (first_tile * block_m, row_end)
}

/// The streamed (evict-first) load of the tile of rows `rows` of `x`, masked past `row_end` and
/// by `col_mask`, with `other` in the masked lanes (zero when `None`). The prefetch of a
/// pipelined row kernel: past the program's last tile it loads nothing. `x` streams through
/// once, so it is evicted first and the vectors every row reads (`w`, `b`) stay in L2.
pub(crate) fn load_row_tile(
    x: Tile,
    row_stride: Tile,
    rows: Tile,
    row_end: Tile,
    cols: Tile,
    col_mask: Tile,
    other: Option<Operand>,
) -> Tile {
    load_with(
        x + rows.col() * row_stride + cols.row(),
        LoadOptions {
            mask: Some(rows.lt(row_end).col() & col_mask.row()),
            other,
            evict: EvictionPolicy::First,
            ..Default::default()
        },
    )
}

/// A load of a vector every row reads (`w`, `b`): kept in L2.
fn load_kept(ptr: Tile, mask: Tile) -> Tile {
    load_block(ptr, Some(mask), EvictionPolicy::Last)
}

/// [`layer_norm_fwd_rows`] over `tiles_per_program` consecutive tiles of `block_m` rows: each
/// trip issues the next tile's load of `x` (kept in the input dtype, with its rows' first
/// elements, the shifts) before the current tile's reduction round, so a program has a tile in
/// flight while it reduces and stores; `w` and `b` load only for the output.
#[tegula::kernel]
pub fn layer_norm_fwd_pipelined<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    w: Ptr<T>,
    b: Ptr<T>,
    mean: Ptr<f32>,
    rstd: Ptr<f32>,
    x_row_stride: i32,
    y_row_stride: i32,
    m: i32,
    n: i32,
    inv_n: f32,
    eps: f32,
    tiles_per_program: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block: usize,
) {
    let (first_row, row_end) = program_rows(tiles_per_program, block_m, m);
    let row_offsets = arange(0, block_m as i64);
    let cols = arange(0, block as i64);
    let col_mask = cols.lt(n);
    let load_rows =
        |rows: Tile| load_row_tile(x, x_row_stride, rows, row_end, cols, col_mask, None);
    let load_shifts = |rows: Tile| row_shift(x, n, Some((rows * x_row_stride, rows.lt(row_end))));
    let mut next = load_rows(first_row + row_offsets);
    let mut next_shift = load_shifts(first_row + row_offsets);
    let wv = load_kept(w + cols, col_mask).to::<f32>();
    let bv = load_kept(b + cols, col_mask).to::<f32>();
    for start in range(first_row, row_end, block_m) {
        let rows = start + row_offsets;
        let row_mask = rows.lt(row_end);
        let mask = row_mask.col() & col_mask.row();
        let v = next.to::<f32>();
        let shift = next_shift;
        next = load_rows(rows + block_m as i64);
        next_shift = load_shifts(rows + block_m as i64);
        let s = select(mask, v - shift.col(), 0.0);
        let (centre, r) = shifted_moments(sum(s, 1), sum(s * s, 1), inv_n, eps);
        store(mean + rows, shift + centre, row_mask);
        store(rstd + rows, r, row_mask);
        store(
            y + rows.col() * y_row_stride + cols.row(),
            (s - centre.col()) * r.col() * wv.row() + bv.row(),
            mask,
        );
    }
}

/// [`rms_norm_fwd_rows`] over `tiles_per_program` consecutive tiles of `block_m` rows, the
/// next tile's `x` in flight while the current one reduces (see [`layer_norm_fwd_pipelined`]).
#[tegula::kernel]
pub fn rms_norm_fwd_pipelined<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    w: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    m: i32,
    n: i32,
    eps: f32,
    tiles_per_program: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block: usize,
) {
    let (first_row, row_end) = program_rows(tiles_per_program, block_m, m);
    let row_offsets = arange(0, block_m as i64);
    let cols = arange(0, block as i64);
    let col_mask = cols.lt(n);
    let load_rows =
        |rows: Tile| load_row_tile(x, x_row_stride, rows, row_end, cols, col_mask, None);
    let mut next = load_rows(first_row + row_offsets);
    for start in range(first_row, row_end, block_m) {
        let rows = start + row_offsets;
        let mask = rows.lt(row_end).col() & col_mask.row();
        let v = next.to::<f32>();
        next = load_rows(rows + block_m as i64);
        let r: Tile = 1.0 / sqrt(sum(v * v, 1) / n + eps);
        let wv = load_kept(w + cols, col_mask).to::<f32>();
        store(
            y + rows.col() * y_row_stride + cols.row(),
            v * r.col() * wv.row(),
            mask,
        );
    }
}

// --- host wrappers -----------------------------------------------------------------------

/// The block of columns a row kernel takes for rows of `n`: the whole row up to [`MAX_BLOCK`].
pub fn row_block(n: usize) -> usize {
    check::next_pow2(n, 16).min(MAX_BLOCK)
}

/// The longest row the one-tile forward kernels may be given (one read of `x`, held in
/// registers); the defaults stop earlier (see [`layer_norm_config`], [`rms_norm_config`]).
pub const MAX_ROW: usize = 16384;

/// Tile elements per thread on the one-tile path (two 16-byte loads of bf16 per thread).
const ELEMS_PER_THREAD: usize = 16;

/// SMs assumed on the interpreter, which has none: small, so that the CPU runs of the
/// pipelined kernels walk several tiles per program.
const INTERPRETER_SMS: usize = 2;

/// The grid of a pipelined (persistent) row kernel: about `programs_per_sm` programs per SM,
/// each walking `tiles_per_program` consecutive tiles of rows. Returns
/// `(programs, tiles_per_program)`.
pub fn persistent_grid(dev: &Device, tiles: usize, programs_per_sm: usize) -> (usize, usize) {
    let sms = check::sm_count(dev, INTERPRETER_SMS);
    check::persistent_grid(tiles, sms * programs_per_sm)
}

/// The looping kernels' block of columns and blocks a trip by default: 8 elements a thread
/// at 8 warps, 4 blocks (four 16-byte loads of bf16) in flight a thread. Layer norm takes 72
/// registers (3 programs a SM, 48 KB of bf16 in flight a SM); RMS norm 40 (6 programs a SM;
/// beyond 16384 columns it runs other blocks, see [`rms_norm_config`]).
const LOOP_BLOCK: usize = 2048;
const LOOP_UNROLL: usize = 4;

/// The default `UNROLL` of a looping kernel for rows of `n`: [`LOOP_UNROLL`], or 1 when `n`
/// is not a multiple of 8 elements. Such rows (of a contiguous tensor) are not 16-byte aligned,
/// so the launch's specialization loads each element on its own: four blocks a trip then take
/// 148-160 registers at 8 warps (one program a SM) for no more bytes in flight.
pub(crate) fn loop_unroll_for(n: usize) -> usize {
    if n.is_multiple_of(8) {
        LOOP_UNROLL
    } else {
        1
    }
}

/// A forward launch config for rows of `n`: the one-tile kernels (`BLOCK` >= `n`, `BLOCK_M`
/// rows per program, several for short rows) up to `one_tile` columns, else the looping
/// kernels (`BLOCK_M` 0, [`LOOP_UNROLL`] blocks of [`LOOP_BLOCK`] a trip) at 8 warps.
fn row_config(n: usize, one_tile: usize) -> Config {
    let block = check::next_pow2(n, 16);
    if block > one_tile {
        return Config::new(8, 1)
            .with("BLOCK", row_block(n).min(LOOP_BLOCK) as i64)
            .with("BLOCK_M", 0)
            .with(UNROLL, loop_unroll_for(n) as i64);
    }
    let block_m = (2048 / block).clamp(1, 16);
    // At most 16 warps: 1024 threads would cap a thread at 64 registers.
    let warps = (block * block_m / (32 * ELEMS_PER_THREAD)).clamp(4, 16) as u32;
    Config::new(warps, 1)
        .with("BLOCK", block as i64)
        .with("BLOCK_M", block_m as i64)
}

/// `PROGRAMS_PER_SM` of a config: above 0 the one-tile path takes the pipelined kernels
/// (a persistent grid, the next tile's load in flight during the current tile's reductions).
pub const PROGRAMS_PER_SM: &str = "PROGRAMS_PER_SM";

/// `UNROLL` of a looping config (`BLOCK_M` 0): the blocks of `BLOCK` columns each trip of
/// the looping kernels loads at once (1 to [`MAX_UNROLL`]; 1 when unset).
pub const UNROLL: &str = "UNROLL";

/// Layer norm's forward config for rows of `n`: the one-tile kernel without the prefetch up to
/// 4096 columns (as RMS norm: 8 warps at 4096), the looping kernel beyond (the one-tile kernel
/// at 16384 columns takes about 119 registers: one program a SM). The looping kernel reads a
/// row twice since the statistics take one pass (`shifted_moments`). The one tile is what it
/// is by being lean: without masks (`whole` rows), divisions, square roots or `w`/`b` held
/// during the load it takes about 40 registers, so six programs share an SM and keep 48 KB of
/// `x` in flight; with them (74 registers, 3 programs a SM) it lost to the pipelined kernel.
/// 4 warps stream slightly faster than 8 but make the PTX half as long again and double the
/// first launch's driver JIT, so 8 (docs/performance.md, "Layer norm forward").
pub fn layer_norm_config(n: usize) -> Config {
    row_config(n, 4096)
}

/// RMS norm's forward config for rows of `n`: one tile without the prefetch up to 4096 columns
/// (ahead of the pipelined kernel at two and four programs per SM), the looping kernel
/// beyond. Its second pass over a row reads it back from L2, so the rows in flight on the GPU
/// (programs a SM x SMs x row bytes) must fit there with room to spare. At 8 warps and 4
/// blocks of 2048 a trip (about 40 registers, 6 programs a SM) they do up to 16384 columns;
/// at 32768 the same 6 programs a SM hold most of a 60 MB L2 in rows and the second pass goes
/// back to DRAM, so 16 warps and blocks of 4096 (2 programs a SM) there (docs/performance.md,
/// "RMS norm").
pub fn rms_norm_config(n: usize) -> Config {
    let c = row_config(n, 4096);
    if check::next_pow2(n, 16) <= 16384 {
        return c;
    }
    Config { num_warps: 16, ..c }.with("BLOCK", 4096)
}

/// `BLOCK` and `BLOCK_M` of a forward config, checked against rows of `n`.
fn blocks(op: &str, config: &Config, n: usize) -> Result<(usize, usize)> {
    let (block, block_m) = (config.usize("BLOCK")?, config.usize("BLOCK_M")?);
    let fits = if block_m == 0 {
        block <= MAX_ROW
    } else {
        block_m.is_power_of_two() && block >= n
    };
    if !block.is_power_of_two() || block < 16 || !fits {
        return Err(Error::Invalid {
            op: op.into(),
            message: format!("config {config} does not fit rows of {n}"),
        });
    }
    Ok((block, block_m))
}

/// The most blocks a trip of the looping kernels loads at once (`UNROLL`).
pub const MAX_UNROLL: usize = 8;

/// `UNROLL` of a looping config: blocks a trip loads before it uses the first (1 if unset).
pub(crate) fn loop_unroll(op: &str, config: &Config) -> Result<usize> {
    match config.get(UNROLL).unwrap_or(1) {
        u @ 1.. if u as usize <= MAX_UNROLL => Ok(u as usize),
        u => Err(Error::Invalid {
            op: op.into(),
            message: format!("UNROLL must be 1 to {MAX_UNROLL}, got {u}"),
        }),
    }
}

/// Checks a `[rows, n]` input or output with unit column stride and i32 offsets.
fn expect_rows<T: Element>(op: &str, name: &str, t: &Tensor<T>, shape: &[usize]) -> Result<()> {
    check::expect_shape(op, name, t, shape)?;
    check::expect_unit_last_stride(op, name, t)?;
    check::expect_i32_extent(op, name, t)
}

/// Checks a contiguous vector of `n` elements.
fn expect_vector<T: Element>(op: &str, name: &str, t: &Tensor<T>, n: usize) -> Result<()> {
    check::expect_shape(op, name, t, &[n])?;
    check::expect_contiguous(op, name, t)
}

fn row_stride<T: Element>(op: &str, t: &Tensor<T>) -> Result<i32> {
    check::as_i32(op, "row stride", t.strides()[0])
}

fn expect_eps(op: &str, eps: f32) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::Invalid {
            op: op.into(),
            message: format!("eps must be finite and >= 0, got {eps}"),
        });
    }
    Ok(())
}

/// Outputs of [`layer_norm`].
pub struct LayerNormOutput<T: Element> {
    pub y: Tensor<T>,
    /// Per-row mean, f32.
    pub mean: Tensor<f32>,
    /// Per-row `1 / sqrt(var + eps)` (biased variance), f32.
    pub rstd: Tensor<f32>,
}

/// Layer norm forward into given outputs.
///
/// Contract: `T` is f16, bf16 or f32; `x` and `y` are `[M, N]` with unit column stride (any row
/// stride); `w`, `b` are contiguous `[N]`; `mean`, `rstd` contiguous `[M]` f32; all on one
/// device; no output shares memory with an input or another output; `eps >= 0`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_into<T: Element>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    eps: f32,
    y: &Tensor<T>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
) -> Result<()> {
    check::expect_rank("layer_norm", "x", x, 2)?;
    let c = layer_norm_config(x.shape()[1]);
    layer_norm_into_with(x, w, b, eps, y, mean, rstd, &c)
}

/// [`layer_norm_into`] with an explicit launch config (see [`layer_norm_config`]).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_into_with<T: Element>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    eps: f32,
    y: &Tensor<T>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
    config: &Config,
) -> Result<()> {
    const OP: &str = "layer_norm";
    check_layer_norm_inputs(x, w, b, eps)?;
    let (m, n) = (x.shape()[0], x.shape()[1]);
    expect_rows(OP, "y", y, &[m, n])?;
    expect_vector(OP, "mean", mean, m)?;
    expect_vector(OP, "rstd", rstd, m)?;
    check::expect_same_device(OP, ("x", x), ("y", y))?;
    check::expect_same_device(OP, ("x", x), ("mean", mean))?;
    check::expect_same_device(OP, ("x", x), ("rstd", rstd))?;
    for (name, input) in [("x", x), ("w", w), ("b", b)] {
        check::expect_no_alias(OP, ("y", y), (name, input))?;
        check::expect_no_alias(OP, ("mean", mean), (name, input))?;
        check::expect_no_alias(OP, ("rstd", rstd), (name, input))?;
    }
    check::expect_no_alias(OP, ("rstd", rstd), ("mean", mean))?;
    let (block, block_m) = blocks(OP, config, n)?;
    let unroll = loop_unroll(OP, config)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (mi, ni) = (check::as_i32(OP, "M", m)?, check::as_i32(OP, "N", n)?);
    // 1 / n once, on the host: the kernels multiply by it.
    let inv_n = 1.0 / n as f32;
    let (xs, ys) = (row_stride(OP, x)?, row_stride(OP, y)?);
    let (dev, lc) = (x.device(), config.launch_config());
    let per_sm = config.get(PROGRAMS_PER_SM).unwrap_or(0);
    if block_m > 0 && per_sm > 0 {
        let (grid, tiles) = persistent_grid(dev, m.div_ceil(block_m), per_sm as usize);
        let tiles = check::as_i32(OP, "tiles per program", tiles)?;
        return layer_norm_fwd_pipelined::launch_with::<T>(
            dev, grid, lc, x, y, w, b, mean, rstd, xs, ys, mi, ni, inv_n, eps, tiles, block_m,
            block,
        );
    }
    if block_m > 0 {
        let grid = m.div_ceil(block_m);
        let whole = n == block && m.is_multiple_of(block_m);
        return layer_norm_fwd_rows::launch_with::<T>(
            dev, grid, lc, x, y, w, b, mean, rstd, xs, ys, mi, ni, inv_n, eps, block_m, block,
            whole,
        );
    }
    layer_norm_fwd::launch_with::<T>(
        dev, m, lc, x, y, w, b, mean, rstd, xs, ys, ni, inv_n, eps, block, unroll,
    )
}

/// The contract of [`layer_norm_into`] on its inputs.
fn check_layer_norm_inputs<T: Element>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    eps: f32,
) -> Result<()> {
    const OP: &str = "layer_norm";
    check::expect_dtype_in::<T>(OP, "x", DTYPES)?;
    check::expect_rank(OP, "x", x, 2)?;
    let (m, n) = (x.shape()[0], x.shape()[1]);
    expect_rows(OP, "x", x, &[m, n])?;
    expect_vector(OP, "w", w, n)?;
    expect_vector(OP, "b", b, n)?;
    expect_eps(OP, eps)?;
    check::expect_same_device(OP, ("x", x), ("w", w))?;
    check::expect_same_device(OP, ("x", x), ("b", b))?;
    check::as_i32(OP, "M", m)?;
    check::as_i32(OP, "N", n)?;
    row_stride(OP, x)?;
    Ok(())
}

/// Layer norm forward of `x` `[M, N]` with weight `w` and bias `b` `[N]`; see
/// [`layer_norm_into`]. The inputs are checked before the outputs are allocated.
pub fn layer_norm<T: Element>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    b: &Tensor<T>,
    eps: f32,
) -> Result<LayerNormOutput<T>> {
    check_layer_norm_inputs(x, w, b, eps)?;
    check::expect_i32_output("layer_norm", "y", x.shape())?;
    let dev = x.device();
    let out = LayerNormOutput {
        y: dev.empty::<T>(x.shape())?,
        mean: dev.empty::<f32>([x.shape()[0]])?,
        rstd: dev.empty::<f32>([x.shape()[0]])?,
    };
    layer_norm_into(x, w, b, eps, &out.y, &out.mean, &out.rstd)?;
    Ok(out)
}

/// Gradients of [`layer_norm_backward`].
pub struct LayerNormGrads<T: Element> {
    pub dx: Tensor<T>,
    pub dw: Tensor<T>,
    pub db: Tensor<T>,
}

/// Rows each `dw`/`db` program sums before its partial result goes to the second reduction.
pub const ROWS_PER_GROUP: usize = 64;
/// Tile of the `dw`/`db` kernels: rows by columns.
const DWDB_BLOCK: (usize, usize) = (16, 64);

/// Layer norm backward: from `dy` [M, N], the forward input `x`, weight `w` and the forward's
/// `mean`, `rstd`, computes `dx` `[M, N]`, `dw` and `db` `[N]`.
///
/// Contract as in [`layer_norm_into`]: `x`, `dy` have unit column stride, `w`, `mean`, `rstd`
/// are contiguous; the results are new contiguous tensors, allocated once every input is
/// checked. Deterministic: the same inputs give the same bits.
pub fn layer_norm_backward<T: Element>(
    dy: &Tensor<T>,
    x: &Tensor<T>,
    w: &Tensor<T>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
) -> Result<LayerNormGrads<T>> {
    const OP: &str = "layer_norm_backward";
    check::expect_dtype_in::<T>(OP, "x", DTYPES)?;
    check::expect_rank(OP, "x", x, 2)?;
    let (m, n) = (x.shape()[0], x.shape()[1]);
    expect_rows(OP, "x", x, &[m, n])?;
    expect_rows(OP, "dy", dy, &[m, n])?;
    expect_vector(OP, "w", w, n)?;
    expect_vector(OP, "mean", mean, m)?;
    expect_vector(OP, "rstd", rstd, m)?;
    check::expect_same_device(OP, ("x", x), ("dy", dy))?;
    check::expect_same_device(OP, ("x", x), ("w", w))?;
    check::expect_same_device(OP, ("x", x), ("mean", mean))?;
    check::expect_same_device(OP, ("x", x), ("rstd", rstd))?;
    let (mi, ni) = (check::as_i32(OP, "M", m)?, check::as_i32(OP, "N", n)?);
    let (xs, dys) = (row_stride(OP, x)?, row_stride(OP, dy)?);
    check::expect_i32_output(OP, "dx", &[m, n])?;
    let groups = m.div_ceil(ROWS_PER_GROUP);
    check::expect_i32_output(OP, "partial sums", &[groups, n])?;
    let dev = x.device();
    let grads = LayerNormGrads {
        dx: dev.empty::<T>([m, n])?,
        dw: dev.zeros::<T>([n])?,
        db: dev.zeros::<T>([n])?,
    };
    if m == 0 || n == 0 {
        return Ok(grads);
    }
    let dxs = ni; // `dx` is contiguous
    layer_norm_bwd_dx::launch::<T>(
        dev,
        m,
        x,
        dy,
        w,
        mean,
        rstd,
        &grads.dx,
        xs,
        dys,
        dxs,
        ni,
        row_block(n),
    )?;

    let dw_partial = dev.empty::<f32>([groups, n])?;
    let db_partial = dev.empty::<f32>([groups, n])?;
    let (bm, bn) = DWDB_BLOCK;
    let col_blocks = n.div_ceil(bn) as u32;
    layer_norm_bwd_dwdb::launch::<T>(
        dev,
        [col_blocks, groups as u32],
        x,
        dy,
        mean,
        rstd,
        &dw_partial,
        &db_partial,
        xs,
        dys,
        mi,
        ni,
        ROWS_PER_GROUP as i32,
        bm,
        bn,
    )?;
    layer_norm_bwd_reduce::launch::<T>(
        dev,
        col_blocks,
        &dw_partial,
        &db_partial,
        &grads.dw,
        &grads.db,
        groups as i32,
        ni,
        bm,
        bn,
    )?;
    Ok(grads)
}

/// RMS norm `y = x / sqrt(mean(x^2) + eps) * w` into `y`.
///
/// Contract: `T` is f16, bf16 or f32; `x`, `y` are `[M, N]` with unit column stride, `w` is
/// contiguous `[N]`; one device; `y` shares no memory with `x` or `w`; `eps >= 0`.
pub fn rms_norm_into<T: Element>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    eps: f32,
    y: &Tensor<T>,
) -> Result<()> {
    check::expect_rank("rms_norm", "x", x, 2)?;
    rms_norm_into_with(x, w, eps, y, &rms_norm_config(x.shape()[1]))
}

/// [`rms_norm_into`] with an explicit launch config (see [`rms_norm_config`]).
pub fn rms_norm_into_with<T: Element>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    eps: f32,
    y: &Tensor<T>,
    config: &Config,
) -> Result<()> {
    const OP: &str = "rms_norm";
    check_rms_norm_inputs(x, w, eps)?;
    let (m, n) = (x.shape()[0], x.shape()[1]);
    expect_rows(OP, "y", y, &[m, n])?;
    check::expect_same_device(OP, ("x", x), ("y", y))?;
    check::expect_no_alias(OP, ("y", y), ("x", x))?;
    check::expect_no_alias(OP, ("y", y), ("w", w))?;
    let (block, block_m) = blocks(OP, config, n)?;
    let unroll = loop_unroll(OP, config)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (mi, ni) = (check::as_i32(OP, "M", m)?, check::as_i32(OP, "N", n)?);
    let (xs, ys) = (row_stride(OP, x)?, row_stride(OP, y)?);
    let (dev, lc) = (x.device(), config.launch_config());
    let per_sm = config.get(PROGRAMS_PER_SM).unwrap_or(0);
    if block_m > 0 && per_sm > 0 {
        let (grid, tiles) = persistent_grid(dev, m.div_ceil(block_m), per_sm as usize);
        let tiles = check::as_i32(OP, "tiles per program", tiles)?;
        return rms_norm_fwd_pipelined::launch_with::<T>(
            dev, grid, lc, x, y, w, xs, ys, mi, ni, eps, tiles, block_m, block,
        );
    }
    if block_m > 0 {
        let grid = m.div_ceil(block_m);
        return rms_norm_fwd_rows::launch_with::<T>(
            dev, grid, lc, x, y, w, xs, ys, mi, ni, eps, block_m, block,
        );
    }
    rms_norm_fwd::launch_with::<T>(dev, m, lc, x, y, w, xs, ys, ni, eps, block, unroll)
}

/// The contract of [`rms_norm_into`] on its inputs.
fn check_rms_norm_inputs<T: Element>(x: &Tensor<T>, w: &Tensor<T>, eps: f32) -> Result<()> {
    const OP: &str = "rms_norm";
    check::expect_dtype_in::<T>(OP, "x", DTYPES)?;
    check::expect_rank(OP, "x", x, 2)?;
    let (m, n) = (x.shape()[0], x.shape()[1]);
    expect_rows(OP, "x", x, &[m, n])?;
    expect_vector(OP, "w", w, n)?;
    expect_eps(OP, eps)?;
    check::expect_same_device(OP, ("x", x), ("w", w))?;
    check::as_i32(OP, "M", m)?;
    check::as_i32(OP, "N", n)?;
    row_stride(OP, x)?;
    Ok(())
}

/// RMS norm of `x` `[M, N]` with weight `w` `[N]` in a new tensor; see [`rms_norm_into`]. The
/// inputs are checked before the output is allocated.
pub fn rms_norm<T: Element>(x: &Tensor<T>, w: &Tensor<T>, eps: f32) -> Result<Tensor<T>> {
    check_rms_norm_inputs(x, w, eps)?;
    check::expect_i32_output("rms_norm", "y", x.shape())?;
    let y = x.device().empty::<T>(x.shape())?;
    rms_norm_into(x, w, eps, &y)?;
    Ok(y)
}

// --- float64 references --------------------------------------------------------------------

/// Float64 layer norm of row-major `x` [m, n]: `(y, mean, rstd)`.
pub fn layer_norm_reference(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    eps: f64,
    m: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut means, mut rstds) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..m {
        let row = &x[r * n..(r + 1) * n];
        let mu = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
        let rs = 1.0 / (var + eps).sqrt();
        y.extend((0..n).map(|c| (row[c] - mu) * rs * w[c] + b[c]));
        means.push(mu);
        rstds.push(rs);
    }
    (y, means, rstds)
}

/// Float64 layer norm backward from the forward's `mean`, `rstd`: `(dx, dw, db)`.
pub fn layer_norm_backward_reference(
    dy: &[f64],
    x: &[f64],
    w: &[f64],
    mean: &[f64],
    rstd: &[f64],
    m: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut dx, mut dw, mut db) = (Vec::new(), vec![0.0; n], vec![0.0; n]);
    for r in 0..m {
        let xhat: Vec<f64> = (0..n).map(|c| (x[r * n + c] - mean[r]) * rstd[r]).collect();
        let g: Vec<f64> = (0..n).map(|c| w[c] * dy[r * n + c]).collect();
        let c1 = xhat.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>() / n as f64;
        let c2 = g.iter().sum::<f64>() / n as f64;
        dx.extend((0..n).map(|c| (g[c] - (xhat[c] * c1 + c2)) * rstd[r]));
        for c in 0..n {
            dw[c] += dy[r * n + c] * xhat[c];
            db[c] += dy[r * n + c];
        }
    }
    (dx, dw, db)
}

/// Float64 RMS norm of row-major `x` [m, n].
pub fn rms_norm_reference(x: &[f64], w: &[f64], eps: f64, m: usize, n: usize) -> Vec<f64> {
    let mut y = Vec::with_capacity(m * n);
    for r in 0..m {
        let row = &x[r * n..(r + 1) * n];
        let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
        let rs = 1.0 / (ms + eps).sqrt();
        y.extend((0..n).map(|c| row[c] * rs * w[c]));
    }
    y
}

/// Tolerances `(atol, rtol)` for normalized outputs (values of order 1, sums of up to a few
/// thousand f32 terms) of dtype `dtype`.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (4e-3, 4e-3),
        DType::BF16 => (3e-2, 2e-2),
        _ => (2e-5, 2e-5),
    }
}

/// Tolerances for `dw`, `db`: sums over `m` rows of terms of order 1, so the absolute error
/// grows with `sqrt(m)` (f32 accumulation) and with the output rounding.
pub fn param_grad_tolerance(dtype: DType, m: usize) -> (f64, f64) {
    let (atol, rtol) = tolerance(dtype);
    (atol * (m as f64).sqrt().max(1.0), rtol)
}

// --- library entries ---------------------------------------------------------------------

fn dims(shape: &[usize]) -> (usize, usize) {
    (
        shape.first().copied().unwrap_or(1),
        shape.get(1).copied().unwrap_or(1),
    )
}

const EPS: f32 = 1e-5;

/// One compared output: what the kernel produced, the float64 reference, `(atol, rtol)`.
type Part = (Vec<f64>, Vec<f64>, (f64, f64));

fn compare_all(name: &str, shape: String, dtype: DType, parts: &[Part]) -> CheckReport {
    // The report of the worst part, so one number says whether everything passed.
    parts
        .iter()
        .map(|(got, want, tol)| check::compare(name, shape.clone(), dtype, got, want, *tol))
        .max_by(|a, b| a.worst_ratio.total_cmp(&b.worst_ratio))
        .expect("at least one part")
}

fn layer_norm_check<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (m, n) = dims(shape);
    let x = dev.randn::<T>([m, n])?;
    let w = dev.randn::<T>([n])?;
    let b = dev.randn::<T>([n])?;
    let out = layer_norm(&x, &w, &b, EPS)?;
    let (y, mu, rs) = layer_norm_reference(
        &x.to_f64_vec()?,
        &w.to_f64_vec()?,
        &b.to_f64_vec()?,
        EPS as f64,
        m,
        n,
    );
    let tol = tolerance(T::DTYPE);
    let f32_tol = tolerance(DType::F32);
    Ok(compare_all(
        "layer_norm",
        format!("M={m} N={n}"),
        T::DTYPE,
        &[
            (out.y.to_f64_vec()?, y, tol),
            (out.mean.to_f64_vec()?, mu, f32_tol),
            (out.rstd.to_f64_vec()?, rs, f32_tol),
        ],
    ))
}

fn layer_norm_backward_check<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (m, n) = dims(shape);
    let x = dev.randn::<T>([m, n])?;
    let w = dev.randn::<T>([n])?;
    let b = dev.randn::<T>([n])?;
    let dy = dev.randn::<T>([m, n])?;
    let fwd = layer_norm(&x, &w, &b, EPS)?;
    let g = layer_norm_backward(&dy, &x, &w, &fwd.mean, &fwd.rstd)?;
    // The reference takes the kernel's own mean and rstd (f32) so that only the backward is
    // measured.
    let (dx, dw, db) = layer_norm_backward_reference(
        &dy.to_f64_vec()?,
        &x.to_f64_vec()?,
        &w.to_f64_vec()?,
        &fwd.mean.to_f64_vec()?,
        &fwd.rstd.to_f64_vec()?,
        m,
        n,
    );
    let pt = param_grad_tolerance(T::DTYPE, m);
    Ok(compare_all(
        "layer_norm_backward",
        format!("M={m} N={n}"),
        T::DTYPE,
        &[
            (g.dx.to_f64_vec()?, dx, tolerance(T::DTYPE)),
            (g.dw.to_f64_vec()?, dw, pt),
            (g.db.to_f64_vec()?, db, pt),
        ],
    ))
}

fn rms_norm_check<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (m, n) = dims(shape);
    let x = dev.randn::<T>([m, n])?;
    let w = dev.randn::<T>([n])?;
    let y = rms_norm(&x, &w, EPS)?;
    let want = rms_norm_reference(&x.to_f64_vec()?, &w.to_f64_vec()?, EPS as f64, m, n);
    Ok(check::compare(
        "rms_norm",
        format!("M={m} N={n}"),
        T::DTYPE,
        &y.to_f64_vec()?,
        &want,
        tolerance(T::DTYPE),
    ))
}

macro_rules! by_dtype {
    ($f:ident, $dtype:expr, $($arg:expr),*) => {
        match $dtype {
            DType::F16 => $f::<f16>($($arg),*),
            DType::BF16 => $f::<bf16>($($arg),*),
            _ => $f::<f32>($($arg),*),
        }
    };
}

fn ln_check(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    by_dtype!(layer_norm_check, dtype, dev, shape)
}
fn ln_bwd_check(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    by_dtype!(layer_norm_backward_check, dtype, dev, shape)
}
fn rms_check(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    by_dtype!(rms_norm_check, dtype, dev, shape)
}

/// `BLOCK_M`, `BLOCK`, `UNROLL` and whether the pipelined kernel runs, of a forward config.
fn forward_blocks(c: Config) -> (usize, usize, usize, bool) {
    let get = |k: &str| c.get(k).unwrap_or(0) as usize;
    let unroll = get(UNROLL).max(1);
    (
        get("BLOCK_M"),
        get("BLOCK"),
        unroll,
        get(PROGRAMS_PER_SM) > 0,
    )
}
fn ln_trace(shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    let (m, n) = dims(shape);
    let (block_m, block, unroll, pipelined) = forward_blocks(layer_norm_config(n));
    let whole = n == block && block_m > 0 && m.is_multiple_of(block_m);
    by_dtype!(
        ln_trace_typed,
        dtype,
        block_m,
        block,
        unroll,
        pipelined,
        whole
    )
}
fn ln_trace_typed<T: Element>(
    block_m: usize,
    block: usize,
    unroll: usize,
    pipelined: bool,
    whole: bool,
) -> std::result::Result<Kernel, TraceError> {
    match (block_m, pipelined) {
        (0, _) => layer_norm_fwd::trace::<T>(block, unroll),
        (_, true) => layer_norm_fwd_pipelined::trace::<T>(block_m, block),
        _ => layer_norm_fwd_rows::trace::<T>(block_m, block, whole),
    }
}
fn ln_bwd_trace(shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    let block = row_block(dims(shape).1);
    by_dtype!(ln_bwd_trace_typed, dtype, block)
}
/// The `dx` kernel, the first and heaviest of the three backward launches.
fn ln_bwd_trace_typed<T: Element>(block: usize) -> std::result::Result<Kernel, TraceError> {
    layer_norm_bwd_dx::trace::<T>(block)
}
fn rms_trace(shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    let (block_m, block, unroll, pipelined) = forward_blocks(rms_norm_config(dims(shape).1));
    by_dtype!(rms_trace_typed, dtype, block_m, block, unroll, pipelined)
}
fn rms_trace_typed<T: Element>(
    block_m: usize,
    block: usize,
    unroll: usize,
    pipelined: bool,
) -> std::result::Result<Kernel, TraceError> {
    match (block_m, pipelined) {
        (0, _) => rms_norm_fwd::trace::<T>(block, unroll),
        (_, true) => rms_norm_fwd_pipelined::trace::<T>(block_m, block),
        _ => rms_norm_fwd_rows::trace::<T>(block_m, block),
    }
}

/// Library entry: layer norm forward.
pub fn layer_norm_entry() -> LibraryKernel {
    LibraryKernel {
        name: "layer_norm",
        about: "layer norm forward over rows (y, mean, rstd), one program per row",
        dims: &["M", "N"],
        default_shape: &[37, 1031],
        dtypes: DTYPES,
        check: ln_check,
        trace: ln_trace,
    }
}

/// Library entry: layer norm backward.
pub fn layer_norm_backward_entry() -> LibraryKernel {
    LibraryKernel {
        name: "layer_norm_backward",
        about: "layer norm backward: dx per row, dw/db by deterministic two-stage column sums",
        dims: &["M", "N"],
        default_shape: &[37, 1031],
        dtypes: DTYPES,
        check: ln_bwd_check,
        trace: ln_bwd_trace,
    }
}

/// Library entry: RMS norm forward.
pub fn rms_norm_entry() -> LibraryKernel {
    LibraryKernel {
        name: "rms_norm",
        about: "RMS norm forward over rows, one program per row",
        dims: &["M", "N"],
        default_shape: &[37, 1031],
        dtypes: DTYPES,
        check: rms_check,
        trace: rms_trace,
    }
}
