//! Tutorial 11 on the interpreter: the add without grid-dependency control, the refusal of a
//! PDL launch, and the `USE_GDC` branches tracing to nothing.

use tegula::prelude::*;
use tegula_tutorials::t11_programmatic_dependent_launch::{add, add_kernel};

#[test]
fn add_matches_float64_at_odd_sizes() -> tegula::Result<()> {
    let dev = Device::cpu();
    for n in [1, 37, 131, 5000] {
        let x = dev.randn::<f32>([n])?;
        let y = dev.randn::<f32>([n])?;
        let out = add(&x, &y, false)?.to_f64_vec()?;
        for ((g, a), b) in out.iter().zip(x.to_f64_vec()?).zip(y.to_f64_vec()?) {
            assert!((g - (a + b)).abs() <= (a + b).abs() * 2f64.powi(-24));
        }
    }
    Ok(())
}

#[test]
fn a_pdl_launch_is_refused() -> tegula::Result<()> {
    let dev = Device::cpu();
    let x = dev.randn::<f32>([10])?;
    assert!(matches!(
        add(&x, &x, true),
        Err(tegula::Error::Invalid { .. })
    ));
    Ok(())
}

#[test]
fn use_gdc_adds_nothing_to_the_kernel() -> tegula::Result<()> {
    let with = add_kernel::trace(1024, true)?.to_string();
    let without = add_kernel::trace(1024, false)?.to_string();
    assert_eq!(with, without);
    Ok(())
}

#[test]
fn registry_check_passes() -> tegula::Result<()> {
    let t = tegula_tutorials::find("11-pdl-add-nogdc").expect("registered");
    let r = (t.check)(&Device::cpu(), &[1031], t.dtypes[0])?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}
