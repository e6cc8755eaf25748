//! The `tegula` command.

mod bench;
mod ceilings;
mod launch_cost;
mod library;

use clap::{Parser, Subcommand};
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
    /// Run a library kernel on the default device and print its error against a float64
    /// reference.
    Run {
        kernel: String,
        /// Problem size, e.g. `--shape 37,1031` (see `tegula list`).
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
    },
    /// Print a library kernel's Tile IR.
    Ir {
        kernel: String,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
    },
    /// Print a library kernel's PTX (sm_90a) and, with ptxas, its resource report. The kernels
    /// `launch-cost` measures compile as their host wrapper's GPU launch would (aligned tensors,
    /// the untuned default config), by default at `launch-cost`'s realistic shape.
    Ptx {
        kernel: String,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
        /// Pins the config, as `tegula bench --config` does: `BLOCK_M=128,BLOCK_N=64,warps=4,
        /// stages=2` (default: the wrapper's untuned config; 4 warps, 1 stage for kernels
        /// traced without a host call).
        #[arg(long)]
        config: Option<String>,
        /// The GPU architecture: sm_80, sm_86, sm_89 or sm_90 (default sm_90a).
        #[arg(long)]
        target: Option<String>,
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
        #[arg(long)]
        config: Option<String>,
        #[arg(long)]
        target: Option<String>,
    },
    /// Check every library kernel (every dtype, default and odd shapes) on the default device
    /// against float64 references: the GPU check when a GPU is present.
    Check {
        /// Only kernels whose name contains this.
        filter: Option<String>,
    },
    /// List the library's kernels with their dimensions and dtypes.
    List,
    /// What a launch costs on the host: first launch of a specialization (trace, lower, JIT)
    /// per kernel at a realistic shape, as the library's wrapper compiles it, and a cached
    /// launch against a raw driver launch.
    LaunchCost,
    /// Time library kernels on the GPU beside the device's ceilings (see BENCHMARKS.md).
    Bench(bench::BenchArgs),
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
        } => library::run(&kernel, shape.as_deref(), dtype.as_deref()),
        Command::Ir {
            kernel,
            shape,
            dtype,
        } => library::ir(&kernel, shape.as_deref(), dtype.as_deref()).map(|()| true),
        Command::Ptx {
            kernel,
            shape,
            dtype,
            config,
            target,
        } => library::ptx(
            &kernel,
            shape.as_deref(),
            dtype.as_deref(),
            config.as_deref(),
            target.as_deref(),
        )
        .map(|()| true),
        Command::Plan {
            kernel,
            shape,
            dtype,
            config,
            target,
        } => library::plan(
            &kernel,
            shape.as_deref(),
            dtype.as_deref(),
            config.as_deref(),
            target.as_deref(),
        )
        .map(|()| true),
        Command::Check { filter } => library::check_all(filter.as_deref()),
        Command::LaunchCost => launch_cost::run(),
        Command::Bench(args) => bench::run(args),
        Command::List => {
            for k in tegula_kernels::library() {
                let dtypes: Vec<_> = k.dtypes.iter().map(|d| d.name()).collect();
                println!(
                    "{:<22} {:<40} --shape {} (default {}) --dtype {}",
                    k.name,
                    k.about,
                    k.dims.join(","),
                    library::describe_shape(&k, k.default_shape),
                    dtypes.join("|")
                );
            }
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
