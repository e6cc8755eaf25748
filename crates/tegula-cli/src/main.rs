//! The `tegula` command.

mod bench;
mod ceilings;
mod copy;
mod entries;
mod first_call;
mod launch_cost;
mod registry;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tegula::Device;

#[derive(Parser)]
#[command(name = "tegula", version, about = "A tile kernel compiler for Rust")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the library's GEMV (y = A x, A [M, N] f16 row-major, x f16, y f32) on the default
    /// device and check it against a float64 reference.
    Demo {
        #[arg(long, default_value_t = 4096)]
        m: usize,
        #[arg(long, default_value_t = 4096)]
        n: usize,
    },
    /// Run a registry entry (a library kernel or a tutorial's port) on the default device and
    /// print its error against a float64 reference.
    Run {
        kernel: String,
        /// Problem size in the check's dimensions, e.g. `--shape 37,1031` (see `tegula list`).
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
    },
    /// Print an entry's Tile IR: a library kernel's as its check traces it (`--shape` in the
    /// check's dimensions), a tutorial's as its benchmark's call launches it.
    Ir {
        kernel: String,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
    },
    /// Print the PTX (sm_90a) of the kernels an entry's call launches and, with ptxas, their
    /// resource report: its benchmark's call recorded as on a GPU of 132 SMs (aligned tensors,
    /// the untuned default config), by default at its realistic shape (`tegula list`).
    Ptx {
        kernel: String,
        /// In the benchmark's dimensions (`tegula bench --shape`).
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
        /// Attention's mask when `--shape` leaves it out: yes or no.
        #[arg(long, default_value = "no")]
        causal: String,
        /// Pins the config, as `tegula bench --config` does: `BLOCK_M=128,BLOCK_N=64,warps=4,
        /// stages=2` (default: the host function's untuned config).
        #[arg(long)]
        config: Option<String>,
        /// The GPU architecture: sm_80, sm_86, sm_89 or sm_90 (default sm_90a).
        #[arg(long)]
        target: Option<String>,
    },
    /// Compile the kernels an entry's call launches (recorded as `tegula ptx` records them)
    /// into an ahead-of-time bundle (`tegula::aot::Bundle`, JSON) that a program installs
    /// with `Device::install_bundle`; an existing FILE keeps its entries and gains the new
    /// ones. Takes the options of `tegula ptx`.
    Aot {
        kernel: String,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
        #[arg(long, default_value = "no")]
        causal: String,
        #[arg(long)]
        config: Option<String>,
        #[arg(long)]
        target: Option<String>,
        /// The bundle to write (or add to).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// A tuning cache exported on the GPU (`tegula tune --export`): the call is recorded
        /// as that GPU launches it, with its tuned configs, and the bundle carries them.
        #[arg(long, value_name = "TUNED")]
        tuned: Option<PathBuf>,
        /// The GPU of the tuning cache to record for, by its name (needed when the file holds
        /// several).
        #[arg(long)]
        gpu: Option<String>,
        /// Assemble each entry with ptxas into a cubin the GPU loads without its JIT.
        #[arg(long)]
        assemble: bool,
    },
    /// What the compiler decides for a library kernel or a tutorial port, as its host call
    /// compiles it: per loop the pipeline stages it got (and why fewer than asked, at the
    /// source line), per dot the instructions it runs on and where its operands come from,
    /// shared memory and occupancy. Takes the options of `tegula ptx`.
    Plan {
        kernel: String,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
        #[arg(long, default_value = "no")]
        causal: String,
        #[arg(long)]
        config: Option<String>,
        #[arg(long)]
        target: Option<String>,
    },
    /// Check every entry (the library's kernels in every dtype at default and odd shapes, the
    /// copy, the tutorials' ports at their default shapes) on the default device against
    /// float64 references: the GPU check when a GPU is present.
    Check {
        /// Only entries whose name contains this (`tutorial` for the ports).
        filter: Option<String>,
    },
    /// List the registry: the library's kernels, the copy and the tutorials' ports, with their
    /// dimensions, dtypes and benchmark shapes.
    List,
    /// What a launch costs on the host: first launch of a specialization (trace, lower, JIT)
    /// per kernel at a realistic shape, as the host function compiles it, and a cached launch
    /// against a raw driver launch.
    LaunchCost {
        /// Entries whose name contains this (default: the library's kernels).
        filter: Option<String>,
    },
    /// Time the first call of an entry in this process (as `tegula aot` records it: its
    /// benchmark's launch, at `--shape` in the benchmark's dimensions), after installing
    /// `--bundle` when given: `FIRST_CALL` with the first and second call's milliseconds.
    /// GPU only. For a cold first call, run it with an empty `TEGULA_CACHE_DIR` and
    /// `CUDA_CACHE_DISABLE=1`.
    FirstCall {
        kernel: String,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
        #[arg(long, default_value = "no")]
        causal: String,
        /// An ahead-of-time bundle (`tegula aot`) to install first.
        #[arg(long, value_name = "FILE")]
        bundle: Option<PathBuf>,
    },
    /// Time registry entries on the GPU beside the device's ceilings (see BENCHMARKS.md); a
    /// tutorial's also as `TEGULA <tutorial> <shape> <ms>` lines.
    Bench(bench::BenchArgs),
    /// Ship tuned configs: export the autotune cache (`$TEGULA_CACHE_DIR/autotune.json`) to a
    /// file, or import such a file into it (its entries win over the cache's of the same key).
    Tune(TuneArgs),
}

#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct TuneArgs {
    /// Write every entry of the autotune cache to FILE.
    #[arg(long, value_name = "FILE")]
    export: Option<PathBuf>,
    /// Merge the entries of FILE (written by `--export`) into the autotune cache.
    #[arg(long, value_name = "FILE")]
    import: Option<PathBuf>,
}

/// `tegula tune`: export or import the global tuner's cache.
fn tune(args: TuneArgs) -> tegula::Result<bool> {
    let tuner = tegula::Autotuner::global();
    match (args.export, args.import) {
        (Some(file), _) => {
            let n = tuner.export(&file)?;
            let entries = if n == 1 { "entry" } else { "entries" };
            println!("exported {n} {entries} to {}", file.display());
        }
        (None, Some(file)) => {
            if tuner.cache_path().is_none() {
                // The entries would last only as long as this command.
                return Err(tegula::Error::Invalid {
                    op: "tegula tune --import".into(),
                    message: "the autotune cache is off (TEGULA_CACHE_DIR=off): nothing to \
                              import into"
                        .into(),
                });
            }
            let report = tuner.import(&file)?;
            println!("imported {}: {report}", file.display());
        }
        // clap asks for exactly one of the two.
        (None, None) => {
            return Err(tegula::Error::Invalid {
                op: "tegula tune".into(),
                message: "give --export FILE or --import FILE".into(),
            })
        }
    }
    Ok(true)
}

/// The library's GEMV on the default device (A f16 row-major, x f16, y f32), checked against a
/// float64 reference within atol 1e-3 + rtol 1e-4.
fn demo(m: usize, n: usize) -> tegula::Result<bool> {
    let dev = Device::default()?;
    println!("device: {}", dev.name());
    let a = dev.randn::<half::f16>([m, n])?;
    let x = dev.randn::<half::f16>([n])?;
    let y = dev.empty::<f32>([m])?;
    let start = Instant::now();
    tegula_kernels::gemv::gemv_into(&a, &x, &y)?;
    dev.synchronize()?;
    let first = start.elapsed();
    let again = dev.time(|| tegula_kernels::gemv::gemv_into(&a, &x, &y))?;

    let (av, xv, yv) = (a.to_f64_vec()?, x.to_f64_vec()?, y.to_f64_vec()?);
    let want = tegula_kernels::gemv::reference(&av, &xv, m, n);
    let (mut max_err, mut ok) = (0.0f64, true);
    for (got, want) in yv.iter().zip(&want) {
        let err = (got - want).abs();
        max_err = max_err.max(err);
        ok &= err <= 1e-3 + 1e-4 * want.abs();
    }
    println!(
        "gemv  A[{m}, {n}] f16 x f16 -> f32: first launch (trace, lower, compile, run) {first:.2?}, \
         cached launch {again:.3} ms"
    );
    println!(
        "max |y - y_ref| = {max_err:.3e}  (tolerance 1e-3 + 1e-4 |y_ref|): {}",
        if ok { "ok" } else { "FAILED" }
    );
    Ok(ok)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Demo { m: 4096, n: 4096 }) {
        Command::Demo { m, n } => demo(m, n),
        Command::Run {
            kernel,
            shape,
            dtype,
        } => entries::run(&kernel, shape.as_deref(), dtype.as_deref()),
        Command::Ir {
            kernel,
            shape,
            dtype,
        } => entries::ir(&kernel, shape.as_deref(), dtype.as_deref()).map(|()| true),
        Command::Ptx {
            kernel,
            shape,
            dtype,
            causal,
            config,
            target,
        } => entries::ptx(
            &kernel,
            shape.as_deref(),
            dtype.as_deref(),
            &causal,
            config.as_deref(),
            target.as_deref(),
        )
        .map(|()| true),
        Command::Plan {
            kernel,
            shape,
            dtype,
            causal,
            config,
            target,
        } => entries::plan(
            &kernel,
            shape.as_deref(),
            dtype.as_deref(),
            &causal,
            config.as_deref(),
            target.as_deref(),
        )
        .map(|()| true),
        Command::Aot {
            kernel,
            shape,
            dtype,
            causal,
            config,
            target,
            out,
            tuned,
            gpu,
            assemble,
        } => entries::aot(
            &kernel,
            entries::CallArgs {
                shape: shape.as_deref(),
                dtype: dtype.as_deref(),
                causal: &causal,
                config: config.as_deref(),
                target: target.as_deref(),
            },
            &entries::AotArgs {
                out: &out,
                tuned: tuned.as_deref(),
                gpu: gpu.as_deref(),
                assemble,
            },
        )
        .map(|()| true),
        Command::Check { filter } => entries::check_all(filter.as_deref()),
        Command::LaunchCost { filter } => launch_cost::run(filter.as_deref()),
        Command::FirstCall {
            kernel,
            shape,
            dtype,
            causal,
            bundle,
        } => first_call::run(
            &kernel,
            shape.as_deref(),
            dtype.as_deref(),
            &causal,
            bundle.as_deref(),
        ),
        Command::Bench(args) => bench::run(args),
        Command::Tune(args) => tune(args),
        Command::List => {
            entries::list();
            Ok(true)
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
