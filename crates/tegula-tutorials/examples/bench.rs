//! Times every ported tutorial (or those whose name contains the first argument) at the
//! Triton harness's shapes on the default device, with `do_bench`'s budget (an L2 clear
//! before each sample, the median), and prints `TEGULA <tutorial> <shape> <ms>` lines that
//! join with the harness's `TRITON <tutorial> <shape> <ms>`.
//!
//!     cargo run --release -p tegula-tutorials --example bench [-- 03]

use tegula::autotune::{measure, MeasureOptions};
use tegula::prelude::*;

fn main() -> tegula::Result<()> {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let dev = Device::default()?;
    if dev.cuda_runtime().is_none() {
        eprintln!("bench: no GPU; the harness's shapes are too large for the interpreter");
        return Ok(());
    }
    for t in tegula_tutorials::tutorials() {
        if !t.name.contains(&filter) {
            continue;
        }
        for s in t.bench_shapes {
            let result = (t.bench)(&dev, s.dims, t.dtypes[0]).and_then(|mut b| {
                let timing = measure(&dev, &MeasureOptions::default(), &mut b.launch)?;
                Ok((b.flops, b.bytes, timing.median))
            });
            match result {
                Ok((flops, bytes, ms)) => println!(
                    "TEGULA {} {} {ms:.5}  # {:.1} TFLOP/s {:.3} TB/s",
                    t.triton_name(),
                    s.label,
                    flops / ms / 1e9,
                    bytes / ms / 1e9
                ),
                Err(e) => println!(
                    "TEGULA-ERROR {} {}",
                    t.triton_name(),
                    e.to_string().replace('\n', " | ")
                ),
            }
        }
    }
    Ok(())
}
