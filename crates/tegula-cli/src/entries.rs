//! `tegula list`, `run`, `ir`, `ptx`, `plan` and `check`: the registry's entries (library
//! kernels, the copy baseline and the tutorials' ports) from the command line.

use crate::registry;
use tegula::compiler::{Compiled, Target};
use tegula::ir::DType;
use tegula::registry::{describe, CheckReport, Entry, Kind};
use tegula::{Device, Error, Result};

fn invalid(entry: &Entry, message: String) -> Error {
    Error::Invalid {
        op: format!("tegula {}", entry.name),
        message,
    }
}

/// `--shape 37,1031` (or `37x1031`) as numbers.
fn numbers(entry: &Entry, text: &str) -> Result<Vec<usize>> {
    text.split([',', 'x'])
        .map(|d| d.trim().parse())
        .collect::<std::result::Result<Vec<usize>, _>>()
        .map_err(|_| {
            invalid(
                entry,
                format!("--shape {text}: expected numbers like 37,1031"),
            )
        })
}

/// `--shape` in the check's dimensions (or the entry's default shape).
pub fn check_shape_of(entry: &Entry, shape: Option<&str>) -> Result<Vec<usize>> {
    let Some(text) = shape else {
        return Ok(entry.default_shape.to_vec());
    };
    let dims = numbers(entry, text)?;
    if dims.len() != entry.dims.len() {
        return Err(invalid(
            entry,
            format!(
                "--shape needs {} numbers ({}), got {}",
                entry.dims.len(),
                entry.dims.join(", "),
                dims.len()
            ),
        ));
    }
    Ok(dims)
}

/// `--shape` in the benchmark's dimensions; for a benchmark with a `CAUSAL` dimension the
/// flag may be left out of the shape and given by `causal` (each value one shape).
pub fn bench_shapes_of(entry: &Entry, text: &str, causal: &[bool]) -> Result<Vec<Vec<usize>>> {
    let dims = numbers(entry, text)?;
    let want = entry.bench.dims;
    if entry.bench.has_causal() && dims.len() + 1 == want.len() {
        return Ok(causal
            .iter()
            .map(|&c| {
                let mut s = dims.clone();
                s.push(usize::from(c));
                s
            })
            .collect());
    }
    if dims.len() != want.len() || dims.contains(&0) {
        return Err(invalid(
            entry,
            format!(
                "--shape {text}: expected {} positive sizes ({})",
                want.len(),
                want.join(",")
            ),
        ));
    }
    Ok(vec![dims])
}

/// `--dtype bf16` (or `default`), checked against what the entry supports.
pub fn dtype_of(entry: &Entry, dtype: Option<&str>, default: DType) -> Result<DType> {
    let Some(name) = dtype else {
        return Ok(default);
    };
    parse_dtype(name)
        .filter(|d| entry.dtypes.contains(d))
        .ok_or_else(|| {
            invalid(
                entry,
                format!(
                    "--dtype {name}: {} supports {}",
                    entry.name,
                    entry
                        .dtypes
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
}

/// `bf16`, `fp16` or `f16`, `fp32` or `f32`, and the IR's names.
pub fn parse_dtype(s: &str) -> Option<DType> {
    match s {
        "fp16" | "half" => Some(DType::F16),
        "fp32" | "float" => Some(DType::F32),
        other => DType::from_name(other),
    }
}

/// `--causal yes|no|both` as the masks it asks for.
pub fn causal_of(text: &str) -> Result<&'static [bool]> {
    match text {
        "yes" | "true" | "1" => Ok(&[true]),
        "no" | "false" | "0" => Ok(&[false]),
        "both" => Ok(&[false, true]),
        other => Err(Error::Invalid {
            op: "tegula".into(),
            message: format!("--causal {other}: expected yes, no or both"),
        }),
    }
}

/// `tegula list`: every entry with its dimensions, default shape, dtypes and benchmark shapes.
pub fn list() {
    let all = registry::all();
    let width = all.iter().map(|e| e.name.len()).max().unwrap_or(0);
    for kind in [Kind::Library, Kind::Baseline, Kind::Tutorial] {
        for e in all.iter().filter(|e| e.kind == kind) {
            let dtypes: Vec<_> = e.dtypes.iter().map(|d| d.name()).collect();
            let bench: Vec<String> = e.bench.shapes.iter().map(|s| s.text()).collect();
            println!(
                "{:<width$}  {}\n{:<width$}  --shape {} (default {}) --dtype {}; bench {} at {}",
                e.name,
                e.about,
                "",
                e.dims.join(","),
                e.describe(e.default_shape),
                dtypes.join("|"),
                e.bench.dims.join(","),
                bench.join(" ")
            );
        }
    }
}

pub fn print_reports(reports: &[CheckReport]) {
    let width = reports
        .iter()
        .map(|r| r.kernel.len())
        .max()
        .unwrap_or(0)
        .max(22);
    let shape_width = reports
        .iter()
        .map(|r| r.shape.len())
        .max()
        .unwrap_or(0)
        .max(28);
    println!(
        "{:<width$} {:<shape_width$} {:<6} {:>12} {:>10}  result",
        "kernel", "shape", "dtype", "max abs err", "err/tol"
    );
    for r in reports {
        println!(
            "{:<width$} {:<shape_width$} {:<6} {:>12.3e} {:>10.3}  {}",
            r.kernel,
            r.shape,
            r.dtype.name(),
            r.max_abs_err,
            r.worst_ratio,
            if r.passed() { "ok" } else { "FAILED" }
        );
    }
}

/// `tegula run`: one entry on the default device against its float64 reference.
pub fn run(name: &str, shape: Option<&str>, dtype: Option<&str>) -> Result<bool> {
    let e = registry::find(name)?;
    let (shape, dtype) = (
        check_shape_of(&e, shape)?,
        dtype_of(&e, dtype, e.dtypes[0])?,
    );
    let dev = Device::default()?;
    let report = (e.check)(&dev, &shape, dtype)?;
    print_reports(std::slice::from_ref(&report));
    Ok(report.passed())
}

/// `tegula ir`: the traced (and canonicalized) Tile IR: a library kernel's as its check
/// launches it at `--shape` (the check's dimensions); otherwise the kernels the benchmark's
/// call launches at `--shape` (the benchmark's dimensions).
pub fn ir(name: &str, shape: Option<&str>, dtype: Option<&str>) -> Result<()> {
    let e = registry::find(name)?;
    if let Some(trace) = e.trace {
        let (shape, dtype) = (
            check_shape_of(&e, shape)?,
            dtype_of(&e, dtype, e.dtypes[0])?,
        );
        let mut kernel = trace(&shape, dtype)?;
        tegula::ir::passes::canonicalize(&mut kernel);
        print!("{kernel}");
        return Ok(());
    }
    let (dtype, shape) = call_shape_of(&e, shape, dtype, &[false])?;
    for launch in e.record(&shape, dtype, None, crate::launch_cost::RECORDING_SMS)? {
        print!("{}", launch.kernel);
    }
    Ok(())
}

/// `--target sm_80|sm_86|sm_89|sm_90` (or the bare number), default sm_90a.
pub fn target_of(text: Option<&str>) -> Result<Target> {
    let Some(text) = text else {
        return Ok(tegula::compiler::DEFAULT_TARGET);
    };
    let digits = text.trim().trim_start_matches("sm_").trim_end_matches('a');
    match digits.parse::<u32>() {
        Ok(sm) if sm >= 80 => Ok(Target::for_compute_capability(sm / 10, sm % 10)),
        _ => Err(Error::Invalid {
            op: "tegula".into(),
            message: format!("--target {text}: expected sm_80, sm_86, sm_89 or sm_90"),
        }),
    }
}

/// The dtype and shape (the benchmark's dimensions) of a recorded call: `--dtype` and
/// `--shape` (with the `CAUSAL` flag from `causal` when the shape leaves it out), or the
/// entry's realistic ones.
pub(crate) fn call_shape_of(
    e: &Entry,
    shape: Option<&str>,
    dtype: Option<&str>,
    causal: &[bool],
) -> Result<(DType, Vec<usize>)> {
    let (realistic_dtype, realistic_shape) = e.realistic();
    let dtype = dtype_of(e, dtype, realistic_dtype)?;
    let shape = match shape {
        Some(text) => bench_shapes_of(e, text, causal)?.remove(0),
        None => realistic_shape.to_vec(),
    };
    Ok((dtype, shape))
}

/// The kernels an entry's call compiles, as `tegula ptx` and `tegula plan` show them: its
/// benchmark's launches recorded as a GPU of 132 SMs would get them (the host function's
/// arguments and untuned config, or `config` in `tegula bench --config` syntax pinned), by
/// default at the realistic shape.
fn compile_call(
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    causal: &str,
    config: Option<&str>,
    target: &Target,
) -> Result<Vec<Compiled>> {
    record_call(name, shape, dtype, causal, config)?
        .iter()
        .map(|l| l.compile(target))
        .collect()
}

/// The launches of [`compile_call`], recorded and not compiled.
fn record_call(
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    causal: &str,
    config: Option<&str>,
) -> Result<Vec<tegula::RecordedLaunch>> {
    let dev = tegula::Device::recording(crate::launch_cost::RECORDING_SMS);
    record_call_on(&dev, name, shape, dtype, causal, config)
}

/// [`record_call`] on a recording device of the caller's.
fn record_call_on(
    dev: &tegula::Device,
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    causal: &str,
    config: Option<&str>,
) -> Result<Vec<tegula::RecordedLaunch>> {
    let e = registry::find(name)?;
    let config = config.map(crate::bench::parse_config).transpose()?;
    let (dtype, shape) = call_shape_of(&e, shape, dtype, causal_of(causal)?)?;
    eprintln!(
        "// {} {} {dtype} as its host function launches it",
        e.name,
        describe(e.bench.dims, &shape)
    );
    e.record_on(dev, &shape, dtype, config.as_ref())
}

/// The options of `tegula ptx` that say which call to record.
pub struct CallArgs<'a> {
    pub shape: Option<&'a str>,
    pub dtype: Option<&'a str>,
    pub causal: &'a str,
    pub config: Option<&'a str>,
    pub target: Option<&'a str>,
}

/// `tegula aot`'s own options.
pub struct AotArgs<'a> {
    pub out: &'a std::path::Path,
    pub tuned: Option<&'a std::path::Path>,
    pub gpu: Option<&'a str>,
    pub assemble: bool,
}

/// `tegula aot`: the call of `tegula ptx` compiled into an ahead-of-time bundle at `out`
/// (`tegula::aot::Bundle`); a bundle already there (of this compiler) keeps its entries and
/// gains the call's new specializations, so several calls can fill one bundle. With a tuning
/// cache (`tuned`) the call is recorded standing for its GPU, tuned configs and all; with
/// `assemble`, every entry gets its cubin from ptxas.
pub fn aot(name: &str, call: CallArgs<'_>, aot: &AotArgs<'_>) -> Result<()> {
    let target = target_of(call.target)?;
    let launches = match aot.tuned {
        None => record_call(name, call.shape, call.dtype, call.causal, call.config)?,
        Some(tuned) => {
            let text = std::fs::read_to_string(tuned).map_err(|e| Error::Invalid {
                op: "tegula aot".into(),
                message: format!("--tuned {}: {e}", tuned.display()),
            })?;
            let gpus = tegula::Autotuner::global().import_json_in_memory(&text)?;
            let tuned_as = tuned_gpu(&gpus, aot.gpu, tuned)?;
            eprintln!(
                "// recorded as {} (driver {}) launches it, with its tuned configs",
                tuned_as.device, tuned_as.driver_version
            );
            let dev = tegula::Device::recording_as(tegula::StandIn {
                sm_count: crate::launch_cost::RECORDING_SMS,
                target,
                tuned_as,
            });
            record_call_on(&dev, name, call.shape, call.dtype, call.causal, call.config)?
        }
    };
    let mut bundle = if aot.out.exists() {
        tegula::aot::Bundle::read(aot.out)?
    } else {
        tegula::aot::Bundle::new()
    };
    bundle.add_tuned(tegula::Autotuner::global().take_stand_in_hits());
    let added = bundle.add_launches(&launches, &target)?;
    let assembled = if aot.assemble {
        let ptxas = tegula_ptx::ptxas::find().ok_or_else(|| Error::Invalid {
            op: "tegula aot".into(),
            message: "--assemble: no ptxas found (set TEGULA_PTXAS or run scripts/ptxas.sh)".into(),
        })?;
        bundle.assemble(&ptxas)?
    } else {
        0
    };
    bundle.write(aot.out)?;
    eprintln!(
        "// {added} new of {} specializations for sm_{} ({assembled} assembled); {} has {} entries and {} tuned configs",
        launches.len(),
        target.sm,
        aot.out.display(),
        bundle.entries.len(),
        bundle.tuned.len()
    );
    Ok(())
}

/// The GPU of a tuning cache to record for: the one named, else the only one.
fn tuned_gpu(
    gpus: &[tegula::autotune::Target],
    named: Option<&str>,
    file: &std::path::Path,
) -> Result<tegula::autotune::Target> {
    let names: Vec<String> = gpus
        .iter()
        .map(|g| format!("{} (driver {})", g.device, g.driver_version))
        .collect();
    let matching: Vec<&tegula::autotune::Target> = gpus
        .iter()
        .filter(|g| named.is_none_or(|n| g.device == n))
        .collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Error::Invalid {
            op: "tegula aot".into(),
            message: format!(
                "--tuned {}: no entries{}; it holds: {}",
                file.display(),
                named.map(|n| format!(" for `{n}`")).unwrap_or_default(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        }),
        _ => Err(Error::Invalid {
            op: "tegula aot".into(),
            message: format!(
                "--tuned {} holds entries of several GPUs or drivers ({}): name one with --gpu",
                file.display(),
                names.join(", ")
            ),
        }),
    }
}

/// `tegula ptx`: the PTX of a call's kernels and their resource report from ptxas, when one
/// is found (see [`compile_call`]).
pub fn ptx(
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    causal: &str,
    config: Option<&str>,
    target: Option<&str>,
) -> Result<()> {
    let target = target_of(target)?;
    for c in &compile_call(name, shape, dtype, causal, config, &target)? {
        print_ptx(c, &target)?;
    }
    Ok(())
}

/// `tegula plan`: what the compiler decided for a call's kernels (see [`compile_call`]): per
/// loop its pipeline stages and why fewer than asked, per dot its instructions and operand
/// homes, shared memory and occupancy.
pub fn plan(
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    causal: &str,
    config: Option<&str>,
    target: Option<&str>,
) -> Result<()> {
    let target = target_of(target)?;
    for c in &compile_call(name, shape, dtype, causal, config, &target)? {
        print!("{}", c.report);
    }
    Ok(())
}

/// Prints one kernel's PTX, then its size, threads, shared memory and ptxas report on stderr.
fn print_ptx(compiled: &Compiled, target: &Target) -> Result<()> {
    print!("{}", compiled.ptx);
    eprintln!(
        "// entry {}: {} threads, {} bytes of shared memory, {} PTX lines",
        compiled.entry,
        compiled.num_threads,
        compiled.shared_bytes,
        compiled.ptx.lines().count()
    );
    match tegula_ptx::ptxas::find() {
        Some(ptxas) => {
            let dir = std::env::temp_dir().join(format!("tegula-ptx-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(io_error)?;
            let assembled =
                tegula_ptx::ptxas::assemble(&ptxas, &compiled.ptx, target.sm, &dir, "kernel");
            let _ = std::fs::remove_dir_all(&dir);
            match assembled {
                Ok(a) => eprint!("{}", a.log),
                Err(e) => eprintln!("// {e}"),
            }
        }
        None => eprintln!(
            "// no ptxas found for a resource report (set TEGULA_PTXAS or run scripts/ptxas.sh)"
        ),
    }
    Ok(())
}

fn io_error(e: std::io::Error) -> Error {
    Error::Invalid {
        op: "tegula ptx".into(),
        message: e.to_string(),
    }
}

/// `tegula check`: every entry whose name contains `filter` (the library's kernels, the copy
/// and the tutorials' ports), every dtype, its check shapes ([`Entry::check_shapes`]), on the
/// default device (the GPU check when run on a GPU machine); a table of max errors last.
pub fn check_all(filter: Option<&str>) -> Result<bool> {
    let dev = Device::default()?;
    // An output element a kernel leaves unwritten reads NaN (or -1), not a stale value.
    dev.set_poison_empty(true);
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for e in registry::all() {
        if filter.is_some_and(|f| !e.name.contains(f)) {
            continue;
        }
        for &dtype in e.dtypes {
            for shape in e.check_shapes() {
                let label = format!("{} {} {}", e.name, e.describe(&shape), dtype);
                eprintln!("checking {label}");
                match (e.check)(&dev, &shape, dtype) {
                    Ok(r) => reports.push(r),
                    Err(err) => failures.push(format!("{label}: {err}")),
                }
            }
        }
    }
    println!();
    print_reports(&reports);
    for f in &failures {
        println!("ERROR {f}");
    }
    let passed = reports.iter().filter(|r| r.passed()).count();
    println!(
        "{} passed, {} failed",
        passed,
        reports.len() - passed + failures.len()
    );
    Ok(failures.is_empty() && reports.iter().all(CheckReport::passed))
}
