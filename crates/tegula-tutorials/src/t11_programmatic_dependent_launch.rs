//! Tutorial 11, programmatic dependent launch (PDL): tutorial 01's vector add, written so that
//! on Hopper a kernel may start while the kernel before it in the stream is finishing.
//!
//! # The Triton code
//!
//! `add_kernel` takes a constexpr `USE_GDC`. With it, the kernel calls
//! `tl.extra.cuda.gdc_wait()` before its first load (wait until every program of the prior
//! grid has finished and its memory is visible) and `tl.extra.cuda.gdc_launch_dependents()`
//! after its loads (let the next grid launch early); the host launches it with
//! `launch_pdl=True`, which sets the launch attribute that allows the overlap. Without
//! `USE_GDC` it is tutorial 01's kernel. The harness times both (`11-pdl-add-nogdc`,
//! `11-pdl-add-gdc`).
//!
//! # What maps to what
//!
//! Everything but the grid-dependency control is tutorial 01's mapping (see
//! [`crate::t01_vector_add`]); `USE_GDC: tl.constexpr` is `#[constexpr] USE_GDC: bool`, and
//! `if USE_GDC:` is a Rust `if`, decided at trace time.
//!
//! # What differs
//!
//! tegula has neither `gdc_wait` / `gdc_launch_dependents` (PTX `griddepcontrol`) nor a PDL
//! launch attribute. This port is the tutorial without the PDL path: the kernel keeps
//! `USE_GDC` and its two branches, which emit nothing (a `workaround` note at each), and
//! [`add`] refuses `launch_pdl = true` with a typed error instead of launching something that
//! is not what was asked. The registry has the harness's `11-pdl-add-nogdc` only.
#![allow(non_snake_case)]

use crate::common;
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::Result;

#[tegula::kernel]
pub fn add_kernel(
    x_ptr: Ptr<f32>,
    y_ptr: Ptr<f32>,
    output_ptr: Ptr<f32>,
    n_elements: i32,
    #[constexpr] BLOCK_SIZE: usize,
    #[constexpr] USE_GDC: bool,
) {
    let pid = program_id(0);
    let block_start = pid * BLOCK_SIZE;
    let offsets = block_start + arange(0, BLOCK_SIZE as i64);
    let mask = offsets.lt(n_elements);
    if USE_GDC {
        // GDC wait waits for ALL programs in the the prior kernel to complete before continuing.
        // This ensures any memory operations happen before the wait in program order,
        // e.g. if the prior kernel writes to x or y the new values will be visible.
        // workaround: tl.extra.cuda.gdc_wait (griddepcontrol.wait) is missing; without a PDL
        // launch it has nothing to wait for, and the host never makes one.
    }

    let x = load_masked(x_ptr + offsets, mask);
    let y = load_masked(y_ptr + offsets, mask);
    if USE_GDC {
        // GDC launch dependents hints the runtime system to launch dependent kernels.
        // workaround: tl.extra.cuda.gdc_launch_dependents (griddepcontrol.launch_dependents)
        // is missing; it is only a hint, and without a PDL launch it has no effect.
    }
    let output = x + y;
    store(output_ptr + offsets, output, mask);
}

const OP: &str = "tutorial-11-programmatic-dependent-launch";

/// The tutorial's `BLOCK_SIZE=1024`.
pub const PDL_BLOCK_SIZE: usize = 1024;

/// The launch of `add(x, y, launch_pdl)` into a prepared `output`.
pub fn add_into(
    x: &Tensor<f32>,
    y: &Tensor<f32>,
    output: &Tensor<f32>,
    launch_pdl: bool,
) -> Result<()> {
    if launch_pdl {
        return Err(common::invalid(
            OP,
            "launch_pdl: tegula has no programmatic dependent launch (no launch attribute, no \
             gdc_wait / gdc_launch_dependents)",
        ));
    }
    common::expect_same_device(OP, x, y)?;
    common::expect_same_device(OP, x, output)?;
    common::expect_shape(OP, "y", y, x.shape())?;
    common::expect_shape(OP, "output", output, x.shape())?;
    for (name, t) in [("x", x), ("y", y), ("output", output)] {
        common::expect_contiguous(OP, name, t)?;
    }
    let n_elements = common::as_i32(OP, "n_elements", output.numel())?;
    if n_elements == 0 {
        return Ok(());
    }
    let grid = common::cdiv(n_elements as usize, PDL_BLOCK_SIZE);
    add_kernel::launch(
        x.device(),
        grid,
        x,
        y,
        output,
        n_elements,
        PDL_BLOCK_SIZE,
        launch_pdl, // USE_GDC: set constexpr in kernel to use grid dependence control
    )
}

/// The tutorial's `add(x, y, launch_pdl)`.
pub fn add(x: &Tensor<f32>, y: &Tensor<f32>, launch_pdl: bool) -> Result<Tensor<f32>> {
    let output = x.device().empty::<f32>(x.shape())?;
    add_into(x, y, &output, launch_pdl)?;
    Ok(output)
}

fn check(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let n = common::dim(shape, 0, 98432);
    let x = dev.rand_uniform::<f32>([n], 0.0, 1.0)?;
    let y = dev.rand_uniform::<f32>([n], 0.0, 1.0)?;
    let out = add(&x, &y, false)?;
    let want: Vec<f64> = x
        .to_f64_vec()?
        .iter()
        .zip(y.to_f64_vec()?)
        .map(|(a, b)| a + b)
        .collect();
    Ok(common::compare(
        OP,
        format!("n={n}"),
        DType::F32,
        &out.to_f64_vec()?,
        &want,
        (1e-45, 2f64.powi(-23)),
    ))
}

fn bench(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    let n = common::dim(shape, 0, 1 << 24);
    let x = dev.rand_uniform::<f32>([n], 0.0, 1.0)?;
    let y = dev.rand_uniform::<f32>([n], 0.0, 1.0)?;
    let output = dev.empty::<f32>([n])?;
    Ok(Bench {
        flops: n as f64,
        bytes: 12.0 * n as f64,
        input_copies: 1,
        launch: Box::new(move || add_into(&x, &y, &output, false)),
    })
}

/// The registry entry: the harness's `11-pdl-add-nogdc` at `n=16777216`, fp32.
pub fn tutorials() -> Vec<Port> {
    vec![Port {
        name: "tutorial-11-pdl-add-nogdc",
        about: "tutorial 11's add without grid-dependency control (no PDL in tegula)",
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
