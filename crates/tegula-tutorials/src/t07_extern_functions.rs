//! Tutorial 07, extern functions: a kernel that calls a function of an external library,
//! CUDA's libdevice, on each element: `y = asin(x)`.
//!
//! # The Triton code
//!
//! `asin_kernel` is tutorial 01's shape with one input; its body applies
//! `triton.language.extra.libdevice.asin`, which Triton resolves to `__nv_asinf` in
//! libdevice's bitcode and links into the kernel. The tutorial's point is the mechanism: any
//! libdevice function (or one of another bitcode library, through `extern_libs`) can be called
//! from a kernel like a builtin.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `from triton.language.extra import libdevice`, `libdevice.asin(x)` | [`asin`], a builtin |
//! | `tl.load(p, mask=m)` | `load_masked(p, m)` |
//! | `asin_kernel[grid](x, out, n, BLOCK_SIZE=1024)` | `asin_kernel::launch(dev, grid, &x, &out, n, 1024)` |
//!
//! # What differs
//!
//! tegula has no extern functions (no libdevice, no linking of bitcode: the interpreter could
//! not run them, and it is the oracle every backend is tested against). Its math library
//! (`tegula_ir::mathlib`) has `asin` and the rest of libdevice's common set as builtins
//! instead: one algorithm both backends run operation for operation, so the interpreter and
//! the GPU give the same bits. `asin` computes in f32 arithmetic, with no f64 operation and no
//! approximate instruction: a degree-5 minimax polynomial in `x^2` for `|x| <= 1/2`, and
//! `pi/2 - 2 asin(sqrt((1 - |x|) / 2))` above, the square root from a bit-pattern estimate,
//! two Newton steps and a residual, pi/2 in two pieces and the last sums split exactly. That
//! is about 51 SASS instructions an element (fma, mul, add, select; a few integer ones), all
//! at the f32 rate, where an evaluation in f64 would be bound by f64 throughput. Its error is
//! at most 0.5476 ulp over every f32 input (0.5 would be correctly rounded; neither is
//! libdevice's `__nv_asinf`). `__nv_asinf` takes about 18 instructions an element, its
//! square root one `sqrt.approx`, which the interpreter could not reproduce bit for bit: at
//! the tutorial's size the port's extra arithmetic is as long as its memory traffic, which is
//! why it trails Triton's (BENCHMARKS.md). The harness compares with torch's `asin` within
//! 1e-6.
#![allow(non_snake_case)]

use crate::common;
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::Result;

#[tegula::kernel]
pub fn asin_kernel(
    x_ptr: Ptr<f32>,
    y_ptr: Ptr<f32>,
    n_elements: i32,
    #[constexpr] BLOCK_SIZE: usize,
) {
    let pid = program_id(0);
    let block_start = pid * BLOCK_SIZE;
    let offsets = block_start + arange(0, BLOCK_SIZE as i64);
    let mask = offsets.lt(n_elements);
    let x = load_masked(x_ptr + offsets, mask);
    let x = asin(x);
    store(y_ptr + offsets, x, mask);
}

const OP: &str = "tutorial-07-extern-functions";

/// The tutorial's `BLOCK_SIZE=1024`.
pub const ASIN_BLOCK_SIZE: usize = 1024;

/// The harness's launch: `asin_kernel[grid](x, out, n, BLOCK_SIZE=1024)` into `out`.
pub fn asin_into(x: &Tensor<f32>, out: &Tensor<f32>) -> Result<()> {
    common::expect_contiguous(OP, "x", x)?;
    common::expect_shape(OP, "out", out, x.shape())?;
    common::expect_contiguous(OP, "out", out)?;
    common::expect_same_device(OP, x, out)?;
    let n = common::as_i32(OP, "n_elements", x.numel())?;
    if n == 0 {
        return Ok(());
    }
    let grid = common::cdiv(n as usize, ASIN_BLOCK_SIZE);
    asin_kernel::launch(x.device(), grid, x, out, n, ASIN_BLOCK_SIZE)
}

/// `asin(x)` in a new tensor.
pub fn asin_tensor(x: &Tensor<f32>) -> Result<Tensor<f32>> {
    let out = x.device().empty::<f32>(x.shape())?;
    asin_into(x, &out)?;
    Ok(out)
}

/// Tolerances `(atol, rtol)` of the port against float64: `asin` is within 0.5476 ulp in f32
/// (docs/semantics.md), and an ulp of a value `v` is at most `2^-23 |v|`.
pub const TOLERANCE: (f64, f64) = (1e-45, 1.1 / (1u64 << 24) as f64);

fn check(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let n = common::dim(shape, 0, 98432);
    // The harness's inputs: torch.rand(n) * 2 - 1.
    let x = dev.rand_uniform::<f32>([n], -1.0, 1.0)?;
    let y = asin_tensor(&x)?;
    let want: Vec<f64> = x.to_f64_vec()?.iter().map(|v| v.asin()).collect();
    Ok(common::compare(
        OP,
        format!("n={n}"),
        DType::F32,
        &y.to_f64_vec()?,
        &want,
        TOLERANCE,
    ))
}

fn bench(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    let n = common::dim(shape, 0, 1 << 24);
    let x = dev.rand_uniform::<f32>([n], -1.0, 1.0)?;
    let out = dev.empty::<f32>([n])?;
    Ok(Bench {
        // about twelve operations an element, as an f32 asin counts them (tegula's does
        // about fifty, fma, mul, add and select alike)
        flops: 12.0 * n as f64,
        bytes: 8.0 * n as f64,
        input_copies: 1,
        launch: Box::new(move || asin_into(&x, &out)),
    })
}

/// The registry entry: the harness's `07-extern-asin` at `n=16777216`, fp32.
pub fn tutorials() -> Vec<Port> {
    vec![Port {
        name: "tutorial-07-extern-asin",
        about: "y = asin(x) elementwise (libdevice in Triton; tegula's correctly rounded builtin)",
        dims: &["n"],
        default_shape: &[98432],
        bench_shapes: &[BenchShape {
            label: "n=16777216",
            dims: &[1 << 24],
        }],
        dtypes: &[DType::F32],
        check,
        bench,
    }]
}
