//! matmul through the autotuner on the CPU: the default config is tuned, the candidates are
//! pruned by shape, set fields are held, an explicit config bypasses the tuner, and results
//! through the tuned path match float64.

use tegula::ir::DType;
use tegula::prelude::*;
use tegula::LaunchConfig;
use tegula_kernels::check;
use tegula_kernels::matmul::{
    adds_a_kernel, candidates, chosen_config, heuristic, key, matmul_into, tolerance, MatmulConfig,
    MatmulProblem,
};
use tegula_kernels::tuned::{AUTO, AUTO_LAUNCH};

fn problem(m: usize, n: usize, k: usize, input: DType) -> MatmulProblem {
    MatmulProblem {
        m,
        n,
        k,
        input,
        output: DType::F32,
        a_col_major: false,
        b_col_major: false,
        wgmma: false,
    }
}

/// The candidates the tuner would time for `p` on an H200 (a recording device plans for
/// sm_90a): those whose compiled plans add a kernel (`matmul::adds_a_kernel`).
fn kept(p: &MatmulProblem, cands: &[MatmulConfig]) -> Vec<MatmulConfig> {
    let dev = Device::recording(132);
    let a = dev.randn::<bf16>([p.m, p.k]).unwrap();
    let b = dev.randn::<bf16>([p.k, p.n]).unwrap();
    let keep = |c: &&MatmulConfig| match p.output {
        DType::BF16 => {
            let out = dev.empty::<bf16>([p.m, p.n]).unwrap();
            adds_a_kernel(&a, &b, &out, c).unwrap()
        }
        _ => {
            let out = dev.empty::<f32>([p.m, p.n]).unwrap();
            adds_a_kernel(&a, &b, &out, c).unwrap()
        }
    };
    cands.iter().filter(keep).copied().collect()
}

fn launch(w: u32, s: u32) -> LaunchConfig {
    LaunchConfig::new(w, s)
}

#[test]
fn default_is_tuned_and_a_full_config_is_not() {
    let d = MatmulConfig::default();
    assert!(d.is_tuned());
    assert_eq!((d.block_m, d.block_n, d.block_k), (AUTO, AUTO, AUTO));
    assert_eq!(d.launch, AUTO_LAUNCH);
    assert!(!MatmulConfig::fixed(64, 32, 16).is_tuned());
    // One field left AUTO is enough to tune.
    let partial = MatmulConfig {
        block_k: AUTO,
        ..MatmulConfig::fixed(64, 64, 32)
    };
    assert!(partial.is_tuned());
}

#[test]
fn large_shapes_try_the_triton_grid_default_first() {
    let p = problem(1024, 1024, 1024, DType::BF16);
    let cands = candidates(&p, &MatmulConfig::default());
    let planned = kept(&p, &cands);
    assert_eq!(
        cands[0],
        MatmulConfig {
            launch: launch(4, 3),
            ..MatmulConfig::fixed(64, 64, 32)
        }
    );
    assert!(cands.len() >= 20, "{} candidates", cands.len());
    for c in &cands {
        assert!([64, 128, 256].contains(&c.block_m), "{c:?}");
        assert!([64, 128, 256].contains(&c.block_n), "{c:?}");
        assert!([32, 64].contains(&c.block_k), "{c:?}");
        assert_eq!(c.group_m, 8);
        let w = c.launch.num_warps as usize;
        let s = c.launch.num_stages as usize;
        assert!([4, 8].contains(&w) && (2..=4).contains(&s), "{c:?}");
        // Registers: at most 128 accumulators per thread.
        assert!(c.block_m * c.block_n / (32 * w) <= 128, "{c:?}");
    }
    // Shared memory, by the compiler's plans: the stages kept fit in Hopper's 227 KB.
    assert!(planned.len() < cands.len() && planned[0] == cands[0]);
    for c in planned.iter().filter(|c| c.persistent == Some(0)) {
        let stage = (c.block_m + c.block_n) * c.block_k * 2;
        let s = c.launch.num_stages as usize;
        assert!(s * stage <= 227 * 1024, "{c:?}");
    }
    // Known members of the grid, and known pruned ones.
    let has = |bm, bn, bk, w, s| {
        cands.contains(&MatmulConfig {
            launch: launch(w, s),
            ..MatmulConfig::fixed(bm, bn, bk)
        })
    };
    assert!(has(128, 128, 32, 4, 3));
    assert!(has(128, 256, 32, 8, 2));
    assert!(has(128, 128, 64, 8, 2));
    assert!(!has(256, 256, 32, 8, 2), "256 accumulators per thread");
    assert!(!has(128, 256, 32, 4, 2), "256 accumulators per thread");
    assert!(
        has(128, 128, 64, 4, 3),
        "96 KB of stages fit in dynamic shared memory"
    );
    assert!(!has(64, 64, 32, 8, 3), "8 warps on a 64x64 tile");
    // Persistent twins: of pipelined 8-warp tiles of at least 128 x 128 only, each beside
    // its one-program-a-tile config; the plans keep those whose slots and output exchange fit
    // in 227 KB together.
    let twins: Vec<_> = cands.iter().filter(|c| c.persistent == Some(1)).collect();
    assert!(!twins.is_empty());
    for t in &twins {
        assert!(
            t.launch.num_warps == 8 && t.block_m * t.block_n >= 128 * 128,
            "{t:?}"
        );
        assert!(cands.contains(&MatmulConfig {
            persistent: Some(0),
            ..**t
        }));
    }
    for t in planned.iter().filter(|c| c.persistent == Some(1)) {
        let slots = t.launch.num_stages as usize * (t.block_m + t.block_n) * t.block_k * 2;
        assert!(slots + t.block_m * t.block_n * 4 <= 227 * 1024, "{t:?}");
    }
    let twin = |bm, bn, bk, s| MatmulConfig {
        launch: launch(8, s),
        persistent: Some(1),
        ..MatmulConfig::fixed(bm, bn, bk)
    };
    assert!(
        planned.contains(&twin(128, 128, 32, 4)),
        "64 KB of slots + 64 KB of f32 exchange"
    );
    assert!(cands.contains(&twin(256, 128, 64, 4)));
    assert!(
        !planned.contains(&twin(256, 128, 64, 4)),
        "192 KB of slots + 128 KB of f32 exchange"
    );
    let bf16_out = MatmulProblem {
        output: DType::BF16,
        ..p
    };
    assert!(
        kept(&bf16_out, &candidates(&bf16_out, &MatmulConfig::default()))
            .contains(&twin(128, 256, 32, 4)),
        "96 KB of slots + 64 KB of bf16 exchange"
    );
    assert!(candidates(
        &problem(4096, 4096, 4096, DType::F32),
        &MatmulConfig::default()
    )
    .iter()
    .all(|c| c.persistent == Some(0)));
}

#[test]
fn hopper_adds_wgmma_twins_of_the_tiles_the_lowering_takes() {
    let sm80 = problem(1024, 1024, 1024, DType::BF16);
    let sm90 = MatmulProblem {
        wgmma: true,
        ..sm80
    };
    let plain = candidates(&sm80, &MatmulConfig::default());
    let cands = candidates(&sm90, &MatmulConfig::default());
    assert!(plain.iter().all(|c| c.wgmma == Some(false)));
    assert_eq!(cands[0], plain[0], "the default stays mma.sync");
    let raw_twins = cands.iter().filter(|c| c.wgmma == Some(true)).count();
    assert_eq!(cands.len() - raw_twins, plain.len());
    // The twins the compiler's plans put on wgmma.
    let planned = kept(&sm90, &cands);
    let twins: Vec<_> = planned.iter().filter(|c| c.wgmma == Some(true)).collect();
    assert!(!twins.is_empty() && twins.len() < raw_twins);
    assert!(twins.iter().any(|t| t.launch.num_stages == 6));
    for t in &twins {
        // Beside its mma.sync config; 16 rows a warp in each row block; A rows of 64 or 128
        // bytes (BLOCK_K 32 or 64).
        let sibling = MatmulConfig {
            wgmma: Some(false),
            ..**t
        };
        let w = t.launch.num_warps as usize;
        assert!(t.block_m % (16 * w) == 0, "{t:?}");
        assert!([32, 64].contains(&t.block_k), "{t:?}");
        if t.launch.num_stages == 6 {
            // BLOCK_K 32 in flight: beside its 4-stage twin, not an mma.sync config.
            assert_eq!(t.block_k, 32, "{t:?}");
            let four = MatmulConfig {
                launch: launch(t.launch.num_warps, 4),
                ..**t
            };
            assert!(cands.contains(&four), "{t:?}");
            continue;
        }
        assert!(plain.contains(&sibling), "{t:?}");
    }
    let has = |bm, bn, bk, w, s, persistent| {
        planned.contains(&MatmulConfig {
            launch: launch(w, s),
            persistent: Some(persistent),
            wgmma: Some(true),
            ..MatmulConfig::fixed(bm, bn, bk)
        })
    };
    assert!(
        has(128, 256, 64, 8, 3, 0),
        "the wgmma tile the tuner picks on Hopper"
    );
    assert!(
        has(128, 128, 32, 8, 4, 1),
        "persistent twins get wgmma twins"
    );
    assert!(has(128, 256, 32, 8, 6, 0), "BLOCK_K 32 in flight");
    assert!(
        has(128, 128, 64, 4, 3, 0),
        "one warpgroup, two 64-row blocks"
    );
    assert!(!has(64, 128, 64, 8, 3, 0), "8 rows a warp");
    // f32 inputs have no wgmma; a held choice has no twins.
    let f32s = MatmulProblem {
        wgmma: true,
        ..problem(4096, 4096, 4096, DType::F32)
    };
    assert!(candidates(&f32s, &MatmulConfig::default())
        .iter()
        .all(|c| c.wgmma == Some(false)));
    let held_off = MatmulConfig {
        wgmma: Some(false),
        ..Default::default()
    };
    assert_eq!(candidates(&sm90, &held_off), plain);
    let held_on = MatmulConfig {
        wgmma: Some(true),
        ..Default::default()
    };
    assert!(candidates(&sm90, &held_on)
        .iter()
        .all(|c| c.wgmma == Some(true)));
    eprintln!(
        "{} candidates on sm_90, {} without wgmma",
        cands.len(),
        plain.len()
    );
}

/// Rule *fill the SMs*: the largest of the heuristic's tiles whose grid has a tile per SM.
#[test]
fn the_heuristic_takes_the_largest_tile_that_fills_the_sms() {
    let pick = |m, n, k| {
        let p = MatmulProblem {
            wgmma: true,
            ..problem(m, n, k, DType::BF16)
        };
        let c = heuristic(&p, 132, &MatmulConfig::default());
        (c.block_m, c.block_n, c.block_k, c.launch.num_warps, c.wgmma)
    };
    // 16 x 32 tiles of 128 x 256.
    assert_eq!(pick(4096, 4096, 4096), (128, 256, 64, 8, Some(true)));
    // 128 x 256 would make 72 tiles for 132 SMs; 128 x 128 makes 144.
    assert_eq!(pick(1536, 1536, 1536), (128, 128, 64, 4, Some(true)));
    // 64 x 128 makes 128 tiles, one short; 64 x 64 makes 256.
    assert_eq!(pick(1024, 1024, 1024), (64, 64, 64, 4, Some(true)));
    // Nothing fills the SMs: the smallest tile.
    assert_eq!(pick(200, 150, 130), (64, 64, 64, 4, Some(true)));
}

/// A bf16 row stride that is a multiple of 8 elements but not of 16 (K = 1000 for A, N = 3000
/// for B) still makes 16-byte rows: the specialization's divisibility of 8 lets the operand
/// stream through `cp.async` and the dot run on wgmma. An odd stride does not.
#[test]
fn strides_divisible_by_8_keep_the_wgmma_tile() {
    let wgmma_tile = MatmulConfig {
        launch: launch(8, 3),
        persistent: Some(0),
        wgmma: Some(true),
        ..MatmulConfig::fixed(128, 256, 64)
    };
    let on_sm90 = |m, n, k| MatmulProblem {
        wgmma: true,
        ..problem(m, n, k, DType::BF16)
    };
    for (m, n, k) in [(3000, 2000, 1000), (2000, 3000, 4000)] {
        let p = on_sm90(m, n, k);
        assert_eq!(kept(&p, &[wgmma_tile]), vec![wgmma_tile], "{m}x{n}x{k}");
    }
    let odd = on_sm90(3000, 2000, 1001);
    assert!(kept(&odd, &[wgmma_tile]).is_empty(), "K = 1001");
}

#[test]
fn pruning_removes_oversize_candidates_for_small_shapes() {
    let p = problem(17, 31, 20, DType::F16);
    let cands = candidates(&p, &MatmulConfig::default());
    assert!(!cands.is_empty());
    for c in &cands {
        assert!(
            c.block_m <= 32 && c.block_n <= 32 && c.block_k <= 32,
            "{c:?}"
        );
        // K = 20 is one or two steps: no more than 2 stages.
        assert!(c.launch.num_stages <= 2, "{c:?}");
    }
    assert_eq!(
        cands[0],
        MatmulConfig {
            launch: launch(4, 2),
            ..MatmulConfig::fixed(32, 32, 32)
        }
    );
    // A 1x1x1 product keeps only 16-blocks.
    let tiny = candidates(&problem(1, 1, 1, DType::F16), &MatmulConfig::default());
    assert!(tiny
        .iter()
        .all(|c| (c.block_m, c.block_n, c.block_k) == (16, 16, 16)));
    // Tall-skinny: blocks follow each dimension on its own.
    let skinny = candidates(
        &problem(4096, 8, 4096, DType::F16),
        &MatmulConfig::default(),
    );
    assert!(skinny.iter().all(|c| c.block_n == 16 && c.block_m >= 64));
    // f32 inputs are not pipelined: one stage only.
    let f32s = candidates(
        &problem(512, 512, 512, DType::F32),
        &MatmulConfig::default(),
    );
    assert!(f32s.iter().all(|c| c.launch.num_stages == 1));
}

#[test]
fn set_fields_are_held() {
    let p = problem(1024, 1024, 1024, DType::F16);
    let fixed_k = MatmulConfig {
        block_k: 64,
        ..Default::default()
    };
    let cands = candidates(&p, &fixed_k);
    assert!(cands.len() > 1);
    assert!(cands.iter().all(|c| c.block_k == 64));
    let fixed_launch = MatmulConfig {
        launch: launch(8, 2),
        group_m: 4,
        ..Default::default()
    };
    let cands = candidates(&p, &fixed_launch);
    assert!(cands.len() > 1);
    assert!(cands
        .iter()
        .all(|c| c.launch == launch(8, 2) && c.group_m == 4));
    // Held fields can make candidates equal: no duplicates are timed.
    for (i, c) in cands.iter().enumerate() {
        assert!(!cands[..i].contains(c), "duplicate {c:?}");
    }
}

#[test]
fn keys_bucket_shapes_and_tell_dtypes_and_layouts_apart() {
    let ieee = InputPrecision::Ieee;
    let k = key(&problem(4096, 4096, 4096, DType::BF16), ieee);
    assert_eq!(k, "m=4096,n=4096,k=4096,bf16->f32,ieee,a=row,b=row");
    assert_eq!(key(&problem(4000, 3000, 2500, DType::BF16), ieee), k);
    assert_ne!(key(&problem(4097, 4096, 4096, DType::BF16), ieee), k);
    assert_ne!(key(&problem(4096, 4096, 4096, DType::F16), ieee), k);
    let col = MatmulProblem {
        b_col_major: true,
        ..problem(4096, 4096, 4096, DType::BF16)
    };
    assert_ne!(key(&col, ieee), k);
    assert_ne!(
        key(&problem(4096, 4096, 4096, DType::F32), InputPrecision::Tf32),
        key(&problem(4096, 4096, 4096, DType::F32), ieee)
    );
}

#[test]
fn the_wrapper_takes_the_tuned_path_unless_the_config_is_full() {
    let dev = Device::cpu();
    for (m, n, k) in [(9, 40, 70), (150, 100, 33)] {
        let a = dev.randn::<f16>([m, k]).unwrap();
        let b = dev.randn::<f16>([k, n]).unwrap();
        let c = dev.zeros::<f32>([m, n]).unwrap();
        let default = MatmulConfig::default();
        let chosen = chosen_config(&a, &b, &c, default).unwrap();
        // On the interpreter the tuner answers with the first candidate for this shape.
        let p = problem(m, n, k, DType::F16);
        assert_eq!(chosen, candidates(&p, &default)[0]);
        assert!(!chosen.is_tuned());
        // An explicit config, even one no candidate list holds, is launched as given.
        let explicit = MatmulConfig {
            launch: launch(2, 1),
            ..MatmulConfig::fixed(16, 128, 16)
        };
        assert_eq!(chosen_config(&a, &b, &c, explicit).unwrap(), explicit);
        // A partial config keeps its set field.
        let partial = MatmulConfig {
            block_n: 16,
            ..Default::default()
        };
        assert_eq!(chosen_config(&a, &b, &c, partial).unwrap().block_n, 16);
    }
    // The two shapes choose differently: the choice depends on the shape.
    let small = candidates(&problem(9, 40, 70, DType::F16), &MatmulConfig::default())[0];
    let large = candidates(&problem(150, 100, 33, DType::F16), &MatmulConfig::default())[0];
    assert_ne!(small, large);
    // Invalid set fields are still reported.
    let a = dev.randn::<f16>([4, 4]).unwrap();
    let c = dev.zeros::<f32>([4, 4]).unwrap();
    let half_launch = MatmulConfig {
        launch: launch(4, 0),
        ..Default::default()
    };
    assert!(matches!(
        chosen_config(&a, &a, &c, half_launch),
        Err(tegula::Error::Invalid { .. })
    ));
}

fn check_tuned<T: Element>(dev: &Device, m: usize, n: usize, k: usize, b_col_major: bool) {
    let a = dev.randn::<T>([m, k]).unwrap();
    let b = if b_col_major {
        dev.randn::<T>([n, k]).unwrap().transpose(0, 1).unwrap()
    } else {
        dev.randn::<T>([k, n]).unwrap()
    };
    let c = dev.full::<f32>([m, n], f32::NAN).unwrap();
    matmul_into(&a, &b, &c).unwrap();
    let want = check::matmul_f64(&a.to_f64_vec().unwrap(), &b.to_f64_vec().unwrap(), m, k, n);
    let r = check::compare(
        "matmul",
        format!("{m}x{n}x{k}"),
        T::DTYPE,
        &c.to_f64_vec().unwrap(),
        &want,
        tolerance(T::DTYPE, DType::F32, InputPrecision::Ieee, k),
    );
    assert!(r.passed(), "{r:?}");
}

#[test]
fn tuned_results_match_float64() {
    let dev = Device::cpu();
    check_tuned::<f16>(&dev, 67, 45, 93, false);
    check_tuned::<bf16>(&dev, 130, 70, 33, true);
    check_tuned::<f32>(&dev, 5, 77, 129, false);
}

#[test]
fn a_held_field_is_not_answered_from_the_default_choice() {
    // Same shape and dtype: the default's choice must not stand in for a request that holds
    // a field (the wrappers remember choices per key within a process).
    let dev = Device::cpu();
    let a = dev.randn::<bf16>([90, 61]).unwrap();
    let b = dev.randn::<bf16>([61, 77]).unwrap();
    let c = dev.zeros::<f32>([90, 77]).unwrap();
    let first = chosen_config(&a, &b, &c, MatmulConfig::default()).unwrap();
    assert_eq!(first.block_k, 32);
    for bk in [16, 64] {
        let held = MatmulConfig {
            block_k: bk,
            ..Default::default()
        };
        assert_eq!(chosen_config(&a, &b, &c, held).unwrap().block_k, bk);
    }
    let grouped = MatmulConfig {
        group_m: 3,
        ..Default::default()
    };
    assert_eq!(chosen_config(&a, &b, &c, grouped).unwrap().group_m, 3);
}
