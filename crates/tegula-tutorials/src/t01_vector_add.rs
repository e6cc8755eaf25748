//! Tutorial 01, vector addition: `output = x + y`, one block of `BLOCK_SIZE` elements a
//! program.
//!
//! # The Triton code
//!
//! `add_kernel` runs on a 1-D grid of `cdiv(n_elements, BLOCK_SIZE)` programs. Program `pid`
//! owns the elements `[pid * BLOCK_SIZE, (pid + 1) * BLOCK_SIZE)`: it builds their offsets
//! with `tl.arange`, a mask `offsets < n_elements` for the ragged last block, loads `x` and
//! `y` through pointer tiles (`x_ptr + offsets`), adds, and stores through `output_ptr +
//! offsets` under the same mask. The host function `add` allocates the output with
//! `torch.empty_like(x)`, computes the grid from the meta-parameter and launches with
//! `BLOCK_SIZE=1024`.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `@triton.jit def add_kernel(x_ptr, ..)` | `#[tegula::kernel] fn add_kernel<T: Element>(x_ptr: Ptr<T>, ..)` |
//! | `BLOCK_SIZE: tl.constexpr` | `#[constexpr] BLOCK_SIZE: usize` (a Rust value at trace time) |
//! | `tl.program_id(axis=0)` | `program_id(0)` |
//! | `tl.arange(0, BLOCK_SIZE)` | `arange(0, BLOCK_SIZE as i64)` |
//! | `offsets < n_elements` | `offsets.lt(n_elements)` (Rust's `<` must return `bool`) |
//! | `tl.load(p, mask=m)` | `load_masked(p, m)` (masked-off lanes read 0 in tegula, where Triton leaves them undefined) |
//! | `tl.store(p, v, mask=m)` | `store(p, v, m)` |
//! | `torch.empty_like(x)` | `dev.empty::<T>(x.shape())` |
//! | `add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)` | `add_kernel::launch::<T>(dev, grid, &x, &y, &out, n, 1024)` |
//!
//! A Triton kernel is specialized on its arguments' dtypes when it is called; a tegula kernel
//! says so with a type parameter (`T: Element`), one specialization per dtype.
//!
//! # What differs
//!
//! `add` checks what the tutorial asserts (one device) and what the kernel assumes without
//! saying (contiguous inputs of one shape, a size that fits the i32 offsets) and returns typed
//! errors instead of failing an assertion. The launch is split out as [`add_into`] so that a
//! benchmark can time the launch on a prepared output: the harness times `add` with torch's
//! caching allocator, whose `empty_like` costs nothing on the GPU, while tegula's `empty`
//! fills the new tensor with a poison pattern.
//!
//! Kernel names keep Triton's spelling (`BLOCK_SIZE`, `n_elements`), hence the
//! `non_snake_case` allowance of this module.
#![allow(non_snake_case)]

use crate::common;
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::Result;

#[tegula::kernel]
pub fn add_kernel<T: Element>(
    x_ptr: Ptr<T>,                  // *Pointer* to first input vector.
    y_ptr: Ptr<T>,                  // *Pointer* to second input vector.
    output_ptr: Ptr<T>,             // *Pointer* to output vector.
    n_elements: i32,                // Size of the vector.
    #[constexpr] BLOCK_SIZE: usize, // Number of elements each program should process.
) {
    // There are multiple 'programs' processing different data. We identify which program
    // we are here:
    // We use a 1D launch grid so axis is 0.
    let pid = program_id(0);
    // This program will process inputs that are offset from the initial data.
    let block_start = pid * BLOCK_SIZE;
    let offsets = block_start + arange(0, BLOCK_SIZE as i64);
    // Create a mask to guard memory operations against out-of-bounds accesses.
    let mask = offsets.lt(n_elements);
    // Load x and y from DRAM, masking out any extra elements in case the input is not a
    // multiple of the block size.
    let x = load_masked(x_ptr + offsets, mask);
    let y = load_masked(y_ptr + offsets, mask);
    let output = x + y;
    // Write x + y back to DRAM.
    store(output_ptr + offsets, output, mask);
}

const OP: &str = "tutorial-01-vector-add";

/// The tutorial's `BLOCK_SIZE=1024`.
pub const ADD_BLOCK_SIZE: usize = 1024;

/// The launch of `add`: `output = x + y` into a prepared `output` of the same shape.
pub fn add_into<T: Element>(x: &Tensor<T>, y: &Tensor<T>, output: &Tensor<T>) -> Result<()> {
    common::expect_same_device(OP, x, y)?;
    common::expect_same_device(OP, x, output)?;
    common::expect_shape(OP, "y", y, x.shape())?;
    common::expect_shape(OP, "output", output, x.shape())?;
    common::expect_contiguous(OP, "x", x)?;
    common::expect_contiguous(OP, "y", y)?;
    common::expect_contiguous(OP, "output", output)?;
    let n_elements = output.numel();
    let n = common::as_i32(OP, "n_elements", n_elements)?;
    if n_elements == 0 {
        return Ok(());
    }
    // The SPMD launch grid: the number of kernel instances that run in parallel.
    let grid = common::cdiv(n_elements, ADD_BLOCK_SIZE);
    add_kernel::launch::<T>(x.device(), grid, x, y, output, n, ADD_BLOCK_SIZE)
}

/// The tutorial's `add(x, y)`: allocates the output and enqueues the kernel.
pub fn add<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<Tensor<T>> {
    // We need to preallocate the output.
    let output = x.device().empty::<T>(x.shape())?;
    add_into(x, y, &output)?;
    Ok(output)
}

/// `x + y` in float64.
pub fn reference(x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| a + b).collect()
}

/// One rounding of an exact sum is at most half an ulp of the dtype; the bound allows one ulp
/// (and subnormals' absolute spacing), which still catches any wrong element.
fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (2f64.powi(-24), 2f64.powi(-10)),
        DType::BF16 => (1e-38, 2f64.powi(-7)),
        _ => (1e-45, 2f64.powi(-23)),
    }
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let n = common::dim(shape, 0, 98432);
    // The harness's inputs: torch.rand, uniform in [0, 1).
    let x = dev.rand_uniform::<T>([n], 0.0, 1.0)?;
    let y = dev.rand_uniform::<T>([n], 0.0, 1.0)?;
    let output = add(&x, &y)?;
    let want = reference(&x.to_f64_vec()?, &y.to_f64_vec()?);
    Ok(common::compare(
        OP,
        format!("n={n}"),
        T::DTYPE,
        &output.to_f64_vec()?,
        &want,
        tolerance(T::DTYPE),
    ))
}

fn check(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::F16 => check_typed::<f16>(dev, shape),
        DType::BF16 => check_typed::<bf16>(dev, shape),
        _ => check_typed::<f32>(dev, shape),
    }
}

fn bench_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<Bench> {
    let n = common::dim(shape, 0, 1 << 27);
    let x = dev.rand_uniform::<T>([n], 0.0, 1.0)?;
    let y = dev.rand_uniform::<T>([n], 0.0, 1.0)?;
    let output = dev.empty::<T>([n])?;
    let s = T::DTYPE.size_bytes() as f64;
    Ok(Bench {
        flops: n as f64,
        bytes: 3.0 * n as f64 * s,
        input_copies: 1,
        launch: Box::new(move || add_into(&x, &y, &output)),
    })
}

fn bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    match dtype {
        DType::F16 => bench_typed::<f16>(dev, shape),
        DType::BF16 => bench_typed::<bf16>(dev, shape),
        _ => bench_typed::<f32>(dev, shape),
    }
}

/// The registry entry: the harness's `01-vector-add` at `n=134217728`, fp32.
pub fn tutorials() -> Vec<Port> {
    vec![Port {
        name: "tutorial-01-vector-add",
        about: "output = x + y, BLOCK_SIZE 1024 elements a program",
        dims: &["n"],
        default_shape: &[98432],
        bench_shapes: &[BenchShape {
            label: "n=134217728",
            dims: &[1 << 27],
        }],
        dtypes: &[DType::F32, DType::F16, DType::BF16],
        check,
        bench,
    }]
}
