//! Fused row softmax (Triton tutorial 02) for any row length.
//!
//! A row that fits one block (`next_pow2(n) <= max_block`) is loaded once, in a masked tile of
//! one or more rows (short rows share a program); a longer row takes two passes over blocks:
//! an online pass keeping a running maximum and a rescaled running sum per lane, then a pass that
//! writes `exp(x - max) / sum`.
//! Inputs are f16, bf16 or f32; the math is f32 and the output has the input dtype.
//! Elements equal to -inf get probability 0; a row that is entirely -inf gives NaN (as in
//! PyTorch), on both paths.

use crate::check;
use crate::norm::{self, PROGRAMS_PER_SM, UNROLL};
use crate::{CheckReport, LibraryKernel};
use tegula::autotune::Config;
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

/// The largest row held in one tile by default. Longer rows loop over blocks of
/// [`ONLINE_BLOCK`] columns: past this length the online path, with per-lane statistics and
/// four blocks a trip, streams faster than one tile of the row (which takes 16 warps and
/// about 124 registers a thread at 32768 columns; docs/performance.md, "Softmax").
pub const MAX_BLOCK: usize = 16384;

/// The online path's block of columns (at most the single-tile limit): 8 values a thread at
/// 8 warps, with the norms' looping kernels' blocks a trip (`norm::loop_unroll_for`: four
/// 16-byte loads of bf16 in flight a thread, 64 registers, 4 programs a SM at 32768 columns).
pub const ONLINE_BLOCK: usize = 2048;

/// `block_m` whole rows in one masked tile: read once, write once.
#[tegula::kernel]
pub fn softmax_kernel<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    n_rows: i32,
    n_cols: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block: usize,
) {
    let rows = program_id(0) * block_m + arange(0, block_m as i64);
    let cols = arange(0, block as i64);
    let mask = rows.lt(n_rows).col() & cols.lt(n_cols).row();
    // -inf in the padding lanes: they add exp(-inf) = 0 to the sum.
    let v = load(
        x + rows.col() * x_row_stride + cols.row(),
        mask,
        f32::NEG_INFINITY,
    )
    .to::<f32>();
    let shifted = v - max(v, 1).col();
    let numerator = exp(shifted);
    // One division per row, a multiplication per element.
    let inv_denominator: Tile = 1.0 / sum(numerator, 1);
    store(
        y + rows.col() * y_row_stride + cols.row(),
        numerator * inv_denominator.col(),
        mask,
    );
}

/// [`softmax_kernel`] over `tiles_per_program` consecutive tiles of `block_m` rows: each trip
/// issues the next tile's load before the current tile's reductions, so one program keeps a
/// tile's bytes in flight while it reduces and stores (a register double buffer; the
/// prefetched tile stays in the input dtype). x streams through once (evict first).
#[tegula::kernel]
pub fn softmax_pipelined_kernel<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    n_rows: i32,
    n_cols: i32,
    tiles_per_program: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block: usize,
) {
    let (first_row, row_end) = norm::program_rows(tiles_per_program, block_m, n_rows);
    let row_offsets = arange(0, block_m as i64);
    let cols = arange(0, block as i64);
    let col_mask = cols.lt(n_cols);
    // -inf in the padding lanes: they add exp(-inf) = 0 to the sum.
    let load_rows = |rows: Tile| {
        let other = Some(Operand::Float(f64::NEG_INFINITY));
        norm::load_row_tile(x, x_row_stride, rows, row_end, cols, col_mask, other)
    };
    let mut next = load_rows(first_row + row_offsets);
    for start in range(first_row, row_end, block_m) {
        let rows = start + row_offsets;
        let v = next.to::<f32>();
        next = load_rows(rows + block_m as i64);
        let numerator = exp(v - max(v, 1).col());
        let inv_denominator: Tile = 1.0 / sum(numerator, 1);
        store(
            y + rows.col() * y_row_stride + cols.row(),
            numerator * inv_denominator.col(),
            rows.lt(row_end).col() & col_mask.row(),
        );
    }
}

/// A row longer than one block: an online pass keeping a running maximum and a rescaled
/// running sum per lane (a lane of the block tile: no reduction across the program until the
/// row ends), then a normalizing pass. Each trip loads `unroll` blocks of `block` columns
/// before it uses the first (bytes in flight without larger accumulators) and rescales the
/// running sum once for all of them.
#[tegula::kernel]
pub fn softmax_online_kernel<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    n_cols: i32,
    #[constexpr] block: usize,
    #[constexpr] unroll: usize,
) {
    let row = program_id(0);
    let offsets = arange(0, block as i64);
    let x_row = x + row * x_row_stride;
    let y_row = y + row * y_row_stride;
    let mut m = full::<f32>([block], f32::NEG_INFINITY);
    let mut l = zeros::<f32>([block]);
    for start in range(0, n_cols, block * unroll) {
        let vs: Vec<Tile> = (0..unroll)
            .map(|k| {
                let cols = start + (k * block) as i64 + offsets;
                // Kept in L2 for the normalizing pass, which reads the row again.
                load_x(x_row + cols, cols.lt(n_cols), EvictionPolicy::Last).to::<f32>()
            })
            .collect();
        let m_new = vs.iter().fold(m, |acc, &v| maximum(acc, v));
        // While every element of a lane so far is -inf (masked or -inf input), shift by 0
        // instead of -inf so that exp(-inf - -inf) never makes a NaN: l stays 0 there.
        let shift = select(m_new.eq(f32::NEG_INFINITY), 0.0, m_new);
        l = vs
            .into_iter()
            .fold(l * exp(m - shift), |acc, v| acc + exp(v - shift));
        m = m_new;
    }
    // One reduction round for the row: its maximum, then every lane's sum rescaled to it.
    let row_max = max(m, 0);
    let inv_l = 1.0 / sum(l * exp(m - row_max), 0);
    for start in range(0, n_cols, block * unroll) {
        let cols: Vec<Tile> = (0..unroll)
            .map(|k| start + (k * block) as i64 + offsets)
            .collect();
        let vs: Vec<Tile> = cols
            .iter()
            .map(|&c| load_x(x_row + c, c.lt(n_cols), EvictionPolicy::First))
            .collect();
        for (v, c) in vs.into_iter().zip(cols) {
            let out = exp(v.to::<f32>() - row_max) * inv_l;
            norm::store_streamed(y_row + c, out, c.lt(n_cols));
        }
    }
}

/// A masked load of x with -inf in the masked lanes (they add exp(-inf) = 0 to the sums).
fn load_x(ptr: Tile, mask: Tile, evict: EvictionPolicy) -> Tile {
    load_with(
        ptr,
        LoadOptions {
            mask: Some(mask),
            other: Some(Operand::Float(f64::NEG_INFINITY)),
            evict,
            ..Default::default()
        },
    )
}

const OP: &str = "softmax";
const DTYPES: &[DType] = &[DType::F16, DType::BF16, DType::F32];

/// Softmax of each row of `x` [rows, cols] into `y` [rows, cols].
///
/// Contract: `T` is f16, bf16 or f32; both tensors are 2-D of one shape with unit column
/// stride (any row stride, so row slices of wider buffers work), on one device, and `y` shares
/// no memory with `x`.
pub fn softmax_into<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<()> {
    check::expect_rank(OP, "x", x, 2)?;
    softmax_into_with(x, y, &config(x.shape()[1], MAX_BLOCK))
}

/// [`softmax_into`] with an explicit largest single-tile row (`max_block`, a power of two of
/// at least 16): rows longer than that loop over blocks of up to [`ONLINE_BLOCK`] columns.
pub fn softmax_into_blocked<T: Element>(
    x: &Tensor<T>,
    y: &Tensor<T>,
    max_block: usize,
) -> Result<()> {
    if !max_block.is_power_of_two() || max_block < 16 {
        return Err(tegula::Error::Invalid {
            op: OP.into(),
            message: format!("max_block must be a power of two >= 16, got {max_block}"),
        });
    }
    let cols = x.shape().get(1).copied().unwrap_or(0);
    softmax_into_with(x, y, &config(cols, max_block))
}

/// Elements of a tile per thread on the single-tile path: 32 values are four 16-byte loads of
/// bf16 per thread. Fewer a thread means more warps a row, whose reductions then cost more
/// (docs/performance.md, "Softmax").
const ELEMS_PER_THREAD: usize = 32;

/// The launch config for rows of `cols` elements with single tiles up to `max_block`:
/// `BLOCK` (the tile's columns; the loop's block on the online path), `BLOCK_M` (rows per
/// program on the single-tile path, several for short rows) and the warps.
pub fn config(cols: usize, max_block: usize) -> Config {
    let block = check::next_pow2(cols, 16);
    if block > max_block {
        let online = max_block.min(ONLINE_BLOCK);
        let warps = (online / (32 * 8)).clamp(4, 8) as u32;
        return Config::new(warps, 1)
            .with("BLOCK", online as i64)
            .with("BLOCK_M", 0)
            .with(UNROLL, norm::loop_unroll_for(cols) as i64);
    }
    let block_m = (2048 / block).clamp(1, 16);
    // At most 16 warps: 1024 threads would cap a thread at 64 registers.
    let warps = (block * block_m / (32 * ELEMS_PER_THREAD)).clamp(4, 16) as u32;
    // One tile without the prefetch: the pipelined kernel (a persistent grid prefetching the
    // next rows) lost to it at every row length; it stays available through
    // `PROGRAMS_PER_SM`.
    Config::new(warps, 1)
        .with("BLOCK", block as i64)
        .with("BLOCK_M", block_m as i64)
        .with(PROGRAMS_PER_SM, 0)
}

/// [`softmax_into`] with an explicit config (see [`config`]): `BLOCK_M` 0 takes the online
/// path over blocks of `BLOCK` columns; otherwise `BLOCK` must cover the row.
pub fn softmax_into_with<T: Element>(x: &Tensor<T>, y: &Tensor<T>, config: &Config) -> Result<()> {
    check_input(x)?;
    check::expect_shape(OP, "y", y, x.shape())?;
    check::expect_unit_last_stride(OP, "y", y)?;
    check::expect_same_device(OP, ("x", x), ("y", y))?;
    check::expect_no_alias(OP, ("y", y), ("x", x))?;
    check::expect_i32_extent(OP, "y", y)?;
    let (block, block_m) = (config.usize("BLOCK")?, config.usize("BLOCK_M")?);
    let unroll = norm::loop_unroll(OP, config)?;
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    let bad = !block.is_power_of_two()
        || block < 16
        || (block_m > 0 && (!block_m.is_power_of_two() || block < cols));
    if bad {
        return Err(tegula::Error::Invalid {
            op: OP.into(),
            message: format!("config {config} does not fit rows of {cols}"),
        });
    }
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let (m, n) = (
        check::as_i32(OP, "rows", rows)?,
        check::as_i32(OP, "cols", cols)?,
    );
    let (xs, ys) = (row_stride(x)?, row_stride(y)?);
    let dev = x.device();
    let lc = config.launch_config();
    let per_sm = config.get(PROGRAMS_PER_SM).unwrap_or(0);
    if block_m > 0 && per_sm > 0 {
        let (grid, tiles) = norm::persistent_grid(dev, rows.div_ceil(block_m), per_sm as usize);
        let tiles = check::as_i32(OP, "tiles per program", tiles)?;
        softmax_pipelined_kernel::launch_with::<T>(
            dev, grid, lc, x, y, xs, ys, m, n, tiles, block_m, block,
        )
    } else if block_m > 0 {
        let grid = rows.div_ceil(block_m);
        softmax_kernel::launch_with::<T>(dev, grid, lc, x, y, xs, ys, m, n, block_m, block)
    } else {
        softmax_online_kernel::launch_with::<T>(dev, rows, lc, x, y, xs, ys, n, block, unroll)
    }
}

/// The contract on the input.
fn check_input<T: Element>(x: &Tensor<T>) -> Result<()> {
    check::expect_dtype_in::<T>(OP, "x", DTYPES)?;
    check::expect_rank(OP, "x", x, 2)?;
    check::expect_unit_last_stride(OP, "x", x)?;
    check::expect_i32_extent(OP, "x", x)?;
    check::as_i32(OP, "rows", x.shape()[0])?;
    check::as_i32(OP, "cols", x.shape()[1])?;
    Ok(())
}

/// The softmax of each row of `x` in a new contiguous tensor (see [`softmax_into`]). The
/// input is checked before the output is allocated.
pub fn softmax<T: Element>(x: &Tensor<T>) -> Result<Tensor<T>> {
    check_input(x)?;
    check::expect_i32_output(OP, "y", x.shape())?;
    let y = x.device().empty::<T>(x.shape())?;
    softmax_into(x, &y)?;
    Ok(y)
}

fn row_stride<T: Element>(t: &Tensor<T>) -> Result<i32> {
    check::as_i32(OP, "row stride", t.strides()[0])
}

/// Float64 softmax of each row of the row-major `x` [rows, cols].
pub fn reference(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
        out.extend(row.iter().map(|v| (v - m).exp() / z));
    }
    out
}

/// Tolerances for softmax outputs of dtype `dtype`: values lie in (0, 1], so the error is
/// relative, from f32 exp and summation and from rounding the output to the dtype.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (1e-5, 2e-3),
        DType::BF16 => (1e-4, 1.6e-2),
        _ => (1e-7, 2e-5),
    }
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (rows, cols) = dims(shape);
    let x = dev.randn::<T>([rows, cols])?;
    let y = softmax(&x)?;
    let want = reference(&x.to_f64_vec()?, rows, cols);
    Ok(check::compare(
        OP,
        format!("M={rows} N={cols}"),
        T::DTYPE,
        &y.to_f64_vec()?,
        &want,
        tolerance(T::DTYPE),
    ))
}

fn dims(shape: &[usize]) -> (usize, usize) {
    (
        shape.first().copied().unwrap_or(1),
        shape.get(1).copied().unwrap_or(1),
    )
}

fn check_entry(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::F16 => check_typed::<f16>(dev, shape),
        DType::BF16 => check_typed::<bf16>(dev, shape),
        _ => check_typed::<f32>(dev, shape),
    }
}

fn trace_typed<T: Element>(shape: &[usize]) -> std::result::Result<Kernel, TraceError> {
    let c = config(dims(shape).1, MAX_BLOCK);
    let get = |k: &str| c.get(k).unwrap_or(0) as usize;
    match (get("BLOCK_M"), get(PROGRAMS_PER_SM)) {
        (0, _) => softmax_online_kernel::trace::<T>(get("BLOCK"), get(UNROLL).max(1)),
        (block_m, 0) => softmax_kernel::trace::<T>(block_m, get("BLOCK")),
        (block_m, _) => softmax_pipelined_kernel::trace::<T>(block_m, get("BLOCK")),
    }
}

fn trace_entry(shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    match dtype {
        DType::F16 => trace_typed::<f16>(shape),
        DType::BF16 => trace_typed::<bf16>(shape),
        _ => trace_typed::<f32>(shape),
    }
}

/// The library entry.
pub fn entry() -> LibraryKernel {
    LibraryKernel {
        name: "softmax",
        about: "row softmax, whole rows in registers; rows over 16384 loop with an online max/sum",
        dims: &["M", "N"],
        default_shape: &[37, 1031],
        dtypes: DTYPES,
        check: check_entry,
        trace: trace_entry,
    }
}
