//! Matrix-vector product `y = A x`, with f32 accumulation.
//!
//! The reference contract is `A` `[M, N]` row-major f16, `x` `[N]` f16, `y` `[M]` f32 (the
//! classic Triton GEMV, one row per program); this kernel also takes bf16 (and f32) inputs and any strides for `A`, `x` and `y`, passed as arguments,
//! so a transposed or sliced view of `A` works without a copy. Each program owns `block_m` rows
//! and walks across the columns in `block_n` chunks, masking the ragged edges, accumulating
//! products in an f32 tile that is reduced once at the end. With `block_m = 1` this is the
//! classic program (one row per program); the host wrapper picks a taller, narrower tile when
//! `A` is column-major so that the loads run along the contiguous axis.

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
    #[constexpr] unroll: usize,
) {
    let row_offsets = arange(0, block_m as i64);
    let offsets = arange(0, block_n as i64);
    // Program p owns row blocks p, p + P, p + 2P, .. (P programs). The host launches either one
    // program per row block (one trip) or a persistent grid of a few programs per SM.
    for row_start in range(program_id(0) * block_m, m, num_programs(0) * block_m) {
        let rows = row_start + row_offsets;
        let row_mask = rows.lt(m);
        let mut acc = zeros::<f32>([block_m, block_n]);
        // Each step covers `unroll` chunks of `block_n` columns. Every load of a step is issued
        // before the first multiply, so a thread has `unroll` loads of A per row in flight.
        for start in range(0, n, block_n * unroll) {
            let mut chunks = Vec::new();
            for u in static_range(0, unroll, 1) {
                let cols = start + (u * block_n) as i64 + offsets;
                let col_mask = cols.lt(n);
                let mask = row_mask.col() & col_mask.row();
                // A streams through once: evict it first, so that x (re-read by every program)
                // stays.
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
                chunks.push((av, xv));
            }
            for (av, xv) in chunks {
                acc += av.to::<f32>() * xv.to::<f32>().row();
            }
        }
        store(y + rows * stride_y, sum(acc, 1), row_mask);
    }
}

const OP: &str = "gemv";
const DTYPES: &[DType] = &[DType::F16, DType::BF16, DType::F32];

/// Bytes of one vector load of A: the widest load the lowering emits.
const LOAD_BYTES: usize = 16;

/// Loads of A in flight per thread per loop step on the one-warp-a-row path: eight 16-byte
/// loads (4 KB a warp). Eight streamed faster than four for many short rows (14336 x 4096)
/// and the same elsewhere (docs/performance.md, "GEMV").
const LOADS_PER_STEP: usize = 8;

/// Warps per program on the row-major path.
const WARPS: u32 = 4;

/// Columns a step of the wide row-major config (16-bit elements, rows a multiple of it).
const WIDE_COLS: usize = 4096;

/// The wide config serves at most this many rows, or rows of at least [`WIDE_MIN_COLS`].
const WIDE_MAX_ROWS: usize = 4096;
const WIDE_MIN_COLS: usize = 16384;

/// The SM count the interpreter pretends to have for `PROGRAMS_PER_SM` (small, so that the
/// persistent loop takes several trips in tests).
const CPU_SMS: usize = 4;

/// The launch config for `A` of `m` rows with strides `(stride_m, stride_n)`, `n` columns and
/// elements of `elem_bytes` bytes. Knobs: `BLOCK_M` rows per program, `BLOCK_N` columns per
/// load, `UNROLL` loads of `BLOCK_N` columns per row per loop step (default 1),
/// `PROGRAMS_PER_SM` (0, the default: one program per `BLOCK_M` rows; else a persistent grid
/// of about that many programs per SM, each looping over row blocks), and the warps.
///
/// Column-major `A` (unit row stride): 64 rows by 32 columns per step, so adjacent lanes along
/// the rows read adjacent elements.
///
/// Row-major `A` of 16-bit elements whose rows are a multiple of 4096 columns, with few rows
/// (`WIDE_MAX_ROWS`) or long ones (`WIDE_MIN_COLS`): one row a program of 4 warps, 4096
/// columns a step (a cross-warp reduction a row), which runs a little ahead of one warp a row
/// at those shapes. With more rows of fewer columns, one warp a row streams faster, above all
/// back to back (docs/performance.md, "GEMV"). Other row-major `A`: one warp per row.
/// `BLOCK_N` is what one warp covers with
/// one 16-byte load per lane (256 columns of f16/bf16, 128 of f32), so the blocked layout puts
/// the warps along the rows and each row is reduced with shuffles inside its warp: no shared
/// memory, no barrier. `BLOCK_M` is the number of warps, and `UNROLL` gives each thread
/// `LOADS_PER_STEP` loads in flight (fewer when the row is shorter).
pub fn config(m: usize, stride_m: usize, stride_n: usize, n: usize, elem_bytes: usize) -> Config {
    if stride_m == 1 && stride_n != 1 {
        return Config::new(4, 1)
            .with("BLOCK_M", 64)
            .with("BLOCK_N", check::next_pow2(n, 16).min(32) as i64);
    }
    let wide = m <= WIDE_MAX_ROWS || n >= WIDE_MIN_COLS;
    if elem_bytes == 2 && n.is_multiple_of(WIDE_COLS) && wide {
        return Config::new(WARPS, 1)
            .with("BLOCK_M", 1)
            .with("BLOCK_N", WIDE_COLS as i64);
    }
    let warp_cols = 32 * LOAD_BYTES / elem_bytes.max(1);
    let bn = check::next_pow2(n, 16).min(warp_cols);
    let unroll = n.div_ceil(bn).clamp(1, LOADS_PER_STEP);
    Config::new(WARPS, 1)
        .with("BLOCK_M", WARPS as i64)
        .with("BLOCK_N", bn as i64)
        .with("UNROLL", unroll as i64)
}

/// `y = A x` into `y`.
///
/// Contract: `T` is f16, bf16 or f32; `a` is `[M, N]`, `x` is `[N]`, `y` is `[M]` f32, each
/// with any strides (transposed or sliced views are fine); all on one device; `y` shares no
/// memory with `a` or `x`. The result is accumulated in f32 in column order per lane, then
/// reduced across the block.
pub fn gemv_into<T: Element>(a: &Tensor<T>, x: &Tensor<T>, y: &Tensor<f32>) -> Result<()> {
    check::expect_rank(OP, "a", a, 2)?;
    let c = config(
        a.shape()[0],
        a.strides()[0],
        a.strides()[1],
        a.shape()[1],
        T::DTYPE.size_bytes(),
    );
    gemv_into_with(a, x, y, &c)
}

/// [`gemv_into`] with an explicit config (see [`config`]): `BLOCK_M` and `BLOCK_N` powers of
/// two, `BLOCK_N` at least 16; optional `UNROLL` (at least 1) and `PROGRAMS_PER_SM`.
pub fn gemv_into_with<T: Element>(
    a: &Tensor<T>,
    x: &Tensor<T>,
    y: &Tensor<f32>,
    config: &Config,
) -> Result<()> {
    check_inputs(a, x)?;
    let (m, n) = (a.shape()[0], a.shape()[1]);
    check::expect_shape(OP, "y", y, &[m])?;
    check::expect_same_device(OP, ("a", a), ("y", y))?;
    check::expect_no_alias(OP, ("y", y), ("a", a))?;
    check::expect_no_alias(OP, ("y", y), ("x", x))?;
    check::expect_i32_extent(OP, "y", y)?;
    let (block_m, block_n) = (config.usize("BLOCK_M")?, config.usize("BLOCK_N")?);
    let unroll = config.get("UNROLL").unwrap_or(1);
    let programs_per_sm = config.get("PROGRAMS_PER_SM").unwrap_or(0);
    if !block_m.is_power_of_two()
        || !block_n.is_power_of_two()
        || block_n < 16
        || unroll < 1
        || programs_per_sm < 0
    {
        return Err(tegula::Error::Invalid {
            op: OP.into(),
            message: format!(
                "config {config}: block sizes must be powers of two, BLOCK_N >= 16, \
                 UNROLL >= 1, PROGRAMS_PER_SM >= 0"
            ),
        });
    }
    if m == 0 {
        return Ok(());
    }
    let (mi, ni) = (check::as_i32(OP, "M", m)?, check::as_i32(OP, "N", n)?);
    let (sam, san) = (a.strides()[0], a.strides()[1]);
    let row_blocks = m.div_ceil(block_m);
    let programs = match programs_per_sm as usize {
        0 => row_blocks,
        per_sm => {
            let sms = check::sm_count(a.device(), CPU_SMS);
            check::persistent_grid(row_blocks, sms * per_sm).0
        }
    };
    gemv_kernel::launch_with::<T>(
        a.device(),
        programs,
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
        unroll as usize,
    )
}

/// The contract on the inputs.
fn check_inputs<T: Element>(a: &Tensor<T>, x: &Tensor<T>) -> Result<()> {
    check::expect_dtype_in::<T>(OP, "a", DTYPES)?;
    check::expect_rank(OP, "a", a, 2)?;
    let (m, n) = (a.shape()[0], a.shape()[1]);
    check::expect_shape(OP, "x", x, &[n])?;
    check::expect_same_device(OP, ("a", a), ("x", x))?;
    check::expect_i32_extent(OP, "a", a)?;
    check::expect_i32_extent(OP, "x", x)?;
    check::as_i32(OP, "M", m)?;
    check::as_i32(OP, "N", n)?;
    Ok(())
}

/// `A x` in a new f32 vector; see [`gemv_into`]. The inputs are checked before the output is
/// allocated.
pub fn gemv<T: Element>(a: &Tensor<T>, x: &Tensor<T>) -> Result<Tensor<f32>> {
    check_inputs(a, x)?;
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
/// in f32, so only the f32 summation errs: the reference contract's `atol 1e-3, rtol 1e-4`
/// hold up to a few thousand columns of unit-normal data. f32 inputs round each product too.
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
    let (m, n) = dims(shape);
    // The row-major layout `check` uses.
    let c = config(m, n, 1, n, dtype.size_bytes());
    let get = |k: &str| c.get(k).unwrap_or(1) as usize;
    let (bm, bn, unroll) = (get("BLOCK_M"), get("BLOCK_N"), get("UNROLL"));
    match dtype {
        DType::BF16 => gemv_kernel::trace::<bf16>(bm, bn, unroll),
        DType::F32 => gemv_kernel::trace::<f32>(bm, bn, unroll),
        _ => gemv_kernel::trace::<f16>(bm, bn, unroll),
    }
}

/// The library entry.
pub fn entry() -> LibraryKernel {
    LibraryKernel {
        name: "gemv",
        about: "y = A x with f32 accumulation, f16/bf16/f32 inputs, strided A",
        dims: &["M", "N"],
        default_shape: &[37, 1031],
        dtypes: &[DType::F16, DType::BF16, DType::F32],
        check: check_entry,
        trace: trace_entry,
    }
}
