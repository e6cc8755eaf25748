//! `tegula launch-cost`: what a launch costs on the host.
//!
//! - First launch of a new specialization: an entry's call at its realistic shape
//!   ([`tegula::registry::Entry::realistic`]) recorded on a recording device (tracing),
//!   lowering to PTX, driver JIT (or the disk cache), per kernel, timed in phases. The kernel
//!   compiled is the one a user's call compiles: the host function's own arguments and
//!   untuned default config, tensors 16-byte aligned as GPU allocations are
//!   ([`tegula::specialize`]).
//! - Cached launch: host time of `Device::launch` for a specialization already compiled, against
//!   a raw driver launch of the same loaded function with the same packed arguments.

use std::time::Instant;
use tegula::ir::DType;
use tegula::registry::{Entry, Kind};
use tegula::{Device, Error, Grid, KernelArg, Launch, LaunchConfig, Result, TensorArg};

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The SM count recorded calls size their grids for (persistent kernels pass trips per
/// program as arguments, whose facts the specialization reads): a Hopper H100/H200's.
pub const RECORDING_SMS: usize = 132;

/// Cold JIT compiles of each kernel after its first launch, for their min and median.
const JIT_REPEATS: usize = 4;

/// Phases of a first launch for one entry at its realistic shape; one line per launch its
/// host function makes.
fn first_launch(dev: &Device, entry: &Entry) -> Result<()> {
    let (dtype, shape) = entry.realistic();
    let name = entry.name;
    let launches = entry.record(shape, dtype, None, RECORDING_SMS)?;
    let target = tegula::compiler::DEFAULT_TARGET;
    for launch in &launches {
        let trace_ms = launch.trace_ms;
        let t = Instant::now();
        let compiled = launch.compile(&target)?;
        let lower_ms = ms(t);
        // The driver JIT of that PTX (cold unless the disk cache or the driver's cache has it).
        // Without a GPU, a local ptxas run stands in for it (it takes about as long).
        let mut repeats = String::new();
        let (jit_ms, jit_label) = match dev.cuda_runtime() {
            Some(runtime) => {
                let t = Instant::now();
                runtime.load(&compiled.ptx, &compiled.entry, &|_| None)?;
                let first = ms(t);
                // The driver JIT's time moves with the host's load: compile again a few times
                // (no cache) so one slow or fast sample does not stand for the kernel.
                let mut again = Vec::with_capacity(JIT_REPEATS);
                for _ in 0..JIT_REPEATS {
                    let t = Instant::now();
                    runtime.jit_uncached(&compiled.ptx, &compiled.entry)?;
                    again.push(ms(t));
                }
                again.sort_by(f64::total_cmp);
                repeats = format!(
                    "  (JIT again x{JIT_REPEATS}: min {:.2} median {:.2} ms)",
                    again[0],
                    again[again.len() / 2]
                );
                (Some(first), "JIT")
            }
            None => (local_ptxas_ms(&compiled.ptx), "ptxas"),
        };
        let jit = jit_ms.map_or("   (no GPU, no ptxas)".to_string(), |j| {
            format!("{j:>8.2} ms")
        });
        let total = trace_ms + lower_ms + jit_ms.unwrap_or(0.0);
        println!(
            "{:<12} {:<5} {:<28} warps {} stages {}  trace {:>6.2} ms  lower {:>6.2} ms \
             ({:>5} PTX lines)  {} {}  total {:>7.2} ms{}",
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
            total,
            repeats
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

/// `tegula launch-cost [filter]`: the library's kernels, or every entry whose name contains
/// `filter` (`tutorial` for the ports).
pub fn run(filter: Option<&str>) -> Result<bool> {
    // A cold JIT: the driver's cache of compiled PTX is off unless the caller set it (the
    // driver reads this when it starts, which is below), and tegula's disk cache of cubins is
    // left out for this device whatever TEGULA_CACHE_DIR says.
    let driver_cache = match std::env::var("CUDA_CACHE_DISABLE") {
        Ok(v) => format!("CUDA_CACHE_DISABLE={v} as set by the caller"),
        Err(_) => {
            std::env::set_var("CUDA_CACHE_DISABLE", "1");
            "CUDA_CACHE_DISABLE=1".to_string()
        }
    };
    let dev = Device::default()?;
    if let Some(runtime) = dev.cuda_runtime() {
        runtime.set_disk_cache(None);
    }
    println!(
        "first launch of a new specialization at realistic shapes, as the host function \
         compiles it (untuned default config, aligned tensors; trace + lower + JIT; cold: \
         {driver_cache}, no disk cache; without a GPU a local ptxas run stands in for the JIT):"
    );
    for entry in crate::registry::all() {
        let wanted = match filter {
            Some(f) => entry.name.contains(f),
            None => entry.kind == Kind::Library,
        };
        if wanted {
            first_launch(&dev, &entry)?;
        }
    }
    if dev.cuda_runtime().is_some() {
        cached_launch(&dev)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::bench::parse_config;
    use crate::registry;
    use tegula::ir::DType;

    #[test]
    fn recorded_calls_follow_a_pinned_config() {
        let record = |name: &str, shape: &[usize], dtype, config| {
            registry::find(name)
                .unwrap()
                .record(shape, dtype, config, super::RECORDING_SMS)
        };
        // B, H, N, D, CAUSAL
        let shape = [2, 4, 256, 64, 1];
        let pinned = parse_config("BLOCK_M=128,BLOCK_N=32,warps=8,stages=2").unwrap();
        let fwd = record("attention", &shape, DType::BF16, Some(&pinned)).unwrap();
        assert_eq!(fwd.len(), 1);
        assert_eq!((fwd[0].config.num_warps, fwd[0].config.num_stages), (8, 2));
        assert!(
            fwd[0].key.contains("128") && fwd[0].key.contains("32"),
            "{}",
            fwd[0].key
        );
        // Unpinned, the wrapper's untuned default (4 warps).
        let default = record("attention", &shape, DType::BF16, None).unwrap();
        assert_eq!(default[0].config.num_warps, 4);
        // The backward's wrapper launches its preprocess, dK/dV and dQ conversion kernels.
        let bwd = record("attention_backward", &shape, DType::BF16, Some(&pinned)).unwrap();
        assert!(
            bwd.len() >= 3,
            "{:?}",
            bwd.iter().map(|l| l.name).collect::<Vec<_>>()
        );
        assert!(bwd.iter().any(|l| l.config.num_warps == 8));
        let mm = parse_config("BLOCK_M=64,BLOCK_N=128,BLOCK_K=32,warps=8,stages=3").unwrap();
        let m = record("matmul", &[256, 512, 128], DType::F16, Some(&mm)).unwrap();
        assert_eq!((m[0].config.num_warps, m[0].config.num_stages), (8, 3));
        // A config nothing would read is refused.
        assert!(record("vector_add", &[1000], DType::F32, Some(&mm)).is_err());
    }

    #[test]
    fn every_entry_records_its_call_at_a_small_shape() {
        // The library's and the copy's at small shapes (the tutorials' registry test records
        // theirs).
        for e in registry::all()
            .into_iter()
            .filter(|e| e.kind != tegula::registry::Kind::Tutorial)
        {
            let shape: Vec<usize> = match e.name {
                "attention" | "attention_backward" => vec![1, 2, 128, 64, 0],
                _ => e.default_shape.to_vec(),
            };
            let dtype = e.realistic().0;
            let launches = e
                .record(&shape, dtype, None, super::RECORDING_SMS)
                .unwrap_or_else(|err| panic!("{}: {err}", e.name));
            assert!(!launches.is_empty(), "{}", e.name);
        }
    }
}
