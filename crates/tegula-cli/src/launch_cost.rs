//! `tegula launch-cost`: what a launch costs on the host.
//!
//! - First launch of a new specialization: trace, lowering to PTX, driver JIT (or the disk cache),
//!   and the launch itself, per library kernel, timed in phases.
//! - Cached launch: host time of `Device::launch` for a specialization already compiled, against
//!   a raw driver launch of the same loaded function with the same packed arguments.

use std::time::Instant;
use tegula::ir::{passes, DType};
use tegula::{Device, Error, Grid, KernelArg, Launch, LaunchConfig, Result, TensorArg};

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Phases of a first launch for one library kernel at its default shape.
fn first_launch(dev: &Device, name: &str, dtype: DType) -> Result<()> {
    let k = crate::library::find(name)?;
    let shape = k.default_shape.to_vec();
    let t = Instant::now();
    let mut kernel = (k.trace)(&shape, dtype)?;
    passes::canonicalize(&mut kernel);
    let trace_ms = ms(t);
    let t = Instant::now();
    let target = tegula_ptx::Target { sm: 90 };
    let compiled = tegula_ptx::compile(&kernel, &target, &Default::default())?;
    let lower_ms = ms(t);
    // The driver JIT of that PTX (cold unless the disk cache or the driver's cache has it).
    let jit_ms = match dev.cuda_runtime() {
        Some(runtime) => {
            let t = Instant::now();
            runtime.load(&compiled.ptx, &compiled.entry, &|_| None)?;
            Some(ms(t))
        }
        None => None,
    };
    let jit = jit_ms.map_or("   (no GPU)".to_string(), |j| format!("{j:>8.2} ms"));
    let total = trace_ms + lower_ms + jit_ms.unwrap_or(0.0);
    println!(
        "{:<12} {:<5} trace {:>6.2} ms  lower {:>6.2} ms ({:>5} PTX lines)  JIT {}  total {:>7.2} ms",
        name,
        dtype.name(),
        trace_ms,
        lower_ms,
        compiled.ptx.lines().count(),
        jit,
        total
    );
    Ok(())
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
        "first launch of a new specialization at the default shapes (trace + lower + JIT; \
         set TEGULA_CACHE_DIR=off and CUDA_CACHE_DISABLE=1 for a cold JIT):"
    );
    for (name, dtype) in [
        ("vector_add", DType::F32),
        ("softmax", DType::BF16),
        ("layer_norm", DType::BF16),
        ("rms_norm", DType::BF16),
        ("gemv", DType::F16),
        ("matmul", DType::BF16),
        ("attention", DType::BF16),
    ] {
        first_launch(&dev, name, dtype)?;
    }
    if dev.cuda_runtime().is_some() {
        cached_launch(&dev)?;
    }
    Ok(true)
}
