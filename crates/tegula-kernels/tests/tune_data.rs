//! The library's tuner heuristics against every candidate's timing on a GPU
//! (`benchmarks/tune-data/*.jsonl`, written by `scripts/tune_data_gpu.sh` with
//! `TEGULA_TUNE_TOP_K=all`): at each recorded key, the candidates nearest the heuristic
//! (`tuned::distance`), among those the tuner timed, hold one within the stated margin of the
//! best of all, and the heuristic's own nearest (what runs with tuning off) is within 10%.

use std::path::PathBuf;
use tegula::autotune::Config;
use tegula::ir::DType;
use tegula_kernels::attention::{forward_heuristic, AttentionOptions, Dims, FORWARD_TOP_K};
use tegula_kernels::matmul::{heuristic, MatmulConfig, MatmulProblem, TOP_K};
use tegula_kernels::tuned::distance;

struct Tuning {
    kernel: String,
    key: String,
    device: String,
    timed: Vec<(Config, f64)>,
}

fn records() -> Vec<Tuning> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../benchmarks/tune-data");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("benchmarks/tune-data") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let timed = v["timed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    let c: Config = serde_json::from_value(t["config"].clone()).unwrap();
                    (c, t["ms"].as_f64().unwrap())
                })
                .collect();
            out.push(Tuning {
                kernel: v["kernel"].as_str().unwrap().into(),
                key: v["key"].as_str().unwrap().into(),
                device: v["device"].as_str().unwrap().into(),
                timed,
            });
        }
    }
    assert!(!out.is_empty(), "no tuning recorded in {}", dir.display());
    out
}

/// `name=value` of a key.
fn field(key: &str, name: &str) -> String {
    key.split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{key}: no {name}"))
        .to_string()
}

fn num(key: &str, name: &str) -> usize {
    field(key, name).parse().unwrap()
}

/// (best of the `top_k` nearest `first`, nearest's own) over the best of all, as ratios.
fn shortlist_quality(t: &Tuning, first: &Config, top_k: usize) -> (f64, f64) {
    let best = t.timed.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
    let mut ranked = t.timed.clone();
    ranked.sort_by(|a, b| distance(&a.0, first).total_cmp(&distance(&b.0, first)));
    let shortlisted = ranked[..top_k.min(ranked.len())]
        .iter()
        .map(|x| x.1)
        .fold(f64::INFINITY, f64::min);
    (shortlisted / best, ranked[0].1 / best)
}

fn sms(device: &str) -> usize {
    assert!(
        device.contains("H200") || device.contains("H100"),
        "{device}"
    );
    132
}

#[test]
fn matmul_shortlist_holds_a_winner_at_every_recorded_shape() {
    let mut checked = 0;
    for t in records()
        .iter()
        .filter(|t| t.kernel == "tegula_kernels::matmul")
    {
        if !t.key.contains(",bf16->bf16,") {
            continue;
        }
        let dtype = DType::BF16;
        let p = MatmulProblem {
            m: num(&t.key, "m"),
            n: num(&t.key, "n"),
            k: num(&t.key, "k"),
            input: dtype,
            output: dtype,
            a_col_major: false,
            b_col_major: false,
            wgmma: true,
        };
        let first = heuristic(&p, sms(&t.device), &MatmulConfig::default()).to_tuner();
        let (short, default) = shortlist_quality(t, &first, TOP_K);
        // Where the plans pruned every wgmma twin (operands the wgmma path cannot take), the
        // wrapper times every candidate: no short list to check.
        if !t.timed.iter().any(|(c, _)| c.get("WGMMA") == Some(1)) {
            continue;
        }
        assert!(short <= 1.03, "{}: shortlist {short:.3}", t.key);
        assert!(default <= 1.05, "{}: default {default:.3}", t.key);
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} matmul tunings recorded");
}

#[test]
fn attention_forward_shortlist_holds_a_winner_at_every_recorded_shape() {
    let mut checked = 0;
    for t in records()
        .iter()
        .filter(|t| t.kernel == "tegula_kernels::attention::forward")
    {
        if !t.key.contains(",bf16,") || num(&t.key, "group") != 1 {
            continue;
        }
        let dims = Dims {
            batch: num(&t.key, "bh"),
            heads: 1,
            kv_heads: 1,
            n_q: num(&t.key, "nq"),
            n_k: num(&t.key, "nk"),
            head_dim: num(&t.key, "d"),
        };
        let options = AttentionOptions {
            causal: field(&t.key, "causal") == "true",
            ..AttentionOptions::default()
        };
        let first = forward_heuristic(&dims, DType::BF16, &options, true).to_tuner();
        let (short, default) = shortlist_quality(t, &first, FORWARD_TOP_K);
        assert!(short <= 1.02, "{}: shortlist {short:.3}", t.key);
        assert!(default <= 1.10, "{}: default {default:.3}", t.key);
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} forward tunings recorded");
}

/// The distance's weights: a tile's own stages, persistent and warp twins sit nearer than the
/// next tile size, and its other lowering (wgmma or not) farther.
#[test]
fn distance_puts_a_tiles_twins_before_the_next_tile() {
    let tile = |m: i64, n: i64| Config::new(8, 3).with("BLOCK_M", m).with("BLOCK_N", n);
    let h = tile(128, 256).with("WGMMA", 1);
    assert_eq!(distance(&h, &h), 0.0);
    let stage = Config {
        num_stages: 4,
        ..h.clone()
    };
    let persistent = h.clone().with("PERSISTENT", 1);
    let warps = Config {
        num_warps: 4,
        ..h.clone()
    };
    let next_tile = tile(128, 128).with("WGMMA", 1);
    let other_lowering = tile(128, 256).with("WGMMA", 0);
    let d = |c: &Config| distance(&h, c);
    assert_eq!(d(&stage), 0.5);
    assert_eq!(d(&persistent), 0.6);
    assert_eq!(d(&warps), 0.7);
    assert_eq!(d(&next_tile), 1.0);
    assert_eq!(d(&other_lowering), 1.5);
    // Symmetric, and a missing constexpr reads as 0.
    assert_eq!(distance(&next_tile, &h), 1.0);
    assert_eq!(distance(&tile(128, 256), &h), 1.5);
}
