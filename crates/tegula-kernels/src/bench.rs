//! The library's benchmarks, as registry entries ([`tegula::registry::BenchSpec`]): per
//! kernel its FLOPs and the fewest bytes it must move, the shapes its peers measure (peers.py's
//! sweep), the realistic shape a user would launch, and a prepared launch through the host
//! wrapper (with `tegula bench --config`'s pinned config where the wrapper takes one).
//!
//! Memory-bound kernels cycle through copies of their inputs (at least 1 GiB together, at
//! most 64 copies, as peers.py does) so that a timed call reads DRAM, not the 60 MB L2. On a
//! recording device (`tegula ptx`, `plan`, `launch-cost`) the inputs are one set of empty
//! tensors: nothing runs there.

use crate::attention::{self, AttentionOptions};
use crate::{gemv, matmul, norm, softmax, vector_add};
use tegula::autotune::Config;
use tegula::ir::{DType, Element};
use tegula::registry::{is_recording, Bench, BenchShape, BenchSpec};
use tegula::{Device, Error, Result, Tensor};

fn invalid(message: String) -> Error {
    Error::Invalid {
        op: "bench".into(),
        message,
    }
}

/// Copies of the inputs so that the timed calls cycle through at least 1 GiB (as peers.py
/// does), for inputs under 1 GiB; at most 64. One copy off a GPU.
pub fn copies_for(dev: &Device, input_bytes: f64) -> usize {
    if dev.cuda_runtime().is_none() {
        return 1;
    }
    let total = (1u64 << 30) as f64;
    ((total / input_bytes.max(1.0)).ceil() as usize).clamp(1, 64)
}

/// `copies` tensors of `shape` holding random normal values (a random chunk of up to 4M
/// values, repeated: drawing billions on the host would take longer than the benchmark; only
/// the addresses must differ between copies for the L2 to miss). Empty tensors on a
/// recording device.
pub fn random_copies<T: Element>(
    dev: &Device,
    shape: &[usize],
    copies: usize,
) -> Result<Vec<Tensor<T>>> {
    if is_recording(dev) {
        return (0..copies)
            .map(|_| dev.empty::<T>(shape.to_vec()))
            .collect();
    }
    let n: usize = shape.iter().product();
    let chunk = dev.randn::<T>([n.min(1 << 22)])?.to_vec()?;
    let host: Vec<T> = chunk.iter().copied().cycle().take(n).collect();
    (0..copies)
        .map(|_| dev.from_slice(&host, shape.to_vec()))
        .collect()
}

/// One tensor of `shape` filled as [`random_copies`] fills them.
pub fn random<T: Element>(dev: &Device, shape: &[usize]) -> Result<Tensor<T>> {
    Ok(random_copies(dev, shape, 1)?.remove(0))
}

/// Cycles through `0..n`.
pub struct Rotor {
    next: usize,
    n: usize,
}

impl Rotor {
    pub fn new(n: usize) -> Rotor {
        Rotor { next: 0, n }
    }
    pub fn step(&mut self) -> usize {
        let i = self.next;
        self.next = (self.next + 1) % self.n;
        i
    }
}

/// Calls `$body` with `$T` the Rust type of `$dtype` (f16, bf16 or f32).
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

// --- vector_add ----------------------------------------------------------------------------

fn vector_add_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<Bench> {
    let s = T::DTYPE.size_bytes() as f64;
    let n = shape[0];
    let copies = copies_for(dev, 2.0 * n as f64 * s);
    let xs = random_copies::<T>(dev, &[n], copies)?;
    let ys = random_copies::<T>(dev, &[n], copies)?;
    let out = dev.empty::<T>([n])?;
    let mut r = Rotor::new(xs.len());
    Ok(Bench {
        flops: n as f64,
        bytes: 3.0 * n as f64 * s,
        input_copies: copies,
        launch: Box::new(move || {
            let i = r.step();
            vector_add::vector_add_into(&xs[i], &ys[i], &out)
        }),
    })
}

fn vector_add_bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    with_dtype!(dtype, T => vector_add_typed::<T>(dev, shape))
}

/// `vector_add`: N.
pub fn vector_add() -> BenchSpec {
    BenchSpec {
        op: "vector_add",
        dims: &["N"],
        shapes: {
            const SHAPES: &[BenchShape] = &[
                BenchShape::of(&[1 << 20]),
                BenchShape::of(&[1 << 24]),
                BenchShape::of(&[1 << 28]),
            ];
            SHAPES
        },
        dtype: DType::BF16,
        realistic: Some((DType::F32, &[16 << 20])),
        streaming: true,
        prepare: vector_add_bench,
        pinned: None,
    }
}

// --- softmax, layer_norm, rms_norm ---------------------------------------------------------

/// The row kernels of one pass: softmax, layer norm, RMS norm.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rows {
    Softmax,
    LayerNorm,
    RmsNorm,
}

fn rows_typed<T: Element>(
    dev: &Device,
    shape: &[usize],
    kind: Rows,
    config: Option<&Config>,
) -> Result<Bench> {
    let s = T::DTYPE.size_bytes() as f64;
    let (m, n) = (shape[0], shape[1]);
    let (mn, nf) = ((m * n) as f64, n as f64);
    let (flops, bytes) = match kind {
        // max, subtract, exp, sum, divide
        Rows::Softmax => (5.0 * mn, 2.0 * mn * s),
        // mean, centre, square, sum, scale, weight, bias; mean and rstd out (f32)
        Rows::LayerNorm => (8.0 * mn, 2.0 * mn * s + 2.0 * nf * s + 8.0 * m as f64),
        Rows::RmsNorm => (4.0 * mn, 2.0 * mn * s + nf * s),
    };
    let copies = copies_for(dev, mn * s);
    let xs = random_copies::<T>(dev, &[m, n], copies)?;
    let y = dev.empty::<T>([m, n])?;
    let w = random::<T>(dev, &[n])?;
    let b = random::<T>(dev, &[n])?;
    let mean = dev.empty::<f32>([m])?;
    let rstd = dev.empty::<f32>([m])?;
    let mut r = Rotor::new(xs.len());
    let config = config.cloned();
    Ok(Bench {
        flops,
        bytes,
        input_copies: copies,
        launch: Box::new(move || {
            let x = &xs[r.step()];
            match (kind, &config) {
                (Rows::Softmax, None) => softmax::softmax_into(x, &y),
                (Rows::Softmax, Some(c)) => softmax::softmax_into_with(x, &y, c),
                (Rows::LayerNorm, None) => norm::layer_norm_into(x, &w, &b, 1e-5, &y, &mean, &rstd),
                (Rows::LayerNorm, Some(c)) => {
                    norm::layer_norm_into_with(x, &w, &b, 1e-5, &y, &mean, &rstd, c)
                }
                (Rows::RmsNorm, None) => norm::rms_norm_into(x, &w, 1e-5, &y),
                (Rows::RmsNorm, Some(c)) => norm::rms_norm_into_with(x, &w, 1e-5, &y, c),
            }
        }),
    })
}

macro_rules! rows_fns {
    ($($bench:ident, $pinned:ident => $kind:expr;)*) => {$(
        fn $bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
            with_dtype!(dtype, T => rows_typed::<T>(dev, shape, $kind, None))
        }
        fn $pinned(dev: &Device, shape: &[usize], dtype: DType, c: &Config) -> Result<Bench> {
            with_dtype!(dtype, T => rows_typed::<T>(dev, shape, $kind, Some(c)))
        }
    )*};
}

rows_fns! {
    softmax_bench, softmax_pinned => Rows::Softmax;
    layer_norm_bench, layer_norm_pinned => Rows::LayerNorm;
    rms_norm_bench, rms_norm_pinned => Rows::RmsNorm;
}

/// peers.py's rows: 4096 of 1024 to 32768 columns.
const ROW_SWEEP: &[BenchShape] = &[
    BenchShape::of(&[4096, 1024]),
    BenchShape::of(&[4096, 4096]),
    BenchShape::of(&[4096, 16384]),
    BenchShape::of(&[4096, 32768]),
];

fn rows_spec(op: &'static str, prepare: tegula::registry::BenchFn) -> BenchSpec {
    BenchSpec {
        op,
        dims: &["M", "N"],
        shapes: ROW_SWEEP,
        dtype: DType::BF16,
        realistic: Some((DType::BF16, &[4096, 4096])),
        streaming: true,
        prepare,
        pinned: None,
    }
}

/// `softmax`: M, N; `--config BLOCK, BLOCK_M, warps, PROGRAMS_PER_SM, UNROLL`.
pub fn softmax() -> BenchSpec {
    BenchSpec {
        pinned: Some(softmax_pinned),
        ..rows_spec("softmax", softmax_bench)
    }
}

/// `layer_norm`: M, N; pinned as softmax.
pub fn layer_norm() -> BenchSpec {
    BenchSpec {
        pinned: Some(layer_norm_pinned),
        ..rows_spec("layer_norm", layer_norm_bench)
    }
}

/// `rms_norm`: M, N; pinned as softmax.
pub fn rms_norm() -> BenchSpec {
    BenchSpec {
        pinned: Some(rms_norm_pinned),
        ..rows_spec("rms_norm", rms_norm_bench)
    }
}

fn layer_norm_backward_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<Bench> {
    // The library's API allocates dx, dw, db and the partial column sums on every call, so
    // the time includes those allocations (and poisoning dx).
    let s = T::DTYPE.size_bytes() as f64;
    let (m, n) = (shape[0], shape[1]);
    let mn = (m * n) as f64;
    let copies = copies_for(dev, 2.0 * mn * s);
    let xs = random_copies::<T>(dev, &[m, n], copies)?;
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
    Ok(Bench {
        flops: 10.0 * mn,
        // dy and x read, dx written; w, mean, rstd read; dw, db written.
        bytes: 3.0 * mn * s + 3.0 * n as f64 * s + 8.0 * m as f64,
        input_copies: copies,
        launch: Box::new(move || {
            norm::layer_norm_backward(&dy, &xs[r.step()], &w, &mean, &rstd).map(|_| ())
        }),
    })
}

fn layer_norm_backward_bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    with_dtype!(dtype, T => layer_norm_backward_typed::<T>(dev, shape))
}

/// `layer_norm_backward`: M, N (the wrapper takes no config).
pub fn layer_norm_backward() -> BenchSpec {
    rows_spec("layer_norm_backward", layer_norm_backward_bench)
}

// --- gemv ----------------------------------------------------------------------------------

fn gemv_typed<T: Element>(dev: &Device, shape: &[usize], config: Option<&Config>) -> Result<Bench> {
    let s = T::DTYPE.size_bytes() as f64;
    let (m, n) = (shape[0], shape[1]);
    let copies = copies_for(dev, (m * n) as f64 * s);
    let a = random_copies::<T>(dev, &[m, n], copies)?;
    let x = random::<T>(dev, &[n])?;
    let y = dev.empty::<f32>([m])?;
    let mut r = Rotor::new(a.len());
    let config = config.cloned();
    Ok(Bench {
        flops: 2.0 * (m * n) as f64,
        // A and x read once, y (f32) written once.
        bytes: (m * n) as f64 * s + n as f64 * s + 4.0 * m as f64,
        input_copies: copies,
        launch: Box::new(move || match &config {
            None => gemv::gemv_into(&a[r.step()], &x, &y),
            Some(c) => gemv::gemv_into_with(&a[r.step()], &x, &y, c),
        }),
    })
}

fn gemv_bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    with_dtype!(dtype, T => gemv_typed::<T>(dev, shape, None))
}

fn gemv_pinned(dev: &Device, shape: &[usize], dtype: DType, c: &Config) -> Result<Bench> {
    with_dtype!(dtype, T => gemv_typed::<T>(dev, shape, Some(c)))
}

/// `gemv`: M, N; `--config warps, BLOCK_M, BLOCK_N`.
pub fn gemv() -> BenchSpec {
    BenchSpec {
        op: "gemv",
        dims: &["M", "N"],
        shapes: {
            const SHAPES: &[BenchShape] = &[
                BenchShape::of(&[4096, 4096]),
                BenchShape::of(&[8192, 8192]),
                BenchShape::of(&[16384, 16384]),
                BenchShape::of(&[14336, 4096]),
                BenchShape::of(&[4096, 14336]),
            ];
            SHAPES
        },
        dtype: DType::F16,
        realistic: Some((DType::F16, &[8192, 8192])),
        streaming: true,
        prepare: gemv_bench,
        pinned: Some(gemv_pinned),
    }
}

// --- matmul --------------------------------------------------------------------------------

/// The matmul config pinned by `--config`: `BLOCK_M`, `BLOCK_N`, `BLOCK_K` (each left to the
/// autotuner when absent), `GROUP_M` (8 when absent), `PERSISTENT` (programs a SM of a
/// persistent grid; 0, one program a tile, when absent), `WGMMA` (1: ask for Hopper's wgmma,
/// 0: mma.sync, when absent), `warps` and `stages` (4 and 1 when absent, as for every kernel).
pub fn matmul_config(c: &Config) -> Result<matmul::MatmulConfig> {
    let size = |name: &str, absent: usize| -> Result<usize> {
        match c.get(name) {
            Some(v) => usize::try_from(v).map_err(|_| invalid(format!("--config {name}={v}"))),
            None => Ok(absent),
        }
    };
    let auto = crate::tuned::AUTO;
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

fn matmul_typed<T: Element>(
    dev: &Device,
    shape: &[usize],
    config: Option<&Config>,
) -> Result<Bench> {
    let s = T::DTYPE.size_bytes() as f64;
    let (m, n, k) = (shape[0], shape[1], shape[2]);
    let a = random::<T>(dev, &[m, k])?;
    let b = random::<T>(dev, &[k, n])?;
    let c = dev.empty::<T>([m, n])?;
    let pinned = config.map(matmul_config).transpose()?;
    Ok(Bench::new(
        2.0 * (m * n * k) as f64,
        ((m * k + k * n + m * n) as f64) * s,
        move || match pinned {
            None => matmul::matmul_into::<T, T>(&a, &b, &c),
            Some(p) => matmul::matmul_into_with::<T, T>(&a, &b, &c, p),
        },
    ))
}

fn matmul_bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    with_dtype!(dtype, T => matmul_typed::<T>(dev, shape, None))
}

fn matmul_pinned(dev: &Device, shape: &[usize], dtype: DType, c: &Config) -> Result<Bench> {
    with_dtype!(dtype, T => matmul_typed::<T>(dev, shape, Some(c)))
}

/// `matmul`: M, N, K; `--config` as [`matmul_config`].
pub fn matmul() -> BenchSpec {
    BenchSpec {
        op: "matmul",
        dims: &["M", "N", "K"],
        shapes: {
            const SHAPES: &[BenchShape] = &[
                BenchShape::of(&[4096, 4096, 4096]),
                BenchShape::of(&[8192, 8192, 8192]),
            ];
            SHAPES
        },
        dtype: DType::BF16,
        realistic: Some((DType::BF16, &[4096, 4096, 4096])),
        streaming: false,
        prepare: matmul_bench,
        pinned: Some(matmul_pinned),
    }
}

// --- attention, attention_backward ---------------------------------------------------------

/// The forward's or backward's options pinned by `--config`: `BLOCK_M` and `BLOCK_N` (each
/// left to the autotuner when absent), `WGMMA` (1: ask for Hopper's wgmma in the forward or
/// in the backward's dK/dV kernel, 0 when absent), `warps` and `stages` (4 and 1 when absent,
/// as for every kernel).
pub fn attention_options(c: &Config, base: AttentionOptions) -> Result<AttentionOptions> {
    let size = |name: &str| -> Result<usize> {
        match c.get(name) {
            Some(v) => usize::try_from(v).map_err(|_| invalid(format!("--config {name}={v}"))),
            None => Ok(crate::tuned::AUTO),
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

fn attention_typed<T: Element>(
    dev: &Device,
    shape: &[usize],
    backward: bool,
    config: Option<&Config>,
) -> Result<Bench> {
    let s = T::DTYPE.size_bytes() as f64;
    let (bt, h, n, d) = (shape[0], shape[1], shape[2], shape[3]);
    let causal = shape.get(4).copied().unwrap_or(0) != 0;
    let fwd =
        4.0 * (bt * h) as f64 * (n as f64) * (n as f64) * d as f64 / if causal { 2.0 } else { 1.0 };
    let qkv = (bt * h * n * d) as f64 * s;
    let lse = (bt * h * n) as f64 * 4.0;
    let q = random::<T>(dev, &[bt, h, n, d])?;
    let k = random::<T>(dev, &[bt, h, n, d])?;
    let v = random::<T>(dev, &[bt, h, n, d])?;
    let o = dev.empty::<T>([bt, h, n, d])?;
    let l = dev.empty::<f32>([bt, h, n])?;
    let base = AttentionOptions {
        causal,
        ..Default::default()
    };
    let opts = match config {
        Some(c) => attention_options(c, base)?,
        None => base,
    };
    if !backward {
        // q, k, v read; o, lse written
        return Ok(Bench::new(fwd, 4.0 * qkv + lse, move || {
            attention::forward_into(&q, &k, &v, &o, &l, &opts)
        }));
    }
    attention::forward_into(&q, &k, &v, &o, &l, &base)?;
    let d_o = random::<T>(dev, &[bt, h, n, d])?;
    let dq = dev.empty::<T>([bt, h, n, d])?;
    let dk = dev.empty::<T>([bt, h, n, d])?;
    let dv = dev.empty::<T>([bt, h, n, d])?;
    // The usual convention: the backward does 2.5 times the forward's FLOPs; q, k, v, o, dO,
    // lse read; dq, dk, dv written.
    Ok(Bench::new(2.5 * fwd, 8.0 * qkv + lse, move || {
        attention::backward_into(&q, &k, &v, &o, &d_o, &l, &dq, &dk, &dv, &opts)
    }))
}

macro_rules! attention_fns {
    ($($bench:ident, $pinned:ident => $backward:expr;)*) => {$(
        fn $bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
            with_dtype!(dtype, T => attention_typed::<T>(dev, shape, $backward, None))
        }
        fn $pinned(dev: &Device, shape: &[usize], dtype: DType, c: &Config) -> Result<Bench> {
            with_dtype!(dtype, T => attention_typed::<T>(dev, shape, $backward, Some(c)))
        }
    )*};
}

attention_fns! {
    attention_bench, attention_pinned => false;
    attention_backward_bench, attention_backward_pinned => true;
}

/// `[B, H, N, D]` with one KV head a query head; CAUSAL 0 or 1.
const ATTENTION_DIMS: &[&str] = &["B", "H", "N", "D", "CAUSAL"];

/// `attention`: B, H, N, D, CAUSAL (peers.py's `attention_fwd`); `--config BLOCK_M, BLOCK_N,
/// WGMMA, warps, stages`.
pub fn attention() -> BenchSpec {
    BenchSpec {
        op: "attention_fwd",
        dims: ATTENTION_DIMS,
        shapes: {
            const SHAPES: &[BenchShape] = &[
                BenchShape::of(&[4, 32, 1024, 64, 0]),
                BenchShape::of(&[4, 32, 1024, 64, 1]),
                BenchShape::of(&[4, 32, 4096, 64, 0]),
                BenchShape::of(&[4, 32, 4096, 64, 1]),
                BenchShape::of(&[4, 32, 16384, 64, 0]),
                BenchShape::of(&[4, 32, 16384, 64, 1]),
                BenchShape::of(&[4, 32, 1024, 128, 0]),
                BenchShape::of(&[4, 32, 1024, 128, 1]),
                BenchShape::of(&[4, 32, 4096, 128, 0]),
                BenchShape::of(&[4, 32, 4096, 128, 1]),
                BenchShape::of(&[4, 32, 16384, 128, 0]),
                BenchShape::of(&[4, 32, 16384, 128, 1]),
                BenchShape::of(&[1, 32, 16384, 128, 0]),
                BenchShape::of(&[1, 32, 16384, 128, 1]),
            ];
            SHAPES
        },
        dtype: DType::BF16,
        realistic: Some((DType::BF16, &[4, 32, 4096, 64, 0])),
        streaming: false,
        prepare: attention_bench,
        pinned: Some(attention_pinned),
    }
}

/// `attention_backward`: as [`attention()`] (peers.py's `attention_bwd`).
pub fn attention_backward() -> BenchSpec {
    BenchSpec {
        op: "attention_bwd",
        dims: ATTENTION_DIMS,
        shapes: {
            const SHAPES: &[BenchShape] = &[
                BenchShape::of(&[4, 32, 4096, 64, 0]),
                BenchShape::of(&[4, 32, 4096, 64, 1]),
                BenchShape::of(&[4, 32, 4096, 128, 0]),
                BenchShape::of(&[4, 32, 4096, 128, 1]),
                BenchShape::of(&[1, 32, 16384, 128, 0]),
                BenchShape::of(&[1, 32, 16384, 128, 1]),
            ];
            SHAPES
        },
        dtype: DType::BF16,
        realistic: Some((DType::BF16, &[4, 32, 4096, 128, 0])),
        streaming: false,
        prepare: attention_backward_bench,
        pinned: Some(attention_backward_pinned),
    }
}

// --- attention_single_head_f32 -------------------------------------------------------------

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

fn single_head_typed(
    dev: &Device,
    shape: &[usize],
    dtype: DType,
    config: Option<&Config>,
) -> Result<Bench> {
    // The contract: f32, one head, Q [M, D], K and V [N, D].
    if dtype != DType::F32 {
        return Err(invalid(
            "attention_single_head_f32 runs in f32 only (--dtype fp32)".into(),
        ));
    }
    let (m, n, d) = (shape[0], shape[1], shape[2]);
    let flops = 4.0 * (m * n * d) as f64;
    let bytes = (2 * m * d + 2 * n * d) as f64 * 4.0;
    let q = random::<f32>(dev, &[m, d])?;
    let k = random::<f32>(dev, &[n, d])?;
    let v = random::<f32>(dev, &[n, d])?;
    let o = dev.empty::<f32>([m, d])?;
    Ok(match config {
        // The basic 16x16 IEEE kernel.
        Some(c) if c.get("BASIC").unwrap_or(0) != 0 => Bench::new(flops, bytes, move || {
            attention::single_head_f32_basic_into(&q, &k, &v, &o)
        }),
        Some(c) => {
            let pinned = single_head_config(dev, c, (m, n, d))?;
            eprintln!("attention_single_head_f32: {pinned:?}");
            Bench::new(flops, bytes, move || {
                attention::single_head_f32_with(&q, &k, &v, &o, &pinned)
            })
        }
        None => Bench::new(flops, bytes, move || {
            attention::single_head_f32_into(&q, &k, &v, &o)
        }),
    })
}

fn single_head_bench(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    single_head_typed(dev, shape, dtype, None)
}

fn single_head_pinned(dev: &Device, shape: &[usize], dtype: DType, c: &Config) -> Result<Bench> {
    single_head_typed(dev, shape, dtype, Some(c))
}

/// `attention_single_head_f32`: M, N, D, f32 (peers.py's `attention_fwd_f32_single_head`);
/// `--config BLOCK_M, BLOCK_N, SPLITS, TF32X3, warps, stages` for the fast path, `BASIC=1`
/// for the basic 16x16 IEEE kernel.
pub fn single_head() -> BenchSpec {
    BenchSpec {
        op: "attention_fwd_f32_single_head",
        dims: &["M", "N", "D"],
        shapes: {
            const SHAPES: &[BenchShape] = &[
                BenchShape::of(&[7, 13, 8]),
                BenchShape::of(&[35, 67, 32]),
                BenchShape::of(&[64, 129, 128]),
                BenchShape::of(&[1024, 4096, 64]),
                BenchShape::of(&[1024, 4096, 128]),
            ];
            SHAPES
        },
        dtype: DType::F32,
        realistic: Some((DType::F32, &[1024, 4096, 64])),
        streaming: false,
        prepare: single_head_bench,
        pinned: Some(single_head_pinned),
    }
}
