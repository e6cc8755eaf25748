//! Tutorial 06 on the interpreter: forward and backward, causal or not, odd batch and head
//! counts, several forward configs, against float64 within the error bounds of the fp16
//! algorithm, and tighter: the largest error against the largest value at a small scale.

mod common;
use common::plans;

use tegula::prelude::*;
use tegula_tutorials::t06_fused_attention::{
    attention, attention_backward, attention_fwd_launch, check_with, configs, reference,
};

#[test]
fn forward_matches_float64() -> tegula::Result<()> {
    let dev = Device::cpu();
    for (dims, causal) in [
        ([1, 3, 128, 32], false),
        ([3, 1, 128, 64], true),
        ([2, 1, 256, 32], true),
    ] {
        let r = check_with(&dev, dims, causal, 1.3, false)?;
        assert!(r.passed(), "{r:?}");
    }
    Ok(())
}

#[test]
fn every_forward_block_shape_matches() -> tegula::Result<()> {
    // One config per (BLOCK_M, BLOCK_N), causal where it is allowed (BLOCK_M >= BLOCK_N).
    let dev = Device::cpu();
    let dims = [1usize, 2, 128, 128];
    let q = dev.randn::<f16>(dims.to_vec())?;
    let k = dev.randn::<f16>(dims.to_vec())?;
    let v = dev.randn::<f16>(dims.to_vec())?;
    let (qv, kv, vv) = (q.to_f64_vec()?, k.to_f64_vec()?, v.to_f64_vec()?);
    let mut seen = std::collections::HashSet::new();
    for meta in configs(&dev) {
        let (bm, bn) = (meta.get("BLOCK_M").unwrap(), meta.get("BLOCK_N").unwrap());
        if !seen.insert((bm, bn)) {
            continue;
        }
        for causal in [false, true] {
            if causal && bm < bn {
                continue;
            }
            let o = dev.empty::<f16>(dims.to_vec())?;
            let m = dev.empty::<f32>([1, 2, 128])?;
            attention_fwd_launch(&q, &k, &v, &o, &m, causal, 0.3, false, &meta)?;
            let want = reference(dims, &qv, &kv, &vv, None, causal, 0.3f32 as f64);
            for (i, (g, w)) in o.to_f64_vec()?.iter().zip(&want.o).enumerate() {
                let bound = 1e-4 + 2.0 / 2048.0 * want.o_mag[i];
                assert!(
                    (g - w).abs() <= bound,
                    "{meta} causal={causal} [{i}]: {g} vs {w}"
                );
            }
        }
    }
    assert_eq!(seen.len(), 6);
    Ok(())
}

#[test]
fn backward_matches_float64() -> tegula::Result<()> {
    let dev = Device::cpu();
    for (dims, causal) in [
        ([1, 3, 128, 32], false),
        ([1, 1, 256, 64], true),
        ([3, 1, 128, 32], true),
    ] {
        let r = check_with(&dev, dims, causal, 1.3, true)?;
        assert!(r.passed(), "{r:?}");
    }
    Ok(())
}

#[test]
fn backward_errors_are_small_against_the_largest_gradient() -> tegula::Result<()> {
    // At a small scale the pre-scaled K's rounding hardly moves the scores: every error is
    // then within a few fp16 roundings of the largest gradient (observed: about 5e-4).
    let dev = Device::cpu();
    for causal in [false, true] {
        let dims = [1usize, 2, 128, 32];
        let q = dev.randn::<f16>(dims.to_vec())?;
        let k = dev.randn::<f16>(dims.to_vec())?;
        let v = dev.randn::<f16>(dims.to_vec())?;
        let d_o = dev.randn::<f16>(dims.to_vec())?;
        let (o, ctx) = attention(&q, &k, &v, causal, 0.125, false)?;
        let (dq, dk, dv) = attention_backward(&ctx, &d_o)?;
        let want = reference(
            dims,
            &q.to_f64_vec()?,
            &k.to_f64_vec()?,
            &v.to_f64_vec()?,
            Some(&d_o.to_f64_vec()?),
            causal,
            0.125,
        );
        for (name, got, w) in [
            ("o", o, &want.o),
            ("dq", dq, &want.dq),
            ("dk", dk, &want.dk),
            ("dv", dv, &want.dv),
        ] {
            let largest = w.iter().fold(0f64, |a, b| a.max(b.abs()));
            let err = got
                .to_f64_vec()?
                .iter()
                .zip(w)
                .fold(0f64, |a, (g, w)| a.max((g - w).abs()));
            assert!(
                err <= 3e-3 * largest,
                "causal={causal} {name}: {err} of {largest}"
            );
        }
    }
    Ok(())
}

#[test]
fn contract_errors_are_typed() -> tegula::Result<()> {
    let dev = Device::cpu();
    // The backward needs N_CTX % 128 == 0; the forward needs blocks that divide N_CTX.
    let q = dev.randn::<f16>([1, 1, 64, 32])?;
    let (_, ctx) = attention(&q, &q, &q, false, 0.5, false)?;
    assert!(matches!(
        attention_backward(&ctx, &q),
        Err(tegula::Error::Invalid { .. })
    ));
    let q = dev.randn::<f16>([1, 1, 100, 32])?;
    assert!(matches!(
        attention(&q, &q, &q, false, 0.5, false),
        Err(tegula::Error::Invalid { .. })
    ));
    let q = dev.randn::<f16>([1, 1, 128, 48])?;
    assert!(matches!(
        attention(&q, &q, &q, false, 0.5, false),
        Err(tegula::Error::Invalid { .. })
    ));
    // HEAD_DIM 16 is allowed by the host, but every config has BLOCK_N > 16: the kernel's
    // static_assert(BLOCK_N <= HEAD_DIM) refuses it at trace time.
    let q = dev.randn::<f16>([1, 1, 128, 16])?;
    assert!(matches!(
        attention(&q, &q, &q, false, 0.5, false),
        Err(tegula::Error::Trace(_))
    ));
    Ok(())
}

#[test]
fn the_split_join_branch_matches_float64() -> tegula::Result<()> {
    // warp_specialize with BLOCK_M = 128 and HEAD_DIM = 128 off Hopper (the interpreter is
    // not Hopper): the accumulator is split in halves, each scaled by alpha, and joined back.
    let dev = Device::cpu();
    let dims = [1usize, 1, 256, 128];
    let q = dev.randn::<f16>(dims.to_vec())?;
    let k = dev.randn::<f16>(dims.to_vec())?;
    let v = dev.randn::<f16>(dims.to_vec())?;
    let (qv, kv, vv) = (q.to_f64_vec()?, k.to_f64_vec()?, v.to_f64_vec()?);
    let meta = configs(&dev)
        .into_iter()
        .find(|c| c.get("BLOCK_M") == Some(128) && c.get("BLOCK_N") == Some(64))
        .expect("a 128 x 64 config");
    let ir = tegula_tutorials::t06_fused_attention::_attn_fwd::trace(128, 128, 64, 1, true, false)?
        .to_string();
    let plain =
        tegula_tutorials::t06_fused_attention::_attn_fwd::trace(128, 128, 64, 1, false, false)?
            .to_string();
    assert_ne!(ir, plain, "warp_specialize takes the split/join branch");
    for causal in [false, true] {
        let o = dev.empty::<f16>(dims.to_vec())?;
        let m = dev.empty::<f32>([1, 1, 256])?;
        attention_fwd_launch(&q, &k, &v, &o, &m, causal, 0.3, true, &meta)?;
        let want = reference(dims, &qv, &kv, &vv, None, causal, 0.3f32 as f64);
        for (i, (g, w)) in o.to_f64_vec()?.iter().zip(&want.o).enumerate() {
            let bound = 1e-4 + 2.0 / 2048.0 * want.o_mag[i];
            assert!((g - w).abs() <= bound, "causal={causal} [{i}]: {g} vs {w}");
        }
    }
    Ok(())
}

#[test]
fn the_forward_key_loops_are_pipelined_at_the_configs_stages_on_sm_90() -> tegula::Result<()> {
    // Non-causal: one loop over the keys; causal: the off-band and the on-band stage's.
    for (name, loops) in [("06-attention-fwd", 1), ("06-attention-fwd-causal", 2)] {
        let plans = plans(name, &[1, 2, 1024, 64])?;
        let (launch, report) = &plans[0];
        let key_loops: Vec<_> = report.loops.iter().filter(|l| l.candidate).collect();
        assert_eq!(key_loops.len(), loops, "{report}");
        for l in key_loops {
            assert_eq!(l.asked, launch.config.num_stages, "{report}");
            assert_eq!(l.stages, l.asked, "{name}: {:?}\n{report}", l.why);
        }
    }
    Ok(())
}
