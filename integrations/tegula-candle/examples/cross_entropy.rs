//! The fused cross-entropy beside candle's own ops: checked, then timed.
//!
//!     cargo run --release --example cross_entropy                   # CPU (interpreter), small
//!     cargo run --release --features cuda --example cross_entropy   # GPU: the BENCHMARKS.md rows
//!
//! On the GPU each figure is the mean of 50 calls after 5 warm-ups, the device synchronized
//! around them (wall clock: candle has no event timer in its public API); bandwidth counts the
//! logits read once, the minimum either way.

use candle_core::{DType, Device, Tensor};
use std::time::Instant;
use tegula_candle::cross_entropy;
use tegula_candle::cross_entropy::cross_entropy_reference;

fn time_ms(
    dev: &Device,
    iters: usize,
    f: impl Fn() -> candle_core::Result<Tensor>,
) -> candle_core::Result<f64> {
    for _ in 0..5 {
        f()?;
    }
    dev.synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
    Ok(start.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

fn main() -> candle_core::Result<()> {
    #[cfg(feature = "cuda")]
    let (dev, shapes, iters) = (
        Device::new_cuda(0)?,
        vec![(4096usize, 32000usize), (4096, 128256), (16384, 32000)],
        50,
    );
    #[cfg(not(feature = "cuda"))]
    let (dev, shapes, iters) = (Device::Cpu, vec![(64usize, 2048usize)], 3);
    println!("device: {dev:?}");
    println!(
        "| logits | dtype | tegula fused (ms) | GB/s | candle ops (ms) | speedup | max abs diff |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (n, v) in shapes {
        for dt in [DType::F32, DType::BF16] {
            let logits = (Tensor::randn(0f32, 1f32, (n, v), &dev)? * 3.0)?.to_dtype(dt)?;
            let targets = Tensor::rand(0f32, v as f32, n, &dev)?
                .floor()?
                .to_dtype(DType::U32)?;
            let ours = cross_entropy(&logits, &targets)?;
            let theirs = cross_entropy_reference(&logits, &targets)?;
            let diff = (&ours - &theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let t_ours = time_ms(&dev, iters, || cross_entropy(&logits, &targets))?;
            let t_theirs = time_ms(&dev, iters, || cross_entropy_reference(&logits, &targets))?;
            let bytes = (n * v * dt.size_in_bytes()) as f64;
            println!(
                "| [{n}, {v}] | {dt:?} | {t_ours:.3} | {:.0} | {t_theirs:.3} | {:.1}x | {diff:.2e} |",
                bytes / (t_ours * 1e-3) / 1e9,
                t_theirs / t_ours
            );
        }
    }
    Ok(())
}
