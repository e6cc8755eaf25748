//! `tegula launch-cost`: what a launch costs on the host; and the library calls it measures,
//! which `tegula ptx` prints.
//!
//! - First launch of a new specialization: the library's host wrapper called at a realistic
//!   shape on a recording device (tracing), lowering to PTX, driver JIT (or the disk cache),
//!   per kernel, timed in phases. The kernel compiled is the one a user's call compiles: the
//!   wrapper's own arguments and untuned default config, tensors 16-byte aligned as GPU
//!   allocations are ([`tegula::specialize`]).
//! - Cached launch: host time of `Device::launch` for a specialization already compiled, against
//!   a raw driver launch of the same loaded function with the same packed arguments.

use std::time::Instant;
use tegula::ir::{DType, Element};
use tegula::{
    Device, Error, Grid, KernelArg, Launch, LaunchConfig, RecordedLaunch, Result, Tensor, TensorArg,
};
use tegula_kernels::{attention, gemv, matmul, norm, softmax, vector_add};

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The SM count recorded calls size their grids for (persistent kernels pass trips per
/// program as arguments, whose facts the specialization reads): an H200's.
const H200_SMS: usize = 132;

/// The kernels `launch-cost` measures, each at the shape a user would launch (in the order of
/// the library entry's `--shape` dimensions).
pub const REALISTIC: &[(&str, DType, &[usize])] = &[
    ("vector_add", DType::F32, &[16 << 20]),
    ("softmax", DType::BF16, &[4096, 4096]),
    ("layer_norm", DType::BF16, &[4096, 4096]),
    ("rms_norm", DType::BF16, &[4096, 4096]),
    ("gemv", DType::F16, &[8192, 8192]),
    ("matmul", DType::BF16, &[4096, 4096, 4096]),
    // B, H, HKV, NQ, NK, D, CAUSAL
    ("attention", DType::BF16, &[4, 32, 32, 4096, 4096, 64, 0]),
];

/// The realistic dtype and shape of a kernel of [`REALISTIC`].
pub fn realistic(name: &str) -> Option<(DType, &'static [usize])> {
    REALISTIC
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, dtype, shape)| (dtype, shape))
}

/// The launches the library's host wrapper for `name` makes at `shape` (`--shape` order) and
/// `dtype`, recorded, not run: the traced kernels with their arguments and configs.
pub fn record(name: &str, shape: &[usize], dtype: DType) -> Result<Vec<RecordedLaunch>> {
    let dev = Device::recording(H200_SMS);
    call_typed(&dev, name, shape, dtype)?;
    Ok(dev.take_recorded())
}

/// Calls the host wrapper of `name` for `dtype` on `dev`.
fn call_typed(dev: &Device, name: &str, shape: &[usize], dtype: DType) -> Result<()> {
    match dtype {
        DType::F32 => call::<f32>(dev, name, shape),
        DType::F16 => call::<half::f16>(dev, name, shape),
        DType::BF16 => call::<half::bf16>(dev, name, shape),
        other => Err(Error::Invalid {
            op: format!("tegula {name}"),
            message: format!("no recorded call for dtype {other}"),
        }),
    }
}

/// Calls the host wrapper of `name` on `dev` with tensors of `shape`.
fn call<T: Element>(dev: &Device, name: &str, shape: &[usize]) -> Result<()> {
    let dim = |i: usize| shape.get(i).copied().unwrap_or(1);
    let t = |s: &[usize]| -> Result<Tensor<T>> { dev.empty::<T>(s.to_vec()) };
    let (m, n) = (dim(0), dim(1));
    match name {
        "vector_add" => vector_add::vector_add(&t(&[m])?, &t(&[m])?).map(drop),
        "softmax" => softmax::softmax(&t(&[m, n])?).map(drop),
        "layer_norm" => norm::layer_norm(&t(&[m, n])?, &t(&[n])?, &t(&[n])?, 1e-5).map(drop),
        "rms_norm" => norm::rms_norm(&t(&[m, n])?, &t(&[n])?, 1e-5).map(drop),
        "gemv" => gemv::gemv(&t(&[m, n])?, &t(&[n])?).map(drop),
        "matmul" => matmul::matmul(&t(&[m, dim(2)])?, &t(&[dim(2), n])?).map(drop),
        "attention" => {
            let (b, h, hkv, nq, nk, d) = (dim(0), dim(1), dim(2), dim(3), dim(4), dim(5));
            let options = attention::AttentionOptions {
                causal: dim(6) != 0,
                ..Default::default()
            };
            let (q, k, v) = (
                t(&[b, h, nq, d])?,
                t(&[b, hkv, nk, d])?,
                t(&[b, hkv, nk, d])?,
            );
            attention::forward(&q, &k, &v, &options).map(drop)
        }
        other => Err(Error::Invalid {
            op: "tegula".into(),
            message: format!("no recorded host call for `{other}`"),
        }),
    }
}

/// Phases of a first launch for one library kernel at its realistic shape; one line per
/// launch its host wrapper makes.
fn first_launch(dev: &Device, name: &str, dtype: DType, shape: &[usize]) -> Result<()> {
    let launches = record(name, shape, dtype)?;
    let target = tegula_ptx::Target { sm: 90 };
    for launch in &launches {
        let trace_ms = launch.trace_ms;
        let t = Instant::now();
        let compiled = launch.compile(&target)?;
        let lower_ms = ms(t);
        // The driver JIT of that PTX (cold unless the disk cache or the driver's cache has it).
        // Without a GPU, a local ptxas run stands in for it (it takes about as long).
        let (jit_ms, jit_label) = match dev.cuda_runtime() {
            Some(runtime) => {
                let t = Instant::now();
                runtime.load(&compiled.ptx, &compiled.entry, &|_| None)?;
                (Some(ms(t)), "JIT")
            }
            None => (local_ptxas_ms(&compiled.ptx), "ptxas"),
        };
        let jit = jit_ms.map_or("   (no GPU, no ptxas)".to_string(), |j| {
            format!("{j:>8.2} ms")
        });
        let total = trace_ms + lower_ms + jit_ms.unwrap_or(0.0);
        println!(
            "{:<12} {:<5} {:<28} warps {} stages {}  trace {:>6.2} ms  lower {:>6.2} ms \
             ({:>5} PTX lines)  {} {}  total {:>7.2} ms",
            name,
            dtype.name(),
            launch.kernel.name,
            launch.config.num_warps,
            launch.config.num_stages,
            trace_ms,
            lower_ms,
            compiled.ptx.lines().count(),
            jit_label,
            jit,
            total
        );
    }
    Ok(())
}

/// Milliseconds of one local `ptxas -v` run on `ptx` (sm_90a), process start included; `None`
/// without ptxas or when it fails.
fn local_ptxas_ms(ptx: &str) -> Option<f64> {
    let ptxas = tegula_ptx::ptxas::find()?;
    let dir = std::env::temp_dir().join(format!("tegula-launch-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let t = Instant::now();
    let assembled = tegula_ptx::ptxas::assemble(&ptxas, ptx, 90, &dir, "kernel");
    let elapsed = ms(t);
    let _ = std::fs::remove_dir_all(&dir);
    assembled.ok().map(|_| elapsed)
}

/// Host microseconds per launch: through `Device::launch` and raw, for a one-block kernel.
fn cached_launch(dev: &Device) -> Result<()> {
    let runtime = dev.cuda_runtime().ok_or_else(|| Error::Invalid {
        op: "launch-cost".into(),
        message: "the cached-launch measurement needs a GPU".into(),
    })?;
    let n = 256usize;
    let x = dev.randn::<f32>([n])?;
    let y = dev.randn::<f32>([n])?;
    let out = dev.empty::<f32>([n])?;
    let trace = || tegula_kernels::vector_add::add_kernel::trace::<f32>(1024);
    let args = || {
        vec![
            (&x).kernel_arg(),
            (&y).kernel_arg(),
            (&out).kernel_arg(),
            KernelArg::Int {
                dtype: DType::I32,
                value: n as i64,
            },
        ]
    };
    let launch = || Launch {
        name: "add_kernel",
        key: "block=1024, T=F32".into(),
        trace: &trace,
        grid: Grid::from(1u32),
        config: LaunchConfig::default(),
        args: args(),
    };
    let compiled = dev.compiled(&launch())?;
    let params = compiled.pack(&args())?;
    let block = [compiled.compiled.num_threads, 1, 1];
    let iters = 20_000;
    for _ in 0..100 {
        dev.launch(launch())?;
    }
    dev.synchronize()?;
    let t = Instant::now();
    for _ in 0..iters {
        runtime.launch(&compiled.loaded, [1, 1, 1], block, 0, &params)?;
    }
    let raw_us = ms(t) * 1e3 / iters as f64;
    dev.synchronize()?;
    let t = Instant::now();
    for _ in 0..iters {
        dev.launch(launch())?;
    }
    let full_us = ms(t) * 1e3 / iters as f64;
    dev.synchronize()?;
    println!(
        "cached launch of a one-block kernel: Device::launch {full_us:.2} us, raw driver launch {raw_us:.2} us, \
         tegula adds {:.2} us per launch",
        full_us - raw_us
    );
    Ok(())
}

pub fn run() -> Result<bool> {
    let dev = Device::default()?;
    println!(
        "first launch of a new specialization at realistic shapes, as the library's wrapper \
         compiles it (untuned default config, aligned tensors; trace + lower + JIT; set \
         TEGULA_CACHE_DIR=off and CUDA_CACHE_DISABLE=1 for a cold JIT; without a GPU a local \
         ptxas run stands in for the JIT):"
    );
    for &(name, dtype, shape) in REALISTIC {
        first_launch(&dev, name, dtype, shape)?;
    }
    if dev.cuda_runtime().is_some() {
        cached_launch(&dev)?;
    }
    Ok(true)
}
