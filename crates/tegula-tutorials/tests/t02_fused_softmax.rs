//! Tutorial 02 on the interpreter: the persistent grid walks several rows a program; odd
//! row lengths pad a block with -inf.

use tegula::prelude::*;
use tegula_tutorials::t02_fused_softmax::{
    reference, softmax, softmax_programs, tolerance, INTERPRETER_PROGRAMS,
};

#[test]
fn softmax_matches_float64_at_odd_shapes() -> tegula::Result<()> {
    let dev = Device::cpu();
    for (m, n) in [(1, 1), (37, 131), (9, 1000), (5, 16)] {
        let x = dev.randn::<f32>([m, n])?;
        let y = softmax(&x)?;
        let want = reference(&x.to_f64_vec()?, n);
        let (atol, rtol) = tolerance(n);
        for (i, (g, w)) in y.to_f64_vec()?.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= atol + rtol * w.abs(),
                "{m}x{n} element {i}: {g} vs {w}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_grid_is_persistent_on_the_interpreter() -> tegula::Result<()> {
    let dev = Device::cpu();
    let x = dev.randn::<f32>([37, 131])?;
    let y = dev.empty::<f32>([37, 131])?;
    let plan = softmax_programs(&x, &y)?;
    assert_eq!(plan.num_programs, INTERPRETER_PROGRAMS);
    assert_eq!(plan.block_size, 256);
    Ok(())
}

#[test]
fn strided_rows_of_a_wider_buffer() -> tegula::Result<()> {
    let dev = Device::cpu();
    let wide = dev.randn::<f32>([13, 300])?;
    let x = wide.narrow(1, 7, 250)?;
    let y = softmax(&x)?;
    let want = reference(&x.to_f64_vec()?, 250);
    let (atol, rtol) = tolerance(250);
    for (g, w) in y.to_f64_vec()?.iter().zip(&want) {
        assert!((g - w).abs() <= atol + rtol * w.abs());
    }
    Ok(())
}

#[test]
fn registry_check_passes() -> tegula::Result<()> {
    let t = tegula_tutorials::find("02-fused-softmax").expect("registered");
    let r = (t.check)(&Device::cpu(), &[67, 333], t.dtypes[0])?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}
