//! Tutorial 09 on the interpreter: every variant at odd shapes (clamped edge rows, the K mask,
//! descriptor bounds), the persistent grids walking several tiles a program (two SMs on the
//! interpreter), and both epilogues of the persistent descriptor kernels.

mod common;
use common::plans;

use tegula::prelude::*;
use tegula_tutorials::t09_persistent_matmul::{
    b_for, check_dtype, check_with, inputs, matmul_tma_persistent_get_configs, matmul_with, Variant,
};

#[test]
fn every_variant_matches_float64_at_odd_shapes() -> tegula::Result<()> {
    let dev = Device::cpu();
    for variant in Variant::ALL {
        // 3 x 2 tiles of 128 x 128 for two programs; K = 77 is two ragged k-tiles of 64.
        for mnk in [(257, 131, 77), (5, 3, 200)] {
            let r = check_with(&dev, variant, mnk, None)?;
            assert!(r.passed(), "{r:?}");
        }
    }
    Ok(())
}

#[test]
fn both_epilogues_and_wide_tiles() -> tegula::Result<()> {
    let dev = Device::cpu();
    let configs = matmul_tma_persistent_get_configs();
    // BN 256, BK 128, with and without the subtile epilogue.
    let picked: Vec<_> = configs
        .iter()
        .filter(|c| {
            c.get("BLOCK_SIZE_N") == Some(256)
                && c.get("BLOCK_SIZE_K") == Some(128)
                && c.num_stages == 2
                && c.num_warps == 8
        })
        .collect();
    assert_eq!(picked.len(), 2);
    for meta in picked {
        for variant in [Variant::TmaPersistent, Variant::DescriptorPersistent] {
            let r = check_with(&dev, variant, (300, 520, 130), Some(meta))?;
            assert!(r.passed(), "{meta}: {r:?}");
        }
    }
    Ok(())
}

#[test]
fn split_takes_the_halves_of_the_last_axis() -> tegula::Result<()> {
    // split through a kernel: [4, 8] -> reshape [4, 2, 4] -> permute -> split, as the subtile
    // epilogue does.
    #[tegula::kernel]
    fn split_kernel(x: Ptr<f32>, lo: Ptr<f32>, hi: Ptr<f32>) {
        let rows = arange(0, 4).col();
        let cols = arange(0, 8).row();
        let v = load_unmasked(x + rows * 8 + cols);
        let (a, b) = split(v.reshape([4, 2, 4]).permute(&[0, 2, 1]));
        let out = rows * 4 + arange(0, 4).row();
        store_unmasked(lo + out, a);
        store_unmasked(hi + out, b);
    }
    let dev = Device::cpu();
    let x = dev.randn::<f32>([4, 8])?;
    let (lo, hi) = (dev.empty::<f32>([4, 4])?, dev.empty::<f32>([4, 4])?);
    split_kernel::launch(&dev, 1u32, &x, &lo, &hi)?;
    let xv = x.to_vec()?;
    for r in 0..4 {
        for c in 0..4 {
            assert_eq!(lo.to_vec()?[r * 4 + c], xv[r * 8 + c]);
            assert_eq!(hi.to_vec()?[r * 4 + c], xv[r * 8 + 4 + c]);
        }
    }
    Ok(())
}

#[test]
fn contract_errors_are_typed() -> tegula::Result<()> {
    let dev = Device::cpu();
    let (a, b_t) = inputs(&dev, (32, 48, 40))?;
    let meta = &tegula_tutorials::t09_persistent_matmul::matmul_get_configs()[0];
    // The descriptor variants take B as [N, K]; the naive one as [K, N].
    assert!(matches!(
        matmul_with(Variant::Naive, &a, &b_t, meta),
        Err(tegula::Error::Shape { .. })
    ));
    let b_view = dev.randn::<f16>([40, 48])?.transpose(0, 1)?; // [48, 40], strides (1, 48)
    assert!(matches!(
        matmul_with(Variant::DescriptorPersistent, &a, &b_view, meta),
        Err(tegula::Error::Stride { .. })
    ));
    Ok(())
}

#[test]
fn the_k_loops_are_pipelined_at_the_configs_stages_on_sm_90() -> tegula::Result<()> {
    // The naive kernel's one loop; the persistent kernel's inner k-loop (whose first stages
    // the tile loop copies across tiles).
    for name in ["09-matmul-naive", "09-matmul-persistent"] {
        let plans = plans(name, &[1024, 1024, 512])?;
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

/// The tutorial's `--prec fp8`: e4m3 inputs (B `[N, K]` contiguous, as `b.T.contiguous()`,
/// and its `.T` view for the pointer kernels) and e4m3 output (the kernels'
/// `c_ptr.dtype.element_ty == tl.float8e4nv` branch and `FP8_OUTPUT`): on the interpreter
/// against float64, and compiled for sm_90 with every variant's k-loop streaming both loads at
/// the config's stages and its dot on fp8 `wgmma`.
#[test]
fn fp8_inputs_and_output_match_float64_and_run_on_fp8_wgmma() -> tegula::Result<()> {
    let dev = Device::cpu();
    for variant in Variant::ALL {
        let r = check_dtype::<f8e4m3>(&dev, variant, (257, 131, 80), None)?;
        assert!(r.passed(), "{r:?}");
        assert_eq!(r.dtype, tegula::ir::DType::F8E4M3);
    }
    let target = tegula::compiler::Target::for_compute_capability(9, 0);
    let rec = Device::recording(132);
    let (a, b_t) = inputs::<f8e4m3>(&rec, (1024, 1024, 512))?;
    for variant in Variant::ALL {
        let b = b_for(variant, &b_t)?;
        let meta = &variant.configs(true)[0];
        matmul_with(variant, &a, &b, meta)?;
        let launches = rec.take_recorded();
        let report = launches[0].compile(&target)?.report;
        let k_loop = report.loops.iter().find(|l| l.candidate).expect("a k-loop");
        assert_eq!(
            (k_loop.stages, k_loop.streamed.len()),
            (meta.num_stages, 2),
            "{variant:?} {meta}: {:?}\n{report}",
            k_loop.why
        );
        assert_eq!(report.wgmma_dots(), 1, "{variant:?} {meta}\n{report}");
    }
    Ok(())
}
