//! Vector addition `out = x + y` (Triton tutorial 01), generic over the element type.

use crate::check;
use crate::{CheckReport, LibraryKernel};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

/// Elements per program.
pub const BLOCK: usize = 1024;

/// Each program adds one block of `block` elements; the mask covers the ragged tail.
#[tegula::kernel]
pub fn add_kernel<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    out: Ptr<T>,
    n: i32,
    #[constexpr] block: usize,
) {
    let pid = program_id(0);
    let offsets = pid * block + arange(0, block as i64);
    let mask = offsets.lt(n);
    let xv = load(x + offsets, mask, 0);
    let yv = load(y + offsets, mask, 0);
    store(out + offsets, xv + yv, mask);
}

const OP: &str = "vector_add";

/// `out = x + y` elementwise into `out`. Contract: the three tensors have one shape, are
/// contiguous and live on one device; `out` shares no memory with `x` or `y`. Integer dtypes
/// wrap on overflow; floats round once in `T`.
pub fn vector_add_into<T: Element>(x: &Tensor<T>, y: &Tensor<T>, out: &Tensor<T>) -> Result<()> {
    let n = check_inputs(x, y)?;
    check::expect_shape(OP, "out", out, x.shape())?;
    check::expect_contiguous(OP, "out", out)?;
    check::expect_same_device(OP, ("x", x), ("out", out))?;
    check::expect_no_alias(OP, ("out", out), ("x", x))?;
    check::expect_no_alias(OP, ("out", out), ("y", y))?;
    if n == 0 {
        return Ok(());
    }
    add_kernel::launch::<T>(x.device(), x.numel().div_ceil(BLOCK), x, y, out, n, BLOCK)
}

/// The contract on the inputs; the element count as the kernel's i32.
fn check_inputs<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<i32> {
    check::expect_shape(OP, "y", y, x.shape())?;
    check::expect_contiguous(OP, "x", x)?;
    check::expect_contiguous(OP, "y", y)?;
    check::expect_same_device(OP, ("x", x), ("y", y))?;
    check::as_i32(OP, "numel", x.numel())
}

/// `x + y` in a new tensor (see [`vector_add_into`] for the contract). The inputs are checked
/// before the output is allocated.
pub fn vector_add<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<Tensor<T>> {
    check_inputs(x, y)?;
    let out = x.device().empty::<T>(x.shape())?;
    vector_add_into(x, y, &out)?;
    Ok(out)
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let n = shape.first().copied().unwrap_or(1);
    let x = dev.randn::<T>([n])?;
    let y = dev.randn::<T>([n])?;
    let out = vector_add(&x, &y)?;
    let want: Vec<f64> = x
        .to_f64_vec()?
        .iter()
        .zip(y.to_f64_vec()?)
        .map(|(a, b)| a + b)
        .collect();
    // One rounding of an exact sum: half an ulp of the output dtype.
    let tol = match T::DTYPE {
        DType::F16 => (1e-7, 2f64.powi(-11)), // atol: f16 subnormals have absolute spacing 2^-24
        DType::BF16 => (1e-30, 2f64.powi(-8)),
        DType::F32 => (1e-30, 2f64.powi(-24)),
        _ => (1e-300, 1e-15),
    };
    Ok(check::compare(
        OP,
        format!("N={n}"),
        T::DTYPE,
        &out.to_f64_vec()?,
        &want,
        tol,
    ))
}

fn check_entry(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::F16 => check_typed::<f16>(dev, shape),
        DType::BF16 => check_typed::<bf16>(dev, shape),
        DType::F64 => check_typed::<f64>(dev, shape),
        _ => check_typed::<f32>(dev, shape),
    }
}

fn trace_entry(_shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    match dtype {
        DType::F16 => add_kernel::trace::<f16>(BLOCK),
        DType::BF16 => add_kernel::trace::<bf16>(BLOCK),
        DType::F64 => add_kernel::trace::<f64>(BLOCK),
        _ => add_kernel::trace::<f32>(BLOCK),
    }
}

/// The library entry.
pub fn entry() -> LibraryKernel {
    LibraryKernel {
        name: "vector_add",
        about: "out = x + y, one block of 1024 elements per program",
        dims: &["N"],
        default_shape: &[10_007],
        dtypes: &[DType::F32, DType::F16, DType::BF16, DType::F64],
        check: check_entry,
        trace: trace_entry,
    }
}
