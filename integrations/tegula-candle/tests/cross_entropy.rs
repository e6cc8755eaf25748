//! The fused cross-entropy against candle's own composition of it, on candle's CPU device
//! (tegula's interpreter underneath).

use candle_core::{DType, Device, IndexOp, Tensor};
use rand::{Rng, SeedableRng};
use tegula_candle::cross_entropy;
use tegula_candle::cross_entropy::cross_entropy_reference;

fn targets(n: usize, v: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..v as u32)).collect()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn matches_candle_in_f32() -> candle_core::Result<()> {
    for &(n, v) in &[(37usize, 1000usize), (5, 5000), (3, 7), (1, 4096)] {
        let logits = (Tensor::randn(0f32, 1f32, (n, v), &Device::Cpu)? * 4.0)?;
        let t = Tensor::new(targets(n, v, v as u64), &Device::Cpu)?;
        let ours = cross_entropy(&logits, &t)?;
        let theirs = cross_entropy_reference(&logits, &t)?;
        assert_eq!(ours.dims(), &[n]);
        assert_eq!(ours.dtype(), DType::F32);
        let d = max_diff(&ours, &theirs);
        assert!(
            d < 2e-5 * (v as f32).ln().max(1.0) * 4.0,
            "[{n}, {v}]: max diff {d}"
        );
    }
    Ok(())
}

#[test]
fn half_precision_logits_and_i64_targets() -> candle_core::Result<()> {
    let (n, v) = (9, 3000);
    let base = Tensor::randn(0f32, 2f32, (n, v), &Device::Cpu)?;
    let t32 = Tensor::new(targets(n, v, 1), &Device::Cpu)?;
    let t64 = t32.to_dtype(DType::I64)?;
    for dt in [DType::F16, DType::BF16] {
        let logits = base.to_dtype(dt)?;
        // The reference reads the same rounded logits, in f32.
        let theirs = cross_entropy_reference(&logits, &t32)?;
        for t in [&t32, &t64] {
            let d = max_diff(&cross_entropy(&logits, t)?, &theirs);
            assert!(d < 1e-4, "{dt:?} {:?}: max diff {d}", t.dtype());
        }
    }
    Ok(())
}

#[test]
fn strided_and_offset_views_are_read_in_place() -> candle_core::Result<()> {
    let (n, v) = (6, 500);
    // Column-major logits: the transpose of a [V, N] tensor, strides [1, N].
    let logits_t = Tensor::randn(0f32, 1f32, (v, n), &Device::Cpu)?.t()?;
    assert!(!logits_t.is_contiguous());
    let t = Tensor::new(targets(n, v, 2), &Device::Cpu)?;
    let d = max_diff(
        &cross_entropy(&logits_t, &t)?,
        &cross_entropy_reference(&logits_t, &t)?,
    );
    assert!(d < 1e-5, "transposed: {d}");
    // Rows 2..6 and columns 100..400 of a larger tensor: an offset and a row stride of 500.
    let big = Tensor::randn(0f32, 1f32, (8, v), &Device::Cpu)?;
    let view = big.i((2..6, 100..400))?;
    let t = Tensor::new(targets(4, 300, 3), &Device::Cpu)?;
    let d = max_diff(
        &cross_entropy(&view, &t)?,
        &cross_entropy_reference(&view, &t)?,
    );
    assert!(d < 1e-5, "offset view: {d}");
    Ok(())
}

#[test]
fn bad_inputs_are_errors_and_bad_targets_nan() -> candle_core::Result<()> {
    let logits = Tensor::zeros((2, 3, 4), DType::F32, &Device::Cpu)?;
    let t = Tensor::new(&[0u32, 1], &Device::Cpu)?;
    let e = cross_entropy(&logits, &t).unwrap_err();
    assert!(
        e.to_string().contains("logits [N, V] and targets [N]"),
        "{e}"
    );
    let logits = Tensor::zeros((2, 4), DType::F64, &Device::Cpu)?;
    let e = cross_entropy(&logits, &t).unwrap_err();
    assert!(e.to_string().contains("f32/f16/bf16"), "{e}");
    let logits = Tensor::zeros((2, 4), DType::F32, &Device::Cpu)?;
    let loss = cross_entropy(&logits, &Tensor::new(&[1u32, 9], &Device::Cpu)?)?.to_vec1::<f32>()?;
    assert!(
        (loss[0] - 4f32.ln()).abs() < 1e-6 && loss[1].is_nan(),
        "{loss:?}"
    );
    Ok(())
}
