//! Matrix multiplication `C = A B` (Triton tutorial 03) with grouped program ordering.
//!
//! Each program computes one `block_m x block_n` tile of C, looping over K in `block_k` steps
//! with an f32 accumulator (`dot`). Masks cover any M, N, K. A and B are addressed through
//! strides, so row- and column-major inputs (and transposed or sliced views) work without copies.
//!
//! Program order: the 1-D program id is mapped to tiles in groups of `group_m` tile-rows
//! (seed section 4.4.2): consecutive programs sweep down a column of `group_m` tiles before
//! moving right, so the A rows and B columns they read stay in L2 across the group.
//!
//! Inputs are f16, bf16 or f32; the output dtype is the caller's choice (`Tensor<O>` for any
//! float `O`): the f32 accumulator is rounded once when stored. [`matmul`] returns f32.
//! f32 inputs are multiplied exactly ([`InputPrecision::Ieee`]) unless the caller asks for tf32.

use crate::check;
use crate::{CheckReport, LibraryKernel};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::{Error, Result};

#[tegula::kernel]
pub fn matmul_kernel<T: Element, O: Element>(
    a: Ptr<T>,
    b: Ptr<T>,
    c: Ptr<O>,
    m: i32,
    n: i32,
    k: i32,
    stride_am: i32,
    stride_ak: i32,
    stride_bk: i32,
    stride_bn: i32,
    stride_cm: i32,
    stride_cn: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
    #[constexpr] block_k: usize,
    #[constexpr] group_m: usize,
    #[constexpr] precision: InputPrecision,
) {
    // Grouped ordering: which tile of C this program computes.
    let pid = program_id(0);
    let num_pid_m = cdiv(m, block_m);
    let num_pid_n = cdiv(n, block_n);
    let num_pid_in_group = num_pid_n * group_m;
    let group_id = pid / num_pid_in_group;
    let first_pid_m = group_id * group_m;
    let group_size_m = minimum(num_pid_m - first_pid_m, group_m);
    let pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m;
    let pid_n = (pid % num_pid_in_group) / group_size_m;

    let offs_m = pid_m * block_m + arange(0, block_m as i64);
    let offs_n = pid_n * block_n + arange(0, block_n as i64);
    let offs_k = arange(0, block_k as i64);
    let mask_m = offs_m.lt(m).col();
    let mask_n = offs_n.lt(n).row();
    let mut acc = zeros::<f32>([block_m, block_n]);
    for start in range(0, k, block_k) {
        let ks = start + offs_k;
        let a_ptrs = a + offs_m.col() * stride_am + ks.row() * stride_ak;
        let b_ptrs = b + ks.col() * stride_bk + offs_n.row() * stride_bn;
        let a_tile = load(a_ptrs, mask_m & ks.row().lt(k), 0);
        let b_tile = load(b_ptrs, ks.col().lt(k) & mask_n, 0);
        acc = dot_with(a_tile, b_tile, Some(acc), precision);
    }
    let c_ptrs = c + offs_m.col() * stride_cm + offs_n.row() * stride_cn;
    store(c_ptrs, acc, mask_m & mask_n);
}

const OP: &str = "matmul";
const DTYPES: &[DType] = &[DType::F16, DType::BF16, DType::F32];

/// Tile sizes and program grouping; every block is a power of two of at least 16 (`dot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulConfig {
    pub block_m: usize,
    pub block_n: usize,
    pub block_k: usize,
    /// Tile-rows per program group (the L2-reuse grouping).
    pub group_m: usize,
    /// How f32 inputs are multiplied (f16/bf16 products are always exact).
    pub precision: InputPrecision,
}

impl Default for MatmulConfig {
    fn default() -> Self {
        MatmulConfig {
            block_m: 64,
            block_n: 64,
            block_k: 32,
            group_m: 8,
            precision: InputPrecision::Ieee,
        }
    }
}

impl MatmulConfig {
    fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("block_m", self.block_m),
            ("block_n", self.block_n),
            ("block_k", self.block_k),
        ] {
            if !v.is_power_of_two() || v < 16 {
                return Err(Error::Invalid {
                    op: OP.into(),
                    message: format!("{name} must be a power of two >= 16, got {v}"),
                });
            }
        }
        if self.group_m == 0 {
            return Err(Error::Invalid {
                op: OP.into(),
                message: "group_m must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// `C = A B` into `c` with the default [`MatmulConfig`].
///
/// Contract: `T` is f16, bf16 or f32 and `O` is a float dtype; `a` is `[M, K]`, `b` `[K, N]`,
/// `c` `[M, N]`, each with any strides (row-major, column-major, sliced); one device; `c` shares
/// no memory with `a` or `b`. Accumulation is f32, rounded once to `O`.
pub fn matmul_into<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
) -> Result<()> {
    matmul_into_with(a, b, c, MatmulConfig::default())
}

/// [`matmul_into`] with explicit tile sizes, grouping and f32 precision.
pub fn matmul_into_with<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: MatmulConfig,
) -> Result<()> {
    check::expect_dtype_in::<T>(OP, "a", DTYPES)?;
    check::expect_dtype_in::<O>(OP, "c", &[DType::F16, DType::BF16, DType::F32, DType::F64])?;
    config.validate()?;
    check::expect_rank(OP, "a", a, 2)?;
    check::expect_rank(OP, "b", b, 2)?;
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let n = b.shape()[1];
    check::expect_shape(OP, "b", b, &[k, n])?;
    check::expect_shape(OP, "c", c, &[m, n])?;
    check::expect_same_device(OP, a, b)?;
    check::expect_same_device(OP, a, c)?;
    check::expect_no_alias(OP, ("c", c), ("a", a))?;
    check::expect_no_alias(OP, ("c", c), ("b", b))?;
    check::expect_i32_extent(OP, "a", a)?;
    check::expect_i32_extent(OP, "b", b)?;
    check::expect_i32_extent(OP, "c", c)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (mi, ni, ki) = (
        check::as_i32(OP, "M", m)?,
        check::as_i32(OP, "N", n)?,
        check::as_i32(OP, "K", k)?,
    );
    let tiles = m.div_ceil(config.block_m) * n.div_ceil(config.block_n);
    let s = |t: &[usize], i: usize| t[i] as i32; // fit i32: checked by expect_i32_extent
    matmul_kernel::launch::<T, O>(
        a.device(),
        tiles,
        a,
        b,
        c,
        mi,
        ni,
        ki,
        s(a.strides(), 0),
        s(a.strides(), 1),
        s(b.strides(), 0),
        s(b.strides(), 1),
        s(c.strides(), 0),
        s(c.strides(), 1),
        config.block_m,
        config.block_n,
        config.block_k,
        config.group_m,
        config.precision,
    )
}

/// `A B` in a new contiguous f32 tensor; see [`matmul_into`].
pub fn matmul<T: Element>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<f32>> {
    check::expect_rank(OP, "a", a, 2)?;
    check::expect_rank(OP, "b", b, 2)?;
    let c = a.device().empty::<f32>([a.shape()[0], b.shape()[1]])?;
    matmul_into(a, b, &c)?;
    Ok(c)
}

/// Tolerances `(atol, rtol)` for a product with inner dimension `k` of unit-normal inputs of
/// dtype `input`, accumulated in f32 and stored as `output`. f16/bf16 products are exact in f32;
/// the f32 sum errs by about `sqrt(k)` ulps of its terms; tf32 rounds each input to 11 bits.
pub fn tolerance(input: DType, output: DType, precision: InputPrecision, k: usize) -> (f64, f64) {
    let sk = (k.max(1) as f64).sqrt();
    let (mut atol, mut rtol): (f64, f64) = (1e-5 * sk, 1e-5);
    if input == DType::F32 && precision != InputPrecision::Ieee {
        atol = 2e-3 * sk;
        rtol = 2e-3;
    }
    match output {
        DType::F16 => (atol + 1e-3, rtol.max(2e-3)),
        DType::BF16 => (atol + 8e-3, rtol.max(1.6e-2)),
        _ => (atol, rtol),
    }
}

fn dims(shape: &[usize]) -> (usize, usize, usize) {
    (
        shape.first().copied().unwrap_or(1),
        shape.get(1).copied().unwrap_or(1),
        shape.get(2).copied().unwrap_or(1),
    )
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (m, n, k) = dims(shape);
    let a = dev.randn::<T>([m, k])?;
    let b = dev.randn::<T>([k, n])?;
    let c = matmul(&a, &b)?;
    let want = check::matmul_f64(&a.to_f64_vec()?, &b.to_f64_vec()?, m, k, n);
    Ok(check::compare(
        OP,
        format!("M={m} N={n} K={k}"),
        T::DTYPE,
        &c.to_f64_vec()?,
        &want,
        tolerance(T::DTYPE, DType::F32, InputPrecision::Ieee, k),
    ))
}

fn check_entry(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::BF16 => check_typed::<bf16>(dev, shape),
        DType::F32 => check_typed::<f32>(dev, shape),
        _ => check_typed::<f16>(dev, shape),
    }
}

fn trace_typed<T: Element>() -> std::result::Result<Kernel, TraceError> {
    let c = MatmulConfig::default();
    matmul_kernel::trace::<T, f32>(c.block_m, c.block_n, c.block_k, c.group_m, c.precision)
}

fn trace_entry(_shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    match dtype {
        DType::BF16 => trace_typed::<bf16>(),
        DType::F32 => trace_typed::<f32>(),
        _ => trace_typed::<f16>(),
    }
}

/// The library entry.
pub fn entry() -> LibraryKernel {
    LibraryKernel {
        name: "matmul",
        about: "C = A B, 64x64x32 tiles, f32 accumulation, grouped program order (GROUP_M = 8)",
        dims: &["M", "N", "K"],
        default_shape: &[200, 150, 130],
        dtypes: DTYPES,
        check: check_entry,
        trace: trace_entry,
    }
}
