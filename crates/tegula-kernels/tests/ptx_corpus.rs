//! The PTX corpus: every library kernel as its host wrapper launches it, at a few shapes and
//! dtypes and at every candidate its tuner may time, compiled for sm_80 and sm_90a, one hash
//! of the PTX text per case (`ptx_corpus.txt` beside this file).
//!
//! It is the referee of changes to the compiler that must not change what it emits (moving
//! code between the planning and emitting halves of the backend, say): any case whose PTX
//! changes fails the test, named. A change that means to change the PTX rewrites the file with
//! `TEGULA_BLESS=1 cargo test -p tegula-kernels --test ptx_corpus` and says why in its commit.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use tegula::ir::{DType, Element};
use tegula::{Device, LaunchConfig, Result, Tensor};
use tegula_kernels::attention::{self, AttentionOptions, Dims};
use tegula_kernels::matmul::{self, MatmulConfig, MatmulProblem};
use tegula_kernels::{gemv, norm, softmax, vector_add};

/// The SM count the recorded launches size persistent grids for (an H200's).
const SMS: usize = 132;

/// 64-bit FNV-1a: stable across platforms and Rust versions, unlike `DefaultHasher`.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The cases of one wrapper call: `name`'s recorded launches, each compiled for both targets.
struct Corpus {
    hashes: BTreeMap<String, String>,
    errors: Vec<String>,
}

impl Corpus {
    /// Runs `call` on a fresh recording device and hashes every launch it made.
    fn record(&mut self, name: String, call: impl FnOnce(&Device) -> Result<()>) {
        let dev = Device::recording(SMS);
        if let Err(e) = call(&dev) {
            self.errors.push(format!("{name}: {e}"));
            return;
        }
        for (i, launch) in dev.take_recorded().iter().enumerate() {
            for sm in [80, 90] {
                let case = format!("{name} #{i} {} sm_{sm}", launch.name);
                let entry = match launch.compile(&tegula::compiler::Target { sm }) {
                    Ok(c) => format!("{:016x}", fnv1a(&c.ptx)),
                    Err(e) => format!("error:{:016x}", fnv1a(&e.to_string())),
                };
                self.hashes.insert(case, entry);
            }
        }
    }
}

fn float_name(dtype: DType) -> &'static str {
    dtype.name()
}

fn launch_name(c: LaunchConfig) -> String {
    format!("w{}s{}", c.num_warps, c.num_stages)
}

fn matmul_cases<T: Element>(corpus: &mut Corpus, (m, n, k): (usize, usize, usize), a_col: bool) {
    let problem = MatmulProblem {
        m,
        n,
        k,
        input: T::DTYPE,
        output: DType::F32,
        a_col_major: a_col,
        b_col_major: false,
        wgmma: true,
    };
    let fixed = MatmulConfig {
        precision: match T::DTYPE {
            DType::F32 => tegula::ir::InputPrecision::Tf32,
            _ => tegula::ir::InputPrecision::Ieee,
        },
        ..MatmulConfig::default()
    };
    for c in matmul::candidates(&problem, &fixed) {
        let name = format!(
            "matmul {} {m}x{n}x{k}{} {}x{}x{} g{} {:?} {} persistent={:?} wgmma={:?}",
            float_name(T::DTYPE),
            if a_col { " a=col" } else { "" },
            c.block_m,
            c.block_n,
            c.block_k,
            c.group_m,
            c.precision,
            launch_name(c.launch),
            c.persistent,
            c.wgmma
        );
        corpus.record(name, |dev| {
            let a: Tensor<T> = if a_col {
                dev.randn::<T>([k, m])?.transpose(0, 1)?
            } else {
                dev.randn::<T>([m, k])?
            };
            let b = dev.randn::<T>([k, n])?;
            let out = dev.empty::<f32>([m, n])?;
            // Only what the tuner would time: the candidates whose plans add a kernel.
            if !matmul::adds_a_kernel(&a, &b, &out, &c)? {
                return Ok(());
            }
            matmul::matmul_into_with(&a, &b, &out, c)
        });
    }
}

fn attention_cases<T: Element>(corpus: &mut Corpus, dims: Dims, causal: bool, backward: bool) {
    let base = AttentionOptions {
        causal,
        ..AttentionOptions::default()
    };
    let candidates = if backward {
        attention::backward_candidates(&dims, T::DTYPE, &base, true)
    } else {
        attention::forward_candidates(&dims, T::DTYPE, &base, true)
    };
    for c in candidates {
        let c = AttentionOptions {
            wgmma: Some(c.wgmma.unwrap_or(false)),
            ..c
        };
        let name = format!(
            "attention {} {} {} causal={causal} {}x{} {} wgmma={:?}",
            if backward { "backward" } else { "forward" },
            float_name(T::DTYPE),
            dims.describe(),
            c.block_m,
            c.block_n,
            launch_name(c.config),
            c.wgmma
        );
        corpus.record(name, |dev| {
            let q = dev.randn::<T>(dims.q_shape())?;
            let k = dev.randn::<T>(dims.kv_shape())?;
            let v = dev.randn::<T>(dims.kv_shape())?;
            // Only what the tuner would time: the candidates whose plans add kernels.
            if backward {
                let o = dev.randn::<T>(dims.q_shape())?;
                let d_o = dev.randn::<T>(dims.q_shape())?;
                let lse = dev.randn::<f32>(dims.lse_shape())?;
                if !attention::backward_adds_a_kernel(&q, &k, &v, &o, &d_o, &lse, &c)? {
                    return Ok(());
                }
                attention::backward(&q, &k, &v, &o, &d_o, &lse, &c).map(|_| ())
            } else {
                if !attention::forward_adds_a_kernel(&q, &k, &v, &c)? {
                    return Ok(());
                }
                attention::forward(&q, &k, &v, &c).map(|_| ())
            }
        });
    }
}

fn row_cases<T: Element>(corpus: &mut Corpus, (m, n): (usize, usize)) {
    let dt = float_name(T::DTYPE);
    corpus.record(format!("softmax {dt} {m}x{n}"), |dev| {
        softmax::softmax(&dev.randn::<T>([m, n])?).map(|_| ())
    });
    corpus.record(format!("layer_norm {dt} {m}x{n}"), |dev| {
        let x = dev.randn::<T>([m, n])?;
        let (w, b) = (dev.randn::<T>([n])?, dev.randn::<T>([n])?);
        norm::layer_norm(&x, &w, &b, 1e-5).map(|_| ())
    });
    corpus.record(format!("layer_norm_backward {dt} {m}x{n}"), |dev| {
        let x = dev.randn::<T>([m, n])?;
        let w = dev.randn::<T>([n])?;
        let dy = dev.randn::<T>([m, n])?;
        let mean = dev.randn::<f32>([m])?;
        let rstd = dev.rand_uniform::<f32>([m], 0.5, 2.0)?;
        norm::layer_norm_backward(&dy, &x, &w, &mean, &rstd).map(|_| ())
    });
    corpus.record(format!("rms_norm {dt} {m}x{n}"), |dev| {
        let x = dev.randn::<T>([m, n])?;
        norm::rms_norm(&x, &dev.randn::<T>([n])?, 1e-5).map(|_| ())
    });
    corpus.record(format!("gemv {dt} {m}x{n}"), |dev| {
        gemv::gemv(&dev.randn::<T>([m, n])?, &dev.randn::<T>([n])?).map(|_| ())
    });
    corpus.record(format!("vector_add {dt} {}", m * n), |dev| {
        let (x, y) = (dev.randn::<T>([m * n])?, dev.randn::<T>([m * n])?);
        vector_add::vector_add(&x, &y).map(|_| ())
    });
}

fn single_head_cases(corpus: &mut Corpus, (m, n, d): (usize, usize, usize)) {
    corpus.record(format!("single_head_f32_basic {m}x{n}x{d}"), |dev| {
        let q = dev.randn::<f32>([m, d])?;
        let (k, v) = (dev.randn::<f32>([n, d])?, dev.randn::<f32>([n, d])?);
        attention::single_head_f32_basic(&q, &k, &v).map(|_| ())
    });
    corpus.record(format!("single_head_f32 {m}x{n}x{d}"), |dev| {
        let q = dev.randn::<f32>([m, d])?;
        let (k, v) = (dev.randn::<f32>([n, d])?, dev.randn::<f32>([n, d])?);
        attention::single_head_f32(&q, &k, &v).map(|_| ())
    });
}

fn dims(batch: usize, heads: usize, kv_heads: usize, n: usize, head_dim: usize) -> Dims {
    Dims {
        batch,
        heads,
        kv_heads,
        n_q: n,
        n_k: n,
        head_dim,
    }
}

fn build() -> Corpus {
    let mut corpus = Corpus {
        hashes: BTreeMap::new(),
        errors: Vec::new(),
    };
    for shape in [(512, 512, 512), (200, 150, 130)] {
        matmul_cases::<half::bf16>(&mut corpus, shape, false);
        matmul_cases::<half::f16>(&mut corpus, shape, false);
        matmul_cases::<f32>(&mut corpus, shape, false);
    }
    matmul_cases::<half::f16>(&mut corpus, (512, 256, 256), true);
    for head_dim in [64, 128] {
        for causal in [false, true] {
            let d = dims(1, 2, 2, 1024, head_dim);
            attention_cases::<half::bf16>(&mut corpus, d, causal, false);
            attention_cases::<half::bf16>(&mut corpus, d, causal, true);
        }
    }
    attention_cases::<half::f16>(&mut corpus, dims(2, 4, 2, 333, 64), true, false);
    attention_cases::<half::f16>(&mut corpus, dims(2, 4, 2, 333, 64), true, true);
    attention_cases::<f32>(&mut corpus, dims(1, 2, 1, 100, 40), false, false);
    attention_cases::<f32>(&mut corpus, dims(1, 2, 1, 100, 40), false, true);
    attention_cases::<half::bf16>(&mut corpus, dims(1, 2, 2, 512, 256), false, false);
    for shape in [(37, 1031), (256, 4096), (64, 32768)] {
        row_cases::<half::bf16>(&mut corpus, shape);
        row_cases::<f32>(&mut corpus, shape);
    }
    row_cases::<half::f16>(&mut corpus, (128, 2048));
    single_head_cases(&mut corpus, (1024, 1024, 64));
    single_head_cases(&mut corpus, (77, 300, 48));
    corpus
}

#[test]
fn library_ptx_is_unchanged() {
    let corpus = build();
    assert!(
        corpus.errors.is_empty(),
        "library calls failed:\n{}",
        corpus.errors.join("\n")
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx_corpus.txt");
    let mut text = String::from(
        "# PTX hashes of the library's kernels (tests/ptx_corpus.rs); rewrite with TEGULA_BLESS=1\n",
    );
    for (case, hash) in &corpus.hashes {
        writeln!(text, "{hash} {case}").expect("a String takes writes");
    }
    if std::env::var("TEGULA_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &text).expect("the corpus file is writable");
        return;
    }
    let stored = std::fs::read_to_string(&path).expect("tests/ptx_corpus.txt exists");
    let parse = |t: &str| -> BTreeMap<String, String> {
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (hash, case) = l.rsplit_once(" sm_").map(|(head, sm)| {
                    let (hash, case) = head.split_once(' ').unwrap_or((head, ""));
                    (hash.to_string(), format!("{case} sm_{sm}"))
                })?;
                Some((case, hash))
            })
            .collect()
    };
    let (want, got) = (parse(&stored), parse(&text));
    let mut diffs = Vec::new();
    for (case, hash) in &got {
        match want.get(case) {
            Some(h) if h == hash => {}
            Some(h) => diffs.push(format!("changed: {case} ({h} -> {hash})")),
            None => diffs.push(format!("new: {case}")),
        }
    }
    for case in want.keys().filter(|c| !got.contains_key(*c)) {
        diffs.push(format!("gone: {case}"));
    }
    assert!(
        diffs.is_empty(),
        "{} of {} cases differ from tests/ptx_corpus.txt:\n{}",
        diffs.len(),
        got.len(),
        diffs.join("\n")
    );
}
