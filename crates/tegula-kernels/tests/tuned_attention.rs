//! Attention forward and backward through the autotuner on the CPU: default options are
//! tuned, the candidates are pruned by shape and head dim, set options are held, explicit
//! options bypass the tuner, and results through the tuned path match float64.

use tegula::ir::DType;
use tegula::prelude::*;
use tegula::LaunchConfig;
use tegula_kernels::attention::{
    self, backward_candidates, backward_config, forward_candidates, forward_config, key, reference,
    AttentionOptions, Dims,
};
use tegula_kernels::check;
use tegula_kernels::tuned::{AUTO, AUTO_LAUNCH};

fn dims(batch: usize, heads: usize, kv_heads: usize, n_q: usize, n_k: usize, d: usize) -> Dims {
    Dims {
        batch,
        heads,
        kv_heads,
        n_q,
        n_k,
        head_dim: d,
    }
}

fn launch(w: u32, s: u32) -> LaunchConfig {
    LaunchConfig::new(w, s)
}

/// The candidates the tuner would time on an H200 (a recording device plans for sm_90a): those
/// whose compiled plans add a kernel (`attention::forward_adds_a_kernel`,
/// `backward_adds_a_kernel`), wgmma twins included.
fn kept_candidates(dm: Dims, backward: bool) -> Vec<AttentionOptions> {
    let dev = Device::recording(132);
    let q = dev.randn::<bf16>(dm.q_shape()).unwrap();
    let k = dev.randn::<bf16>(dm.kv_shape()).unwrap();
    let lse = dev.randn::<f32>(dm.lse_shape()).unwrap();
    let raw = if backward {
        backward_candidates(&dm, DType::BF16, &Default::default(), true)
    } else {
        forward_candidates(&dm, DType::BF16, &Default::default(), true)
    };
    raw.into_iter()
        .filter(|c| {
            let c = AttentionOptions {
                wgmma: Some(c.wgmma.unwrap_or(false)),
                ..*c
            };
            if backward {
                attention::backward_adds_a_kernel(&q, &k, &k, &q, &q, &lse, &c).unwrap()
            } else {
                attention::forward_adds_a_kernel(&q, &k, &k, &c).unwrap()
            }
        })
        .collect()
}

fn blocks(o: &AttentionOptions) -> (usize, usize, u32, u32) {
    (
        o.block_m,
        o.block_n,
        o.config.num_warps,
        o.config.num_stages,
    )
}

#[test]
fn default_options_are_tuned() {
    let d = AttentionOptions::default();
    assert!(d.is_tuned());
    assert_eq!((d.block_m, d.block_n, d.config), (AUTO, AUTO, AUTO_LAUNCH));
    assert!(AttentionOptions::causal().is_tuned());
    let full = AttentionOptions {
        block_m: 64,
        block_n: 32,
        config: launch(4, 2),
        ..Default::default()
    };
    assert!(!full.is_tuned());
}

#[test]
fn forward_candidates_for_long_sequences() {
    let dm = dims(4, 32, 32, 4096, 4096, 128);
    let cands = forward_candidates(&dm, DType::BF16, &AttentionOptions::causal(), false);
    assert_eq!(blocks(&cands[0]), (64, 64, 4, 2));
    assert!(cands.len() >= 10, "{} candidates", cands.len());
    for c in &cands {
        assert!(c.causal);
        assert!([64, 128].contains(&c.block_m), "{c:?}");
        assert!([32, 64, 128].contains(&c.block_n), "{c:?}");
        let (bm, bn, w, s) = blocks(c);
        assert!((1..=3).contains(&s) && [4, 8].contains(&w), "{c:?}");
        // Accumulator and scores: at most 160 f32 values per thread, 192 when Q's fragments
        // (more than 32 registers a thread) are read from shared memory instead.
        let threads = 32 * w as usize;
        let q_in_shared = bm * 128 * 2 / 4 / threads > 32;
        let values = if q_in_shared { 192 } else { 160 };
        assert!((bm * 128 + bm * bn) / threads <= values, "{c:?}");
        // K and V stages past 2 (and a Q in shared memory) fit in Hopper's 227 KB.
        let q_bytes = if q_in_shared { bm * 128 * 2 } else { 0 };
        assert!(
            s <= 2 || s as usize * 2 * bn * 128 * 2 + q_bytes <= 227 * 1024,
            "{c:?}"
        );
    }
    let has = |bm, bn, w, s| cands.iter().any(|c| blocks(c) == (bm, bn, w, s));
    assert!(has(128, 64, 8, 2));
    assert!(has(128, 32, 4, 3));
    // FlashAttention-2's D = 128 blocks: 32 query rows a warp, Q read from shared memory.
    assert!(has(128, 64, 4, 2) && has(128, 64, 4, 3));
    assert!(!has(128, 128, 4, 2), "256 values per thread at D = 128");
    assert!(
        has(64, 128, 4, 3),
        "96 KB of K/V stages fit in dynamic shared memory"
    );
    // D = 64 allows the 128-row block with 4 warps.
    let d64 = forward_candidates(
        &dims(4, 32, 32, 4096, 4096, 64),
        DType::BF16,
        &Default::default(),
        false,
    );
    assert!(d64.iter().any(|c| blocks(c) == (128, 64, 4, 2)));
    // f32 is not pipelined: one stage.
    let f32s = forward_candidates(&dm, DType::F32, &Default::default(), false);
    assert!(f32s.iter().all(|c| c.config.num_stages == 1));
}

#[test]
fn pruning_removes_oversize_blocks_for_short_sequences() {
    let dm = dims(1, 2, 1, 5, 20, 64);
    for cands in [
        forward_candidates(&dm, DType::F16, &Default::default(), false),
        backward_candidates(&dm, DType::F16, &Default::default(), false),
    ] {
        assert!(!cands.is_empty());
        for c in &cands {
            assert_eq!(c.block_m, 16, "{c:?}");
            assert!(c.block_n <= 32, "{c:?}");
            // Two key steps at most: no third stage.
            assert!(c.config.num_stages <= 2, "{c:?}");
        }
    }
    // D = 256 leaves no 128-row block with 4 warps.
    let big_d = dims(1, 8, 8, 2048, 2048, 256);
    let cands = forward_candidates(&big_d, DType::BF16, &Default::default(), false);
    assert!(!cands.is_empty());
    assert!(!cands
        .iter()
        .any(|c| c.block_m == 128 && c.config.num_warps == 4));
}

#[test]
fn backward_candidates_are_bounded_by_resident_blocks() {
    let dm = dims(1, 1, 1, 4096, 4096, 128);
    let cands = backward_candidates(&dm, DType::BF16, &AttentionOptions::default(), false);
    assert_eq!(blocks(&cands[0]), (32, 64, 4, 2));
    assert!(cands.len() >= 6, "{} candidates", cands.len());
    for c in &cands {
        let (bm, bn, w, _) = blocks(c);
        assert!(
            [32, 64, 128].contains(&bm) && [32, 64, 128].contains(&bn),
            "{c:?}"
        );
        let t = 32 * w as usize;
        assert!((2 * bn * 128 + bm * bn) / t <= 160, "{c:?}");
        assert!((bm * 128 + bm * bn) / t <= 160, "{c:?}");
    }
    // The compiler's plans keep a third stage only where the dK/dV sweep's shared memory fits
    // it: 64 x 64 and 64 x 128 over 8 warps (K and V resident, 32 and 64 KB, dS^T 8 and 16 KB,
    // 3 x 32 KB of Q and dO slots); 128 x 64 only with 2 (48 KB resident and 3 x 64 KB do not
    // fit), although the grid offers it.
    assert!(cands.iter().any(|c| blocks(c) == (128, 64, 8, 3)));
    let kept: Vec<_> = kept_candidates(dm, true)
        .into_iter()
        .filter(|c| c.wgmma != Some(true))
        .collect();
    assert!(kept.iter().any(|c| blocks(c) == (64, 64, 8, 3)));
    assert!(kept.iter().any(|c| blocks(c) == (64, 128, 8, 3)));
    assert!(kept.iter().any(|c| blocks(c) == (128, 64, 8, 2)));
    assert!(!kept.iter().any(|c| blocks(c) == (128, 64, 8, 3)));
}

#[test]
fn set_options_are_held() {
    let dm = dims(2, 8, 2, 1024, 1024, 64);
    let fixed_m = AttentionOptions {
        block_m: 32,
        sm_scale: Some(0.5),
        ..AttentionOptions::causal()
    };
    let cands = forward_candidates(&dm, DType::F16, &fixed_m, false);
    assert!(cands.len() > 1);
    assert!(cands
        .iter()
        .all(|c| c.block_m == 32 && c.causal && c.sm_scale == Some(0.5)));
    let fixed_launch = AttentionOptions {
        config: launch(8, 1),
        ..Default::default()
    };
    let cands = backward_candidates(&dm, DType::F16, &fixed_launch, false);
    assert!(cands.len() > 1);
    assert!(cands.iter().all(|c| c.config == launch(8, 1)));
    for (i, c) in cands.iter().enumerate() {
        assert!(!cands[..i].contains(c), "duplicate {c:?}");
    }
}

#[test]
fn keys_bucket_lengths_and_tell_the_rest_apart() {
    let dm = dims(4, 32, 8, 4096, 4096, 128);
    let k = key(&dm, DType::BF16, true);
    assert_eq!(k, "bh=128,nq=4096,nk=4096,d=128,bf16,causal=true,group=4");
    assert_eq!(key(&dims(4, 32, 8, 4000, 3500, 128), DType::BF16, true), k);
    assert_ne!(key(&dm, DType::BF16, false), k);
    assert_ne!(key(&dm, DType::F16, true), k);
    assert_ne!(key(&dims(4, 32, 8, 4096, 4096, 96), DType::BF16, true), k);
    assert_ne!(key(&dims(4, 32, 32, 4096, 4096, 128), DType::BF16, true), k);
    assert_ne!(key(&dims(1, 32, 8, 4096, 4096, 128), DType::BF16, true), k);
}

struct Problem<T: Element> {
    dm: Dims,
    q: Tensor<T>,
    k: Tensor<T>,
    v: Tensor<T>,
}

fn problem<T: Element>(dev: &Device, dm: Dims) -> Problem<T> {
    Problem {
        dm,
        q: dev.randn::<T>(dm.q_shape()).unwrap(),
        k: dev.randn::<T>(dm.kv_shape()).unwrap(),
        v: dev.randn::<T>(dm.kv_shape()).unwrap(),
    }
}

#[test]
fn the_wrappers_take_the_tuned_path_unless_options_are_full() {
    let dev = Device::cpu();
    for dm in [dims(1, 2, 1, 9, 40, 24), dims(1, 2, 2, 100, 70, 64)] {
        let p = problem::<f16>(&dev, dm);
        let out = dev.zeros::<f16>(dm.q_shape()).unwrap();
        let lse = dev.zeros::<f32>(dm.lse_shape()).unwrap();
        let causal = AttentionOptions::causal();
        // On the interpreter the tuner answers with the first candidate for this shape.
        let fwd = forward_config(&p.q, &p.k, &p.v, &out, &lse, &causal).unwrap();
        assert_eq!(fwd, forward_candidates(&dm, DType::F16, &causal, false)[0]);
        assert!(!fwd.is_tuned() && fwd.causal);
        let (dq, dk, dv) = (
            dev.zeros::<f16>(dm.q_shape()).unwrap(),
            dev.zeros::<f16>(dm.kv_shape()).unwrap(),
            dev.zeros::<f16>(dm.kv_shape()).unwrap(),
        );
        let d_o = dev.randn::<f16>(dm.q_shape()).unwrap();
        let bwd =
            backward_config(&p.q, &p.k, &p.v, &out, &d_o, &lse, &dq, &dk, &dv, &causal).unwrap();
        assert_eq!(bwd, backward_candidates(&dm, DType::F16, &causal, false)[0]);
        // Full options are used as given, even outside the candidate lists.
        let explicit = AttentionOptions {
            block_m: 16,
            block_n: 128,
            config: launch(2, 1),
            ..causal
        };
        assert_eq!(
            forward_config(&p.q, &p.k, &p.v, &out, &lse, &explicit).unwrap(),
            explicit
        );
        assert_eq!(
            backward_config(&p.q, &p.k, &p.v, &out, &d_o, &lse, &dq, &dk, &dv, &explicit).unwrap(),
            explicit
        );
    }
    // The choice depends on the shape.
    let short = forward_candidates(
        &dims(1, 2, 1, 9, 40, 24),
        DType::F16,
        &Default::default(),
        false,
    );
    let long = forward_candidates(
        &dims(1, 2, 2, 100, 70, 64),
        DType::F16,
        &Default::default(),
        false,
    );
    assert_ne!(short[0], long[0]);
    // Half-set launch options are an error.
    let p = problem::<f32>(&dev, dims(1, 1, 1, 4, 4, 16));
    let half = AttentionOptions {
        config: launch(0, 2),
        ..Default::default()
    };
    assert!(matches!(
        attention::forward(&p.q, &p.k, &p.v, &half),
        Err(tegula::Error::Invalid { .. })
    ));
}

fn assert_bounded(what: &str, got: &[f64], want: &[f64], magnitude: &[f64], dtype: DType) {
    let (atol, rtol) = check::tolerance(dtype);
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(magnitude).enumerate() {
        assert!(
            g == w || (g - w).abs() <= atol + rtol * m,
            "{what}[{i}]: got {g}, want {w} (magnitude {m})"
        );
    }
}

fn check_tuned<T: Element>(dev: &Device, dm: Dims, causal: bool) {
    let p = problem::<T>(dev, dm);
    let options = AttentionOptions {
        causal,
        ..Default::default()
    };
    let (out, lse) = attention::forward(&p.q, &p.k, &p.v, &options).unwrap();
    let d_o = dev.randn::<T>(dm.q_shape()).unwrap();
    let grads = attention::backward(&p.q, &p.k, &p.v, &out, &d_o, &lse, &options).unwrap();
    let (q, k, v) = (
        p.q.to_f64_vec().unwrap(),
        p.k.to_f64_vec().unwrap(),
        p.v.to_f64_vec().unwrap(),
    );
    let scale = 1.0 / (p.dm.head_dim as f64).sqrt();
    let want = reference::attention(&q, &k, &v, dm, causal, scale);
    let what = format!("{} causal={causal} {:?}", dm.describe(), T::DTYPE);
    assert_bounded(
        &format!("out {what}"),
        &out.to_f64_vec().unwrap(),
        &want.out,
        &want.out_magnitude,
        T::DTYPE,
    );
    let lse_mag: Vec<f64> = want.lse.iter().map(|x| x.abs()).collect();
    assert_bounded(
        &format!("lse {what}"),
        &lse.to_f64_vec().unwrap(),
        &want.lse,
        &lse_mag,
        DType::F32,
    );
    let g =
        reference::attention_backward(&q, &k, &v, &d_o.to_f64_vec().unwrap(), dm, causal, scale);
    for (name, got, want, mag) in [
        ("dq", &grads.dq, &g.dq, &g.dq_magnitude),
        ("dk", &grads.dk, &g.dk, &g.dk_magnitude),
        ("dv", &grads.dv, &g.dv, &g.dv_magnitude),
    ] {
        assert_bounded(
            &format!("{name} {what}"),
            &got.to_f64_vec().unwrap(),
            want,
            mag,
            T::DTYPE,
        );
    }
}

#[test]
fn tuned_results_match_float64() {
    let dev = Device::cpu();
    check_tuned::<f16>(&dev, dims(1, 2, 1, 45, 71, 64), true);
    check_tuned::<bf16>(&dev, dims(2, 2, 2, 33, 19, 24), false);
    check_tuned::<f32>(&dev, dims(1, 3, 1, 70, 70, 80), true);
}

/// On a device with wgmma, every pipelined forward candidate gets a wgmma twin; the
/// compiler's plans keep those whose dots run on wgmma: 16 rows a warp in each row block, warps
/// in warpgroups, 2 stages or more, head-dim rows of 64 bytes or multiples of 128, at most
/// 160 values a thread. None for f32, none when the caller holds the choice.
#[test]
fn hopper_adds_wgmma_twins_to_the_forward() {
    let dm = dims(1, 1, 1, 1024, 1024, 128);
    let plain = forward_candidates(&dm, DType::BF16, &Default::default(), false);
    let cands = forward_candidates(&dm, DType::BF16, &Default::default(), true);
    assert_eq!(cands[0], plain[0], "the default stays mma.sync");
    assert!(plain.iter().all(|c| c.wgmma.is_none()));
    let raw_twins = cands.iter().filter(|c| c.wgmma == Some(true)).count();
    assert_eq!(cands.len() - raw_twins, plain.len());
    let kept = kept_candidates(dm, false);
    let twins: Vec<_> = kept.iter().filter(|c| c.wgmma == Some(true)).collect();
    assert!(!twins.is_empty() && twins.len() < raw_twins);
    for t in &twins {
        let w = t.config.num_warps as usize;
        assert!(t.config.num_stages >= 2 && w.is_multiple_of(4), "{t:?}");
        assert!(t.block_m % (16 * w) == 0 && t.block_n % 16 == 0, "{t:?}");
        // Q resident (read by descriptor): the accumulator and scores at most 160 values a
        // thread.
        assert!(
            (t.block_m * 128 + t.block_m * t.block_n) / (32 * w) <= 160,
            "{t:?}"
        );
        assert!(plain.contains(&AttentionOptions { wgmma: None, ..**t }));
    }
    let has = |bm, bn, w, s| {
        twins
            .iter()
            .any(|t| (t.block_m, t.block_n, t.config) == (bm, bn, launch(w, s)))
    };
    assert!(
        has(128, 128, 8, 2),
        "the tile the tuner picks at 1k on Hopper"
    );
    assert!(has(128, 64, 8, 3));
    assert!(!has(128, 64, 4, 2), "192 values a thread: over the bound");
    assert!(
        forward_candidates(&dm, DType::F32, &Default::default(), true)
            .iter()
            .all(|c| c.wgmma.is_none())
    );
    let held = AttentionOptions {
        wgmma: Some(false),
        ..Default::default()
    };
    assert!(forward_candidates(&dm, DType::BF16, &held, true)
        .iter()
        .all(|c| c.wgmma == Some(false)));
    // D = 16: 32-byte rows, which wgmma's swizzled layouts do not take.
    let d16 = dims(1, 1, 1, 1024, 1024, 16);
    assert!(kept_candidates(d16, false)
        .iter()
        .all(|c| c.wgmma != Some(true)));
}

/// The backward's wgmma twins on Hopper, as the compiler's plans keep them: the dK/dV
/// accumulators' BLOCK_N rows 16 a warp in each row block, BLOCK_M a multiple of 16, 2 stages
/// or more; none for f32 or a held choice.
#[test]
fn hopper_adds_wgmma_twins_to_the_backward() {
    let dm = dims(1, 1, 1, 4096, 4096, 128);
    let plain = backward_candidates(&dm, DType::BF16, &Default::default(), false);
    let cands = backward_candidates(&dm, DType::BF16, &Default::default(), true);
    assert_eq!(cands[0], plain[0], "the default stays mma.sync");
    let raw_twins = cands.iter().filter(|c| c.wgmma == Some(true)).count();
    assert_eq!(cands.len() - raw_twins, plain.len());
    let kept = kept_candidates(dm, true);
    let twins: Vec<_> = kept.iter().filter(|c| c.wgmma == Some(true)).collect();
    assert!(!twins.is_empty());
    for t in &twins {
        let w = t.config.num_warps as usize;
        assert!(t.config.num_stages >= 2 && w.is_multiple_of(4), "{t:?}");
        assert!(
            t.block_n.is_multiple_of(16 * w) && t.block_m.is_multiple_of(16),
            "{t:?}"
        );
        assert!(plain.contains(&AttentionOptions { wgmma: None, ..**t }));
    }
    let has = |bm, bn, w, s| {
        twins
            .iter()
            .any(|t| (t.block_m, t.block_n, t.config) == (bm, bn, launch(w, s)))
    };
    assert!(
        has(64, 128, 8, 2),
        "the wgmma tile the tuner picks on Hopper"
    );
    assert!(has(64, 64, 4, 2));
    assert!(!has(128, 64, 8, 2), "8 rows a warp");
    assert!(
        backward_candidates(&dm, DType::F32, &Default::default(), true)
            .iter()
            .all(|c| c.wgmma.is_none())
    );
    let held = AttentionOptions {
        wgmma: Some(false),
        ..Default::default()
    };
    assert!(backward_candidates(&dm, DType::BF16, &held, true)
        .iter()
        .all(|c| c.wgmma == Some(false)));
}
