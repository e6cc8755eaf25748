//! Shared pieces of the host wrappers: contract checks with typed errors, comparison with
//! float64 references, and the grids of persistent kernels.

use crate::CheckReport;
use tegula::ir::{DType, Element};
use tegula::{Device, Error, Result, Tensor};

/// The SMs of `dev`'s GPU (or of the GPU a recording device stands for), or `interpreter` on
/// the interpreter, which has none (small counts
/// make the CPU runs of persistent kernels take several trips; a GPU's count makes shape rules
/// decide as they would there).
pub fn sm_count(dev: &Device, interpreter: usize) -> usize {
    dev.sm_count().unwrap_or(interpreter)
}

/// A persistent grid over `blocks` blocks of work with at most `max_programs` programs:
/// `(programs, trips)`. The fewest trips per program that fit, then the fewest programs that
/// still give every program that many trips (bar the last), so no program runs a trip more
/// than the others while most sit idle.
pub fn persistent_grid(blocks: usize, max_programs: usize) -> (usize, usize) {
    let trips = blocks.div_ceil(max_programs.max(1)).max(1);
    (blocks.div_ceil(trips), trips)
}

/// Tolerances `(atol, rtol)` for outputs computed from inputs of `dtype` with f32 accumulation.
/// f16/bf16 inputs are exact in the reference (it reads the same rounded values), so the error
/// comes from f32 accumulation and from rounding the output to the dtype.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (2e-3, 2e-3),
        DType::BF16 => (1.6e-2, 1.6e-2),
        DType::F64 => (1e-10, 1e-10),
        _ => (1e-4, 1e-4),
    }
}

/// Compares `got` with the float64 `want` elementwise.
pub fn compare(
    kernel: &str,
    shape: String,
    dtype: DType,
    got: &[f64],
    want: &[f64],
    (atol, rtol): (f64, f64),
) -> CheckReport {
    let mut max_abs_err = 0.0f64;
    let mut worst_ratio = if got.len() == want.len() {
        0.0f64
    } else {
        f64::INFINITY
    };
    for (g, w) in got.iter().zip(want) {
        let err = (g - w).abs();
        let ratio = if err.is_nan() {
            f64::INFINITY
        } else {
            err / (atol + rtol * w.abs())
        };
        max_abs_err = max_abs_err.max(if err.is_nan() { f64::INFINITY } else { err });
        worst_ratio = worst_ratio.max(ratio);
    }
    CheckReport {
        kernel: kernel.to_string(),
        shape,
        dtype,
        max_abs_err,
        worst_ratio,
        atol,
        rtol,
    }
}

/// `tensor` must have exactly `shape`.
pub fn expect_shape<T: Element>(
    op: &str,
    name: &str,
    t: &Tensor<T>,
    shape: &[usize],
) -> Result<()> {
    if t.shape() != shape {
        return Err(Error::Shape {
            op: op.to_string(),
            message: format!("`{name}` must have shape {shape:?}, got {:?}", t.shape()),
        });
    }
    Ok(())
}

/// `tensor` must be contiguous along its last axis (stride 1), the layout the kernels vectorize.
pub fn expect_unit_last_stride<T: Element>(op: &str, name: &str, t: &Tensor<T>) -> Result<()> {
    if t.rank() > 0 && t.shape()[t.rank() - 1] > 1 && t.strides()[t.rank() - 1] != 1 {
        return Err(Error::Stride {
            op: op.to_string(),
            message: format!(
                "`{name}` must have unit stride along its last axis, got strides {:?}",
                t.strides()
            ),
        });
    }
    Ok(())
}

/// `tensor` must be contiguous row-major.
pub fn expect_contiguous<T: Element>(op: &str, name: &str, t: &Tensor<T>) -> Result<()> {
    if !t.is_contiguous() {
        return Err(Error::Stride {
            op: op.to_string(),
            message: format!(
                "`{name}` must be contiguous row-major, got shape {:?} strides {:?}",
                t.shape(),
                t.strides()
            ),
        });
    }
    Ok(())
}

/// Tensors must live on one device; the error names both tensors and their devices
/// (`` `y` is on cpu#2 (interpreter, 2 threads), `x` on cpu#1 (interpreter, 2 threads) ``).
pub fn expect_same_device<A: Element, B: Element>(
    op: &str,
    (a_name, a): (&str, &Tensor<A>),
    (b_name, b): (&str, &Tensor<B>),
) -> Result<()> {
    if a.device().id() != b.device().id() {
        return Err(Error::Device {
            op: op.to_string(),
            message: format!(
                "`{b_name}` is on {}, `{a_name}` on {}",
                b.device().name(),
                a.device().name()
            ),
        });
    }
    Ok(())
}

/// An output must not share memory with an input.
pub fn expect_no_alias<A: Element, B: Element>(
    op: &str,
    output: (&str, &Tensor<A>),
    input: (&str, &Tensor<B>),
) -> Result<()> {
    if output.1.overlaps(input.1) {
        return Err(Error::Aliasing {
            op: op.to_string(),
            output: output.0.to_string(),
            input: input.0.to_string(),
        });
    }
    Ok(())
}

/// A new contiguous output of `shape`, checked before it is allocated: its elements must be
/// countable and their offsets fit the i32 the kernels compute with. Allocating wrappers call
/// it (after checking every input) so that a call they refuse allocates nothing.
pub fn expect_i32_output(op: &str, name: &str, shape: &[usize]) -> Result<()> {
    let numel = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::TooLarge {
            op: op.to_string(),
            message: format!("`{name}` of shape {shape:?} has more than usize::MAX elements"),
        })?;
    as_i32(
        op,
        &format!("the largest offset into `{name}`"),
        numel.saturating_sub(1),
    )?;
    Ok(())
}

/// A size as the i32 the kernels take, or a typed error.
pub fn as_i32(op: &str, name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::Invalid {
        op: op.to_string(),
        message: format!("`{name}` = {v} does not fit in i32"),
    })
}

/// The smallest power of two >= `n` (and >= `min`).
pub fn next_pow2(n: usize, min: usize) -> usize {
    n.max(min).next_power_of_two()
}

/// The element type `T` of a kernel's generic parameter must be one of `allowed`.
pub fn expect_dtype_in<T: Element>(op: &str, name: &str, allowed: &[DType]) -> Result<()> {
    if !allowed.contains(&T::DTYPE) {
        let expected = allowed
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(" or ");
        return Err(Error::DType {
            op: op.to_string(),
            name: name.to_string(),
            expected,
            got: T::DTYPE,
        });
    }
    Ok(())
}

/// `tensor` must have rank `rank`.
pub fn expect_rank<T: Element>(op: &str, name: &str, t: &Tensor<T>, rank: usize) -> Result<()> {
    if t.rank() != rank {
        return Err(Error::Shape {
            op: op.to_string(),
            message: format!("`{name}` must have rank {rank}, got shape {:?}", t.shape()),
        });
    }
    Ok(())
}

/// The largest element offset a kernel computes for `t` (`sum (shape - 1) * stride`) must fit
/// the i32 offsets the kernels use.
pub fn expect_i32_extent<T: Element>(op: &str, name: &str, t: &Tensor<T>) -> Result<()> {
    let extent: usize = t
        .shape()
        .iter()
        .zip(t.strides())
        .map(|(&n, &s)| n.saturating_sub(1) * s)
        .sum();
    as_i32(op, &format!("the largest offset into `{name}`"), extent)?;
    for &s in t.strides() {
        as_i32(op, &format!("a stride of `{name}`"), s)?;
    }
    Ok(())
}

/// Row-major float64 product `a[m, k] @ b[k, n]` for references.
pub fn matmul_f64(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p];
            let row = &b[p * n..(p + 1) * n];
            for (cv, bv) in c[i * n..(i + 1) * n].iter_mut().zip(row) {
                *cv += av * bv;
            }
        }
    }
    c
}
