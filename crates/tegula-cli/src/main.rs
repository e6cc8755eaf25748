//! The `tegula` command.

mod bench;
mod ceilings;
mod launch_cost;
mod library;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Instant;
use tegula::ir::builder::{self as tl, trace};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::{Device, Grid, KernelArg, Launch, LaunchConfig, TensorArg};

#[derive(Parser)]
#[command(name = "tegula", version, about = "A tile kernel compiler for Rust")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the seed's GEMV (y = A x, A [M, N] f16 row-major, x f16, y f32) on the default
    /// device and check it against a float64 reference.
    Demo {
        #[arg(long, default_value_t = 4096)]
        m: usize,
        #[arg(long, default_value_t = 4096)]
        n: usize,
        #[arg(long, default_value_t = 1024)]
        block: usize,
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
    /// Print a library kernel's PTX (sm_90a) and, with ptxas, its resource report.
    Ptx {
        kernel: String,
        #[arg(long)]
        shape: Option<String>,
        #[arg(long)]
        dtype: Option<String>,
        #[arg(long, default_value_t = 4)]
        num_warps: u32,
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
    /// per kernel, and a cached launch against a raw driver launch.
    LaunchCost,
    /// Time library kernels on the GPU beside the device's ceilings (see BENCHMARKS.md).
    Bench(bench::BenchArgs),
}

/// The GEMV of the seed chapter (section 4.5): one program per row of A, BLOCK columns at a time.
fn gemv_kernel(block: usize) -> Result<Kernel, TraceError> {
    trace("gemv", |p| {
        let a = p.ptr("a", DType::F16);
        let x = p.ptr("x", DType::F16);
        let y = p.ptr("y", DType::F32);
        let n = p.scalar("n", DType::I32);
        let row = tl::program_id(0);
        let offsets = tl::arange(0, block as i64);
        let acc = tl::for_range(0, n, block, tl::full::<f32>([], 0.0), |start, acc| {
            let cols = start + offsets;
            let mask = cols.lt(n);
            let av = tl::load(a + row * n + cols, mask, 0.0);
            let xv = tl::load(x + cols, mask, 0.0);
            acc + tl::sum(av.to::<f32>() * xv.to::<f32>(), 0)
        });
        tl::store_unmasked(y + row, acc);
    })
}

fn demo(m: usize, n: usize, block: usize) -> tegula::Result<bool> {
    let dev = Device::default()?;
    println!("device: {}", dev.name());
    let a = dev.randn::<half::f16>([m, n])?;
    let x = dev.randn::<half::f16>([n])?;
    let y = dev.empty::<f32>([m])?;
    let trace = || gemv_kernel(block);
    let n_arg = i32::try_from(n).map_err(|_| tegula::Error::Invalid {
        op: "demo".into(),
        message: format!("n = {n} does not fit in i32"),
    })?;
    let launch = Launch {
        name: "gemv",
        key: format!("block={block}"),
        trace: &trace,
        grid: Grid::from(m),
        config: LaunchConfig::default(),
        args: vec![
            (&a).kernel_arg(),
            (&x).kernel_arg(),
            (&y).kernel_arg(),
            KernelArg::Int {
                dtype: DType::I32,
                value: n_arg as i64,
            },
        ],
    };
    let start = Instant::now();
    dev.launch(launch)?;
    let elapsed = start.elapsed();

    // float64 reference, compared with the seed's tolerances (rtol 1e-4, atol 1e-3).
    let (av, xv, yv) = (a.to_f64_vec()?, x.to_f64_vec()?, y.to_f64_vec()?);
    let (mut max_err, mut ok) = (0.0f64, true);
    for r in 0..m {
        let want: f64 = (0..n).map(|c| av[r * n + c] * xv[c]).sum();
        let err = (yv[r] - want).abs();
        max_err = max_err.max(err);
        ok &= err <= 1e-3 + 1e-4 * want.abs();
    }
    println!("gemv  A[{m}, {n}] f16 x f16 -> f32, BLOCK={block}: {elapsed:.2?}");
    println!(
        "max |y - y_ref| = {max_err:.3e}  (tolerance 1e-3 + 1e-4 |y_ref|): {}",
        if ok { "ok" } else { "FAILED" }
    );
    Ok(ok)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Demo {
        m: 4096,
        n: 4096,
        block: 1024,
    }) {
        Command::Demo { m, n, block } => demo(m, n, block),
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
            num_warps,
        } => library::ptx(&kernel, shape.as_deref(), dtype.as_deref(), num_warps).map(|()| true),
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
