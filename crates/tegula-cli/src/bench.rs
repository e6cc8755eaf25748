//! `tegula bench`: times the registry's entries (library kernels, the copy baseline,
//! tutorials' ports) through their host functions with CUDA events and prints each figure
//! beside the device's ceilings (a roofline in numbers).
//!
//! Method (docs/DESIGN.md, "Measuring"): the first call, a probe and a warm-up stay out of the
//! samples; the median and the spread (min, max, quartiles) of many timed calls are reported;
//! memory-bound kernels rotate among copies of their inputs (at least 1 GiB together, at most 64
//! copies) so that a run reads DRAM, not the 60 MB L2; FLOPs and the fewest bytes a kernel must
//! move (each input read once, each output written once) are counted per kernel. Memory-bound
//! kernels are also timed back to back after one L2 clear (`batch_ms`, beside a copy of as many
//! bytes timed so): the rate a stream of such calls sustains, free of the dirty lines the
//! clear before each sample leaves in the L2.
//!
//! A tutorial's port is timed as the Triton harness times its tutorial (`do_bench`'s budget:
//! 25 ms of warm-up, 100 ms of samples, an L2 clear before each, the median; one set of
//! inputs) and printed as a line `TEGULA <tutorial> <shape> <ms>` that joins the harness's
//! `TRITON <tutorial> <shape> <ms>` (`scripts/compare_tutorials.py`).

use crate::ceilings::{self, Ceilings};
use crate::entries::{bench_shapes_of, causal_of, dtype_of};
use crate::registry;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use tegula::autotune::{measure, Config, MeasureOptions, Timing};
use tegula::ir::DType;
use tegula::registry::{join_x, Entry, Kind};
use tegula::{Device, Result};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// What to time: entries of `tegula list` (copy, vector_add, softmax, layer_norm,
    /// layer_norm_backward, rms_norm, gemv, matmul, attention, attention_backward,
    /// attention_single_head_f32, tutorial-03-matmul or its harness name 03-matmul, ..),
    /// `all` (copy and the library) or `tutorials` (every port).
    #[arg(required = true)]
    pub kernel: Vec<String>,
    /// Problem size, repeatable: `--shape 4096,4096 --shape 8192,8192`, in the entry's
    /// benchmark dimensions (`tegula list`): copy and vector_add N; softmax, layer_norm,
    /// rms_norm and gemv M,N; matmul M,N,K; attention and attention_backward B,H,N,D (the
    /// mask from `--causal`); attention_single_head_f32 M,N,D; a tutorial its harness's. The
    /// default is the peers' shapes (peers.py's sweep, the Triton harness's shapes).
    #[arg(long)]
    pub shape: Vec<String>,
    /// bf16, fp16 (f16) or fp32 (f32); the default is the peers' (fp16 for gemv and copy,
    /// fp32 for attention_single_head_f32, else bf16; a tutorial's harness's).
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

/// The peers' dtype names.
pub(crate) fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F16 => "fp16",
        DType::BF16 => "bf16",
        DType::F32 => "fp32",
        DType::F64 => "fp64",
        _ => "other",
    }
}

fn invalid(message: String) -> tegula::Error {
    tegula::Error::Invalid {
        op: "bench".into(),
        message,
    }
}

/// One benchmark case, as it goes to `--json` and to the comparison.
struct Case {
    kernel: &'static str,
    /// The peers' op name: `gemv`, `matmul`, `attention_fwd`, `tutorial-03-matmul`, ...
    op: &'static str,
    dtype: &'static str,
    /// The shape without the `CAUSAL` flag.
    shape: Vec<usize>,
    causal: Option<bool>,
    flops: f64,
    bytes: f64,
    /// How many copies of the inputs the timed calls cycle through.
    copies: usize,
}

/// The entries `names` asks for: `all` (the copy and the library), `tutorials`, or names.
fn selected(names: &[String]) -> Result<Vec<Entry>> {
    let all = registry::all();
    let mut out = Vec::new();
    for name in names {
        match name.as_str() {
            "all" => out.extend(
                all.iter()
                    .filter(|e| e.kind == Kind::Baseline)
                    .chain(all.iter().filter(|e| e.kind == Kind::Library))
                    .copied(),
            ),
            "tutorials" => out.extend(all.iter().filter(|e| e.kind == Kind::Tutorial).copied()),
            other => out.push(registry::find(other)?),
        }
    }
    Ok(out)
}

/// `(shape, label)` of the cases of `entry`: `--shape`s, or the benchmark's shapes; with a
/// `CAUSAL` dimension, those of the masks `causal` asks for.
fn cases_of(
    entry: &Entry,
    shapes: &[String],
    causal: &[bool],
) -> Result<Vec<(Vec<usize>, String)>> {
    let spec = &entry.bench;
    let label = |dims: &[usize]| {
        spec.shapes
            .iter()
            .find(|s| s.dims == dims)
            .map_or_else(|| join_x(dims), |s| s.text())
    };
    let mut out = Vec::new();
    if shapes.is_empty() {
        for s in spec.shapes {
            let mask = spec.has_causal().then(|| s.dims.last() == Some(&1));
            if mask.is_none_or(|m| causal.contains(&m)) {
                out.push((s.dims.to_vec(), s.text()));
            }
        }
    } else {
        for text in shapes {
            for dims in bench_shapes_of(entry, text, causal)? {
                let l = label(&dims);
                out.push((dims, l));
            }
        }
    }
    Ok(out)
}

/// Runs `tegula bench`; false when a case failed.
pub fn run(args: BenchArgs) -> Result<bool> {
    let dev = Device::default()?;
    let entries = selected(&args.kernel)?;
    let ceil = ceilings::ceilings(&dev, args.remeasure)?;
    print_header(&dev, ceil.as_ref());
    let quick = args.quick || dev.cuda_runtime().is_none();
    let base_options = if quick {
        MeasureOptions {
            warmup_ms: 0.0,
            rep_ms: 10.0,
            min_reps: 3,
            max_reps: 20,
            max_total_ms: 2000.0,
            batch: false,
            stop_above: None,
        }
    } else {
        MeasureOptions::default()
    };
    let causal = causal_of(&args.causal)?;
    let configs: Vec<Option<Config>> = if args.config.is_empty() {
        vec![None]
    } else {
        args.config
            .iter()
            .map(|t| parse_config(t).map(Some))
            .collect::<Result<_>>()?
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
    for entry in &entries {
        let spec = &entry.bench;
        let tutorial = entry.kind == Kind::Tutorial;
        let dtype = dtype_of(entry, args.dtype.as_deref(), spec.dtype)?;
        // Streaming kernels are also timed back to back (`batch_ms`), beside a copy timed so.
        let options = MeasureOptions {
            batch: spec.streaming,
            ..base_options
        };
        for (shape, label) in cases_of(entry, &args.shape, causal)? {
            let (plain, mask) = match spec.has_causal() {
                true => (
                    shape[..shape.len() - 1].to_vec(),
                    Some(shape.last() == Some(&1)),
                ),
                false => (shape.clone(), None),
            };
            for config in &configs {
                let timed = entry
                    .prepare(&dev, &shape, dtype, config.as_ref())
                    .and_then(|mut bench| {
                        let timing = measure(&dev, &options, &mut bench.launch)?;
                        Ok((bench, timing))
                    });
                match timed {
                    Ok((bench, timing)) => {
                        let case = Case {
                            kernel: entry.name,
                            op: spec.op,
                            dtype: dtype_name(dtype),
                            shape: plain.clone(),
                            causal: mask,
                            flops: bench.flops,
                            bytes: bench.bytes,
                            copies: bench.input_copies,
                        };
                        let mut rec = record(&dev, &case, &timing, ceil.as_ref());
                        if rec["bound"] == "memory" && dev.cuda_runtime().is_some() && !tutorial {
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
                        if let Some(triton) = entry.triton_name() {
                            rec["label"] = json!(label);
                            // The line the Triton harness's `TRITON <tutorial> <shape> <ms>` joins.
                            println!("TEGULA {triton} {label} {:.5}", timing.median);
                        }
                        emit(rec, &mut records)?;
                    }
                    Err(e) => {
                        ok = false;
                        println!(
                            "{:<19} {:<5} {plain:?}: FAILED: {e}",
                            entry.name,
                            dtype_name(dtype)
                        );
                        if let Some(triton) = entry.triton_name() {
                            println!(
                                "TEGULA-ERROR {triton} {label} {}",
                                e.to_string().replace('\n', " | ")
                            );
                        }
                        let rec = json!({
                            "system": "tegula", "kernel": entry.name, "op": spec.op,
                            "dtype": dtype_name(dtype), "shape": plain,
                            "causal": mask,
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
