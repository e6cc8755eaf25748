//! Fused row softmax (Triton tutorial 02) for any row length.
//!
//! One program per row. A row that fits one block (`next_pow2(n) <= max_block`) is loaded once
//! as a single masked tile; a longer row takes two passes over blocks: an online pass keeping a
//! running maximum and a rescaled running sum, then a pass that writes `exp(x - max) / sum`.
//! Inputs are f16, bf16 or f32; the math is f32 and the output has the input dtype.
//! Elements equal to -inf get probability 0; a row that is entirely -inf gives NaN (as in
//! PyTorch), on both paths.

use crate::check;
use crate::{CheckReport, LibraryKernel};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

/// The largest row held in one tile; longer rows loop over blocks of this size. 4096 f32 values
/// per program are 32 registers per thread at 4 warps, which still leaves room for occupancy.
pub const MAX_BLOCK: usize = 4096;

/// The whole row in one masked tile: read once, write once.
#[tegula::kernel]
pub fn softmax_kernel<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    n_cols: i32,
    #[constexpr] block: usize,
) {
    let row = program_id(0);
    let cols = arange(0, block as i64);
    let mask = cols.lt(n_cols);
    // -inf in the padding lanes: they add exp(-inf) = 0 to the sum.
    let v = load(x + row * x_row_stride + cols, mask, f32::NEG_INFINITY).to::<f32>();
    let shifted = v - max(v, 0);
    let numerator = exp(shifted);
    let denominator = sum(numerator, 0);
    store(y + row * y_row_stride + cols, numerator / denominator, mask);
}

/// A row longer than one block: online max and sum over blocks, then a normalizing pass.
#[tegula::kernel]
pub fn softmax_online_kernel<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    x_row_stride: i32,
    y_row_stride: i32,
    n_cols: i32,
    #[constexpr] block: usize,
) {
    let row = program_id(0);
    let offsets = arange(0, block as i64);
    let x_row = x + row * x_row_stride;
    let y_row = y + row * y_row_stride;
    let mut m = full::<f32>([], f32::NEG_INFINITY);
    let mut l = zeros::<f32>([]);
    for start in range(0, n_cols, block) {
        let cols = start + offsets;
        let v = load(x_row + cols, cols.lt(n_cols), f32::NEG_INFINITY).to::<f32>();
        let m_new = maximum(m, max(v, 0));
        // While every element so far is -inf (a masked prefix), shift by 0 instead of -inf so
        // that exp(-inf - -inf) never makes a NaN: l stays 0 until a finite element arrives.
        let shift = select(m_new.eq(f32::NEG_INFINITY), 0.0, m_new);
        l = l * exp(m - shift) + sum(exp(v - shift), 0);
        m = m_new;
    }
    let inv_l = 1.0 / l;
    for start in range(0, n_cols, block) {
        let cols = start + offsets;
        let mask = cols.lt(n_cols);
        let v = load(x_row + cols, mask, f32::NEG_INFINITY).to::<f32>();
        store(y_row + cols, exp(v - m) * inv_l, mask);
    }
}

const OP: &str = "softmax";
const DTYPES: &[DType] = &[DType::F16, DType::BF16, DType::F32];

/// Softmax of each row of `x` [rows, cols] into `y` [rows, cols].
///
/// Contract: `T` is f16, bf16 or f32; both tensors are 2-D of one shape with unit column
/// stride (any row stride, so row slices of wider buffers work), on one device, and `y` shares
/// no memory with `x`.
pub fn softmax_into<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<()> {
    softmax_into_blocked(x, y, MAX_BLOCK)
}

/// [`softmax_into`] with an explicit largest single-tile row (`max_block`, a power of two of
/// at least 16): rows longer than that loop over blocks of `max_block`.
pub fn softmax_into_blocked<T: Element>(
    x: &Tensor<T>,
    y: &Tensor<T>,
    max_block: usize,
) -> Result<()> {
    check::expect_dtype_in::<T>(OP, "x", DTYPES)?;
    check::expect_rank(OP, "x", x, 2)?;
    check::expect_shape(OP, "y", y, x.shape())?;
    check::expect_unit_last_stride(OP, "x", x)?;
    check::expect_unit_last_stride(OP, "y", y)?;
    check::expect_same_device(OP, x, y)?;
    check::expect_no_alias(OP, ("y", y), ("x", x))?;
    check::expect_i32_extent(OP, "x", x)?;
    check::expect_i32_extent(OP, "y", y)?;
    if !max_block.is_power_of_two() || max_block < 16 {
        return Err(tegula::Error::Invalid {
            op: OP.into(),
            message: format!("max_block must be a power of two >= 16, got {max_block}"),
        });
    }
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let n = check::as_i32(OP, "cols", cols)?;
    let (xs, ys) = (row_stride(x)?, row_stride(y)?);
    let block = check::next_pow2(cols, 16);
    if block <= max_block {
        softmax_kernel::launch::<T>(x.device(), rows, x, y, xs, ys, n, block)
    } else {
        softmax_online_kernel::launch::<T>(x.device(), rows, x, y, xs, ys, n, max_block)
    }
}

/// The softmax of each row of `x` in a new contiguous tensor (see [`softmax_into`]).
pub fn softmax<T: Element>(x: &Tensor<T>) -> Result<Tensor<T>> {
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
    let block = check::next_pow2(dims(shape).1, 16);
    if block <= MAX_BLOCK {
        softmax_kernel::trace::<T>(block)
    } else {
        softmax_online_kernel::trace::<T>(MAX_BLOCK)
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
        about: "row softmax, one program per row; rows over 4096 loop with an online max/sum",
        dims: &["M", "N"],
        default_shape: &[37, 1031],
        dtypes: DTYPES,
        check: check_entry,
        trace: trace_entry,
    }
}
