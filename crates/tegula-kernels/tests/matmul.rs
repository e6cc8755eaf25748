//! Matmul against float64 on fresh random inputs: ragged and prime M, N, K, row- and
//! column-major operands, every input dtype, f32 and input-dtype outputs, tf32, tile configs,
//! and the contract errors.

use half::{bf16, f16};
use rand::Rng;
use tegula::ir::{DType, Element, InputPrecision};
use tegula::{Device, Error, Tensor};
use tegula_kernels::check;
use tegula_kernels::matmul::{matmul, matmul_into, matmul_into_with, tolerance, MatmulConfig};

/// A [rows, cols] operand stored row-major, or column-major (the transpose of a [cols, rows]
/// buffer).
fn operand<T: Element>(dev: &Device, rows: usize, cols: usize, col_major: bool) -> Tensor<T> {
    if col_major {
        dev.randn::<T>([cols, rows])
            .unwrap()
            .transpose(0, 1)
            .unwrap()
    } else {
        dev.randn::<T>([rows, cols]).unwrap()
    }
}

fn check_product<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: MatmulConfig,
) {
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    matmul_into_with(a, b, c, config).unwrap();
    let want = check::matmul_f64(&a.to_f64_vec().unwrap(), &b.to_f64_vec().unwrap(), m, k, n);
    let r = check::compare(
        "matmul",
        format!(
            "{m}x{n}x{k} a{:?} b{:?} {config:?}",
            a.strides(),
            b.strides()
        ),
        T::DTYPE,
        &c.to_f64_vec().unwrap(),
        &want,
        tolerance(T::DTYPE, O::DTYPE, config.precision, k),
    );
    assert!(r.passed(), "{r:?}");
}

fn shapes() -> Vec<(usize, usize, usize)> {
    let mut s = vec![
        (1, 1, 1),
        (1, 17, 3),
        (16, 16, 16),
        (17, 31, 33),
        (64, 64, 64),
        (65, 63, 97),
        (131, 7, 200),
        (200, 150, 130),
    ];
    let mut rng = rand::thread_rng();
    s.extend((0..2).map(|_| {
        (
            rng.gen_range(1..150),
            rng.gen_range(1..150),
            rng.gen_range(1..150),
        )
    }));
    s
}

fn every_layout<T: Element>(dev: &Device) {
    for (i, (m, n, k)) in shapes().into_iter().enumerate() {
        // Cycle the four layouts over the shapes, and run all four on one ragged shape.
        let layouts: Vec<(bool, bool)> = if (m, n, k) == (65, 63, 97) {
            vec![(false, false), (true, false), (false, true), (true, true)]
        } else {
            vec![[(false, false), (true, false), (false, true), (true, true)][i % 4]]
        };
        for (a_cm, b_cm) in layouts {
            let a = operand::<T>(dev, m, k, a_cm);
            let b = operand::<T>(dev, k, n, b_cm);
            let c = dev.full::<f32>([m, n], f32::NAN).unwrap();
            check_product(&a, &b, &c, MatmulConfig::default());
        }
    }
}

#[test]
fn f16_every_layout() {
    every_layout::<f16>(&Device::cpu());
}

#[test]
fn bf16_every_layout() {
    every_layout::<bf16>(&Device::cpu());
}

#[test]
fn f32_every_layout() {
    every_layout::<f32>(&Device::cpu());
}

#[test]
fn output_in_the_input_dtype() {
    let dev = Device::cpu();
    let (m, n, k) = (45, 70, 83);
    let a = operand::<f16>(&dev, m, k, false);
    let b = operand::<f16>(&dev, k, n, true);
    check_product(
        &a,
        &b,
        &dev.zeros::<f16>([m, n]).unwrap(),
        MatmulConfig::default(),
    );
    let a = operand::<bf16>(&dev, m, k, true);
    let b = operand::<bf16>(&dev, k, n, false);
    check_product(
        &a,
        &b,
        &dev.zeros::<bf16>([m, n]).unwrap(),
        MatmulConfig::default(),
    );
}

#[test]
fn tf32_and_other_tile_configs() {
    let dev = Device::cpu();
    let (m, n, k) = (77, 91, 120);
    let a = operand::<f32>(&dev, m, k, false);
    let b = operand::<f32>(&dev, k, n, false);
    let tf32 = MatmulConfig {
        precision: InputPrecision::Tf32,
        ..Default::default()
    };
    check_product(&a, &b, &dev.zeros::<f32>([m, n]).unwrap(), tf32);
    for (bm, bn, bk, g) in [
        (16, 16, 16, 1),
        (32, 16, 64, 3),
        (16, 128, 16, 4),
        (128, 32, 32, 2),
    ] {
        let config = MatmulConfig {
            block_m: bm,
            block_n: bn,
            block_k: bk,
            group_m: g,
            ..Default::default()
        };
        check_product(&a, &b, &dev.zeros::<f32>([m, n]).unwrap(), config);
    }
}

#[test]
fn tf32_differs_from_ieee() {
    // The tf32 path must actually round the inputs: 1 + 2^-12 is not a tf32 number.
    let dev = Device::cpu();
    let v = 1.0f32 + 2f32.powi(-12);
    let a = dev.full::<f32>([16, 16], v).unwrap();
    let b = dev.full::<f32>([16, 16], 1.0).unwrap();
    let ieee = matmul(&a, &b).unwrap().to_vec().unwrap();
    assert_eq!(ieee[0], 16.0 * v);
    let c = dev.zeros::<f32>([16, 16]).unwrap();
    let tf32 = MatmulConfig {
        precision: InputPrecision::Tf32,
        ..Default::default()
    };
    matmul_into_with(&a, &b, &c, tf32).unwrap();
    assert_eq!(c.to_vec().unwrap()[0], 16.0);
}

#[test]
fn grouped_order_covers_every_tile_once() {
    // Many tiles, ragged group at the bottom: 9 x 5 tiles of 16, group of 4 tile-rows. A missed
    // tile would keep the NaN fill; a tile written twice would be a race (checked).
    let dev = Device::cpu();
    dev.set_check_races(true);
    let (m, n, k) = (16 * 8 + 3, 16 * 4 + 5, 19);
    let a = operand::<f16>(&dev, m, k, false);
    let b = operand::<f16>(&dev, k, n, false);
    let c = dev.full::<f32>([m, n], f32::NAN).unwrap();
    let config = MatmulConfig {
        block_m: 16,
        block_n: 16,
        block_k: 16,
        group_m: 4,
        ..Default::default()
    };
    check_product(&a, &b, &c, config);
}

/// The persistent grid: fewer programs than tiles (the interpreter has 2 SMs), each walking
/// tiles in grouped order; tiles do not divide M, N or K. A missed tile keeps the NaN fill,
/// a tile written twice is a race (checked), and every element matches float64.
#[test]
fn persistent_grid_covers_every_tile_once() {
    let dev = Device::cpu();
    dev.set_check_races(true);
    let (m, n, k): (usize, usize, usize) = (16 * 7 + 5, 16 * 3 + 9, 37);
    let tiles = m.div_ceil(16) * n.div_ceil(32);
    for per_sm in [1, 3] {
        let programs = tegula_kernels::matmul::persistent_programs(&dev, tiles, per_sm);
        assert!(
            programs < tiles,
            "{per_sm} a SM: {programs} programs for {tiles} tiles"
        );
        for (dt_bf16, group_m) in [(false, 3), (true, 8)] {
            let config = MatmulConfig {
                block_m: 16,
                block_n: 32,
                block_k: 16,
                group_m,
                persistent: Some(per_sm),
                ..MatmulConfig::fixed(16, 32, 16)
            };
            if dt_bf16 {
                let a = operand::<bf16>(&dev, m, k, false);
                let b = operand::<bf16>(&dev, k, n, true);
                let c = dev.full::<f32>([m, n], f32::NAN).unwrap();
                check_product(&a, &b, &c, config);
            } else {
                let a = operand::<f16>(&dev, m, k, true);
                let b = operand::<f16>(&dev, k, n, false);
                let c = dev.full::<f16>([m, n], f16::NAN).unwrap();
                check_product(&a, &b, &c, config);
            }
        }
    }
}

#[test]
fn sliced_and_strided_output() {
    let dev = Device::cpu();
    let a = dev
        .randn::<bf16>([60, 90])
        .unwrap()
        .narrow(0, 5, 50)
        .unwrap()
        .narrow(1, 10, 70)
        .unwrap();
    let b = dev
        .randn::<bf16>([40, 80])
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .narrow(0, 3, 70)
        .unwrap();
    // C: the transpose of a [40, 50] buffer, column-major output.
    let c = dev.zeros::<f32>([40, 50]).unwrap().transpose(0, 1).unwrap();
    check_product(&a, &b, &c, MatmulConfig::default());
}

#[test]
fn contract_errors_are_typed() {
    let dev = Device::cpu();
    let a = dev.randn::<f16>([5, 7]).unwrap();
    let b = dev.randn::<f16>([7, 3]).unwrap();
    let c = dev.zeros::<f32>([5, 3]).unwrap();
    assert!(matches!(
        matmul(&a, &dev.randn::<f16>([6, 3]).unwrap()),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        matmul_into(&a, &b, &dev.zeros::<f32>([5, 4]).unwrap()),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        matmul(&dev.randn::<f16>([7]).unwrap(), &b),
        Err(Error::Shape { .. })
    ));
    // Output aliasing an input.
    let af = dev.randn::<f32>([6, 6]).unwrap();
    let bf = dev.randn::<f32>([6, 6]).unwrap();
    assert!(matches!(
        matmul_into(&af, &bf, &af),
        Err(Error::Aliasing { .. })
    ));
    // A view of B's buffer.
    let buf = dev.randn::<f32>([6, 12]).unwrap();
    let (b_view, c_view) = (buf.narrow(1, 0, 6).unwrap(), buf.narrow(1, 3, 6).unwrap());
    assert!(matches!(
        matmul_into(&af, &b_view, &c_view),
        Err(Error::Aliasing { .. })
    ));
    // Different devices.
    assert!(matches!(
        matmul(&a, &Device::cpu().randn::<f16>([7, 3]).unwrap()),
        Err(Error::Device { .. })
    ));
    assert!(matches!(
        matmul_into(&a, &b, &Device::cpu().zeros::<f32>([5, 3]).unwrap()),
        Err(Error::Device { .. })
    ));
    // Dtypes and configs.
    let ai = dev.from_slice(&[1i32; 4], [2, 2]).unwrap();
    assert!(matches!(matmul(&ai, &ai), Err(Error::DType { .. })));
    assert!(matches!(
        matmul_into(&a, &b, &dev.zeros::<i32>([5, 3]).unwrap()),
        Err(Error::DType { .. })
    ));
    let bad = MatmulConfig {
        block_k: 8,
        ..Default::default()
    };
    assert!(matches!(
        matmul_into_with(&a, &b, &c, bad),
        Err(Error::Invalid { .. })
    ));
    let bad = MatmulConfig {
        group_m: 0,
        ..Default::default()
    };
    assert!(matches!(
        matmul_into_with(&a, &b, &c, bad),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn library_entry_checks_and_traces() {
    let dev = Device::cpu();
    let k = tegula_kernels::matmul::entry();
    for &dt in k.dtypes {
        let r = (k.check)(&dev, &[67, 45, 33], dt).unwrap();
        assert!(r.passed(), "{r:?}");
        assert!((k.trace)(k.default_shape, dt)
            .unwrap()
            .to_string()
            .contains("dot"));
    }
    assert_eq!(k.dtypes[0], DType::F16);
}
