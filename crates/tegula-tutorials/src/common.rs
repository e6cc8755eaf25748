//! What every port shares: contract checks with typed errors, comparison with float64
//! references, random inputs, and the autotuner plumbing of the tutorials that tune.

use crate::CheckReport;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tegula::autotune::{Autotuner, Config, Source, Target, Tuning};
use tegula::ir::{DType, Element};
use tegula::{Device, Error, Result, Tensor};

/// `triton.cdiv`.
pub fn cdiv(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

/// `triton.next_power_of_2`.
pub fn next_power_of_2(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// An error about the caller's arguments, in words.
pub fn invalid(op: &str, message: impl Into<String>) -> Error {
    Error::Invalid {
        op: op.to_string(),
        message: message.into(),
    }
}

/// A size as the `i32` the kernels take, or a typed error.
pub fn as_i32(op: &str, name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| invalid(op, format!("`{name}` = {v} does not fit in i32")))
}

/// The tutorial's `assert x.is_contiguous()`, as a typed error.
pub fn expect_contiguous<T: Element>(op: &str, name: &str, t: &Tensor<T>) -> Result<()> {
    if t.is_contiguous() {
        return Ok(());
    }
    Err(Error::Stride {
        op: op.to_string(),
        message: format!(
            "`{name}` must be contiguous row-major, got shape {:?} strides {:?}",
            t.shape(),
            t.strides()
        ),
    })
}

/// `tensor` must have exactly `shape`.
pub fn expect_shape<T: Element>(
    op: &str,
    name: &str,
    t: &Tensor<T>,
    shape: &[usize],
) -> Result<()> {
    if t.shape() == shape {
        return Ok(());
    }
    Err(Error::Shape {
        op: op.to_string(),
        message: format!("`{name}` must have shape {shape:?}, got {:?}", t.shape()),
    })
}

/// `tensor` must have rank `rank`.
pub fn expect_rank<T: Element>(op: &str, name: &str, t: &Tensor<T>, rank: usize) -> Result<()> {
    if t.rank() == rank {
        return Ok(());
    }
    Err(Error::Shape {
        op: op.to_string(),
        message: format!("`{name}` must have rank {rank}, got shape {:?}", t.shape()),
    })
}

/// The tutorial's `assert x.device == y.device`, as a typed error.
pub fn expect_same_device<A: Element, B: Element>(
    op: &str,
    a: &Tensor<A>,
    b: &Tensor<B>,
) -> Result<()> {
    if a.device().id() == b.device().id() {
        return Ok(());
    }
    Err(Error::Device {
        op: op.to_string(),
        message: format!(
            "the tensors are on different devices: {} and {}",
            a.device().name(),
            b.device().name()
        ),
    })
}

/// The largest element offset a kernel computes for `t` and each stride must fit the `i32`
/// offsets the tutorials use (as Triton's do: its pointer arithmetic is in i32 unless an
/// argument is i64).
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

/// The strides of a 2-D tensor as the `i32`s the kernels take (checked by
/// [`expect_i32_extent`] first).
pub fn strides2<T: Element>(t: &Tensor<T>) -> (i32, i32) {
    (t.strides()[0] as i32, t.strides()[1] as i32)
}

/// Compares `got` with the float64 `want` elementwise: passes when every
/// `|got - want| <= atol + rtol * |want|`.
pub fn compare(
    kernel: &str,
    shape: String,
    dtype: DType,
    got: &[f64],
    want: &[f64],
    tol: (f64, f64),
) -> CheckReport {
    let magnitude: Vec<f64> = want.iter().map(|w| w.abs()).collect();
    compare_scaled(kernel, shape, dtype, got, want, &magnitude, tol)
}

/// Compares `got` with `want` against a bound scaled by `magnitude` (the sum of the absolute
/// values of the terms that make up each element): passes when every
/// `|got - want| <= atol + rtol * magnitude`. Rounding the terms of a sum moves it by at most
/// a unit roundoff times that magnitude, also where the terms cancel.
pub fn compare_scaled(
    kernel: &str,
    shape: String,
    dtype: DType,
    got: &[f64],
    want: &[f64],
    magnitude: &[f64],
    (atol, rtol): (f64, f64),
) -> CheckReport {
    let mut max_abs_err = 0.0f64;
    let mut worst_ratio = if got.len() == want.len() && want.len() == magnitude.len() {
        0.0f64
    } else {
        f64::INFINITY
    };
    for ((g, w), m) in got.iter().zip(want).zip(magnitude) {
        let err = (g - w).abs();
        if err.is_nan() {
            max_abs_err = f64::INFINITY;
            worst_ratio = f64::INFINITY;
            continue;
        }
        max_abs_err = max_abs_err.max(err);
        worst_ratio = worst_ratio.max(err / (atol + rtol * m));
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

/// The report of several outputs: the worst of them (its shape text names the output), with
/// the largest absolute error of all.
pub fn worst(reports: Vec<CheckReport>) -> CheckReport {
    let max_abs_err = reports.iter().map(|r| r.max_abs_err).fold(0.0, f64::max);
    let mut w = reports
        .into_iter()
        .reduce(|a, b| if b.worst_ratio > a.worst_ratio { b } else { a })
        .unwrap_or(CheckReport {
            kernel: String::new(),
            shape: "nothing compared".into(),
            dtype: DType::F32,
            max_abs_err: f64::INFINITY,
            worst_ratio: f64::INFINITY,
            atol: 0.0,
            rtol: 0.0,
        });
    w.max_abs_err = w.max_abs_err.max(max_abs_err);
    w
}

/// Row-major float64 product `a[m, k] @ b[k, n]`.
pub fn matmul_f64(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p];
            for (cv, bv) in c[i * n..(i + 1) * n].iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *cv += av * bv;
            }
        }
    }
    c
}

/// Row-major float64 `|a| @ |b|`: the magnitude of each element of `a @ b`.
pub fn abs_matmul_f64(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    matmul_f64(&abs(a), &abs(b), m, k, n)
}

/// Tolerances `(atol, rtol)` of a product with inner dimension `k` stored in `output`: f16
/// products are exact in the f32 accumulator, whose sum errs by about `sqrt(k)` ulps of the
/// magnitude, and the result is rounded once to `output`.
pub fn dot_tolerance(output: DType, k: usize) -> (f64, f64) {
    let accumulate = 2f64.powi(-22) * (k.max(1) as f64).sqrt();
    let round = match output {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        DType::F8E4M3 => 2f64.powi(-3),
        DType::F8E5M2 => 2f64.powi(-2),
        _ => 0.0,
    };
    (1e-6, accumulate + round)
}

/// The shape text of a report: `M=37 N=131`.
pub fn describe(dims: &[&str], shape: &[usize]) -> String {
    dims.iter()
        .zip(shape)
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `i`-th size of `shape`, or `default` where the caller gave fewer.
pub fn dim(shape: &[usize], i: usize, default: usize) -> usize {
    shape.get(i).copied().unwrap_or(default)
}

fn memo() -> &'static Mutex<HashMap<String, Config>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Config>>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `@triton.autotune(configs, key)`: the config of `kernel` for `key` on `dev`. From this
/// process's memo, else from tegula's tuner, which gets the request `tuning` builds (called
/// only on a miss: the candidate list and the Tile IR that hashes the source) and times the
/// candidates with `bench` when its cache has no winner. On the interpreter, the first
/// candidate, as with `TEGULA_AUTOTUNE=off`.
pub fn autotune<'a>(
    dev: &Device,
    kernel: &str,
    key: &str,
    tuning: impl FnOnce() -> Result<Tuning<'a>>,
    bench: impl FnMut(&Config) -> Result<f64>,
) -> Result<Config> {
    // Per device: a recording device standing for a GPU answers as that GPU, not as the
    // interpreter whose backend it shares; a pinned config (`tegula bench --config`) apart.
    let pin = tegula::autotune::pinned().map(|c| c.to_string());
    let memo_key = format!("{kernel}|{key}|{:?}|{}|{pin:?}", dev.backend(), dev.id());
    let lock = || memo().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(hit) = lock().get(&memo_key) {
        return Ok(hit.clone());
    }
    let tuning = tuning()?;
    let target = Target::of(dev);
    let tuned = Autotuner::global().tune_for(&target, &tuning, bench)?;
    if target.tunable {
        let how = match tuned.source {
            Source::Tuned { ms, timed } => format!(
                "tuned now ({timed} of {} timed, best {ms:.4} ms; {:.2} s compiling, {:.2} s \
                 timing)",
                tuning.configs.len(),
                tuned.compile_s,
                tuned.timing_s
            ),
            Source::Cached { ms } => format!("from the autotune cache ({ms:.4} ms when tuned)"),
            Source::Default => {
                "the default (TEGULA_AUTOTUNE=off or cached without an entry)".into()
            }
            Source::Pinned => "pinned (--config)".into(),
        };
        eprintln!("tegula: {kernel} [{key}]: {} {how}", tuned.config);
        for (c, why) in &tuned.dropped {
            let first = why.lines().next().unwrap_or("");
            eprintln!("tegula: {kernel} [{key}]: dropped {c}: {first}");
        }
    }
    lock().insert(memo_key, tuned.config.clone());
    Ok(tuned.config)
}

/// `triton.Config({..}, num_warps=w, num_stages=s)`.
pub fn config(constexprs: &[(&str, i64)], num_warps: u32, num_stages: u32) -> Config {
    constexprs
        .iter()
        .fold(Config::new(num_warps, num_stages), |c, &(k, v)| {
            c.with(k, v)
        })
}

/// The value of constexpr `name` of a config as a `usize`, or a typed error.
pub fn cx(c: &Config, name: &str) -> Result<usize> {
    c.usize(name)
}
