//! Tutorial 02, fused softmax: each row of `x` normalized in one read and one write, by a
//! grid of persistent programs sized from the kernel's occupancy.
//!
//! # The Triton code
//!
//! `softmax_kernel` is persistent: program `p` of `P` handles rows `p, p + P, p + 2P, ..`
//! (`tl.range(row_start, n_rows, row_step)`). Each row fits one block (`BLOCK_SIZE` is the
//! next power of two of the row length); it is loaded with `-inf` in the padding lanes (they
//! add `exp(-inf) = 0` to the sum), shifted by its maximum, exponentiated, divided by its sum
//! and stored. The host function `softmax` first compiles the kernel (`warmup`) to read its
//! registers per thread and shared memory, computes how many programs a SM holds
//! (`NUM_REGS // (n_regs * WARP_SIZE * num_warps)`, capped by shared memory), and launches
//! `NUM_SM * occupancy` programs, at most one a row. `num_warps = 8`; `num_stages` is 4 on
//! devices with more than 200 KB of shared memory a block, else 2.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `tl.num_programs(0)` | `num_programs(0)` |
//! | `num_stages: tl.constexpr` | `#[constexpr] num_stages: u32` |
//! | `for row_idx in tl.range(lo, hi, step, num_stages=num_stages)` | `for row_idx in range(lo, hi, step).num_stages(num_stages)` |
//! | `tl.max(row, axis=0)`, `tl.sum(.., axis=0)` | `max(row, 0)`, `sum(.., 0)` |
//! | `tl.exp` | `exp` (on the GPU `ex2.approx` with the scale folded in, as Triton's) |
//! | `other=-float('inf')` | `f32::NEG_INFINITY` |
//! | `softmax_kernel.warmup(..)`, `kernel.n_regs`, `kernel.metadata.shared` | `Device::compiled(&Launch)`: the PTX's shared bytes and the driver's registers per thread |
//! | `driver.active.utils.get_device_properties(..)` | `Device::cuda_runtime()`'s `device_info()` |
//! | `kernel[(num_programs, 1, 1)](..)` | `softmax_kernel::launch_with::<T>(dev, num_programs, config, ..)` |
//!
//! # What differs
//!
//! A tegula launch config carries a stage count too: the host passes `num_stages` to the
//! kernel's constexpr and in `LaunchConfig::new(num_warps, num_stages)`; the kernel's one loop
//! asks for its own (`.num_stages(num_stages)`), so the config's count decides nothing here.
//! On the interpreter there are no registers to count: the grid is [`INTERPRETER_PROGRAMS`]
//! programs (at most one a row), so that each walks several rows. The launch is split from the sizing
//! ([`softmax_programs`], [`softmax_launch`]) because the harness times the launch alone.
#![allow(non_snake_case)]

use crate::common::{self, next_power_of_2};
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::{KernelArg, Launch, LaunchConfig, Result};

#[tegula::kernel]
pub fn softmax_kernel<T: Element>(
    output_ptr: Ptr<T>,
    input_ptr: Ptr<T>,
    input_row_stride: i32,
    output_row_stride: i32,
    n_rows: i32,
    n_cols: i32,
    #[constexpr] BLOCK_SIZE: usize,
    #[constexpr] num_stages: u32,
) {
    // starting row of the program
    let row_start = program_id(0);
    let row_step = num_programs(0);
    for row_idx in range(row_start, n_rows, row_step).num_stages(num_stages) {
        // The stride represents how much we need to increase the pointer to advance 1 row
        let row_start_ptr = input_ptr + row_idx * input_row_stride;
        // The block size is the next power of two greater than n_cols, so we can fit each
        // row in a single block
        let col_offsets = arange(0, BLOCK_SIZE as i64);
        let input_ptrs = row_start_ptr + col_offsets;
        // Load the row into SRAM, using a mask since BLOCK_SIZE may be > than n_cols
        let mask = col_offsets.lt(n_cols);
        let row = load(input_ptrs, mask, f32::NEG_INFINITY);
        // Subtract maximum for numerical stability
        let row_minus_max = row - max(row, 0);
        // Note that exponentiation in Triton is fast but approximate (i.e., think __expf in CUDA)
        let numerator = exp(row_minus_max);
        let denominator = sum(numerator, 0);
        let softmax_output = numerator / denominator;
        // Write back output to DRAM
        let output_row_start_ptr = output_ptr + row_idx * output_row_stride;
        let output_ptrs = output_row_start_ptr + col_offsets;
        store(output_ptrs, softmax_output, mask);
    }
}

const OP: &str = "tutorial-02-fused-softmax";

/// Programs the interpreter runs (it has no occupancy to compute): few, so that each program
/// walks several rows.
pub const INTERPRETER_PROGRAMS: usize = 4;

/// What `softmax` decides before it launches: the block, the stages (the kernel's
/// `num_stages`), the warps, the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftmaxPlan {
    pub block_size: usize,
    pub num_stages: u32,
    pub config: LaunchConfig,
    pub num_programs: usize,
}

fn check_operands<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<(i32, i32)> {
    common::expect_rank(OP, "x", x, 2)?;
    common::expect_shape(OP, "y", y, x.shape())?;
    common::expect_same_device(OP, x, y)?;
    for (name, t) in [("x", x), ("y", y)] {
        if t.shape()[1] > 1 && t.strides()[1] != 1 {
            return Err(tegula::Error::Stride {
                op: OP.into(),
                message: format!(
                    "`{name}` must have unit column stride, got {:?}",
                    t.strides()
                ),
            });
        }
        common::expect_i32_extent(OP, name, t)?;
    }
    Ok((
        common::as_i32(OP, "n_rows", x.shape()[0])?,
        common::as_i32(OP, "n_cols", x.shape()[1])?,
    ))
}

/// The sizing half of the tutorial's `softmax`: `BLOCK_SIZE`, `num_warps = 8`, the stages from
/// the device's shared memory, and `NUM_SM * occupancy` programs (at most one a row) from the
/// compiled kernel's registers and shared memory.
pub fn softmax_programs<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<SoftmaxPlan> {
    let (n_rows, n_cols) = check_operands(x, y)?;
    // The block size of each loop iteration is the smallest power of two greater than the
    // number of columns in `x`
    let BLOCK_SIZE = next_power_of_2(n_cols as usize);
    // Another trick we can use is to ask the compiler to use more threads per row by
    // increasing the number of warps (`num_warps`) over which each row is distributed.
    let num_warps = 8;
    let dev = x.device();
    let Some(info) = dev.cuda_runtime().map(|rt| rt.device_info()) else {
        return Ok(SoftmaxPlan {
            block_size: BLOCK_SIZE,
            num_stages: 2,
            config: LaunchConfig::new(num_warps, 2),
            num_programs: INTERPRETER_PROGRAMS.min(n_rows.max(1) as usize),
        });
    };
    let (NUM_SM, NUM_REGS, SIZE_SMEM, WARP_SIZE) = (
        info.sm_count as usize,
        info.max_registers_per_block as usize,
        info.max_shared_per_block_optin as usize,
        info.warp_size as usize,
    );
    // Number of software pipelining stages.
    let num_stages = if SIZE_SMEM > 200000 { 4 } else { 2 };
    let config = LaunchConfig::new(num_warps, num_stages);
    // pre-compile kernel to get register usage and compute thread occupancy.
    let trace = || softmax_kernel::trace::<T>(BLOCK_SIZE, num_stages);
    let (s_in, s_out) = (x.strides()[0] as i32, y.strides()[0] as i32);
    let args: Vec<KernelArg> = vec![
        TensorArg::kernel_arg(&y),
        TensorArg::kernel_arg(&x),
        ScalarArg::kernel_arg(s_in),
        ScalarArg::kernel_arg(s_out),
        ScalarArg::kernel_arg(n_rows),
        ScalarArg::kernel_arg(n_cols),
    ];
    let kernel = dev.compiled(&Launch {
        name: "softmax_kernel",
        // The key `#[tegula::kernel]` gives this specialization, so the launch reuses it.
        key: format!(
            "BLOCK_SIZE={BLOCK_SIZE:?}, num_stages={num_stages:?}, T={:?}",
            T::DTYPE
        ),
        trace: &trace,
        grid: Grid([1, 1, 1]),
        config,
        args,
    })?;
    let n_regs = kernel.loaded.resources().registers_per_thread.max(1) as usize;
    let size_smem = kernel.compiled.shared_bytes as usize;
    let occupancy = NUM_REGS / (n_regs * WARP_SIZE * num_warps as usize);
    // A kernel without shared memory is limited by its registers alone.
    let occupancy = SIZE_SMEM
        .checked_div(size_smem)
        .map_or(occupancy, |o| occupancy.min(o));
    let num_programs = (NUM_SM * occupancy).min(n_rows as usize).max(1);
    Ok(SoftmaxPlan {
        block_size: BLOCK_SIZE,
        num_stages,
        config,
        num_programs,
    })
}

/// The launch half of the tutorial's `softmax`: `kernel[(num_programs, 1, 1)](..)`.
pub fn softmax_launch<T: Element>(x: &Tensor<T>, y: &Tensor<T>, plan: &SoftmaxPlan) -> Result<()> {
    let (n_rows, n_cols) = check_operands(x, y)?;
    if n_rows == 0 || n_cols == 0 {
        return Ok(());
    }
    softmax_kernel::launch_with::<T>(
        x.device(),
        plan.num_programs,
        plan.config,
        y,
        x,
        x.strides()[0] as i32,
        y.strides()[0] as i32,
        n_rows,
        n_cols,
        plan.block_size,
        plan.num_stages,
    )
}

/// The tutorial's `softmax(x)`: allocates the output, sizes the persistent grid, launches.
pub fn softmax<T: Element>(x: &Tensor<T>) -> Result<Tensor<T>> {
    common::expect_rank(OP, "x", x, 2)?;
    // Allocate output
    let y = x.device().empty::<T>(x.shape())?;
    let plan = softmax_programs(x, &y)?;
    softmax_launch(x, &y, &plan)?;
    Ok(y)
}

/// Row softmax in float64 (`naive_softmax`), rows of `n_cols`.
pub fn reference(x: &[f64], n_cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n_cols.max(1)) {
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / s));
    }
    out
}

/// Tolerances `(atol, rtol)` of an f32 softmax of rows of `n_cols`: `exp` is one f32 rounding
/// on the interpreter and good to about 2^-21 relative on the GPU (`ex2.approx`); the sum of
/// `n_cols` terms errs by about `sqrt(n_cols)` roundings (the interpreter sums in order, the
/// GPU in a tree), the division by one more.
pub fn tolerance(n_cols: usize) -> (f64, f64) {
    (
        1e-30,
        2f64.powi(-20) + (n_cols as f64).sqrt() * 2f64.powi(-22),
    )
}

fn check(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let (m, n) = (common::dim(shape, 0, 1823), common::dim(shape, 1, 781));
    let x = dev.randn::<f32>([m, n])?;
    let y = softmax(&x)?;
    let want = reference(&x.to_f64_vec()?, n);
    Ok(common::compare(
        OP,
        format!("M={m} N={n}"),
        DType::F32,
        &y.to_f64_vec()?,
        &want,
        tolerance(n),
    ))
}

fn bench(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    let (m, n) = (common::dim(shape, 0, 4096), common::dim(shape, 1, 8192));
    let x = dev.randn::<f32>([m, n])?;
    let y = dev.empty::<f32>([m, n])?;
    let plan = softmax_programs(&x, &y)?;
    Ok(Bench {
        // max, subtract, exp, sum, divide
        flops: 5.0 * (m * n) as f64,
        bytes: 2.0 * (m * n) as f64 * 4.0,
        input_copies: 1,
        launch: Box::new(move || softmax_launch(&x, &y, &plan)),
    })
}

fn bench_wrapper(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    let (m, n) = (common::dim(shape, 0, 4096), common::dim(shape, 1, 8192));
    let x = dev.randn::<f32>([m, n])?;
    Ok(Bench {
        flops: 5.0 * (m * n) as f64,
        bytes: 2.0 * (m * n) as f64 * 4.0,
        input_copies: 1,
        launch: Box::new(move || softmax(&x).map(|_| ())),
    })
}

/// The registry entries: the harness's `02-fused-softmax` (the launch alone) and
/// `02-fused-softmax-wrapper` (the whole `softmax(x)`: allocation, sizing, launch) at
/// 4096 x 8192, fp32.
pub fn tutorials() -> Vec<Port> {
    vec![
        Port {
            name: "tutorial-02-fused-softmax",
            about: "row softmax, one row a block, persistent programs sized by occupancy",
            dims: &["M", "N"],
            default_shape: &[1823, 781],
            bench_shapes: &[BenchShape {
                label: "4096x8192",
                dims: &[4096, 8192],
            }],
            dtypes: &[DType::F32],
            check,
            bench,
        },
        Port {
            name: "tutorial-02-fused-softmax-wrapper",
            about: "tutorial 02's softmax(x) as a whole: allocation, occupancy sizing, launch",
            dims: &["M", "N"],
            default_shape: &[1823, 781],
            bench_shapes: &[BenchShape {
                label: "4096x8192",
                dims: &[4096, 8192],
            }],
            dtypes: &[DType::F32],
            check,
            bench: bench_wrapper,
        },
    ]
}
