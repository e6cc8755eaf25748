//! Layer norm (forward, backward) and RMS norm against float64 references: rows that fit one
//! block and rows that loop over blocks, every dtype, strided rows, determinism, and the
//! contract errors.

use half::{bf16, f16};
use rand::Rng;
use tegula::ir::{DType, Element};
use tegula::{Device, Error, Tensor};
use tegula_kernels::check;
use tegula_kernels::norm::{
    layer_norm, layer_norm_backward, layer_norm_backward_reference, layer_norm_into,
    layer_norm_into_with, layer_norm_reference, param_grad_tolerance, rms_norm, rms_norm_into,
    rms_norm_into_with, rms_norm_reference, tolerance, MAX_BLOCK, MAX_ROW, MAX_UNROLL,
};

const EPS: f32 = 1e-5;

fn assert_close(what: &str, dtype: DType, got: &[f64], want: &[f64], tol: (f64, f64)) {
    let r = check::compare(what, String::new(), dtype, got, want, tol);
    assert!(r.passed(), "{what} ({dtype}): {r:?}");
}

/// Odd, prime and block-straddling row lengths: short rows take the one-tile kernels, longer
/// ones the looping kernels (MAX_BLOCK + 3 and MAX_ROW + 3 over several blocks).
fn shapes() -> Vec<(usize, usize)> {
    let mut s = vec![
        (1, 1),
        (3, 2),
        (7, 17),
        (5, 64),
        (2, 127),
        (67, 31), // more rows than one dw/db group
        (3, 1031),
        (2, MAX_BLOCK + 3),
        (2, MAX_ROW + 3),
    ];
    let mut rng = rand::thread_rng();
    s.extend((0..2).map(|_| (rng.gen_range(1..80), rng.gen_range(1..700))));
    s
}

fn f64s<T: Element>(t: &Tensor<T>) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

fn layer_norm_forward_and_backward<T: Element>(dev: &Device) {
    for (m, n) in shapes() {
        let label = format!("{m}x{n}");
        let x = dev.randn::<T>([m, n]).unwrap();
        let w = dev.randn::<T>([n]).unwrap();
        let b = dev.randn::<T>([n]).unwrap();
        let out = layer_norm(&x, &w, &b, EPS).unwrap();
        let (y, mu, rs) = layer_norm_reference(&f64s(&x), &f64s(&w), &f64s(&b), EPS as f64, m, n);
        let tol = tolerance(T::DTYPE);
        assert_close(&format!("y {label}"), T::DTYPE, &f64s(&out.y), &y, tol);
        assert_close(
            &format!("mean {label}"),
            DType::F32,
            &f64s(&out.mean),
            &mu,
            tolerance(DType::F32),
        );
        // rstd of a single element is 1/sqrt(eps): relative error only.
        assert_close(
            &format!("rstd {label}"),
            DType::F32,
            &f64s(&out.rstd),
            &rs,
            (1e-5, 2e-5),
        );

        let dy = dev.randn::<T>([m, n]).unwrap();
        let g = layer_norm_backward(&dy, &x, &w, &out.mean, &out.rstd).unwrap();
        let (dx, dw, db) = layer_norm_backward_reference(
            &f64s(&dy),
            &f64s(&x),
            &f64s(&w),
            &f64s(&out.mean),
            &f64s(&out.rstd),
            m,
            n,
        );
        // For n == 1, dx is exactly 0 in exact arithmetic; the f32 kernel gets rounding noise
        // scaled by rstd = 1/sqrt(eps), so that case is checked with an absolute bound.
        let dx_tol = if n == 1 { (2e-2, 0.0) } else { tol };
        assert_close(&format!("dx {label}"), T::DTYPE, &f64s(&g.dx), &dx, dx_tol);
        let pt = param_grad_tolerance(T::DTYPE, m);
        assert_close(&format!("dw {label}"), T::DTYPE, &f64s(&g.dw), &dw, pt);
        assert_close(&format!("db {label}"), T::DTYPE, &f64s(&g.db), &db, pt);
    }
}

fn rms_norm_forward<T: Element>(dev: &Device) {
    for (m, n) in shapes() {
        let x = dev.randn::<T>([m, n]).unwrap();
        let w = dev.randn::<T>([n]).unwrap();
        let y = rms_norm(&x, &w, EPS).unwrap();
        let want = rms_norm_reference(&f64s(&x), &f64s(&w), EPS as f64, m, n);
        assert_close(
            &format!("rms {m}x{n}"),
            T::DTYPE,
            &f64s(&y),
            &want,
            tolerance(T::DTYPE),
        );
    }
}

#[test]
fn layer_norm_f32() {
    layer_norm_forward_and_backward::<f32>(&Device::cpu());
}

#[test]
fn layer_norm_f16() {
    layer_norm_forward_and_backward::<f16>(&Device::cpu());
}

#[test]
fn layer_norm_bf16() {
    layer_norm_forward_and_backward::<bf16>(&Device::cpu());
}

#[test]
fn rms_norm_every_dtype() {
    let dev = Device::cpu();
    rms_norm_forward::<f32>(&dev);
    rms_norm_forward::<f16>(&dev);
    rms_norm_forward::<bf16>(&dev);
}

/// Layer norm of `x` [m, n] (f32, w = 1, b = 0) with `config`: the worst absolute error of `y`
/// and the worst relative error of `rstd` against float64.
fn layer_norm_errors(
    x: &[f32],
    m: usize,
    n: usize,
    config: &tegula::autotune::Config,
) -> (f64, f64) {
    let dev = Device::cpu();
    let x = dev.from_slice(x, [m, n]).unwrap();
    let w = dev.full::<f32>([n], 1.0).unwrap();
    let b = dev.zeros::<f32>([n]).unwrap();
    let y = dev.full::<f32>([m, n], -3.0).unwrap();
    let mean = dev.full::<f32>([m], -3.0).unwrap();
    let rstd = dev.full::<f32>([m], -3.0).unwrap();
    tegula_kernels::norm::layer_norm_into_with(&x, &w, &b, EPS, &y, &mean, &rstd, config).unwrap();
    let (y_want, _, rs_want) =
        layer_norm_reference(&f64s(&x), &f64s(&w), &f64s(&b), EPS as f64, m, n);
    let worst = |got: Vec<f64>, want: &[f64], relative: bool| {
        got.iter()
            .zip(want)
            .map(|(g, w)| (g - w).abs() / if relative { w.abs() } else { 1.0 })
            .fold(0.0f64, f64::max)
    };
    (
        worst(f64s(&y), &y_want, false),
        worst(f64s(&rstd), &rs_want, true),
    )
}

/// Every forward path of layer norm for rows of `n`: looping, one tile, pipelined.
fn forward_paths(n: usize) -> Vec<tegula::autotune::Config> {
    use tegula::autotune::Config;
    let block = n.next_power_of_two() as i64;
    vec![
        Config::new(4, 1).with("BLOCK", 64).with("BLOCK_M", 0),
        Config::new(4, 1)
            .with("BLOCK", 32)
            .with("BLOCK_M", 0)
            .with("UNROLL", 3),
        Config::new(4, 1).with("BLOCK", block).with("BLOCK_M", 2),
        Config::new(4, 1)
            .with("BLOCK", block)
            .with("BLOCK_M", 1)
            .with("PROGRAMS_PER_SM", 2),
    ]
}

#[test]
fn layer_norm_of_an_offset_input_keeps_its_precision() {
    // The statistics are sums of x - x0 and (x - x0)^2 with x0 the row's first element: a
    // large common offset cancels in x - x0, where E[x^2] - mean^2 would lose the variance
    // (order 1 next to 1e6 at an offset of 1000) entirely.
    // 256 columns over 4 rows: whole rows, the one-tile kernel without masks.
    for (m, n) in [(4, 333), (4, 256)] {
        offset_rows_keep_their_precision(m, n);
    }
}

fn offset_rows_keep_their_precision(m: usize, n: usize) {
    let base = Device::cpu()
        .randn::<f32>([m, n])
        .unwrap()
        .to_vec()
        .unwrap();
    for offset in [0.0f32, 1000.0, -3.0e4] {
        let x: Vec<f32> = base.iter().map(|v| v + offset).collect();
        for c in forward_paths(n) {
            let (y_err, rstd_err) = layer_norm_errors(&x, m, n, &c);
            // The inputs themselves carry f32 ulps of the offset (6e-5 at 1000, 2e-3 at
            // 3e4): y inherits those, the statistics add only f32 rounding.
            let y_tol = 1e-5 + offset.abs() as f64 * 1.2e-7;
            assert!(y_err < y_tol, "offset {offset} {c}: y error {y_err:e}");
            assert!(
                rstd_err < 1e-5,
                "offset {offset} {c}: rstd error {rstd_err:e}"
            );
        }
    }
}

#[test]
fn layer_norm_with_outlying_leading_elements_keeps_its_precision() {
    // An outlier holding most of the variance (an LLM's "massive activation"): as the shift it
    // would make (mean - x0)^2 / var about n and cost rstd about n * 6e-7 relative (5.8e-4
    // measured here with the first element as the shift). The median of the first three
    // elements never takes one outlier, so the error stays at f32 rounding; two outliers of
    // one sign among the first three are the case left (bounded by n * 1e-6 below).
    let (m, n) = (3, 1031);
    let base = Device::cpu()
        .randn::<f32>([m, n])
        .unwrap()
        .to_vec()
        .unwrap();
    for (outliers, rstd_tol) in [
        (&[0][..], 1e-5),
        (&[1], 1e-5),
        (&[2], 1e-5),
        (&[0, 2], n as f64 * 1e-6),
    ] {
        let mut x = base.clone();
        for r in 0..m {
            for &c in outliers {
                x[r * n + c] = 100.0;
            }
        }
        for c in forward_paths(n) {
            let (y_err, rstd_err) = layer_norm_errors(&x, m, n, &c);
            let what = format!("outliers at {outliers:?}, {c}");
            assert!(rstd_err < rstd_tol, "{what}: rstd error {rstd_err:e}");
            // y = (x - mean) rstd inherits rstd's relative error times |y|, about 23 at the
            // outliers (two of 100 among unit normals: std about 4.4).
            let y_tol = (30.0 * rstd_tol).max(1e-2);
            assert!(y_err < y_tol, "{what}: y error {y_err:e}");
        }
    }
}

#[test]
fn strided_rows() {
    let dev = Device::cpu();
    let (m, n) = (6, 200);
    let x = dev.randn::<f32>([m, 257]).unwrap().narrow(1, 5, n).unwrap();
    let w = dev.randn::<f32>([n]).unwrap();
    let b = dev.randn::<f32>([n]).unwrap();
    let y = dev.zeros::<f32>([m, 230]).unwrap().narrow(1, 1, n).unwrap();
    let (mean, rstd) = (
        dev.zeros::<f32>([m]).unwrap(),
        dev.zeros::<f32>([m]).unwrap(),
    );
    layer_norm_into(&x, &w, &b, EPS, &y, &mean, &rstd).unwrap();
    let (want, _, _) = layer_norm_reference(&f64s(&x), &f64s(&w), &f64s(&b), EPS as f64, m, n);
    assert_close(
        "strided ln",
        DType::F32,
        &f64s(&y),
        &want,
        tolerance(DType::F32),
    );

    let dy = dev
        .randn::<f32>([m, 301])
        .unwrap()
        .narrow(1, 100, n)
        .unwrap();
    let g = layer_norm_backward(&dy, &x, &w, &mean, &rstd).unwrap();
    let (dx, dw, db) = layer_norm_backward_reference(
        &f64s(&dy),
        &f64s(&x),
        &f64s(&w),
        &f64s(&mean),
        &f64s(&rstd),
        m,
        n,
    );
    assert_close(
        "strided dx",
        DType::F32,
        &f64s(&g.dx),
        &dx,
        tolerance(DType::F32),
    );
    assert_close(
        "strided dw",
        DType::F32,
        &f64s(&g.dw),
        &dw,
        param_grad_tolerance(DType::F32, m),
    );
    assert_close(
        "strided db",
        DType::F32,
        &f64s(&g.db),
        &db,
        param_grad_tolerance(DType::F32, m),
    );

    let y2 = dev.zeros::<f32>([m, 230]).unwrap().narrow(1, 2, n).unwrap();
    rms_norm_into(&x, &w, EPS, &y2).unwrap();
    let want = rms_norm_reference(&f64s(&x), &f64s(&w), EPS as f64, m, n);
    assert_close(
        "strided rms",
        DType::F32,
        &f64s(&y2),
        &want,
        tolerance(DType::F32),
    );
}

#[test]
fn backward_is_deterministic() {
    let dev = Device::cpu();
    let (m, n) = (150, 77);
    let x = dev.randn::<f32>([m, n]).unwrap();
    let w = dev.randn::<f32>([n]).unwrap();
    let b = dev.randn::<f32>([n]).unwrap();
    let dy = dev.randn::<f32>([m, n]).unwrap();
    let f = layer_norm(&x, &w, &b, EPS).unwrap();
    let g1 = layer_norm_backward(&dy, &x, &w, &f.mean, &f.rstd).unwrap();
    let g2 = layer_norm_backward(&dy, &x, &w, &f.mean, &f.rstd).unwrap();
    assert_eq!(g1.dw.to_vec().unwrap(), g2.dw.to_vec().unwrap());
    assert_eq!(g1.db.to_vec().unwrap(), g2.db.to_vec().unwrap());
    assert_eq!(g1.dx.to_vec().unwrap(), g2.dx.to_vec().unwrap());
}

#[test]
fn contract_errors_are_typed() {
    let dev = Device::cpu();
    let (m, n) = (5, 9);
    let x = dev.randn::<f32>([m, n]).unwrap();
    let w = dev.randn::<f32>([n]).unwrap();
    let b = dev.randn::<f32>([n]).unwrap();
    let y = dev.zeros::<f32>([m, n]).unwrap();
    let (mean, rstd) = (
        dev.zeros::<f32>([m]).unwrap(),
        dev.zeros::<f32>([m]).unwrap(),
    );
    // Shapes.
    let w_short = dev.randn::<f32>([n - 1]).unwrap();
    assert!(matches!(
        layer_norm(&x, &w_short, &b, EPS),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        rms_norm(&x, &w_short, EPS),
        Err(Error::Shape { .. })
    ));
    let mean_short = dev.zeros::<f32>([m + 1]).unwrap();
    assert!(matches!(
        layer_norm_into(&x, &w, &b, EPS, &y, &mean_short, &rstd),
        Err(Error::Shape { .. })
    ));
    let x3 = dev.randn::<f32>([2, 2, 2]).unwrap();
    assert!(matches!(rms_norm(&x3, &w, EPS), Err(Error::Shape { .. })));
    // Strides: a transposed input.
    let xt = dev.randn::<f32>([n, m]).unwrap().transpose(0, 1).unwrap();
    assert!(matches!(
        layer_norm(&xt, &w, &b, EPS),
        Err(Error::Stride { .. })
    ));
    assert!(matches!(rms_norm(&xt, &w, EPS), Err(Error::Stride { .. })));
    assert!(matches!(
        layer_norm_backward(&xt, &x, &w, &mean, &rstd),
        Err(Error::Stride { .. })
    ));
    // Aliasing.
    assert!(matches!(
        layer_norm_into(&x, &w, &b, EPS, &x, &mean, &rstd),
        Err(Error::Aliasing { .. })
    ));
    assert!(matches!(
        layer_norm_into(&x, &w, &b, EPS, &y, &mean, &mean),
        Err(Error::Aliasing { .. })
    ));
    assert!(matches!(
        rms_norm_into(&x, &w, EPS, &x),
        Err(Error::Aliasing { .. })
    ));
    // Devices.
    let other = Device::cpu();
    let w_other = other.randn::<f32>([n]).unwrap();
    assert!(matches!(
        layer_norm(&x, &w_other, &b, EPS),
        Err(Error::Device { .. })
    ));
    assert!(matches!(
        rms_norm(&x, &w_other, EPS),
        Err(Error::Device { .. })
    ));
    assert!(matches!(
        layer_norm_backward(&y, &x, &w_other, &mean, &rstd),
        Err(Error::Device { .. })
    ));
    // Configs: UNROLL outside 1..=MAX_UNROLL.
    for unroll in [0, MAX_UNROLL as i64 + 1] {
        let c = tegula::autotune::Config::new(4, 1)
            .with("BLOCK", 16)
            .with("BLOCK_M", 0)
            .with("UNROLL", unroll);
        assert!(matches!(
            layer_norm_into_with(&x, &w, &b, EPS, &y, &mean, &rstd, &c),
            Err(Error::Invalid { .. })
        ));
        assert!(matches!(
            rms_norm_into_with(&x, &w, EPS, &y, &c),
            Err(Error::Invalid { .. })
        ));
    }
    // Dtype and eps.
    let xi = dev.from_slice(&[1i32; 4], [2, 2]).unwrap();
    let wi = dev.from_slice(&[1i32; 2], [2]).unwrap();
    assert!(matches!(rms_norm(&xi, &wi, EPS), Err(Error::DType { .. })));
    assert!(matches!(
        rms_norm(&x, &w, f32::NAN),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        layer_norm(&x, &w, &b, -1.0),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn library_entries_check_and_trace() {
    let dev = Device::cpu();
    for k in [
        tegula_kernels::norm::layer_norm_entry(),
        tegula_kernels::norm::layer_norm_backward_entry(),
        tegula_kernels::norm::rms_norm_entry(),
    ] {
        for &dt in k.dtypes {
            let r = (k.check)(&dev, k.default_shape, dt).unwrap();
            assert!(r.passed(), "{}: {r:?}", k.name);
            // Rows of the default 1031 columns: both norms one tile, the backward loops over
            // blocks.
            let ir = (k.trace)(k.default_shape, dt).unwrap().to_string();
            let want = match k.name {
                "layer_norm_backward" => "for",
                "layer_norm" => "layer_norm_fwd_rows",
                _ => "rms_norm_fwd_rows",
            };
            assert!(ir.contains(want), "{}: {ir}", k.name);
        }
    }
}

/// Whole rows (a power-of-two row length, a multiple of BLOCK_M rows) trace the one-tile layer
/// norm without masks or selects; a ragged shape keeps them.
#[test]
fn whole_rows_trace_without_masks() {
    let k = tegula_kernels::norm::layer_norm_entry();
    let ir = |shape: &[usize]| (k.trace)(shape, DType::BF16).unwrap().to_string();
    let whole = ir(&[64, 4096]);
    assert!(whole.contains("layer_norm_fwd_rows"), "{whole}");
    assert!(!whole.contains("select"), "{whole}");
    let ragged = ir(&[64, 4000]);
    assert!(ragged.contains("select"), "{ragged}");
}

/// The one-tile kernels and the pipelined (persistent, prefetching) kernels on explicit
/// configs: several rows per tile, several tiles per program, ragged last program and tile.
#[test]
fn pipelined_and_one_tile_configs_match_float64() {
    use tegula::autotune::Config;
    let dev = Device::cpu();
    let mut rng = rand::thread_rng();
    for (m, n) in [
        (37, 1031),
        (13, 300),
        // Whole rows (n a power of two, m a multiple of BLOCK_M): the one-tile layer norm
        // without masks.
        (12, 256),
        (rng.gen_range(5..60), rng.gen_range(17..900)),
    ] {
        let block = usize::next_power_of_two(n) as i64;
        let configs = [(1, 0), (2, 0), (1, 1), (1, 3), (2, 2), (4, 1)].map(|(block_m, per_sm)| {
            Config::new(4, 1)
                .with("BLOCK", block)
                .with("BLOCK_M", block_m)
                .with("PROGRAMS_PER_SM", per_sm)
        });
        check_configs_against_float64(&dev, m, n, &configs);
    }
}

/// The default configs: both norms one tile up to 4096 columns, looping beyond with several
/// blocks a trip; RMS norm's rows of more than 16384 columns at 16 warps and blocks of 4096
/// (fewer programs a SM, so that the rows in flight fit in L2 for the second pass).
#[test]
fn default_configs_follow_the_measured_sweep() {
    use tegula_kernels::norm::{layer_norm_config, rms_norm_config, UNROLL};
    let per_sm = |c: &tegula::autotune::Config| c.get("PROGRAMS_PER_SM").unwrap_or(0);
    for n in [1000, 3000, 4096] {
        for c in [layer_norm_config(n), rms_norm_config(n)] {
            assert!(
                per_sm(&c) == 0 && c.get("BLOCK").unwrap() as usize >= n,
                "{n}: {c}"
            );
        }
    }
    let c = layer_norm_config(16384);
    assert_eq!((c.get("BLOCK_M"), c.num_warps), (Some(0), 8), "{c}");
    let c = rms_norm_config(16384);
    assert_eq!(
        (c.get("BLOCK_M"), c.num_warps, per_sm(&c)),
        (Some(0), 8, 0),
        "{c}"
    );
    let c = rms_norm_config(32768);
    assert_eq!((c.get("BLOCK"), c.num_warps), (Some(4096), 16), "{c}");
    for config in [layer_norm_config, rms_norm_config] {
        let c = config(32768);
        assert_eq!(c.get("BLOCK_M"), Some(0), "{c}");
        let unroll = c.get(UNROLL).unwrap();
        assert!((2..=MAX_UNROLL as i64).contains(&unroll), "{c}");
        // Rows that are not 16-byte aligned load element by element: no unrolling.
        let c = config(32771);
        assert_eq!((c.get("BLOCK_M"), c.get(UNROLL)), (Some(0), Some(1)), "{c}");
    }
}

/// The looping kernels with several blocks a trip: rows of whole trips only (no tail), rows
/// with a partial last trip, and rows shorter than one trip, against float64.
#[test]
fn looping_configs_with_unrolled_trips_match_float64() {
    use tegula::autotune::Config;
    let dev = Device::cpu();
    let mut rng = rand::thread_rng();
    for (m, n) in [
        (3, 192),
        (5, 203),
        (2, 37),
        (rng.gen_range(2..9), rng.gen_range(17..500)),
    ] {
        let configs = [(16, 1), (32, 2), (16, 3), (64, 3), (16, 4)].map(|(block, unroll)| {
            Config::new(4, 1)
                .with("BLOCK", block)
                .with("BLOCK_M", 0)
                .with("UNROLL", unroll)
        });
        check_configs_against_float64(&dev, m, n, &configs);
    }
}

/// Layer norm (y, mean, rstd) and RMS norm of fresh bf16 rows `m x n` under each config,
/// into outputs poisoned with -3, against the float64 references.
fn check_configs_against_float64(
    dev: &Device,
    m: usize,
    n: usize,
    configs: &[tegula::autotune::Config],
) {
    let x = dev.randn::<bf16>([m, n]).unwrap();
    let w = dev.randn::<bf16>([n]).unwrap();
    let b = dev.randn::<bf16>([n]).unwrap();
    let (y_ln, mu, rs) = layer_norm_reference(&f64s(&x), &f64s(&w), &f64s(&b), EPS as f64, m, n);
    let y_rms = rms_norm_reference(&f64s(&x), &f64s(&w), EPS as f64, m, n);
    let (bf, f32_tol) = (tolerance(DType::BF16), tolerance(DType::F32));
    for c in configs {
        let what = format!("{m}x{n} {c}");
        let y = dev.full::<bf16>([m, n], bf16::from_f32(-3.0)).unwrap();
        let mean = dev.full::<f32>([m], -3.0).unwrap();
        let rstd = dev.full::<f32>([m], -3.0).unwrap();
        layer_norm_into_with(&x, &w, &b, EPS, &y, &mean, &rstd, c).unwrap();
        assert_close(&format!("ln y {what}"), DType::BF16, &f64s(&y), &y_ln, bf);
        assert_close(
            &format!("ln mean {what}"),
            DType::F32,
            &f64s(&mean),
            &mu,
            f32_tol,
        );
        assert_close(
            &format!("ln rstd {what}"),
            DType::F32,
            &f64s(&rstd),
            &rs,
            f32_tol,
        );
        let y = dev.full::<bf16>([m, n], bf16::from_f32(-3.0)).unwrap();
        rms_norm_into_with(&x, &w, EPS, &y, c).unwrap();
        assert_close(&format!("rms {what}"), DType::BF16, &f64s(&y), &y_rms, bf);
    }
}

/// f32 rows of mean 1e4 and standard deviation 0.1: the looping kernel (rows over
/// `MAX_BLOCK`, or `BLOCK_M` 0) normalizes as accurately as the one-tile and pipelined
/// kernels. It subtracted the mean rounded to f32 (half an ulp of 1e4 is 5e-3 standard
/// deviations) and lost two digits of `y` (4.5e-3 against 6e-5); it now subtracts the shift
/// (exact) and the centre separately, as the other two do. (What is left is f32 summation in
/// the statistics, which the interpreter does in index order: larger for longer tiles.)
#[test]
fn the_looping_kernel_is_as_accurate_as_the_others_at_a_large_mean() {
    let data: Vec<f32> = Device::cpu()
        .randn::<f32>([MAX_BLOCK + 3])
        .unwrap()
        .to_vec()
        .unwrap()
        .into_iter()
        .map(|v| 1e4 + 0.1 * v)
        .collect();
    // Rows of 1031 (every path) and one row longer than MAX_BLOCK (whose default config is
    // the looping kernel).
    for (m, n) in [(3, 1031), (1, MAX_BLOCK + 3)] {
        let x = &data[..m * n];
        let mut paths = forward_paths(n);
        if n > MAX_BLOCK {
            let default = tegula_kernels::norm::layer_norm_config(n);
            assert_eq!(default.get("BLOCK_M"), Some(0), "{default}");
            paths.push(default);
        }
        let (mut looping, mut others) = (Vec::new(), Vec::new());
        for c in paths {
            let (y_err, rstd_err) = layer_norm_errors(x, m, n, &c);
            assert!(rstd_err < 1e-4, "{n} columns, {c}: rstd error {rstd_err:e}");
            if c.get("BLOCK_M") == Some(0) {
                looping.push((c.to_string(), y_err));
            } else {
                others.push((c.to_string(), y_err));
            }
        }
        let others_worst = others.iter().map(|e| e.1).fold(0.0, f64::max);
        for (what, err) in &looping {
            assert!(
                *err <= 4.0 * others_worst.max(1e-6),
                "{n} columns, {what}: y error {err:e}; the one-tile and pipelined kernels: \
                 {others:?}"
            );
        }
    }
}
