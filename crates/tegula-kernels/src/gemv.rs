//! Matrix-vector product `y = A x` (seed chapter, section 4.5), with f32 accumulation.
//!
//! The seed's contract is `A` [M, N] row-major f16, `x` [N] f16, `y` [M] f32; this kernel also
//! takes bf16 (and f32) inputs and any strides for `A`, `x` and `y`, passed as arguments, so a
//! transposed or sliced view of `A` works without a copy.
//!
//! Each program owns `block_m` rows and walks across the columns in `block_n` chunks, masking
//! the ragged edges, accumulating products in an f32 tile that is reduced once at the end. With
//! `block_m = 1` this is the seed's program (one row per program); the host wrapper picks a
//! taller, narrower tile when `A` is column-major so that the loads run along the contiguous axis.

use crate::check;
use crate::{CheckReport, LibraryKernel};
use tegula::autotune::Config;
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

#[tegula::kernel]
pub fn gemv_kernel<T: Element>(
    a: Ptr<T>,
    x: Ptr<T>,
    y: Ptr<f32>,
    m: i32,
    n: i32,
    stride_am: i32,
    stride_an: i32,
    stride_x: i32,
    stride_y: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
) {
    let rows = program_id(0) * block_m + arange(0, block_m as i64);
    let row_mask = rows.lt(m);
    let offsets = arange(0, block_n as i64);
    let mut acc = zeros::<f32>([block_m, block_n]);
    for start in range(0, n, block_n) {
        let cols = start + offsets;
        let col_mask = cols.lt(n);
        let mask = row_mask.col() & col_mask.row();
        // A streams through once: evict it first, so that x (re-read by every program) stays.
        let av = load_with(
            a + rows.col() * stride_am + cols.row() * stride_an,
            LoadOptions {
                mask: Some(mask),
                evict: EvictionPolicy::First,
                ..Default::default()
            },
        );
        let xv = load_with(
            x + cols * stride_x,
            LoadOptions {
                mask: Some(col_mask),
                evict: EvictionPolicy::Last,
                ..Default::default()
            },
        );
        acc += av.to::<f32>() * xv.to::<f32>().row();
    }
    store(y + rows * stride_y, sum(acc, 1), row_mask);
}

const OP: &str = "gemv";
const DTYPES: &[DType] = &[DType::F16, DType::BF16, DType::F32];

/// Block sizes `(block_m, block_n)` for `A` with strides `(stride_m, stride_n)` and `n` columns
/// (see [`config`]).
pub fn block_sizes(stride_m: usize, stride_n: usize, n: usize) -> (usize, usize) {
    let c = config(stride_m, stride_n, n);
    let get = |k: &str| c.get(k).unwrap_or(1) as usize;
    (get("BLOCK_M"), get("BLOCK_N"))
}

/// Elements of `A` each thread loads per loop step on the row-major path: 32 f16 values are
/// four 16-byte loads in flight per thread, enough with a few programs per SM to cover DRAM
/// latency, and an f32 accumulator of 32 registers.
const ELEMS_PER_THREAD: usize = 32;

/// The launch config (`BLOCK_M`, `BLOCK_N`, warps) for `A` with strides `(stride_m, stride_n)`
/// and `n` columns.
///
/// Column-major `A` (unit row stride): 64 rows by 32 columns per step, so adjacent lanes along
/// the rows read adjacent elements. Otherwise: up to 4096 columns per step (the largest power
/// of two up to that dividing `n`, so no step is half masked), and as many rows per program as
/// make [`ELEMS_PER_THREAD`] elements per thread.
pub fn config(stride_m: usize, stride_n: usize, n: usize) -> Config {
    let warps = 4;
    let (bm, bn) = if stride_m == 1 && stride_n != 1 {
        (64, check::next_pow2(n, 16).min(32))
    } else {
        let full = check::next_pow2(n, 16).min(4096);
        let bn = [4096, 2048, 1024]
            .into_iter()
            .find(|&b| b <= full && n.is_multiple_of(b))
            .unwrap_or(full);
        let bm = (ELEMS_PER_THREAD * 32 * warps as usize / bn).max(1);
        (bm, bn)
    };
    Config::new(warps, 1)
        .with("BLOCK_M", bm as i64)
        .with("BLOCK_N", bn as i64)
}

/// `y = A x` into `y`.
///
/// Contract: `T` is f16, bf16 or f32; `a` is `[M, N]`, `x` is `[N]`, `y` is `[M]` f32, each
/// with any strides (transposed or sliced views are fine); all on one device; `y` shares no
/// memory with `a` or `x`. The result is accumulated in f32 in column order per lane, then
/// reduced across the block.
pub fn gemv_into<T: Element>(a: &Tensor<T>, x: &Tensor<T>, y: &Tensor<f32>) -> Result<()> {
    check::expect_rank(OP, "a", a, 2)?;
    let c = config(a.strides()[0], a.strides()[1], a.shape()[1]);
    gemv_into_with(a, x, y, &c)
}

/// [`gemv_into`] with an explicit config: constexprs `BLOCK_M` and `BLOCK_N` (powers of two;
/// `BLOCK_N` at least 16) and the warps.
pub fn gemv_into_with<T: Element>(
    a: &Tensor<T>,
    x: &Tensor<T>,
    y: &Tensor<f32>,
    config: &Config,
) -> Result<()> {
    check::expect_dtype_in::<T>(OP, "a", DTYPES)?;
    check::expect_rank(OP, "a", a, 2)?;
    let (m, n) = (a.shape()[0], a.shape()[1]);
    check::expect_shape(OP, "x", x, &[n])?;
    check::expect_shape(OP, "y", y, &[m])?;
    check::expect_same_device(OP, a, x)?;
    check::expect_same_device(OP, a, y)?;
    check::expect_no_alias(OP, ("y", y), ("a", a))?;
    check::expect_no_alias(OP, ("y", y), ("x", x))?;
    check::expect_i32_extent(OP, "a", a)?;
    check::expect_i32_extent(OP, "x", x)?;
    check::expect_i32_extent(OP, "y", y)?;
    let (block_m, block_n) = (config.usize("BLOCK_M")?, config.usize("BLOCK_N")?);
    if !block_m.is_power_of_two() || !block_n.is_power_of_two() || block_n < 16 {
        return Err(tegula::Error::Invalid {
            op: OP.into(),
            message: format!("config {config}: block sizes must be powers of two, BLOCK_N >= 16"),
        });
    }
    if m == 0 {
        return Ok(());
    }
    let (mi, ni) = (check::as_i32(OP, "M", m)?, check::as_i32(OP, "N", n)?);
    let (sam, san) = (a.strides()[0], a.strides()[1]);
    gemv_kernel::launch_with::<T>(
        a.device(),
        m.div_ceil(block_m),
        config.launch_config(),
        a,
        x,
        y,
        mi,
        ni,
        sam as i32,
        san as i32,
        x.strides()[0] as i32,
        y.strides()[0] as i32,
        block_m,
        block_n,
    )
}

/// `A x` in a new f32 vector; see [`gemv_into`].
pub fn gemv<T: Element>(a: &Tensor<T>, x: &Tensor<T>) -> Result<Tensor<f32>> {
    check::expect_rank(OP, "a", a, 2)?;
    let y = a.device().empty::<f32>([a.shape()[0]])?;
    gemv_into(a, x, &y)?;
    Ok(y)
}

/// Float64 `A x` for row-major `a` [m, n].
pub fn reference(a: &[f64], x: &[f64], m: usize, n: usize) -> Vec<f64> {
    (0..m)
        .map(|r| (0..n).map(|c| a[r * n + c] * x[c]).sum())
        .collect()
}

/// Tolerances `(atol, rtol)` against the float64 product. Products of f16/bf16 inputs are exact
/// in f32, so only the f32 summation errs: the seed's `atol 1e-3, rtol 1e-4` hold up to a few
/// thousand columns of unit-normal data. f32 inputs round each product too.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (2e-3, 1e-4),
        _ => (1e-3, 1e-4),
    }
}

fn dims(shape: &[usize]) -> (usize, usize) {
    (
        shape.first().copied().unwrap_or(1),
        shape.get(1).copied().unwrap_or(1),
    )
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (m, n) = dims(shape);
    let a = dev.randn::<T>([m, n])?;
    let x = dev.randn::<T>([n])?;
    let y = gemv(&a, &x)?;
    let want = reference(&a.to_f64_vec()?, &x.to_f64_vec()?, m, n);
    Ok(check::compare(
        OP,
        format!("M={m} N={n}"),
        T::DTYPE,
        &y.to_f64_vec()?,
        &want,
        tolerance(T::DTYPE),
    ))
}

fn check_entry(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::BF16 => check_typed::<bf16>(dev, shape),
        DType::F32 => check_typed::<f32>(dev, shape),
        _ => check_typed::<f16>(dev, shape),
    }
}

fn trace_entry(shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    let n = dims(shape).1;
    let (bm, bn) = block_sizes(n, 1, n); // the row-major layout `check` uses
    match dtype {
        DType::BF16 => gemv_kernel::trace::<bf16>(bm, bn),
        DType::F32 => gemv_kernel::trace::<f32>(bm, bn),
        _ => gemv_kernel::trace::<f16>(bm, bn),
    }
}

/// The library entry.
pub fn entry() -> LibraryKernel {
    LibraryKernel {
        name: "gemv",
        about: "y = A x with f32 accumulation (the seed's GEMV), strided A",
        dims: &["M", "N"],
        default_shape: &[37, 1031],
        dtypes: &[DType::F16, DType::BF16, DType::F32],
        check: check_entry,
        trace: trace_entry,
    }
}
