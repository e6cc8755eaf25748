//! The device's ceilings, against which `tegula bench` prints its figures: copy bandwidth
//! measured by tegula on the device, and the matmul peak (the datasheet's dense tensor-core
//! rate). Cached per device and driver in `ceilings.json` beside the autotune cache.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use tegula::autotune::{measure, MeasureOptions};
use tegula::Device;

/// What one device can do at best.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ceilings {
    pub device: String,
    pub driver_version: i32,
    /// Device-to-device copy, bytes read plus bytes written, in TB/s (measured).
    pub copy_tbps: f64,
    pub copy_how: String,
    /// Dense matmul peak with 16-bit inputs (tensor cores), TFLOP/s.
    pub mma16_tflops: Option<f64>,
    /// Dense f32 FMA peak, TFLOP/s.
    pub fp32_tflops: Option<f64>,
    pub compute_how: String,
    /// Seconds since the Unix epoch.
    pub measured_at: u64,
}

impl Ceilings {
    /// The compute peak for inputs of this dtype name (`bf16`, `fp16`, `fp32`).
    pub fn peak_tflops(&self, dtype: &str) -> Option<f64> {
        match dtype {
            "bf16" | "fp16" => self.mma16_tflops,
            _ => self.fp32_tflops,
        }
    }
}

/// Datasheet rates (dense bf16/f16 tensor core, f32 FMA) for the parts we know: the H100 and
/// H200 SXM share the same compute (989.4 and 66.9 TFLOP/s).
fn datasheet(device: &str) -> Option<(f64, f64)> {
    (device.contains("H100") || device.contains("H200")).then_some((989.4, 66.9))
}

fn cache_path() -> Option<PathBuf> {
    tegula::autotune::default_cache_path().map(|p| p.with_file_name("ceilings.json"))
}

/// The ceilings of `dev`: from the cache, else measured now and cached. `None` on the
/// interpreter (it has no ceilings worth quoting).
pub fn ceilings(dev: &Device, remeasure: bool) -> tegula::Result<Option<Ceilings>> {
    let Some(rt) = dev.cuda_runtime() else {
        return Ok(None);
    };
    let info = rt.device_info();
    let key = format!("{}|{}", info.name, info.driver_version);
    let path = cache_path();
    let mut all: BTreeMap<String, Ceilings> = path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| match serde_json::from_str(&t) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("tegula: ignoring unreadable ceilings cache: {e}");
                None
            }
        })
        .unwrap_or_default();
    if !remeasure {
        if let Some(c) = all.get(&key) {
            return Ok(Some(c.clone()));
        }
    }
    let copy_tbps = copy_bandwidth(dev)?;
    let sheet = datasheet(&info.name);
    let c = Ceilings {
        device: info.name.clone(),
        driver_version: info.driver_version,
        copy_tbps,
        copy_how: "tegula: cuMemcpyDtoD of 1 GiB, median of CUDA-event timings, read+write bytes"
            .into(),
        mma16_tflops: sheet.map(|s| s.0),
        fp32_tflops: sheet.map(|s| s.1),
        compute_how: if sheet.is_some() {
            "datasheet (dense, the wgmma rate); mma.sync's ceiling on Hopper is about two thirds \
             of it, so kernels whose dots run on mma.sync stop near that share"
                .into()
        } else {
            "unknown part: no datasheet figure".into()
        },
        measured_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    all.insert(key, c.clone());
    if let Some(p) = path {
        let write = || -> std::io::Result<()> {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = p.with_extension(format!("json.tmp{}", std::process::id()));
            std::fs::write(&tmp, serde_json::to_string_pretty(&all)?)?;
            std::fs::rename(&tmp, &p)
        };
        if let Err(e) = write() {
            eprintln!(
                "tegula: could not cache the ceilings in {}: {e}",
                p.display()
            );
        }
    }
    Ok(Some(c))
}

/// TB/s of a device-to-device copy of 1 GiB (counting bytes read and written), on random data.
pub fn copy_bandwidth(dev: &Device) -> tegula::Result<f64> {
    Ok(copy_bandwidth_moving(dev, 2 << 30)?.tbps)
}

/// A copy's rate at one size, timed two ways (see [`tegula::autotune::Timing::batch`]).
#[derive(Clone, Copy, Debug)]
pub struct CopyRate {
    /// TB/s of the median sample, each queued behind the L2 clear.
    pub tbps: f64,
    /// TB/s of the same copies back to back.
    pub batch_tbps: f64,
}

/// TB/s of a device-to-device copy that moves `bytes_moved` bytes (half read, half written),
/// timed as the benchmarks are: each sample queued behind the L2 clear, the source rotating
/// through copies that add up to at least 1 GiB. It is the roof of a memory-bound case of the
/// same size: the launch ramp, the grid's tail and the dirty lines the clear leaves weigh more
/// the fewer bytes move (docs/performance.md, "How performance is measured").
pub fn copy_bandwidth_moving(dev: &Device, bytes_moved: usize) -> tegula::Result<CopyRate> {
    let Some(rt) = dev.cuda_runtime() else {
        return Err(tegula::Error::Invalid {
            op: "copy bandwidth".into(),
            message: format!("{} has no device memory to copy", dev.name()),
        });
    };
    let bytes = (bytes_moved / 2).max(16);
    let copies = (((1usize << 30) as f64 / bytes as f64).ceil() as usize).clamp(1, 64);
    // Random bytes (a replicated random MiB: generating a GiB on the host would take seconds),
    // never zeros, which can run faster than real data.
    let chunk: Vec<u8> = (0..1 << 20).map(|_| rand::random::<u8>()).collect();
    let host: Vec<u8> = chunk.iter().copied().cycle().take(bytes).collect();
    let sources = (0..copies)
        .map(|_| {
            let src = rt.alloc(bytes)?;
            rt.htod(&src, &host)?;
            Ok(src)
        })
        .collect::<tegula::Result<Vec<_>>>()?;
    let dst = rt.alloc(bytes)?;
    let mut next = 0;
    let options = MeasureOptions {
        batch: true,
        ..MeasureOptions::default()
    };
    let t = measure(dev, &options, || {
        next = (next + 1) % sources.len();
        Ok(rt.dtod(&dst, &sources[next])?)
    })?;
    let tbps = |ms: f64| 2.0 * bytes as f64 / (ms * 1e-3) / 1e12;
    Ok(CopyRate {
        tbps: tbps(t.median),
        batch_tbps: tbps(t.batch.unwrap_or(f64::NAN)),
    })
}
