//! Tutorial 01 on the interpreter: odd sizes, fresh random inputs, against float64.

use tegula::ir::DType;
use tegula::prelude::*;
use tegula_tutorials::t01_vector_add::{add, add_into, reference};

#[test]
fn add_matches_float64_at_odd_sizes() -> tegula::Result<()> {
    let dev = Device::cpu();
    for n in [1, 37, 131, 1024, 4099] {
        let x = dev.randn::<f32>([n])?;
        let y = dev.randn::<f32>([n])?;
        let out = add(&x, &y)?;
        let want = reference(&x.to_f64_vec()?, &y.to_f64_vec()?);
        for (i, (g, w)) in out.to_f64_vec()?.iter().zip(&want).enumerate() {
            // One f32 rounding of the exact sum.
            assert!(
                (g - w).abs() <= w.abs() * 2f64.powi(-24),
                "n={n} element {i}: {g} vs {w}"
            );
        }
    }
    Ok(())
}

#[test]
fn registry_check_passes_in_every_dtype() -> tegula::Result<()> {
    let dev = Device::cpu();
    let t = tegula_tutorials::find("tutorial-01-vector-add").expect("registered");
    for &dtype in t.dtypes {
        let r = (t.check)(&dev, &[131], dtype)?;
        assert!(r.passed(), "{r:?}");
    }
    Ok(())
}

#[test]
fn the_check_fails_on_a_wrong_result() -> tegula::Result<()> {
    // The comparison the registry uses sees a one-ulp-of-f16 error in f32.
    let dev = Device::cpu();
    let x = dev.randn::<f32>([37])?;
    let y = dev.randn::<f32>([37])?;
    let out = add(&x, &y)?;
    let mut got = out.to_f64_vec()?;
    got[17] += got[17].abs() * 1e-3 + 1e-6;
    let want = reference(&x.to_f64_vec()?, &y.to_f64_vec()?);
    let r = tegula_tutorials::common::compare(
        "t",
        String::new(),
        DType::F32,
        &got,
        &want,
        (1e-45, 2f64.powi(-24)),
    );
    assert!(!r.passed());
    Ok(())
}

#[test]
fn contract_errors_are_typed() -> tegula::Result<()> {
    let dev = Device::cpu();
    let x = dev.randn::<f32>([4, 6])?;
    let y = dev.randn::<f32>([4, 6])?;
    let out = dev.empty::<f32>([4, 6])?;
    let xt = x.transpose(0, 1)?;
    assert!(matches!(
        add_into(&xt, &y.transpose(0, 1)?, &out),
        Err(tegula::Error::Stride { .. }) | Err(tegula::Error::Shape { .. })
    ));
    let short = dev.randn::<f32>([5])?;
    assert!(matches!(add(&x, &short), Err(tegula::Error::Shape { .. })));
    Ok(())
}
