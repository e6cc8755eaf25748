//! Tutorial 05 on the interpreter: rows longer than a block in the forward's loops, odd row
//! lengths, and more rows than partial-sum groups, so that the locked accumulation of dw and
//! db takes its `else` branch (rows of one group add into the same partial row).

use tegula::prelude::*;
use tegula_tutorials::t05_layer_norm::{
    check_typed, group_size_m, layer_norm, layer_norm_backward, LayerNormCtx,
};

#[test]
fn forward_matches_float64_at_odd_shapes() -> tegula::Result<()> {
    let dev = Device::cpu();
    for (m, n) in [(1, 1), (37, 131), (5, 3000)] {
        let r = check_typed::<f16>(&dev, (m, n), false)?;
        assert!(r.passed(), "{r:?}");
    }
    let r = check_typed::<f32>(&dev, (13, 77), false)?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}

#[test]
fn forward_loops_over_blocks_when_a_row_exceeds_one() -> tegula::Result<()> {
    // The host always takes the whole row as one block; a smaller block makes the three loops
    // of the kernel run several trips.
    let dev = Device::cpu();
    let (m, n) = (7usize, 300usize);
    let x = dev.randn::<f32>([m, n])?;
    let w = dev.randn::<f32>([n])?;
    let b = dev.randn::<f32>([n])?;
    let (want, _) = layer_norm(&x, &w, &b, 1e-5)?;
    let y = dev.empty::<f32>([m, n])?;
    let (mean, rstd) = (dev.empty::<f32>([m])?, dev.empty::<f32>([m])?);
    tegula_tutorials::t05_layer_norm::_layer_norm_fwd_fused::launch::<f32>(
        &dev, m, &x, &y, &w, &b, &mean, &rstd, n as i32, n as i32, 1e-5, 64,
    )?;
    for (g, w) in y.to_f64_vec()?.iter().zip(want.to_f64_vec()?) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
    }
    Ok(())
}

#[test]
fn backward_matches_float64_with_several_rows_a_group() -> tegula::Result<()> {
    let dev = Device::cpu();
    // N = 1500 gives 128 groups: 300 rows make two or three a group.
    assert_eq!(group_size_m(1500), 128);
    let r = check_typed::<f16>(&dev, (300, 1500), true)?;
    assert!(r.passed(), "{r:?}");
    for (m, n) in [(37, 131), (3, 1)] {
        let r = check_typed::<f16>(&dev, (m, n), true)?;
        assert!(r.passed(), "{r:?}");
    }
    let r = check_typed::<f32>(&dev, (600, 200), true)?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}

#[test]
fn contract_errors_are_typed() -> tegula::Result<()> {
    let dev = Device::cpu();
    let x = dev.randn::<f16>([4, 40000])?;
    let w = dev.randn::<f16>([40000])?;
    assert!(matches!(
        layer_norm(&x, &w, &w, 1e-5),
        Err(tegula::Error::Invalid { .. })
    ));
    let x = dev.randn::<f16>([4, 8])?;
    let w = dev.randn::<f16>([7])?;
    assert!(matches!(
        layer_norm(&x, &w, &w, 1e-5),
        Err(tegula::Error::Shape { .. })
    ));
    let w = dev.randn::<f16>([8])?;
    let (_, ctx): (_, LayerNormCtx<f16>) = layer_norm(&x, &w, &w, 1e-5)?;
    let dy = dev.randn::<f16>([4, 9])?;
    assert!(matches!(
        layer_norm_backward(&ctx, &dy),
        Err(tegula::Error::Shape { .. })
    ));
    Ok(())
}
