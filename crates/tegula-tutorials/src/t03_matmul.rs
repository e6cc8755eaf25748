//! Tutorial 03, matrix multiplication: `C = A B` in fp16 with an f32 accumulator, grouped
//! program order, an optional fused leaky ReLU, autotuned over sixteen configs.
//!
//! # The Triton code
//!
//! `matmul_kernel` gives each program one `BLOCK_SIZE_M x BLOCK_SIZE_N` tile of C. The 1-D
//! program id is mapped to a tile in *grouped* order: `GROUP_SIZE_M` tile-rows form a group,
//! and consecutive programs walk down a column of the group before moving right, so the
//! programs that run together share rows of A and columns of B in L2. The kernel then builds
//! pointer tiles for the first blocks of A (`[BLOCK_SIZE_M, BLOCK_SIZE_K]`) and B
//! (`[BLOCK_SIZE_K, BLOCK_SIZE_N]`), with row indices taken modulo M and N (so rows past the
//! edge read valid memory and only K needs a mask), and loops `cdiv(K, BLOCK_SIZE_K)` times:
//! load both blocks with the mask `offs_k < K - k * BLOCK_SIZE_K`, accumulate
//! `tl.dot(a, b, accumulator)`, and advance both pointer tiles by `BLOCK_SIZE_K` along K. The
//! accumulator optionally goes through `leaky_relu`, is cast to fp16 and stored under a mask
//! on M and N. `@triton.autotune(configs=get_cuda_autotune_config(), key=['M', 'N', 'K'])`
//! picks the config per shape.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `tl.cdiv(M, BLOCK_SIZE_M)` | `cdiv(M, BLOCK_SIZE_M)` |
//! | `pid // n`, `pid % n` | `pid / n`, `pid % n` (the same for the non-negative ids) |
//! | `min(a, GROUP_SIZE_M)` on tiles | `minimum(a, GROUP_SIZE_M)` |
//! | `offs_am[:, None]`, `offs_k[None, :]` | `offs_am.col()`, `offs_k.row()` |
//! | `a_ptrs += BLOCK_SIZE_K * stride_ak` in the loop | the same: `a_ptrs` is a `let mut` pointer tile carried by the loop |
//! | `tl.dot(a, b, accumulator)` | `dot_acc(a, b, accumulator)` |
//! | `tl.zeros((BM, BN), dtype=tl.float32)` | `zeros::<f32>([BM, BN])` |
//! | `if ACTIVATION == "leaky_relu":` (constexpr) | `if ACTIVATION == "leaky_relu"` on a `&'static str` constexpr: decided at trace time |
//! | `tl.where(x >= 0, x, 0.01 * x)` | `select(x.ge(0), x, 0.01 * x)` |
//! | `tl.assume(stride_am > 0)` | `assume(stride_am.gt(0))` |
//! | `accumulator.to(tl.float16)` | `accumulator.to::<f16>()` |
//! | `triton.Config({..}, num_stages=s, num_warps=w)` | `tegula::autotune::Config` with the same constexprs, warps, stages |
//! | `@triton.autotune(configs, key=['M', 'N', 'K'])` | [`matmul`] asks tegula's tuner with key `M=..,N=..,K=..` |
//!
//! # What differs
//!
//! Nothing in the kernel. `tl.assume(..)` is [`assume`]: the GPU
//! emits nothing for it, and the interpreter checks each assumption, so a caller whose strides
//! are not positive gets "assumption violated" there. The configs are the CUDA list
//! of `get_cuda_autotune_config` (the HIP list is not ported). The tuner's default, which the
//! interpreter and `TEGULA_AUTOTUNE=off` run, is the list's first config; [`matmul_with`]
//! launches one config of the caller's choice (the tests take the small ones, which the
//! interpreter runs quickly). The host function checks what the tutorial asserts (inner
//! dimensions agree, A contiguous) plus what the kernel's i32 offsets need, with typed errors.
//!
//! The benchmark's fp8 inputs (`a.to(torch.float8_e5m2)`, `b.T.to(torch.float8_e5m2)`) are
//! the same kernel at `T = f8e5m2` with B a transposed view (`b.transpose(0, 1)`, K
//! contiguous): [`matmul`] takes them as they are, and on Hopper the dot runs on fp8 `wgmma`
//! with both loads pipelined. The registry times the fp16 path only: the Triton harness runs
//! no fp8 line to compare with.
#![allow(non_snake_case)]

use crate::common::{self, config, cx};
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::autotune::{median_ms, Config, Tuning};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

/// The tutorial's `get_cuda_autotune_config()`, in its order.
pub fn get_cuda_autotune_config() -> Vec<Config> {
    let c = |bm, bn, bk, stages, warps| {
        config(
            &[
                ("BLOCK_SIZE_M", bm),
                ("BLOCK_SIZE_N", bn),
                ("BLOCK_SIZE_K", bk),
                ("GROUP_SIZE_M", 8),
            ],
            warps,
            stages,
        )
    };
    vec![
        c(128, 256, 64, 3, 8),
        c(64, 256, 32, 4, 4),
        c(128, 128, 32, 4, 4),
        c(128, 64, 32, 4, 4),
        c(64, 128, 32, 4, 4),
        c(128, 32, 32, 4, 4),
        c(64, 32, 32, 5, 2),
        c(32, 64, 32, 5, 2),
        // Good config for fp8 inputs.
        c(128, 256, 128, 3, 8),
        c(256, 128, 128, 3, 8),
        c(256, 64, 128, 4, 4),
        c(64, 256, 128, 4, 4),
        c(128, 128, 128, 4, 4),
        c(128, 64, 64, 4, 4),
        c(64, 128, 64, 4, 4),
        c(128, 32, 64, 4, 4),
    ]
}

#[tegula::kernel]
pub fn matmul_kernel<T: Element>(
    // Pointers to matrices
    a_ptr: Ptr<T>,
    b_ptr: Ptr<T>,
    c_ptr: Ptr<f16>,
    // Matrix dimensions
    M: i32,
    N: i32,
    K: i32,
    // The stride variables represent how much to increase the ptr by when moving by 1
    // element in a particular dimension. E.g. `stride_am` is how much to increase `a_ptr`
    // by to get the element one row down (A has M rows).
    stride_am: i32,
    stride_ak: i32,
    stride_bk: i32,
    stride_bn: i32,
    stride_cm: i32,
    stride_cn: i32,
    // Meta-parameters
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    #[constexpr] GROUP_SIZE_M: usize,
    #[constexpr] ACTIVATION: &'static str,
) {
    // -----------------------------------------------------------
    // Map program ids `pid` to the block of C it should compute.
    // This is done in a grouped ordering to promote L2 data reuse.
    let pid = program_id(0);
    let num_pid_m = cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = cdiv(N, BLOCK_SIZE_N);
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;
    let group_id = pid / num_pid_in_group;
    let first_pid_m = group_id * GROUP_SIZE_M;
    let group_size_m = minimum(num_pid_m - first_pid_m, GROUP_SIZE_M);
    let pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m);
    let pid_n = (pid % num_pid_in_group) / group_size_m;

    // -----------------------------------------------------------
    // Add some integer bound assumptions.
    // This helps to guide integer analysis in the backend to optimize
    // load/store offset address calculation
    assume(pid_m.ge(0));
    assume(pid_n.ge(0));
    assume(stride_am.gt(0));
    assume(stride_ak.gt(0));
    assume(stride_bn.gt(0));
    assume(stride_bk.gt(0));
    assume(stride_cm.gt(0));
    assume(stride_cn.gt(0));

    // ----------------------------------------------------------
    // Create pointers for the first blocks of A and B.
    // We will advance this pointer as we move in the K direction
    // and accumulate
    // `a_ptrs` is a block of [BLOCK_SIZE_M, BLOCK_SIZE_K] pointers
    // `b_ptrs` is a block of [BLOCK_SIZE_K, BLOCK_SIZE_N] pointers
    let offs_am = (pid_m * BLOCK_SIZE_M + arange(0, BLOCK_SIZE_M as i64)) % M;
    let offs_bn = (pid_n * BLOCK_SIZE_N + arange(0, BLOCK_SIZE_N as i64)) % N;
    let offs_k = arange(0, BLOCK_SIZE_K as i64);
    let mut a_ptrs = a_ptr + (offs_am.col() * stride_am + offs_k.row() * stride_ak);
    let mut b_ptrs = b_ptr + (offs_k.col() * stride_bk + offs_bn.row() * stride_bn);

    // -----------------------------------------------------------
    // Iterate to compute a block of the C matrix.
    // We accumulate into a `[BLOCK_SIZE_M, BLOCK_SIZE_N]` block
    // of fp32 values for higher accuracy.
    // `accumulator` will be converted back to fp16 after the loop.
    let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
    for k in range(0, cdiv(K, BLOCK_SIZE_K)) {
        // Load the next block of A and B, generate a mask by checking the K dimension.
        // If it is out of bounds, set it to 0.
        let a = load(a_ptrs, offs_k.row().lt(K - k * BLOCK_SIZE_K), 0.0);
        let b = load(b_ptrs, offs_k.col().lt(K - k * BLOCK_SIZE_K), 0.0);
        // We accumulate along the K dimension.
        accumulator = dot_acc(a, b, accumulator);
        // Advance the ptrs to the next K block.
        a_ptrs += BLOCK_SIZE_K * stride_ak;
        b_ptrs += BLOCK_SIZE_K * stride_bk;
    }
    // You can fuse arbitrary activation functions here
    // while the accumulator is still in FP32!
    if ACTIVATION == "leaky_relu" {
        accumulator = leaky_relu(accumulator);
    }
    let c = accumulator.to::<f16>();

    // -----------------------------------------------------------
    // Write back the block of the output matrix C with masks.
    let offs_cm = pid_m * BLOCK_SIZE_M + arange(0, BLOCK_SIZE_M as i64);
    let offs_cn = pid_n * BLOCK_SIZE_N + arange(0, BLOCK_SIZE_N as i64);
    let c_ptrs = c_ptr + stride_cm * offs_cm.col() + stride_cn * offs_cn.row();
    let c_mask = offs_cm.col().lt(M) & offs_cn.row().lt(N);
    store(c_ptrs, c, c_mask);
}

/// We can fuse `leaky_relu` by providing it as an `ACTIVATION` meta-parameter in
/// `matmul_kernel`.
pub fn leaky_relu(x: Tile) -> Tile {
    select(x.ge(0), x, 0.01 * x)
}

const OP: &str = "tutorial-03-matmul";

/// The activations the kernel fuses: none (`""`) or `"leaky_relu"`.
pub const ACTIVATIONS: [&str; 2] = ["", "leaky_relu"];

fn check_operands<T: Element>(a: &Tensor<T>, b: &Tensor<T>, activation: &str) -> Result<()> {
    common::expect_rank(OP, "a", a, 2)?;
    common::expect_rank(OP, "b", b, 2)?;
    // Check constraints.
    if a.shape()[1] != b.shape()[0] {
        return Err(tegula::Error::Shape {
            op: OP.into(),
            message: format!(
                "Incompatible dimensions: a is {:?}, b is {:?}",
                a.shape(),
                b.shape()
            ),
        });
    }
    common::expect_contiguous(OP, "a", a)?; // "Matrix A must be contiguous"
    common::expect_same_device(OP, a, b)?;
    common::expect_i32_extent(OP, "a", a)?;
    common::expect_i32_extent(OP, "b", b)?;
    if !ACTIVATIONS.contains(&activation) {
        return Err(common::invalid(
            OP,
            format!("unknown activation `{activation}`: expected \"\" or \"leaky_relu\""),
        ));
    }
    Ok(())
}

/// `ACTIVATION` as the `&'static str` constexpr the kernel takes.
fn activation_constexpr(activation: &str) -> &'static str {
    ACTIVATIONS
        .iter()
        .copied()
        .find(|&a| a == activation)
        .unwrap_or("")
}

/// `matmul_kernel[grid](..)` with one config, into `c` `[M, N]` fp16.
pub fn matmul_launch<T: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<f16>,
    activation: &str,
    meta: &Config,
) -> Result<()> {
    check_operands(a, b, activation)?;
    let (M, K) = (a.shape()[0], a.shape()[1]);
    let N = b.shape()[1];
    common::expect_shape(OP, "c", c, &[M, N])?;
    common::expect_same_device(OP, a, c)?;
    common::expect_i32_extent(OP, "c", c)?;
    if M == 0 || N == 0 {
        return Ok(());
    }
    let (bm, bn) = (cx(meta, "BLOCK_SIZE_M")?, cx(meta, "BLOCK_SIZE_N")?);
    // 1D launch kernel where each block gets its own program.
    let grid = common::cdiv(M, bm) * common::cdiv(N, bn);
    let (sa, sb, sc) = (
        common::strides2(a),
        common::strides2(b),
        common::strides2(c),
    );
    matmul_kernel::launch_with::<T>(
        a.device(),
        grid,
        meta.launch_config(),
        a,
        b,
        c,
        common::as_i32(OP, "M", M)?,
        common::as_i32(OP, "N", N)?,
        common::as_i32(OP, "K", K)?,
        sa.0,
        sa.1,
        sb.0,
        sb.1,
        sc.0,
        sc.1,
        bm,
        bn,
        cx(meta, "BLOCK_SIZE_K")?,
        cx(meta, "GROUP_SIZE_M")?,
        activation_constexpr(activation),
    )
}

/// The autotuner's choice for these operands (`key=['M', 'N', 'K']`); on a GPU a miss times
/// every candidate, writing `c`.
pub fn tuned_config<T: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<f16>,
    activation: &str,
) -> Result<Config> {
    check_operands(a, b, activation)?;
    let (M, K, N) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    let key = format!("M={M},N={N},K={K},{},{activation}", T::DTYPE);
    common::autotune(
        a.device(),
        "tegula_tutorials::t03_matmul",
        &key,
        || {
            let configs = get_cuda_autotune_config();
            let ir = trace_config::<T>(&configs[0], activation_constexpr(activation))?;
            Ok(Tuning::new(
                "tegula_tutorials::t03_matmul",
                &ir.to_string(),
                key.clone(),
                configs,
            )
            // Every candidate compiled on several threads before the timing.
            .prepare_with(|meta| {
                a.device()
                    .prepare(|| matmul_launch(a, b, c, activation, meta))
            }))
        },
        |meta| median_ms(a.device(), || matmul_launch(a, b, c, activation, meta)),
    )
}

fn trace_config<T: Element>(
    meta: &Config,
    activation: &'static str,
) -> std::result::Result<Kernel, TraceError> {
    let get = |n: &str| meta.get(n).unwrap_or(16) as usize;
    matmul_kernel::trace::<T>(
        get("BLOCK_SIZE_M"),
        get("BLOCK_SIZE_N"),
        get("BLOCK_SIZE_K"),
        get("GROUP_SIZE_M"),
        activation,
    )
}

/// The tutorial's `matmul(a, b, activation)`: allocates the fp16 output and launches the
/// autotuned kernel.
pub fn matmul<T: Element>(a: &Tensor<T>, b: &Tensor<T>, activation: &str) -> Result<Tensor<f16>> {
    check_operands(a, b, activation)?;
    // Allocates output.
    let c = a.device().empty::<f16>([a.shape()[0], b.shape()[1]])?;
    let meta = tuned_config(a, b, &c, activation)?;
    matmul_launch(a, b, &c, activation, &meta)?;
    Ok(c)
}

/// [`matmul`] with the config `meta` instead of the tuner's.
pub fn matmul_with<T: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    activation: &str,
    meta: &Config,
) -> Result<Tensor<f16>> {
    check_operands(a, b, activation)?;
    let c = a.device().empty::<f16>([a.shape()[0], b.shape()[1]])?;
    matmul_launch(a, b, &c, activation, meta)?;
    Ok(c)
}

/// `a @ b` in float64 (row-major `a[m, k]`, `b[k, n]`), through `leaky_relu` if asked.
pub fn reference(a: &[f64], b: &[f64], m: usize, k: usize, n: usize, activation: &str) -> Vec<f64> {
    let mut c = common::matmul_f64(a, b, m, k, n);
    if activation == "leaky_relu" {
        for v in &mut c {
            if *v < 0.0 {
                *v *= 0.01;
            }
        }
    }
    c
}

/// Runs `matmul` (or `matmul_with(meta)`) on fresh unit-normal fp16 inputs and compares with
/// float64, bounding each element's error by its magnitude `|A| |B|`.
pub fn check_with(
    dev: &Device,
    (m, n, k): (usize, usize, usize),
    activation: &str,
    meta: Option<&Config>,
) -> Result<CheckReport> {
    let a = dev.randn::<f16>([m, k])?;
    let b = dev.randn::<f16>([k, n])?;
    let c = match meta {
        Some(meta) => matmul_with(&a, &b, activation, meta)?,
        None => matmul(&a, &b, activation)?,
    };
    let (av, bv) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let want = reference(&av, &bv, m, k, n, activation);
    let magnitude = common::abs_matmul_f64(&av, &bv, m, k, n);
    Ok(common::compare_scaled(
        OP,
        format!("M={m} N={n} K={k} {activation}"),
        DType::F16,
        &c.to_f64_vec()?,
        &want,
        &magnitude,
        common::dot_tolerance(DType::F16, k),
    ))
}

fn mnk(shape: &[usize]) -> (usize, usize, usize) {
    (
        common::dim(shape, 0, 257),
        common::dim(shape, 1, 131),
        common::dim(shape, 2, 77),
    )
}

fn check_plain(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    check_with(dev, mnk(shape), "", None)
}

fn check_leaky(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    check_with(dev, mnk(shape), "leaky_relu", None)
}

fn bench_with(dev: &Device, shape: &[usize], activation: &'static str) -> Result<Bench> {
    let (m, n, k) = mnk(shape);
    let a = dev.randn::<f16>([m, k])?;
    let b = dev.randn::<f16>([k, n])?;
    let c = dev.empty::<f16>([m, n])?;
    Ok(Bench {
        flops: 2.0 * (m * n * k) as f64,
        bytes: 2.0 * (m * k + k * n + m * n) as f64,
        input_copies: 1,
        launch: Box::new(move || {
            let meta = tuned_config(&a, &b, &c, activation)?;
            matmul_launch(&a, &b, &c, activation, &meta)
        }),
    })
}

fn bench_plain(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    bench_with(dev, shape, "")
}

fn bench_leaky(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    bench_with(dev, shape, "leaky_relu")
}

const SHAPES: &[BenchShape] = &[BenchShape {
    label: "4096x4096x4096",
    dims: &[4096, 4096, 4096],
}];

/// The registry entries: the harness's `03-matmul` and `03-matmul-leaky-relu` at 4096^3, fp16.
pub fn tutorials() -> Vec<Port> {
    vec![
        Port {
            name: "tutorial-03-matmul",
            about: "C = A B (fp16 in, f32 accumulation, fp16 out), grouped order, autotuned",
            dims: &["M", "N", "K"],
            default_shape: &[257, 131, 77],
            bench_shapes: SHAPES,
            dtypes: &[DType::F16],
            check: check_plain,
            bench: bench_plain,
        },
        Port {
            name: "tutorial-03-matmul-leaky-relu",
            about: "tutorial 03's matmul with ACTIVATION=\"leaky_relu\" fused",
            dims: &["M", "N", "K"],
            default_shape: &[257, 131, 77],
            bench_shapes: SHAPES,
            dtypes: &[DType::F16],
            check: check_leaky,
            bench: bench_leaky,
        },
    ]
}
