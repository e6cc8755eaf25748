//! Tutorial 03 on the interpreter: odd M, N, K (the modulo row indices and the K mask), both
//! activations, the tutorial's small configs and the tuner's default.

mod common;
use common::plans;

use tegula::prelude::*;
use tegula_tutorials::t03_matmul::{check_with, get_cuda_autotune_config, matmul_with};

/// The tutorial's configs with BLOCK_SIZE_K 32 and tiles of at most 64 x 64 (quick to
/// interpret).
fn small_configs() -> Vec<tegula::autotune::Config> {
    get_cuda_autotune_config()
        .into_iter()
        .filter(|c| {
            c.get("BLOCK_SIZE_M").unwrap() * c.get("BLOCK_SIZE_N").unwrap() <= 64 * 64
                && c.get("BLOCK_SIZE_K") == Some(32)
        })
        .collect()
}

#[test]
fn small_configs_match_float64_at_odd_shapes() -> tegula::Result<()> {
    let dev = Device::cpu();
    let configs = small_configs();
    assert_eq!(
        configs.len(),
        3,
        "(128, 32, 32), (64, 32, 32) and (32, 64, 32)"
    );
    for meta in &configs {
        for (m, n, k) in [(37, 131, 77), (1, 17, 5), (100, 64, 96)] {
            for activation in ["", "leaky_relu"] {
                let r = check_with(&dev, (m, n, k), activation, Some(meta))?;
                assert!(r.passed(), "{meta}: {r:?}");
            }
        }
    }
    Ok(())
}

#[test]
fn the_tuned_default_matches_float64() -> tegula::Result<()> {
    // On the interpreter the tuner gives the list's first config, 128 x 256 x 64.
    let r = check_with(&Device::cpu(), (131, 67, 45), "leaky_relu", None)?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}

#[test]
fn leaky_relu_changes_negative_outputs() -> tegula::Result<()> {
    let dev = Device::cpu();
    let meta = &small_configs()[0];
    let a = dev.randn::<f16>([33, 40])?;
    let b = dev.randn::<f16>([40, 35])?;
    let plain = matmul_with(&a, &b, "", meta)?.to_f64_vec()?;
    let leaky = matmul_with(&a, &b, "leaky_relu", meta)?.to_f64_vec()?;
    let negative = plain.iter().filter(|v| **v < -0.5).count();
    assert!(negative > 50);
    for (p, l) in plain.iter().zip(&leaky) {
        if *p >= 0.0 {
            assert_eq!(p, l);
        } else {
            assert!((l - 0.01 * p).abs() <= 1e-3 * p.abs() + 1e-4, "{p} {l}");
        }
    }
    Ok(())
}

#[test]
fn contract_errors_are_typed() -> tegula::Result<()> {
    let dev = Device::cpu();
    let a = dev.randn::<f16>([16, 32])?;
    let b = dev.randn::<f16>([31, 16])?;
    let meta = &small_configs()[0];
    assert!(matches!(
        matmul_with(&a, &b, "", meta),
        Err(tegula::Error::Shape { .. })
    ));
    let b = dev.randn::<f16>([32, 16])?;
    assert!(matches!(
        matmul_with(&a, &b, "gelu", meta),
        Err(tegula::Error::Invalid { .. })
    ));
    let at = dev.randn::<f16>([32, 16])?.transpose(0, 1)?;
    assert!(matches!(
        matmul_with(&at, &b, "", meta),
        Err(tegula::Error::Stride { .. })
    ));
    Ok(())
}

#[test]
fn the_k_loop_is_pipelined_at_the_configs_stages_on_sm_90() -> tegula::Result<()> {
    for name in ["03-matmul", "03-matmul-leaky-relu"] {
        let plans = plans(name, &[512, 512, 512])?;
        let (launch, report) = &plans[0];
        let k_loop = report.loops.iter().find(|l| l.candidate).expect("a k-loop");
        assert_eq!(k_loop.asked, launch.config.num_stages, "{report}");
        assert_eq!(
            k_loop.stages, k_loop.asked,
            "{name}: {:?}\n{report}",
            k_loop.why
        );
    }
    Ok(())
}

/// Tutorial 03's fp8 inputs as its benchmark makes them (`a.to(torch.float8_e5m2)`,
/// `b.T.to(torch.float8_e5m2)`: B read with K contiguous, strides `(1, K)`), through the same
/// kernel: on the interpreter against float64, and compiled for sm_90 at each of the
/// tutorial's "good config for fp8 inputs" with both loads streamed at the config's stages
/// and the dot on fp8 `wgmma`.
#[test]
fn fp8_inputs_match_float64_and_run_on_fp8_wgmma() -> tegula::Result<()> {
    let configs = get_cuda_autotune_config();
    let (m, n, k) = (37, 67, 77);
    let dev = Device::cpu();
    let a = dev.randn::<f8e5m2>([m, k])?;
    let b_t = dev.randn::<f8e5m2>([n, k])?;
    let b = b_t.transpose(0, 1)?;
    let (av, bv) = (a.to_f64_vec()?, b_t.to_f64_vec()?);
    // (64, 32, 32), 5 stages, 2 warps: quick to interpret.
    let c = matmul_with(&a, &b, "", &configs[6])?.to_f64_vec()?;
    for i in 0..m {
        for j in 0..n {
            let (mut want, mut scale) = (0.0, 0.0);
            for x in 0..k {
                want += av[i * k + x] * bv[j * k + x];
                scale += (av[i * k + x] * bv[j * k + x]).abs();
            }
            // The fp16 output's rounding, and f32 sums.
            let err = (c[i * n + j] - want).abs();
            assert!(
                err <= want.abs() * 2f64.powi(-11) + scale * 1e-6,
                "({i}, {j}): {} vs {want}",
                c[i * n + j]
            );
        }
    }
    let target = tegula::compiler::Target::for_compute_capability(9, 0);
    let rec = Device::recording(132);
    let (m, n, k) = (512, 512, 512);
    let a = rec.randn::<f8e5m2>([m, k])?;
    let b = rec.randn::<f8e5m2>([n, k])?.transpose(0, 1)?;
    for meta in &configs[8..] {
        matmul_with(&a, &b, "", meta)?;
        let launches = rec.take_recorded();
        let report = launches[0].compile(&target)?.report;
        let k_loop = report.loops.iter().find(|l| l.candidate).expect("a k-loop");
        assert_eq!(
            (k_loop.stages, k_loop.streamed.len()),
            (meta.num_stages, 2),
            "{meta}: {:?}\n{report}",
            k_loop.why
        );
        assert_eq!(report.wgmma_dots(), 1, "{meta}\n{report}");
    }
    Ok(())
}
