//! `y = x` by a tegula kernel: what a tegula copy attains, against the driver's memcpy (the
//! `copy` baseline of `tegula bench`, peers.py's `copy`).

use tegula::autotune::{Autotuner, Config, Source, Tuning};
use tegula::ir::{DType, Element};
use tegula::registry::{Bench, BenchShape, BenchSpec, CheckReport, Entry, Kind};
use tegula::{Device, Result, Tensor};
use tegula_kernels::bench::{copies_for, random_copies, Rotor};

mod kernel {
    use tegula::prelude::*;

    #[tegula::kernel]
    pub fn copy_kernel<T: Element>(x: Ptr<T>, y: Ptr<T>, n: i32, #[constexpr] block: usize) {
        let offsets = program_id(0) * block + arange(0, block as i64);
        let mask = offsets.lt(n);
        store(y + offsets, load(x + offsets, mask, 0), mask);
    }
}

fn invalid(message: String) -> tegula::Error {
    tegula::Error::Invalid {
        op: "copy".into(),
        message,
    }
}

fn copy_into<T: Element>(x: &Tensor<T>, y: &Tensor<T>, config: &Config) -> Result<()> {
    let block = config.usize("BLOCK")?;
    let n = i32::try_from(x.numel()).map_err(|_| invalid("more than 2^31 elements".into()))?;
    kernel::copy_kernel::launch_with::<T>(
        x.device(),
        x.numel().div_ceil(block),
        config.launch_config(),
        x,
        y,
        n,
        block,
    )
}

/// The peers' dtype names.
fn dtype_name(d: DType) -> &'static str {
    crate::bench::dtype_name(d)
}

/// The copy kernel's config for `x`, by the autotuner (the library's kernels adopt it the same
/// way): tuned on a miss, from the cache of an earlier process otherwise; says which on stderr.
fn tuned_config<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<Config> {
    let dev = x.device();
    let source = kernel::copy_kernel::trace::<T>(1024)?.to_string();
    let configs = [1024, 2048, 4096, 8192]
        .iter()
        .flat_map(|&b| [4, 8].map(|w| Config::new(w, 1).with("BLOCK", b)))
        .collect();
    let key = format!("N={},{}", x.numel(), dtype_name(T::DTYPE));
    let tuning = Tuning::new("bench.copy", &source, key, configs);
    let tuned = Autotuner::global().tune(dev, &tuning, |c| {
        tegula::autotune::median_ms(dev, || copy_into(x, y, c))
    })?;
    let how = match tuned.source {
        Source::Tuned { ms, timed } => {
            format!("tuned now ({timed} configs timed, best {ms:.4} ms)")
        }
        Source::Cached { ms } => {
            format!("from the autotune cache, no timing ({ms:.4} ms when tuned)")
        }
        Source::Default => "the default (no tuning: TEGULA_AUTOTUNE or the interpreter)".into(),
        Source::Pinned => "pinned".into(),
    };
    eprintln!("copy: config {} {how}", tuned.config);
    for (c, why) in &tuned.dropped {
        eprintln!("copy: dropped config {c}: {why}");
    }
    Ok(tuned.config)
}

fn bench_typed<T: Element>(dev: &Device, n: usize) -> Result<Bench> {
    let s = T::DTYPE.size_bytes() as f64;
    let copies = copies_for(dev, n as f64 * s);
    let xs = random_copies::<T>(dev, &[n], copies)?;
    let y = dev.empty::<T>([n])?;
    let config = tuned_config(&xs[0], &y)?;
    let mut r = Rotor::new(xs.len());
    Ok(Bench {
        flops: 0.0,
        bytes: 2.0 * n as f64 * s,
        input_copies: copies,
        launch: Box::new(move || copy_into(&xs[r.step()], &y, &config)),
    })
}

fn bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    match dtype {
        DType::F16 => bench_typed::<half::f16>(dev, shape[0]),
        DType::BF16 => bench_typed::<half::bf16>(dev, shape[0]),
        DType::F32 => bench_typed::<f32>(dev, shape[0]),
        other => Err(invalid(format!("no benchmark in {other}"))),
    }
}

/// The copy is exact: the check compares bits.
fn check(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let n = shape.first().copied().unwrap_or(1000);
    let x = dev.randn::<f32>([n])?;
    let y = dev.empty::<f32>([n])?;
    copy_into(&x, &y, &Config::new(4, 1).with("BLOCK", 1024))?;
    let (xv, yv) = (x.to_vec()?, y.to_vec()?);
    let same = xv.iter().zip(&yv).all(|(a, b)| a.to_bits() == b.to_bits());
    Ok(CheckReport {
        kernel: "copy".into(),
        shape: format!("N={n}"),
        dtype: DType::F32,
        max_abs_err: if same { 0.0 } else { f64::INFINITY },
        worst_ratio: if same { 0.0 } else { f64::INFINITY },
        atol: 0.0,
        rtol: 0.0,
    })
}

/// The registry entry.
pub fn entry() -> Entry {
    Entry {
        name: "copy",
        about: "y = x by a tegula kernel (the copy ceiling's kernel; autotuned block)",
        kind: Kind::Baseline,
        dims: &["N"],
        default_shape: &[4099],
        dtypes: &[DType::F16, DType::BF16, DType::F32],
        check,
        trace: None,
        bench: BenchSpec {
            op: "copy",
            dims: &["N"],
            shapes: {
                const SHAPES: &[BenchShape] = &[BenchShape::of(&[1 << 30])];
                SHAPES
            },
            dtype: DType::F16,
            realistic: Some((DType::F16, &[1 << 24])),
            streaming: true,
            prepare: bench,
            pinned: None,
        },
    }
}
