//! `tegula first-call`: how long the first call of an entry takes in a fresh process, the
//! call as `tegula aot` records it (its benchmark's launch at a shape), with or without an
//! ahead-of-time bundle installed. The inputs are made (and the device started) before the
//! clock starts; the first call's milliseconds hold whatever it does before its kernels
//! finish: trace, plan, emit, tune, the driver's JIT or the cubin's load, and the run. The
//! second call's are the run alone.

use crate::entries::{call_shape_of, causal_of};
use crate::registry;
use std::path::Path;
use std::time::Instant;
use tegula::{Device, Result};

/// Prints `FIRST_CALL <entry> <shape> ...` with the times in milliseconds.
pub fn run(
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    causal: &str,
    bundle: Option<&Path>,
) -> Result<bool> {
    let e = registry::find(name)?;
    let (dtype, shape) = call_shape_of(&e, shape, dtype, causal_of(causal)?)?;
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    let dev = Device::cuda(0)?;
    let device_ms = ms(started);
    let (install_ms, installed) = match bundle {
        Some(path) => {
            let t = Instant::now();
            let b = tegula::aot::Bundle::read(path)?;
            let installed = dev.install_bundle(&b)?;
            (ms(t), Some(installed))
        }
        None => (0.0, None),
    };
    let mut bench = e.prepare(&dev, &shape, dtype, None)?;
    dev.synchronize()?;
    let traced_before = dev.traced_kernels();
    let t = Instant::now();
    (bench.launch)()?;
    dev.synchronize()?;
    let first_ms = ms(t);
    let traced = dev.traced_kernels() - traced_before;
    let t = Instant::now();
    (bench.launch)()?;
    dev.synchronize()?;
    let second_ms = ms(t);
    let shape_text: Vec<String> = shape.iter().map(usize::to_string).collect();
    let installed = installed.map_or_else(
        || "no bundle".to_string(),
        |i| {
            format!(
                "bundle: {} entries ({} with cubins), {} tuned configs",
                i.entries, i.cubins, i.tuned
            )
        },
    );
    println!(
        "FIRST_CALL {} {} {dtype} first {first_ms:.1} ms, second {second_ms:.2} ms, \
         traced {traced} kernels; device {device_ms:.1} ms, install {install_ms:.1} ms; {installed}",
        e.name,
        shape_text.join("x"),
    );
    Ok(true)
}
