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
//! | `from triton.language.extra import libdevice`, `libdevice.asin(x)` | [`asin`], written here over tiles (see below) |
//! | `asin_kernel[grid](x, out, n, BLOCK_SIZE=1024)` | `asin_kernel::launch(dev, grid, &x, &out, n, 1024)` |
//!
//! # What differs
//!
//! tegula has no extern functions: no libdevice, no linking of bitcode, and no `asin` among
//! its math ops. The port computes `asin` from the ops it has (`abs`, `sqrt`, `select`,
//! arithmetic), with the single-precision algorithm of Cephes's `asinf`: a degree-4
//! polynomial in `z = x^2` on `|x| <= 0.5`, and on `0.5 < |x| <= 1` the identity
//! `asin(x) = pi/2 - 2 asin(sqrt((1 - x) / 2))`, good to 2.5e-7 relative (the harness
//! compares with torch's `asin` within 1e-6). Out-of-range inputs give NaN, as libdevice's.
//! The sign of zero is not kept (`asin(-0)` is `+0`).
#![allow(non_snake_case)]

use crate::common;
use crate::{Bench, BenchShape, CheckReport, Tutorial};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::Result;

/// `libdevice.asin` for f32 tiles.
// workaround: extern functions (libdevice.asin, `extern_libs`) are missing, and so is an
// asin op; this is Cephes's asinf over tiles.
pub fn asin(x: Tile) -> Tile {
    let a = abs(x);
    // 0.5 < |x|: asin(a) = pi/2 - 2 asin(sqrt((1 - a) / 2)).
    let flag = a.gt(0.5);
    let z_big = 0.5 * (1.0 - a);
    let xs = select(flag, sqrt(z_big), a);
    let z = select(flag, z_big, a * a);
    let p = ((((4.2163199048E-2 * z + 2.4181311049E-2) * z + 4.5470025998E-2) * z
        + 7.4953002686E-2)
        * z
        + 1.6666752422E-1)
        * z
        * xs
        + xs;
    let r = select(flag, std::f64::consts::FRAC_PI_2 - (p + p), p);
    // Tiny |x|: asin(x) = x to f32 precision.
    let r = select(a.lt(1.0e-4), a, r);
    // Outside [-1, 1]: NaN.
    let r = select(a.gt(1.0), f32::NAN, r);
    select(x.lt(0), -r, r)
}

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
    let x = load(x_ptr + offsets, mask, 0);
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

/// Tolerances `(atol, rtol)` of the port against float64: Cephes gives the peak relative
/// error of its `asinf` as 2.5e-7 (about four f32 ulps where `pi/2 - 2p` cancels); the bound
/// allows 3e-7.
pub const TOLERANCE: (f64, f64) = (1e-30, 3e-7);

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
        // about twelve operations an element (the polynomial, the reduction, the selects)
        flops: 12.0 * n as f64,
        bytes: 8.0 * n as f64,
        launch: Box::new(move || asin_into(&x, &out)),
    })
}

/// The registry entry: the harness's `07-extern-asin` at `n=16777216`, fp32.
pub fn tutorials() -> Vec<Tutorial> {
    vec![Tutorial {
        name: "tutorial-07-extern-asin",
        about: "y = asin(x) elementwise (libdevice in Triton; Cephes's asinf over tiles here)",
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
