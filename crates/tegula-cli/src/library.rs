//! `tegula run`, `tegula ir`, `tegula ptx` and `tegula check`: the kernel library from the
//! command line.

use tegula::compiler::{Compiled, Target};
use tegula::ir::DType;
use tegula::{Device, Error, LaunchConfig, Result};
use tegula_kernels::{CheckReport, LibraryKernel};

/// The library kernel called `name`, or an error listing the names.
pub fn find(name: &str) -> Result<LibraryKernel> {
    tegula_kernels::find(name).ok_or_else(|| Error::Invalid {
        op: "tegula".into(),
        message: format!(
            "no kernel `{name}`; the library has: {}",
            tegula_kernels::library()
                .iter()
                .map(|k| k.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// `--shape 37,1031` (or the kernel's default), checked against its dimension names.
pub fn shape_of(k: &LibraryKernel, shape: Option<&str>) -> Result<Vec<usize>> {
    let Some(text) = shape else {
        return Ok(k.default_shape.to_vec());
    };
    let dims: std::result::Result<Vec<usize>, _> =
        text.split([',', 'x']).map(|d| d.trim().parse()).collect();
    let invalid = |message: String| Error::Invalid {
        op: format!("tegula {}", k.name),
        message,
    };
    let dims =
        dims.map_err(|_| invalid(format!("--shape {text}: expected numbers like 37,1031")))?;
    if dims.len() != k.dims.len() {
        return Err(invalid(format!(
            "--shape needs {} numbers ({}), got {}",
            k.dims.len(),
            k.dims.join(", "),
            dims.len()
        )));
    }
    Ok(dims)
}

/// `--dtype bf16` (or the kernel's first dtype), checked against what it supports.
pub fn dtype_of(k: &LibraryKernel, dtype: Option<&str>) -> Result<DType> {
    let Some(name) = dtype else {
        return Ok(k.dtypes[0]);
    };
    DType::from_name(name)
        .filter(|d| k.dtypes.contains(d))
        .ok_or_else(|| Error::Invalid {
            op: format!("tegula {}", k.name),
            message: format!(
                "--dtype {name}: {} supports {}",
                k.name,
                k.dtypes
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

pub fn describe_shape(k: &LibraryKernel, shape: &[usize]) -> String {
    k.dims
        .iter()
        .zip(shape)
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn print_reports(reports: &[CheckReport]) {
    println!(
        "{:<22} {:<28} {:<6} {:>12} {:>10}  result",
        "kernel", "shape", "dtype", "max abs err", "err/tol"
    );
    for r in reports {
        println!(
            "{:<22} {:<28} {:<6} {:>12.3e} {:>10.3}  {}",
            r.kernel,
            r.shape,
            r.dtype.name(),
            r.max_abs_err,
            r.worst_ratio,
            if r.passed() { "ok" } else { "FAILED" }
        );
    }
}

/// `tegula run`: one kernel on the default device against its float64 reference.
pub fn run(name: &str, shape: Option<&str>, dtype: Option<&str>) -> Result<bool> {
    let k = find(name)?;
    let (shape, dtype) = (shape_of(&k, shape)?, dtype_of(&k, dtype)?);
    let dev = Device::default()?;
    let report = (k.check)(&dev, &shape, dtype)?;
    print_reports(std::slice::from_ref(&report));
    Ok(report.passed())
}

/// `tegula ir`: the traced (and canonicalized) Tile IR.
pub fn ir(name: &str, shape: Option<&str>, dtype: Option<&str>) -> Result<()> {
    let k = find(name)?;
    let (shape, dtype) = (shape_of(&k, shape)?, dtype_of(&k, dtype)?);
    let mut kernel = (k.trace)(&shape, dtype)?;
    tegula::ir::passes::canonicalize(&mut kernel);
    print!("{kernel}");
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

/// The kernels a library or tutorial call compiles, as `tegula ptx` and `tegula plan` show
/// them. Kernels `tegula launch-cost` knows and the tutorials are compiled as their host
/// wrapper's GPU launch compiles them (its arguments' facts and config; by default at the
/// realistic or first benchmark shape), with `config` (`tegula bench --config` syntax)
/// pinning a library wrapper's config; the others are traced at the shape with no argument
/// facts, `config` giving their warps and stages.
fn compile_call(
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    config: Option<&str>,
    target: &Target,
) -> Result<Vec<Compiled>> {
    let config = config.map(crate::bench::parse_config).transpose()?;
    if let Some(t) = tegula_tutorials::find(name) {
        let dtype = match dtype {
            Some(d) => DType::from_name(d)
                .filter(|d| t.dtypes.contains(d))
                .ok_or_else(|| Error::Invalid {
                    op: format!("tegula {name}"),
                    message: format!("--dtype {d}: not one of the tutorial's dtypes"),
                })?,
            None => t.dtypes[0],
        };
        let dims = match shape {
            Some(text) => parse_dims(name, text, t.dims.len())?,
            None => t
                .bench_shapes
                .first()
                .map_or(t.default_shape, |s| s.dims)
                .to_vec(),
        };
        eprintln!("// {name} {dims:?} {dtype} as its host function launches it");
        let launches = t.record(&dims, dtype, crate::launch_cost::RECORDING_SMS)?;
        return launches.iter().map(|l| l.compile(target)).collect();
    }
    let k = find(name)?;
    if let Some((realistic_dtype, realistic_shape)) = crate::launch_cost::realistic(name) {
        let dtype = match dtype {
            Some(_) => dtype_of(&k, dtype)?,
            None => realistic_dtype,
        };
        let shape = match shape {
            Some(_) => shape_of(&k, shape)?,
            None => realistic_shape.to_vec(),
        };
        eprintln!(
            "// {} {} as the host wrapper launches it",
            describe_shape(&k, &shape),
            dtype
        );
        let launches = crate::launch_cost::record(name, &shape, dtype, config.as_ref())?;
        return launches.iter().map(|l| l.compile(target)).collect();
    }
    let (shape, dtype) = (shape_of(&k, shape)?, dtype_of(&k, dtype)?);
    eprintln!(
        "// {} {} traced without argument facts",
        describe_shape(&k, &shape),
        dtype
    );
    let mut kernel = (k.trace)(&shape, dtype)?;
    tegula::ir::passes::canonicalize(&mut kernel);
    let launch = match config {
        Some(c) => c.launch_config(),
        None => LaunchConfig::new(4, 1),
    };
    Ok(vec![tegula::compiler::compile(&kernel, launch, target)?])
}

fn parse_dims(name: &str, text: &str, count: usize) -> Result<Vec<usize>> {
    let dims: std::result::Result<Vec<usize>, _> =
        text.split([',', 'x']).map(|d| d.trim().parse()).collect();
    match dims {
        Ok(d) if d.len() == count => Ok(d),
        _ => Err(Error::Invalid {
            op: format!("tegula {name}"),
            message: format!("--shape {text}: expected {count} numbers like 37,1031"),
        }),
    }
}

/// `tegula ptx`: the PTX of a call's kernels and their resource report from ptxas, when one
/// is found (see [`compile_call`]).
pub fn ptx(
    name: &str,
    shape: Option<&str>,
    dtype: Option<&str>,
    config: Option<&str>,
    target: Option<&str>,
) -> Result<()> {
    let target = target_of(target)?;
    for c in &compile_call(name, shape, dtype, config, &target)? {
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
    config: Option<&str>,
    target: Option<&str>,
) -> Result<()> {
    let target = target_of(target)?;
    for c in &compile_call(name, shape, dtype, config, &target)? {
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

/// `tegula check`: every library kernel, every dtype, a few shapes, on the default device
/// (the GPU check when run on a GPU machine); a table of max errors last.
pub fn check_all(filter: Option<&str>) -> Result<bool> {
    let dev = Device::default()?;
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for k in tegula_kernels::library() {
        if filter.is_some_and(|f| !k.name.contains(f)) {
            continue;
        }
        for &dtype in k.dtypes {
            for shape in check_shapes(&k) {
                let label = format!("{} {} {}", k.name, describe_shape(&k, &shape), dtype);
                eprintln!("checking {label}");
                match (k.check)(&dev, &shape, dtype) {
                    Ok(r) => reports.push(r),
                    Err(e) => failures.push(format!("{label}: {e}")),
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

/// The default shape, the same with every dimension made odd (one less, at least 1): the
/// ragged edges the masks must handle; and for kernels with a CAUSAL flag, the default shape
/// with the flag flipped, so both masks run.
fn check_shapes(k: &LibraryKernel) -> Vec<Vec<usize>> {
    let flag = k.dims.iter().position(|&d| d == "CAUSAL");
    let odd: Vec<usize> = k
        .default_shape
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            if Some(i) == flag || d % 2 == 1 {
                d
            } else {
                (d - 1).max(1)
            }
        })
        .collect();
    let mut shapes = vec![k.default_shape.to_vec()];
    if odd != k.default_shape {
        shapes.push(odd);
    }
    if let Some(i) = flag {
        let mut flipped = k.default_shape.to_vec();
        flipped[i] = 1 - flipped[i].min(1);
        shapes.push(flipped);
    }
    shapes
}
