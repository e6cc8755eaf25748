//! Row softmax against a float64 reference: single-tile and multi-block rows, every dtype,
//! strided rows, and the contract errors.

use half::{bf16, f16};
use rand::Rng;
use tegula::ir::{DType, Element};
use tegula::{Device, Error, Tensor};
use tegula_kernels::check;
use tegula_kernels::softmax::{
    reference, softmax, softmax_into, softmax_into_blocked, tolerance, MAX_BLOCK,
};

/// Runs the kernel on `x` (any row stride) with `max_block` and compares with float64.
fn check_view<T: Element>(x: &Tensor<T>, max_block: usize) {
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    let y = x
        .device()
        .full::<T>([rows, cols], T::from_f64(-3.0))
        .unwrap();
    softmax_into_blocked(x, &y, max_block).unwrap();
    let want = reference(&x.to_f64_vec().unwrap(), rows, cols);
    let r = check::compare(
        "softmax",
        format!("{rows}x{cols} block {max_block}"),
        T::DTYPE,
        &y.to_f64_vec().unwrap(),
        &want,
        tolerance(T::DTYPE),
    );
    assert!(r.passed(), "{r:?}");
}

fn shapes() -> Vec<(usize, usize)> {
    let mut s = vec![
        (1, 1),
        (3, 1),
        (5, 2),
        (7, 17),
        (4, 64),
        (3, 127),
        (2, 781),
        (11, 1031),
    ];
    let mut rng = rand::thread_rng();
    s.extend((0..3).map(|_| (rng.gen_range(1..9), rng.gen_range(1..1500))));
    s
}

fn check_dtype<T: Element>(dev: &Device) {
    for (rows, cols) in shapes() {
        let x = dev.randn::<T>([rows, cols]).unwrap();
        check_view(&x, 4096); // one tile per row
        check_view(&x, 16); // many blocks per row, a ragged last one
        check_view(&x, 128);
    }
}

#[test]
fn f32_single_tile_and_online() {
    check_dtype::<f32>(&Device::cpu());
}

#[test]
fn f16_single_tile_and_online() {
    check_dtype::<f16>(&Device::cpu());
}

#[test]
fn bf16_single_tile_and_online() {
    check_dtype::<bf16>(&Device::cpu());
}

#[test]
fn long_rows_take_the_online_path_by_default() {
    let dev = Device::cpu();
    // One past the largest single tile, and a prime beyond it.
    for cols in [MAX_BLOCK + 1, 40009] {
        let x = dev.randn::<f32>([3, cols]).unwrap();
        let y = softmax(&x).unwrap();
        let want = reference(&x.to_f64_vec().unwrap(), 3, cols);
        let r = check::compare(
            "softmax",
            String::new(),
            DType::F32,
            &y.to_f64_vec().unwrap(),
            &want,
            tolerance(DType::F32),
        );
        assert!(r.passed(), "{r:?}");
    }
}

#[test]
fn large_logits_do_not_overflow() {
    // exp(90) overflows f32; subtracting the row maximum keeps it finite. The largest value
    // sits in a late block so the online rescaling is exercised.
    let dev = Device::cpu();
    let mut data: Vec<f32> = (0..300).map(|i| (i % 17) as f32 * 5.0).collect();
    data[250] = 95.0;
    let x = dev.from_slice(&data, [1, 300]).unwrap();
    check_view(&x, 4096);
    check_view(&x, 32);
}

#[test]
fn minus_infinity_entries_get_zero_probability() {
    // A masked prefix longer than a block (as causal attention logits have), then a masked
    // element in the middle; the all -inf row is NaN on both paths, like PyTorch.
    let dev = Device::cpu();
    let cols = 100;
    let mut data = vec![f32::NEG_INFINITY; 3 * cols];
    for (c, v) in data[40..cols].iter_mut().enumerate() {
        *v = (c as f32 * 0.37).sin() * 3.0;
    }
    data[70] = f32::NEG_INFINITY;
    data.copy_within(..cols, cols);
    let x = dev.from_slice(&data, [3, cols]).unwrap();
    for max_block in [4096, 16] {
        let y = dev.zeros::<f32>([3, cols]).unwrap();
        softmax_into_blocked(&x, &y, max_block).unwrap();
        let yv = y.to_f64_vec().unwrap();
        let want = reference(&x.to_f64_vec().unwrap()[..cols], 1, cols);
        for row in 0..2 {
            let got = &yv[row * cols..(row + 1) * cols];
            assert!(
                got[..40].iter().all(|&p| p == 0.0) && got[70] == 0.0,
                "{got:?}"
            );
            let r = check::compare(
                "softmax",
                String::new(),
                DType::F32,
                got,
                &want,
                tolerance(DType::F32),
            );
            assert!(r.passed(), "block {max_block}: {r:?}");
        }
        assert!(
            yv[2 * cols..].iter().all(|p| p.is_nan()),
            "block {max_block}"
        );
    }
}

#[test]
fn strided_rows_of_a_wider_buffer() {
    let dev = Device::cpu();
    let wide = dev.randn::<f32>([9, 301]).unwrap();
    let x = wide.narrow(1, 7, 250).unwrap(); // row stride 301, offset 7
    check_view(&x, 4096);
    check_view(&x, 64);
    // The output may be strided too.
    let out_wide = dev.zeros::<f32>([9, 260]).unwrap();
    let y = out_wide.narrow(1, 3, 250).unwrap();
    softmax_into(&x, &y).unwrap();
    let want = reference(&x.to_f64_vec().unwrap(), 9, 250);
    let r = check::compare(
        "softmax",
        String::new(),
        DType::F32,
        &y.to_f64_vec().unwrap(),
        &want,
        tolerance(DType::F32),
    );
    assert!(r.passed(), "{r:?}");
    // Columns outside the view are untouched.
    let all = out_wide.to_vec().unwrap();
    assert!(all[..3].iter().all(|&v| v == 0.0));
    assert!(all[253..263].iter().all(|&v| v == 0.0));
}

#[test]
fn contract_errors_are_typed() {
    let dev = Device::cpu();
    let x = dev.randn::<f32>([4, 33]).unwrap();
    let y = dev.zeros::<f32>([4, 32]).unwrap();
    assert!(matches!(softmax_into(&x, &y), Err(Error::Shape { .. })));
    let v = dev.randn::<f32>([33]).unwrap();
    assert!(matches!(softmax(&v), Err(Error::Shape { .. })));
    // Column-strided (transposed) input.
    let xt = dev.randn::<f32>([33, 4]).unwrap().transpose(0, 1).unwrap();
    assert!(matches!(softmax(&xt), Err(Error::Stride { .. })));
    // In place is aliasing.
    assert!(matches!(softmax_into(&x, &x), Err(Error::Aliasing { .. })));
    // Different devices.
    let y_other = Device::cpu().zeros::<f32>([4, 33]).unwrap();
    assert!(matches!(
        softmax_into(&x, &y_other),
        Err(Error::Device { .. })
    ));
    // Integer dtypes are refused.
    let xi = dev.from_slice(&[1i32, 2, 3], [1, 3]).unwrap();
    assert!(matches!(softmax(&xi), Err(Error::DType { .. })));
    // A bad block size.
    let y2 = dev.zeros::<f32>([4, 33]).unwrap();
    assert!(matches!(
        softmax_into_blocked(&x, &y2, 24),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn library_entry_checks_and_traces() {
    let dev = Device::cpu();
    let k = tegula_kernels::softmax::entry();
    for &dt in k.dtypes {
        let r = (k.check)(&dev, k.default_shape, dt).unwrap();
        assert!(r.passed(), "{r:?}");
        assert!((k.trace)(k.default_shape, dt)
            .unwrap()
            .to_string()
            .contains("exp"));
        assert!((k.trace)(&[2, MAX_BLOCK + 1], dt)
            .unwrap()
            .to_string()
            .contains("for"));
    }
}

/// The one-tile kernel and the pipelined (persistent, prefetching) kernel on explicit configs:
/// several rows per tile, several tiles per program, a ragged last program and a ragged last
/// tile (odd row counts), every dtype of the bench.
#[test]
fn pipelined_and_one_tile_configs_match_float64() {
    use tegula::autotune::Config;
    use tegula_kernels::softmax::softmax_into_with;
    let dev = Device::cpu();
    let mut rng = rand::thread_rng();
    for (rows, cols) in [
        (37, 1031),
        (13, 300),
        (rng.gen_range(5..60), rng.gen_range(17..900)),
    ] {
        let x = dev.randn::<bf16>([rows, cols]).unwrap();
        let want = reference(&x.to_f64_vec().unwrap(), rows, cols);
        let block = cols.next_power_of_two();
        for (block_m, per_sm) in [(1, 0), (2, 0), (1, 1), (1, 3), (2, 2), (4, 1)] {
            let c = Config::new(4, 1)
                .with("BLOCK", block as i64)
                .with("BLOCK_M", block_m)
                .with("PROGRAMS_PER_SM", per_sm);
            let y = dev
                .full::<bf16>([rows, cols], bf16::from_f32(-3.0))
                .unwrap();
            softmax_into_with(&x, &y, &c).unwrap();
            let r = check::compare(
                "softmax",
                format!("{rows}x{cols} {c}"),
                DType::BF16,
                &y.to_f64_vec().unwrap(),
                &want,
                tolerance(DType::BF16),
            );
            assert!(r.passed(), "{r:?}");
        }
    }
}

/// The online path on explicit configs: one to five blocks a trip, rows of whole trips and
/// ragged ones, a masked -inf prefix longer than a trip; `UNROLL` 0 is a typed error.
#[test]
fn online_path_with_unrolled_trips_matches_float64() {
    use tegula::autotune::Config;
    use tegula_kernels::softmax::softmax_into_with;
    let dev = Device::cpu();
    let mut rng = rand::thread_rng();
    let online = |block: i64, unroll: i64| {
        Config::new(4, 1)
            .with("BLOCK", block)
            .with("BLOCK_M", 0)
            .with("UNROLL", unroll)
    };
    for (rows, cols) in [
        (3, 192),
        (4, 203),
        (2, 7),
        (rng.gen_range(1..6), rng.gen_range(17..900)),
    ] {
        let mut x = dev
            .randn::<f32>([rows, cols])
            .unwrap()
            .to_f64_vec()
            .unwrap();
        // Row 0 starts with a -inf prefix of 70 columns (or the whole row if shorter).
        for v in x.iter_mut().take(cols.min(70)) {
            *v = f64::NEG_INFINITY;
        }
        let data: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let x = dev.from_slice(&data, [rows, cols]).unwrap();
        let want = reference(&x.to_f64_vec().unwrap(), rows, cols);
        for (block, unroll) in [(16, 1), (16, 2), (32, 3), (16, 5)] {
            let y = dev.full::<f32>([rows, cols], -3.0).unwrap();
            softmax_into_with(&x, &y, &online(block, unroll)).unwrap();
            let got = y.to_f64_vec().unwrap();
            // A row that is entirely -inf is NaN (as the reference's exp(-inf - -inf)).
            let finite = if cols <= 70 {
                cols..rows * cols
            } else {
                0..rows * cols
            };
            let r = check::compare(
                "softmax",
                format!("{rows}x{cols} block {block} unroll {unroll}"),
                DType::F32,
                &got[finite.clone()],
                &want[finite],
                tolerance(DType::F32),
            );
            assert!(r.passed(), "{r:?}");
            if cols <= 70 {
                assert!(got[..cols].iter().all(|p| p.is_nan()), "{got:?}");
            }
        }
    }
    let x = dev.randn::<f32>([2, 40]).unwrap();
    let y = dev.zeros::<f32>([2, 40]).unwrap();
    assert!(matches!(
        softmax_into_with(&x, &y, &online(16, 0)),
        Err(Error::Invalid { .. })
    ));
}
