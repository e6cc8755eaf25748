//! The single-head f32 attention (`attention::single_head_f32*`) on the interpreter against float64 on fresh random inputs with odd sizes: one split (the output
//! written directly) and several (partials combined), IEEE and 3xTF32 dots.

use tegula::ir::InputPrecision;
use tegula::{Device, Error, LaunchConfig, Tensor};
use tegula_kernels::attention::{self, reference, Dims, SingleHeadOptions};

/// The contract's tolerance.
const TOLERANCE: (f64, f64) = attention::SINGLE_HEAD_TOLERANCE;

fn inputs(dev: &Device, m: usize, n: usize, d: usize) -> [Tensor<f32>; 3] {
    [
        dev.randn::<f32>([m, d]).unwrap(),
        dev.randn::<f32>([n, d]).unwrap(),
        dev.randn::<f32>([n, d]).unwrap(),
    ]
}

/// The float64 attention of the inputs.
fn want(qkv: &[Tensor<f32>; 3]) -> Vec<f64> {
    let (m, d) = (qkv[0].shape()[0], qkv[0].shape()[1]);
    let n = qkv[1].shape()[0];
    let dims = Dims::single_head(m, n, d);
    reference::attention(
        &qkv[0].to_f64_vec().unwrap(),
        &qkv[1].to_f64_vec().unwrap(),
        &qkv[2].to_f64_vec().unwrap(),
        dims,
        false,
        1.0 / (d as f64).sqrt(),
    )
    .out
}

/// The largest `|got - want|`, after asserting the contract's elementwise tolerance.
fn max_error(label: &str, got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "{label}");
    let (atol, rtol) = TOLERANCE;
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= atol + rtol * w.abs(),
            "{label}: element {i}: got {g}, want {w}"
        );
        worst = worst.max(err);
    }
    worst
}

fn options(
    block_m: usize,
    block_n: usize,
    splits: usize,
    precision: InputPrecision,
) -> SingleHeadOptions {
    SingleHeadOptions {
        block_m,
        block_n,
        splits,
        precision,
        config: LaunchConfig::new(4, 1),
    }
}

fn run(qkv: &[Tensor<f32>; 3], o: &SingleHeadOptions) -> Vec<f64> {
    let dev = qkv[0].device();
    let out = dev.empty::<f32>(qkv[0].shape().to_vec()).unwrap();
    attention::single_head_f32_with(&qkv[0], &qkv[1], &qkv[2], &out, o).unwrap();
    out.to_f64_vec().unwrap()
}

#[test]
fn one_split_and_many_match_float64() {
    let dev = Device::cpu();
    // (M, N, D, block_m, block_n, splits): ragged query and key blocks, D padded (24, 40) or
    // exact (64), splits that divide the key blocks and ones that leave the last split short.
    let cases = [
        (37, 91, 24, 16, 16, 1),
        (37, 91, 24, 16, 16, 3),
        (19, 133, 40, 32, 32, 4),
        (50, 77, 64, 64, 16, 5),
        (21, 45, 8, 16, 16, 99),
    ];
    for (m, n, d, bm, bn, splits) in cases {
        let qkv = inputs(&dev, m, n, d);
        let got = run(&qkv, &options(bm, bn, splits, InputPrecision::Ieee));
        let label = format!("M={m} N={n} D={d} blocks {bm}x{bn} splits {splits}");
        let err = max_error(&label, &got, &want(&qkv));
        println!("{label}: max abs error {err:.3e}");
        // Exact products and f32 sums: far inside the tolerance.
        assert!(err < 1e-5, "{label}: {err:e}");
    }
}

#[test]
fn default_options_split_keys_when_query_blocks_leave_sms_idle() {
    // 1024 queries in blocks of 64 are 16 programs: the keys split about 264 / 16 ways.
    let o = SingleHeadOptions::for_shape(1024, 4096, 64, 132);
    assert_eq!((o.block_m, o.block_n), (64, 64));
    assert!(o.splits >= 16 && 16 * o.splits >= 132, "{o:?}");
    // Enough query blocks: no split.
    let o = SingleHeadOptions::for_shape(64 * 200, 4096, 128, 132);
    assert_eq!(o.splits, 1, "{o:?}");
    // Never more splits than key blocks.
    let o = SingleHeadOptions::for_shape(16, 40, 32, 132);
    assert_eq!(o.splits, 1, "{o:?}");
}

#[test]
fn default_path_matches_float64_and_the_basic_kernel() {
    let dev = Device::cpu();
    for (m, n, d) in [(7, 13, 8), (35, 67, 32), (65, 129, 128)] {
        let qkv = inputs(&dev, m, n, d);
        let fast = attention::single_head_f32(&qkv[0], &qkv[1], &qkv[2]).unwrap();
        let basic = attention::single_head_f32_basic(&qkv[0], &qkv[1], &qkv[2]).unwrap();
        let w = want(&qkv);
        let label = format!("default M={m} N={n} D={d}");
        let err = max_error(&label, &fast.to_f64_vec().unwrap(), &w);
        max_error("basic", &basic.to_f64_vec().unwrap(), &w);
        assert!(err < 1e-5, "{label}: {err:e}");
    }
}

#[test]
fn bad_options_are_typed_errors() {
    let dev = Device::cpu();
    let qkv = inputs(&dev, 9, 11, 8);
    let out = dev.empty::<f32>([9, 8]).unwrap();
    for o in [
        options(24, 16, 1, InputPrecision::Ieee),
        options(16, 256, 1, InputPrecision::Ieee),
        options(16, 16, 1, InputPrecision::Tf32),
    ] {
        let r = attention::single_head_f32_with(&qkv[0], &qkv[1], &qkv[2], &out, &o);
        assert!(matches!(r, Err(Error::Invalid { .. })), "{o:?}: {r:?}");
    }
    // The contract's checks are shared with the basic kernel.
    let alias = qkv[0].clone();
    assert!(matches!(
        attention::single_head_f32_into(&qkv[0], &qkv[1], &qkv[2], &alias),
        Err(Error::Aliasing { .. })
    ));
}

#[test]
fn tf32x3_is_about_as_accurate_as_ieee() {
    let dev = Device::cpu();
    // The contract's D (64, 128) with fewer rows; several splits.
    for (m, n, d) in [(67, 257, 64), (37, 129, 128)] {
        let qkv = inputs(&dev, m, n, d);
        let w = want(&qkv);
        let label = format!("M={m} N={n} D={d}");
        let ieee = max_error(
            &label,
            &run(&qkv, &options(32, 32, 3, InputPrecision::Ieee)),
            &w,
        );
        let x3 = max_error(
            &label,
            &run(&qkv, &options(32, 32, 3, InputPrecision::Tf32x3)),
            &w,
        );
        println!("{label}: max abs error ieee {ieee:.3e}, tf32x3 {x3:.3e}");
        // 3xTF32 drops only the small*small product (about 2^-22 relative): near f32.
        assert!(x3 < 1e-5, "{label}: tf32x3 {x3:e}");
    }
}
