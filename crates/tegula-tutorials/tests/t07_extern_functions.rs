//! Tutorial 07 on the interpreter: the builtin asin over a dense grid of [-1, 1] (the
//! boundary at 0.5, the ends, tiny values) within its bound (`TOLERANCE`), NaN outside, and
//! the registry check on random inputs.

use tegula::prelude::*;
use tegula_tutorials::t07_extern_functions::{asin_tensor, TOLERANCE};

#[test]
fn asin_is_within_its_bound_on_a_dense_grid() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mut xs: Vec<f32> = (0..=200_000).map(|i| -1.0 + i as f32 * 1e-5).collect();
    xs.extend([
        1.0, -1.0, 0.5, -0.5, 0.49999997, 0.50000006, 1e-5, -3e-5, 1e-20, 0.0,
    ]);
    xs.extend([0.99999994, -0.99999994, 1e-4, 1.0001e-4]);
    let n = xs.len();
    let x = dev.from_slice(&xs, [n])?;
    let y = asin_tensor(&x)?.to_vec()?;
    let (atol, rtol) = TOLERANCE;
    let mut worst = 0f64;
    for (x, y) in xs.iter().zip(&y) {
        let want = (*x as f64).asin();
        let err = (*y as f64 - want).abs();
        worst = worst.max(err / (atol + rtol * want.abs()));
        assert!(
            err <= atol + rtol * want.abs(),
            "asin({x}) = {y}, want {want}"
        );
    }
    assert!(
        worst > 0.05,
        "the tolerance is far above what asin needs: {worst}"
    );
    Ok(())
}

#[test]
fn asin_outside_its_domain_is_nan() -> tegula::Result<()> {
    let dev = Device::cpu();
    let x = dev.from_slice(&[1.5f32, -1.0001, 7.0, f32::NAN], [4])?;
    assert!(asin_tensor(&x)?.to_vec()?.iter().all(|v| v.is_nan()));
    Ok(())
}

#[test]
fn registry_check_passes() -> tegula::Result<()> {
    let t = tegula_tutorials::find("07-extern-asin").expect("registered");
    let r = (t.check)(&Device::cpu(), &[131], t.dtypes[0])?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}
