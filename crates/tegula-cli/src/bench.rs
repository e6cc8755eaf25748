//! `tegula bench`: times library kernels through their host wrappers with CUDA events and
//! prints each figure beside the device's ceilings (a roofline in numbers).
//!
//! Method (docs/DESIGN.md, "Measuring"): the first call, a probe and a warm-up stay out of the
//! samples; the median and the spread (min, max, quartiles) of many timed calls are reported;
//! memory-bound kernels rotate among copies of their inputs (at least 1 GiB together, at most 64
//! copies) so that a run reads DRAM, not the 60 MB L2; FLOPs and the fewest bytes a kernel must
//! move (each input read once, each output written once) are counted per kernel. Memory-bound
//! kernels are also timed back to back after one L2 clear (`batch_ms`, beside a copy of as many
//! bytes timed so): the rate a stream of such calls sustains, free of the dirty lines the
//! clear before each sample leaves in the L2.

use crate::ceilings::{self, Ceilings};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use tegula::autotune::{measure, Autotuner, Config, MeasureOptions, Source, Timing, Tuning};
use tegula::ir::{DType, Element};
use tegula::{Device, Result, Tensor};
use tegula_kernels::attention::{self, AttentionOptions};
use tegula_kernels::{gemv, matmul, norm, softmax, vector_add};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// copy, vector_add, softmax, layer_norm, layer_norm_backward, rms_norm, gemv, matmul,
    /// attention, attention_backward, attention_single_head_f32 (f32), or `all`.
    pub kernel: String,
    /// Problem size, repeatable: `--shape 4096,4096 --shape 8192,8192`. Dimensions: copy and
    /// vector_add N; softmax, layer_norm, rms_norm and gemv M,N; matmul M,N,K; attention and
    /// attention_backward B,H,N,D; attention_single_head_f32 M,N,D. The default is a sweep over peers.py's
    /// shapes.
    #[arg(long)]
    pub shape: Vec<String>,
    /// bf16, fp16 (f16) or fp32 (f32); the default is the peers' (fp16 for gemv, else bf16).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Attention's mask: yes, no or both (default both).
    #[arg(long, default_value = "both")]
    pub causal: String,
    /// Write one JSON record per case (JSON lines).
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Draw TFLOP/s or TB/s against size (SVG).
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Peer measurements (`PEER {json}` lines of peers.py) to draw beside tegula's.
    #[arg(long)]
    pub peers: Option<std::path::PathBuf>,
    /// Measure the ceilings again instead of reading them from the cache.
    #[arg(long)]
    pub remeasure: bool,
    /// A smaller timing budget (for smoke runs; the interpreter uses it always).
    #[arg(long)]
    pub quick: bool,
    /// Launch config instead of the host wrapper's choice, repeatable (each one is a case):
    /// `--config warps=8,BLOCK_M=2,BLOCK_N=2048` for gemv; `BLOCK`, `BLOCK_M`, `warps`,
    /// `PROGRAMS_PER_SM` (above 0: the pipelined one-tile kernels) and `UNROLL` (blocks a trip
    /// of the looping kernels) for softmax, layer_norm and rms_norm (`BLOCK_M=0`: the looping
    /// kernels); `BLOCK_M`, `BLOCK_N`,
    /// `SPLITS`, `TF32X3=0|1` for attention_single_head_f32's fast path, `BASIC=1` for its
    /// basic 16x16 IEEE kernel; `BLOCK_M`, `BLOCK_N`, `warps`, `stages` for
    /// attention and attention_backward (and `WGMMA`: the forward, or the backward's dK/dV
    /// kernel, on wgmma); `BLOCK_M`,
    /// `BLOCK_N`, `BLOCK_K`, `GROUP_M`,
    /// `PERSISTENT`, `WGMMA`, `warps`, `stages` for matmul.
    #[arg(long)]
    pub config: Vec<String>,
}

/// Parses `--config` text: `name=value` pairs; `warps` and `stages` set the launch.
pub(crate) fn parse_config(text: &str) -> Result<Config> {
    let mut c = Config::new(4, 1);
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| invalid(format!("--config {text}: `{part}` is not name=value")))?;
        let v: i64 = v
            .parse()
            .map_err(|e| invalid(format!("--config {text}: {part}: {e}")))?;
        match k {
            "warps" => c.num_warps = v as u32,
            "stages" => c.num_stages = v as u32,
            _ => c = c.with(k, v),
        }
    }
    Ok(c)
}

/// One benchmark case, as it goes to `--json` and to the comparison.
struct Case {
    kernel: &'static str,
    /// The peers' op name: `gemv`, `matmul`, `attention_fwd`, ...
    op: &'static str,
    dtype: &'static str,
    shape: Vec<usize>,
    causal: Option<bool>,
    flops: f64,
    bytes: f64,
    /// How many copies of the inputs the timed calls cycle through.
    copies: usize,
}

/// The kernels that stream their bytes once (memory-bound).
const STREAMING: &[&str] = &[
    "copy",
    "vector_add",
    "softmax",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "gemv",
];

/// Kernels `tegula bench` knows, with their dimension names and default sweeps.
const KERNELS: &[(&str, &str, &[&[usize]])] = &[
    ("copy", "N", &[&[1 << 30]]),
    ("vector_add", "N", &[&[1 << 20], &[1 << 24], &[1 << 28]]),
    (
        "softmax",
        "M,N",
        &[&[4096, 1024], &[4096, 4096], &[4096, 16384], &[4096, 32768]],
    ),
    (
        "layer_norm",
        "M,N",
        &[&[4096, 1024], &[4096, 4096], &[4096, 16384], &[4096, 32768]],
    ),
    (
        "layer_norm_backward",
        "M,N",
        &[&[4096, 1024], &[4096, 4096], &[4096, 16384], &[4096, 32768]],
    ),
    (
        "rms_norm",
        "M,N",
        &[&[4096, 1024], &[4096, 4096], &[4096, 16384], &[4096, 32768]],
    ),
    (
        "gemv",
        "M,N",
        &[
            &[4096, 4096],
            &[8192, 8192],
            &[16384, 16384],
            &[14336, 4096],
            &[4096, 14336],
        ],
    ),
    (
        "matmul",
        "M,N,K",
        &[&[4096, 4096, 4096], &[8192, 8192, 8192]],
    ),
    (
        "attention",
        "B,H,N,D",
        &[
            &[4, 32, 1024, 64],
            &[4, 32, 4096, 64],
            &[4, 32, 16384, 64],
            &[4, 32, 1024, 128],
            &[4, 32, 4096, 128],
            &[4, 32, 16384, 128],
            &[1, 32, 16384, 128],
        ],
    ),
    (
        "attention_backward",
        "B,H,N,D",
        &[
            &[4, 32, 4096, 64],
            &[4, 32, 4096, 128],
            &[1, 32, 16384, 128],
        ],
    ),
    (
        "attention_single_head_f32",
        "M,N,D",
        &[
            &[7, 13, 8],
            &[35, 67, 32],
            &[64, 129, 128],
            &[1024, 4096, 64],
            &[1024, 4096, 128],
        ],
    ),
];

/// The peers.py name of a kernel's operation.
fn op_of(kernel: &'static str) -> &'static str {
    match kernel {
        "attention" => "attention_fwd",
        "attention_backward" => "attention_bwd",
        "attention_single_head_f32" => "attention_fwd_f32_single_head",
        k => k,
    }
}

/// The peers' dtype names.
fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F16 => "fp16",
        DType::BF16 => "bf16",
        DType::F32 => "fp32",
        DType::F64 => "fp64",
        _ => "other",
    }
}

fn parse_dtype(s: &str) -> Option<DType> {
    match s {
        "fp16" | "f16" | "half" => Some(DType::F16),
        "bf16" => Some(DType::BF16),
        "fp32" | "f32" | "float" => Some(DType::F32),
        _ => None,
    }
}

fn invalid(message: String) -> tegula::Error {
    tegula::Error::Invalid {
        op: "bench".into(),
        message,
    }
}

fn parse_shape(text: &str, dims: &str) -> Result<Vec<usize>> {
    let want = dims.split(',').count();
    let shape: Vec<usize> = text
        .split([',', 'x'])
        .map(|s| s.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| invalid(format!("--shape {text}: {e}")))?;
    if shape.len() != want || shape.contains(&0) {
        return Err(invalid(format!(
            "--shape {text}: expected {want} positive sizes ({dims})"
        )));
    }
    Ok(shape)
}

/// Runs `tegula bench`; false when a case failed.
pub fn run(args: BenchArgs) -> Result<bool> {
    let dev = Device::default()?;
    let names: Vec<&str> = if args.kernel == "all" {
        KERNELS.iter().map(|k| k.0).collect()
    } else {
        vec![args.kernel.as_str()]
    };
    let ceil = ceilings::ceilings(&dev, args.remeasure)?;
    print_header(&dev, ceil.as_ref());
    let options = if args.quick || dev.cuda_runtime().is_none() {
        MeasureOptions {
            warmup_ms: 0.0,
            rep_ms: 10.0,
            min_reps: 3,
            max_reps: 20,
            max_total_ms: 2000.0,
            batch: false,
        }
    } else {
        MeasureOptions::default()
    };
    let causal: &[bool] = match args.causal.as_str() {
        "yes" | "true" | "1" => &[true],
        "no" | "false" | "0" => &[false],
        "both" => &[false, true],
        other => {
            return Err(invalid(format!(
                "--causal {other}: expected yes, no or both"
            )))
        }
    };

    // Records are written as they come, so a run stopped by a timeout keeps the finished cases.
    let mut json_file = match &args.json {
        Some(path) => Some(std::fs::File::create(path).map_err(|e| io_error(path, e))?),
        None => None,
    };
    let mut emit = |rec: Value, records: &mut Vec<Value>| -> Result<()> {
        if let (Some(f), Some(path)) = (json_file.as_mut(), args.json.as_ref()) {
            writeln!(f, "{rec}")
                .and_then(|()| f.flush())
                .map_err(|e| io_error(path, e))?;
        }
        records.push(rec);
        Ok(())
    };
    let mut records = Vec::new();
    let mut ok = true;
    // Copy bandwidth at each memory-bound case's size, measured once per size.
    let mut copy_at_size: HashMap<u64, ceilings::CopyRate> = HashMap::new();
    for name in names {
        let Some(&(kernel, dims, sweep)) = KERNELS.iter().find(|k| k.0 == name) else {
            let known: Vec<&str> = KERNELS.iter().map(|k| k.0).collect();
            return Err(invalid(format!(
                "no benchmark for `{name}`; known: {}",
                known.join(", ")
            )));
        };
        let shapes: Vec<Vec<usize>> = if args.shape.is_empty() {
            sweep.iter().map(|s| s.to_vec()).collect()
        } else {
            args.shape
                .iter()
                .map(|s| parse_shape(s, dims))
                .collect::<Result<_>>()?
        };
        let dtype = match &args.dtype {
            Some(d) => parse_dtype(d).ok_or_else(|| invalid(format!("--dtype {d}")))?,
            None if kernel == "gemv" || kernel == "copy" => DType::F16,
            None if kernel == "attention_single_head_f32" => DType::F32,
            None => DType::BF16,
        };
        // Streaming kernels are also timed back to back (`batch_ms`), beside a copy timed so.
        let options = MeasureOptions {
            batch: STREAMING.contains(&kernel),
            ..options
        };
        for shape in &shapes {
            let batched_attention = matches!(kernel, "attention" | "attention_backward");
            let masks: &[bool] = if batched_attention { causal } else { &[false] };
            let configs: Vec<Option<Config>> = if args.config.is_empty() {
                vec![None]
            } else {
                args.config
                    .iter()
                    .map(|t| parse_config(t).map(Some))
                    .collect::<Result<_>>()?
            };
            for (&c, config) in masks
                .iter()
                .flat_map(|c| configs.iter().map(move |k| (c, k)))
            {
                match bench_case(&dev, kernel, shape, dtype, c, config.as_ref(), &options) {
                    Ok((case, timing)) => {
                        let mut rec = record(&dev, &case, &timing, ceil.as_ref());
                        if rec["bound"] == "memory" && dev.cuda_runtime().is_some() {
                            let key = case.bytes as u64;
                            let copy = match copy_at_size.get(&key) {
                                Some(&c) => c,
                                None => {
                                    let c = ceilings::copy_bandwidth_moving(&dev, key as usize)?;
                                    copy_at_size.insert(key, c);
                                    c
                                }
                            };
                            let tbps = rec["tbps"].as_f64().unwrap_or(0.0);
                            rec["copy_same_bytes_tbps"] = json!(copy.tbps);
                            rec["pct_copy_same_bytes"] = json!(100.0 * tbps / copy.tbps);
                            if let Some(batch) = timing.batch {
                                let batch_tbps = case.bytes / (batch * 1e-3) / 1e12;
                                rec["batch_ms"] = json!(batch);
                                rec["batch_tbps"] = json!(batch_tbps);
                                rec["copy_same_bytes_batch_tbps"] = json!(copy.batch_tbps);
                                rec["pct_copy_same_bytes_batch"] =
                                    json!(100.0 * batch_tbps / copy.batch_tbps);
                            }
                        }
                        print_row(&rec);
                        if let (Some(t), Some(p)) = (
                            rec["batch_tbps"].as_f64(),
                            rec["pct_copy_same_bytes_batch"].as_f64(),
                        ) {
                            println!("{:<19} back to back: {t:.3} TB/s, {p:.0}% of a copy so", "");
                        }
                        if let Some(k) = config {
                            println!("{:<19} config {k}", "");
                            rec["config"] = json!(k.to_string());
                        }
                        emit(rec, &mut records)?;
                    }
                    Err(e) => {
                        ok = false;
                        println!(
                            "{kernel:<19} {:<5} {shape:?}: FAILED: {e}",
                            dtype_name(dtype)
                        );
                        let rec = json!({
                            "system": "tegula", "kernel": kernel, "op": op_of(kernel),
                            "dtype": dtype_name(dtype), "shape": shape,
                            "causal": batched_attention.then_some(c),
                            "error": e.to_string(),
                        });
                        emit(rec, &mut records)?;
                    }
                }
            }
        }
    }
    if let Some(path) = &args.plot {
        let peers = match &args.peers {
            Some(p) => read_peer_lines(p)?,
            None => Vec::new(),
        };
        plot(path, &records, &peers)?;
    }
    Ok(ok)
}

fn io_error(path: &std::path::Path, e: impl std::fmt::Display) -> tegula::Error {
    invalid(format!("{}: {e}", path.display()))
}

fn print_header(dev: &Device, ceil: Option<&Ceilings>) {
    println!("device: {}", dev.name());
    match ceil {
        Some(c) => {
            println!(
                "ceilings: copy {:.2} TB/s ({}); matmul {} ({})",
                c.copy_tbps,
                c.copy_how,
                match (c.mma16_tflops, c.fp32_tflops) {
                    (Some(a), Some(b)) => format!("{a:.0} TFLOP/s bf16/fp16, {b:.1} fp32"),
                    _ => "unknown".into(),
                },
                c.compute_how
            );
        }
        None => println!("ceilings: none on the interpreter (its timings are not GPU figures)"),
    }
    // %copy: of the 1 GiB copy; %cp@n: of a copy moving as many bytes, timed the same way.
    println!(
        "{:<19} {:<5} {:<20} {:>10} {:>21} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6}",
        "kernel",
        "dtype",
        "shape",
        "median ms",
        "[min .. max]",
        "TFLOP/s",
        "TB/s",
        "%copy",
        "%cp@n",
        "%peak",
        "%roof"
    );
}

fn print_row(r: &Value) {
    let f = |k: &str| r[k].as_f64();
    let pct = |k: &str| f(k).map_or("-".to_string(), |v| format!("{v:.0}"));
    let mut shape = r["shape"].to_string();
    if r["causal"] == json!(true) {
        shape.push_str(" causal");
    }
    println!(
        "{:<19} {:<5} {:<20} {:>10.4} {:>21} {:>8.1} {:>7.3} {:>6} {:>6} {:>6} {:>6}",
        r["kernel"].as_str().unwrap_or(""),
        r["dtype"].as_str().unwrap_or(""),
        shape,
        f("ms").unwrap_or(f64::NAN),
        format!(
            "[{:.4} .. {:.4}]",
            f("ms_min").unwrap_or(f64::NAN),
            f("ms_max").unwrap_or(f64::NAN)
        ),
        f("tflops").unwrap_or(f64::NAN),
        f("tbps").unwrap_or(f64::NAN),
        pct("pct_copy_bw"),
        pct("pct_copy_same_bytes"),
        pct("pct_peak"),
        pct("pct_roofline"),
    );
}

/// The JSON record of a timed case, with its roofline figures when the ceilings are known.
fn record(dev: &Device, case: &Case, t: &Timing, ceil: Option<&Ceilings>) -> Value {
    let secs = t.median * 1e-3;
    let tflops = case.flops / secs / 1e12;
    let tbps = case.bytes / secs / 1e12;
    let info = dev.cuda_runtime().map(|rt| rt.device_info());
    let mut r = json!({
        "system": "tegula",
        "kernel": case.kernel,
        "op": case.op,
        "dtype": case.dtype,
        "shape": case.shape,
        "causal": case.causal,
        "ms": t.median,
        "ms_min": t.min,
        "ms_max": t.max,
        "ms_q1": t.q1,
        "ms_q3": t.q3,
        "reps": t.samples.len(),
        "input_copies": case.copies,
        "flops": case.flops,
        "bytes": case.bytes,
        "tflops": tflops,
        "tbps": tbps,
        "gpu": info.as_ref().map_or_else(|| dev.name(), |i| i.name.clone()),
        "driver": info.as_ref().map(|i| i.driver_version),
    });
    if let Some(c) = ceil {
        let floor_mem = case.bytes / (c.copy_tbps * 1e12);
        let peak = c.peak_tflops(case.dtype);
        let floor_compute = peak.map_or(0.0, |p| case.flops / (p * 1e12));
        let floor = floor_mem.max(floor_compute);
        r["pct_copy_bw"] = json!(100.0 * tbps / c.copy_tbps);
        r["pct_peak"] = json!(peak.map(|p| 100.0 * tflops / p));
        r["pct_roofline"] = json!(100.0 * floor / secs);
        r["bound"] = json!(if floor_compute > floor_mem {
            "compute"
        } else {
            "memory"
        });
        r["ceilings"] = json!({
            "copy_tbps": c.copy_tbps,
            "peak_tflops": peak,
            "peak_source": c.compute_how,
        });
    } else {
        // Without ceilings, say which resource the kernel would be bound by on an H200.
        let h200 = case.flops / 989e12 > case.bytes / 4.27e12;
        r["bound"] = json!(if h200 { "compute" } else { "memory" });
    }
    r
}

/// Copies of the inputs so that the timed calls cycle through at least 1 GiB (as peers.py
/// does), for inputs under 1 GiB; at most 64.
fn copies_for(input_bytes: f64) -> usize {
    let total = (1u64 << 30) as f64;
    ((total / input_bytes.max(1.0)).ceil() as usize).clamp(1, 64)
}

/// `copies` tensors of `shape` holding random normal values (a random chunk of up to 4M
/// values, repeated: drawing billions on the host would take longer than the benchmark; only
/// the addresses must differ between copies for the L2 to miss).
fn random_copies<T: Element>(
    dev: &Device,
    shape: &[usize],
    copies: usize,
) -> Result<Vec<Tensor<T>>> {
    let n: usize = shape.iter().product();
    let chunk = dev.randn::<T>([n.min(1 << 22)])?.to_vec()?;
    let host: Vec<T> = chunk.iter().copied().cycle().take(n).collect();
    (0..copies)
        .map(|_| dev.from_slice(&host, shape.to_vec()))
        .collect()
}

/// One tensor of `shape` filled as [`random_copies`] fills them.
fn random<T: Element>(dev: &Device, shape: &[usize]) -> Result<Tensor<T>> {
    Ok(random_copies(dev, shape, 1)?.remove(0))
}

/// Cycles through `0..n`.
struct Rotor {
    next: usize,
    n: usize,
}

impl Rotor {
    fn new(n: usize) -> Rotor {
        Rotor { next: 0, n }
    }
    fn step(&mut self) -> usize {
        let i = self.next;
        self.next = (self.next + 1) % self.n;
        i
    }
}

macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F16 => {
                type $T = half::f16;
                $body
            }
            DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            DType::F32 => {
                type $T = f32;
                $body
            }
            other => Err(invalid(format!("no benchmark in {other}"))),
        }
    };
}

fn bench_case(
    dev: &Device,
    kernel: &'static str,
    shape: &[usize],
    dtype: DType,
    causal: bool,
    config: Option<&Config>,
    options: &MeasureOptions,
) -> Result<(Case, Timing)> {
    with_dtype!(dtype, T => bench_typed::<T>(dev, kernel, shape, causal, config, options))
}

fn bench_typed<T: Element>(
    dev: &Device,
    kernel: &'static str,
    shape: &[usize],
    causal: bool,
    config: Option<&Config>,
    options: &MeasureOptions,
) -> Result<(Case, Timing)> {
    let s = T::DTYPE.size_bytes() as f64;
    let mut case = Case {
        kernel,
        op: op_of(kernel),
        dtype: dtype_name(T::DTYPE),
        shape: shape.to_vec(),
        causal: None,
        flops: 0.0,
        bytes: 0.0,
        copies: 1,
    };
    let timing = match kernel {
        "copy" => {
            let n = shape[0];
            case.bytes = 2.0 * n as f64 * s;
            case.copies = copies_for(n as f64 * s);
            let xs = random_copies::<T>(dev, &[n], case.copies)?;
            let y = dev.empty::<T>([n])?;
            let config = tuned_copy_config(&xs[0], &y)?;
            let mut r = Rotor::new(xs.len());
            measure(dev, options, || copy_into(&xs[r.step()], &y, &config))?
        }
        "vector_add" => {
            let n = shape[0];
            case.flops = n as f64;
            case.bytes = 3.0 * n as f64 * s;
            case.copies = copies_for(2.0 * n as f64 * s);
            let xs = random_copies::<T>(dev, &[n], case.copies)?;
            let ys = random_copies::<T>(dev, &[n], case.copies)?;
            let out = dev.empty::<T>([n])?;
            let mut r = Rotor::new(xs.len());
            measure(dev, options, || {
                let i = r.step();
                vector_add::vector_add_into(&xs[i], &ys[i], &out)
            })?
        }
        "softmax" | "layer_norm" | "rms_norm" => {
            let (m, n) = (shape[0], shape[1]);
            let (mn, nf) = ((m * n) as f64, n as f64);
            let (flops, bytes) = match kernel {
                // max, subtract, exp, sum, divide
                "softmax" => (5.0 * mn, 2.0 * mn * s),
                // mean, centre, square, sum, scale, weight, bias; mean and rstd out (f32)
                "layer_norm" => (8.0 * mn, 2.0 * mn * s + 2.0 * nf * s + 8.0 * m as f64),
                _ => (4.0 * mn, 2.0 * mn * s + nf * s),
            };
            case.flops = flops;
            case.bytes = bytes;
            case.copies = copies_for(mn * s);
            let xs = random_copies::<T>(dev, &[m, n], case.copies)?;
            let y = dev.empty::<T>([m, n])?;
            let w = random::<T>(dev, &[n])?;
            let b = random::<T>(dev, &[n])?;
            let mean = dev.empty::<f32>([m])?;
            let rstd = dev.empty::<f32>([m])?;
            let mut r = Rotor::new(xs.len());
            measure(dev, options, || {
                let x = &xs[r.step()];
                match (kernel, config) {
                    ("softmax", None) => softmax::softmax_into(x, &y),
                    ("softmax", Some(c)) => softmax::softmax_into_with(x, &y, c),
                    ("layer_norm", None) => {
                        norm::layer_norm_into(x, &w, &b, 1e-5, &y, &mean, &rstd)
                    }
                    ("layer_norm", Some(c)) => {
                        norm::layer_norm_into_with(x, &w, &b, 1e-5, &y, &mean, &rstd, c)
                    }
                    (_, None) => norm::rms_norm_into(x, &w, 1e-5, &y),
                    (_, Some(c)) => norm::rms_norm_into_with(x, &w, 1e-5, &y, c),
                }
            })?
        }
        "layer_norm_backward" => {
            // The library's API allocates dx, dw, db and the partial column sums on every call,
            // so the time includes those allocations (and poisoning dx).
            let (m, n) = (shape[0], shape[1]);
            let mn = (m * n) as f64;
            case.flops = 10.0 * mn;
            // dy and x read, dx written; w, mean, rstd read; dw, db written.
            case.bytes = 3.0 * mn * s + 3.0 * n as f64 * s + 8.0 * m as f64;
            case.copies = copies_for(2.0 * mn * s);
            let xs = random_copies::<T>(dev, &[m, n], case.copies)?;
            let dy = random::<T>(dev, &[m, n])?;
            let w = random::<T>(dev, &[n])?;
            let b = random::<T>(dev, &[n])?;
            let (y, mean, rstd) = (
                dev.empty::<T>([m, n])?,
                dev.empty::<f32>([m])?,
                dev.empty::<f32>([m])?,
            );
            norm::layer_norm_into(&xs[0], &w, &b, 1e-5, &y, &mean, &rstd)?;
            let mut r = Rotor::new(xs.len());
            measure(dev, options, || {
                norm::layer_norm_backward(&dy, &xs[r.step()], &w, &mean, &rstd).map(|_| ())
            })?
        }
        "gemv" => {
            let (m, n) = (shape[0], shape[1]);
            case.flops = 2.0 * (m * n) as f64;
            // A and x read once, y (f32) written once.
            case.bytes = (m * n) as f64 * s + n as f64 * s + 4.0 * m as f64;
            case.copies = copies_for((m * n) as f64 * s);
            let a = random_copies::<T>(dev, &[m, n], case.copies)?;
            let x = random::<T>(dev, &[n])?;
            let y = dev.empty::<f32>([m])?;
            let mut r = Rotor::new(a.len());
            measure(dev, options, || match config {
                None => gemv::gemv_into(&a[r.step()], &x, &y),
                Some(c) => gemv::gemv_into_with(&a[r.step()], &x, &y, c),
            })?
        }
        "matmul" => {
            let (m, n, k) = (shape[0], shape[1], shape[2]);
            case.flops = 2.0 * (m * n * k) as f64;
            case.bytes = ((m * k + k * n + m * n) as f64) * s;
            let a = random::<T>(dev, &[m, k])?;
            let b = random::<T>(dev, &[k, n])?;
            let c = dev.empty::<T>([m, n])?;
            let pinned = config.map(matmul_config).transpose()?;
            measure(dev, options, || match pinned {
                None => matmul::matmul_into::<T, T>(&a, &b, &c),
                Some(p) => matmul::matmul_into_with::<T, T>(&a, &b, &c, p),
            })?
        }
        "attention" | "attention_backward" => {
            let (bt, h, n, d) = (shape[0], shape[1], shape[2], shape[3]);
            case.causal = Some(causal);
            let fwd = 4.0
                * (bt * h) as f64
                * (n as f64)
                * (n as f64)
                * d as f64
                * if causal { 0.5 } else { 1.0 };
            let qkv = (bt * h * n * d) as f64 * s;
            let lse = (bt * h * n) as f64 * 4.0;
            let q = random::<T>(dev, &[bt, h, n, d])?;
            let k = random::<T>(dev, &[bt, h, n, d])?;
            let v = random::<T>(dev, &[bt, h, n, d])?;
            let o = dev.empty::<T>([bt, h, n, d])?;
            let l = dev.empty::<f32>([bt, h, n])?;
            let opts = AttentionOptions {
                causal,
                ..Default::default()
            };
            if kernel == "attention" {
                case.flops = fwd;
                case.bytes = 4.0 * qkv + lse; // q, k, v read; o, lse written
                let opts = match config {
                    Some(c) => attention_options(c, opts)?,
                    None => opts,
                };
                measure(dev, options, || {
                    attention::forward_into(&q, &k, &v, &o, &l, &opts)
                })?
            } else {
                // The usual convention: the backward does 2.5 times the forward's FLOPs.
                case.flops = 2.5 * fwd;
                // q, k, v, o, dO, lse read; dq, dk, dv written.
                case.bytes = 8.0 * qkv + lse;
                attention::forward_into(&q, &k, &v, &o, &l, &opts)?;
                let d_o = random::<T>(dev, &[bt, h, n, d])?;
                let dq = dev.empty::<T>([bt, h, n, d])?;
                let dk = dev.empty::<T>([bt, h, n, d])?;
                let dv = dev.empty::<T>([bt, h, n, d])?;
                let opts = match config {
                    Some(c) => attention_options(c, opts)?,
                    None => opts,
                };
                measure(dev, options, || {
                    attention::backward_into(&q, &k, &v, &o, &d_o, &l, &dq, &dk, &dv, &opts)
                })?
            }
        }
        "attention_single_head_f32" => {
            // The contract: f32, one head, Q [M, D], K and V [N, D].
            if T::DTYPE != DType::F32 {
                return Err(invalid(
                    "attention_single_head_f32 runs in f32 only (--dtype fp32)".into(),
                ));
            }
            let (m, n, d) = (shape[0], shape[1], shape[2]);
            case.flops = 4.0 * (m * n * d) as f64;
            case.bytes = (2 * m * d + 2 * n * d) as f64 * s;
            let q = dev.randn::<f32>([m, d])?;
            let k = dev.randn::<f32>([n, d])?;
            let v = dev.randn::<f32>([n, d])?;
            let o = dev.empty::<f32>([m, d])?;
            match config {
                // The basic 16x16 IEEE kernel.
                Some(c) if c.get("BASIC").unwrap_or(0) != 0 => measure(dev, options, || {
                    attention::single_head_f32_basic_into(&q, &k, &v, &o)
                })?,
                Some(c) => {
                    let pinned = single_head_config(dev, c, (m, n, d))?;
                    eprintln!("attention_single_head_f32: {pinned:?}");
                    measure(dev, options, || {
                        attention::single_head_f32_with(&q, &k, &v, &o, &pinned)
                    })?
                }
                None => measure(dev, options, || {
                    attention::single_head_f32_into(&q, &k, &v, &o)
                })?,
            }
        }
        other => return Err(invalid(format!("no benchmark for `{other}`"))),
    };
    Ok((case, timing))
}

/// The forward's or backward's options pinned by `--config`: `BLOCK_M` and `BLOCK_N` (each
/// left to the autotuner when absent), `WGMMA` (1: ask for Hopper's wgmma in the forward or
/// in the backward's dK/dV kernel, 0 when absent), `warps` and `stages` (4 and 1 when absent, as for every kernel).
pub(crate) fn attention_options(c: &Config, base: AttentionOptions) -> Result<AttentionOptions> {
    let size = |name: &str| -> Result<usize> {
        match c.get(name) {
            Some(v) => usize::try_from(v).map_err(|_| invalid(format!("--config {name}={v}"))),
            None => Ok(tegula_kernels::tuned::AUTO),
        }
    };
    Ok(AttentionOptions {
        block_m: size("BLOCK_M")?,
        block_n: size("BLOCK_N")?,
        config: c.launch_config(),
        wgmma: match c.get("WGMMA").unwrap_or(0) {
            0 => Some(false),
            1 => Some(true),
            v => return Err(invalid(format!("--config WGMMA={v} (0 or 1)"))),
        },
        ..base
    })
}

/// The matmul config pinned by `--config`: `BLOCK_M`, `BLOCK_N`, `BLOCK_K` (each left to the
/// autotuner when absent), `GROUP_M` (8 when absent), `PERSISTENT` (programs a SM of a
/// persistent grid; 0, one program a tile, when absent), `WGMMA` (1: ask for Hopper's wgmma,
/// 0: mma.sync, when absent), `warps` and `stages` (4 and 1 when absent, as for every kernel).
pub(crate) fn matmul_config(c: &Config) -> Result<matmul::MatmulConfig> {
    let size = |name: &str, absent: usize| -> Result<usize> {
        match c.get(name) {
            Some(v) => usize::try_from(v).map_err(|_| invalid(format!("--config {name}={v}"))),
            None => Ok(absent),
        }
    };
    let auto = tegula_kernels::tuned::AUTO;
    Ok(matmul::MatmulConfig {
        block_m: size("BLOCK_M", auto)?,
        block_n: size("BLOCK_N", auto)?,
        block_k: size("BLOCK_K", auto)?,
        group_m: size("GROUP_M", 8)?,
        launch: c.launch_config(),
        persistent: Some(size("PERSISTENT", 0)?),
        wgmma: match size("WGMMA", 0)? {
            0 => Some(false),
            1 => Some(true),
            v => return Err(invalid(format!("--config WGMMA={v} (0 or 1)"))),
        },
        ..Default::default()
    })
}

/// The single-head attention's options from `--config`: `BLOCK_M`, `BLOCK_N`, `SPLITS`,
/// `TF32X3` (0 or 1), `warps` and `stages` override the shape's defaults.
fn single_head_config(
    dev: &Device,
    c: &Config,
    (m, n, d): (usize, usize, usize),
) -> Result<attention::SingleHeadOptions> {
    let mut o = attention::single_head_f32_options(dev, m, n, d);
    let size = |name: &str, default: usize| -> Result<usize> {
        match c.get(name) {
            Some(v) => usize::try_from(v).map_err(|_| invalid(format!("--config {name}={v}"))),
            None => Ok(default),
        }
    };
    o.block_m = size("BLOCK_M", o.block_m)?;
    o.block_n = size("BLOCK_N", o.block_n)?;
    o.splits = size("SPLITS", o.splits)?;
    if let Some(t) = c.get("TF32X3") {
        o.precision = if t != 0 {
            tegula::ir::InputPrecision::Tf32x3
        } else {
            tegula::ir::InputPrecision::Ieee
        };
    }
    o.config = c.launch_config();
    Ok(o)
}

/// `y = x` by a tegula kernel (what a tegula copy attains, against the driver's memcpy).
mod copy {
    use tegula::prelude::*;

    #[tegula::kernel]
    pub fn copy_kernel<T: Element>(x: Ptr<T>, y: Ptr<T>, n: i32, #[constexpr] block: usize) {
        let offsets = program_id(0) * block + arange(0, block as i64);
        let mask = offsets.lt(n);
        store(y + offsets, load(x + offsets, mask, 0), mask);
    }
}

fn copy_into<T: Element>(x: &Tensor<T>, y: &Tensor<T>, config: &Config) -> Result<()> {
    let block = config.usize("BLOCK")?;
    let n =
        i32::try_from(x.numel()).map_err(|_| invalid("copy: more than 2^31 elements".into()))?;
    copy::copy_kernel::launch_with::<T>(
        x.device(),
        x.numel().div_ceil(block),
        config.launch_config(),
        x,
        y,
        n,
        block,
    )
}

/// The copy kernel's config for `x`, by the autotuner (the library's kernels adopt it the same
/// way): tuned on a miss, from the cache of an earlier process otherwise; says which on stderr.
fn tuned_copy_config<T: Element>(x: &Tensor<T>, y: &Tensor<T>) -> Result<Config> {
    let dev = x.device();
    let source = copy::copy_kernel::trace::<T>(1024)?.to_string();
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
    };
    eprintln!("copy: config {} {how}", tuned.config);
    for (c, why) in &tuned.dropped {
        eprintln!("copy: dropped config {c}: {why}");
    }
    Ok(tuned.config)
}

/// `PEER {json}` lines (or bare JSON lines) of a peers.py run; other lines are skipped.
pub fn read_peer_lines(path: &std::path::Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| io_error(path, e))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let body = l.strip_prefix("PEER ").unwrap_or(l);
            serde_json::from_str::<Value>(body).ok()
        })
        .filter(|v| v.is_object() && v.get("error").is_none())
        .collect())
}

/// Draws tegula's TFLOP/s (compute-bound kernels) or TB/s (memory-bound) per case, with the
/// peers measured on the same cases.
fn plot(path: &std::path::Path, records: &[Value], peers: &[Value]) -> Result<()> {
    use plotters::prelude::*;
    let ok: Vec<&Value> = records.iter().filter(|r| r["ms"].is_f64()).collect();
    if ok.is_empty() {
        return Err(invalid("nothing to plot".into()));
    }
    let compute = ok.iter().filter(|r| r["bound"] == "compute").count() * 2 > ok.len();
    let (metric, unit) = if compute {
        ("tflops", "TFLOP/s")
    } else {
        ("tbps", "TB/s")
    };
    let label = |r: &Value| {
        let dims: Vec<String> = r["shape"]
            .as_array()
            .map(|a| a.iter().map(|v| v.to_string()).collect())
            .unwrap_or_default();
        let causal = if r["causal"] == json!(true) { " c" } else { "" };
        format!(
            "{} {}{causal}",
            r["dtype"].as_str().unwrap_or(""),
            dims.join("x")
        )
    };
    let same_case = |r: &Value, p: &Value| {
        p["op"] == r["op"]
            && p["dtype"] == r["dtype"]
            && p["shape"] == r["shape"]
            && p["causal"].as_bool().unwrap_or(false) == r["causal"].as_bool().unwrap_or(false)
    };
    let mut series: Vec<(String, Vec<(usize, f64)>)> = vec![(
        "tegula".into(),
        ok.iter()
            .enumerate()
            .filter_map(|(i, r)| r[metric].as_f64().map(|v| (i, v)))
            .collect(),
    )];
    let mut names: Vec<String> = peers
        .iter()
        .filter_map(|p| p["peer"].as_str().map(String::from))
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let points: Vec<(usize, f64)> = ok
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                peers
                    .iter()
                    .find(|p| p["peer"] == name.as_str() && same_case(r, p))
                    .and_then(|p| p[metric].as_f64())
                    .map(|v| (i, v))
            })
            .collect();
        if !points.is_empty() {
            series.push((name, points));
        }
    }
    let top = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        * 1.15;
    let labels: Vec<String> = ok.iter().map(|r| label(r)).collect();
    let title = format!("{} ({unit})", ok[0]["kernel"].as_str().unwrap_or("tegula"));
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let n = ok.len();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(60)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0..top.max(1e-9))?;
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_desc(unit)
            .draw()?;
        for (k, (name, points)) in series.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            let pts: Vec<(f64, f64)> = points.iter().map(|&(i, v)| (i as f64, v)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| io_error(path, e))
}
