//! GEMV against float64 on fresh random inputs: the reference contract (f16 row-major), bf16 and
//! f32, transposed and sliced views of A, strided x and y, and the contract errors.

use half::{bf16, f16};
use rand::Rng;
use tegula::ir::Element;
use tegula::Config;
use tegula::{Device, Error, Tensor};
use tegula_kernels::check;
use tegula_kernels::gemv::{config, gemv, gemv_into, gemv_into_with, reference, tolerance};

fn check_case<T: Element>(a: &Tensor<T>, x: &Tensor<T>) {
    let (m, n) = (a.shape()[0], a.shape()[1]);
    let y = a.device().full::<f32>([m], f32::NAN).unwrap();
    gemv_into(a, x, &y).unwrap();
    let want = reference(&a.to_f64_vec().unwrap(), &x.to_f64_vec().unwrap(), m, n);
    let r = check::compare(
        "gemv",
        format!("{m}x{n} strides {:?}", a.strides()),
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
        (1, 17),
        (17, 1),
        (3, 1024),
        (37, 1031),
        (64, 2053),
        (101, 13),
    ];
    let mut rng = rand::thread_rng();
    s.extend((0..3).map(|_| (rng.gen_range(1..150), rng.gen_range(1..2500))));
    s
}

fn all_layouts<T: Element>(dev: &Device) {
    for (m, n) in shapes() {
        let x = dev.randn::<T>([n]).unwrap();
        // Row-major, the reference contract.
        check_case(&dev.randn::<T>([m, n]).unwrap(), &x);
        // Column-major: the transpose of an [N, M] buffer.
        check_case(
            &dev.randn::<T>([n, m]).unwrap().transpose(0, 1).unwrap(),
            &x,
        );
    }
}

#[test]
fn reference_contract_f16_row_major() {
    // The reference size, 4096 x 4096, is too big for a quick interpreter test; 256 x 4096
    // keeps its column count (four full 1024-wide chunks, the mask always true).
    let dev = Device::cpu();
    check_case(
        &dev.randn::<f16>([256, 4096]).unwrap(),
        &dev.randn::<f16>([4096]).unwrap(),
    );
}

#[test]
fn f16_all_layouts() {
    all_layouts::<f16>(&Device::cpu());
}

#[test]
fn bf16_all_layouts() {
    all_layouts::<bf16>(&Device::cpu());
}

#[test]
fn f32_all_layouts() {
    all_layouts::<f32>(&Device::cpu());
}

#[test]
fn sliced_a_and_offset_vectors() {
    let dev = Device::cpu();
    // A: rows 3.. and columns 5.. of a wider buffer (row stride 211, an offset).
    let a = dev
        .randn::<f16>([90, 211])
        .unwrap()
        .narrow(0, 3, 77)
        .unwrap()
        .narrow(1, 5, 150)
        .unwrap();
    // x: a slice of a longer vector. (Tensor has no strided 1-D views yet; the kernel takes
    // x's and y's strides as arguments all the same.)
    let x = dev.randn::<f16>([170]).unwrap().narrow(0, 11, 150).unwrap();
    check_case(&a, &x);
    // A transposed slice: row stride 1, column stride 120, an offset.
    let at = dev
        .randn::<f16>([200, 120])
        .unwrap()
        .narrow(0, 10, 150)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    check_case(&at, &x);
    // y: a slice of a longer vector; the elements around it are untouched.
    let y_wide = dev.zeros::<f32>([130]).unwrap();
    let y = y_wide.narrow(0, 4, 120).unwrap();
    gemv_into(&at, &x, &y).unwrap();
    let want = reference(
        &at.to_f64_vec().unwrap(),
        &x.to_f64_vec().unwrap(),
        120,
        150,
    );
    let r = check::compare(
        "gemv",
        String::new(),
        f16::DTYPE,
        &y.to_f64_vec().unwrap(),
        &want,
        tolerance(f16::DTYPE),
    );
    assert!(r.passed(), "{r:?}");
    let all = y_wide.to_vec().unwrap();
    assert!(all[..4].iter().chain(&all[124..]).all(|&v| v == 0.0));
}

#[test]
fn contract_errors_are_typed() {
    let dev = Device::cpu();
    let (m, n) = (7, 9);
    let a = dev.randn::<f16>([m, n]).unwrap();
    let x = dev.randn::<f16>([n]).unwrap();
    assert!(matches!(
        gemv(&a, &dev.randn::<f16>([n + 1]).unwrap()),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        gemv_into(&a, &x, &dev.zeros::<f32>([m + 1]).unwrap()),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(gemv(&x, &x), Err(Error::Shape { .. })));
    // y aliasing an input (the same f32 buffer viewed as A and as y).
    let af = dev.randn::<f32>([m, m]).unwrap();
    let xf = dev.randn::<f32>([m]).unwrap();
    let row0 = af.narrow(0, 0, 1).unwrap().reshape([m]).unwrap();
    assert!(matches!(
        gemv_into(&af, &xf, &row0),
        Err(Error::Aliasing { .. })
    ));
    assert!(matches!(
        gemv_into(&af, &xf, &xf),
        Err(Error::Aliasing { .. })
    ));
    // Different devices.
    let x_other = Device::cpu().randn::<f16>([n]).unwrap();
    assert!(matches!(gemv(&a, &x_other), Err(Error::Device { .. })));
    assert!(matches!(
        gemv_into(&a, &x, &Device::cpu().zeros::<f32>([m]).unwrap()),
        Err(Error::Device { .. })
    ));
    // Integer inputs are refused.
    let ai = dev.from_slice(&[1i32; 4], [2, 2]).unwrap();
    let xi = dev.from_slice(&[1i32; 2], [2]).unwrap();
    assert!(matches!(gemv(&ai, &xi), Err(Error::DType { .. })));
}

#[test]
fn library_entry_checks_and_traces() {
    let dev = Device::cpu();
    let k = tegula_kernels::gemv::entry();
    for &dt in k.dtypes {
        let r = (k.check)(&dev, k.default_shape, dt).unwrap();
        assert!(r.passed(), "{r:?}");
        assert!((k.trace)(k.default_shape, dt)
            .unwrap()
            .to_string()
            .contains("for"));
    }
}

/// `gemv_into_with` against float64 for one config; y starts as NaN so every row must be written.
fn check_config<T: Element>(a: &Tensor<T>, x: &Tensor<T>, c: &Config) {
    let (m, n) = (a.shape()[0], a.shape()[1]);
    let y = a.device().full::<f32>([m], f32::NAN).unwrap();
    gemv_into_with(a, x, &y, c).unwrap();
    let want = reference(&a.to_f64_vec().unwrap(), &x.to_f64_vec().unwrap(), m, n);
    let r = check::compare(
        "gemv",
        format!("{m}x{n} config {c}"),
        T::DTYPE,
        &y.to_f64_vec().unwrap(),
        &want,
        tolerance(T::DTYPE),
    );
    assert!(r.passed(), "{r:?}");
}

fn knobs(warps: u32, bm: i64, bn: i64, unroll: i64, per_sm: i64) -> Config {
    Config::new(warps, 1)
        .with("BLOCK_M", bm)
        .with("BLOCK_N", bn)
        .with("UNROLL", unroll)
        .with("PROGRAMS_PER_SM", per_sm)
}

#[test]
fn warp_per_row_unrolled_and_persistent_configs() {
    let dev = Device::cpu();
    let mut rng = rand::thread_rng();
    // Odd sizes: ragged last row block and last column step (UNROLL chunks that do not divide
    // N, some chunks of a step wholly masked).
    let (m, n) = (rng.gen_range(40..90) | 1, rng.gen_range(700..1300) | 1);
    let a16 = dev.randn::<f16>([m, n]).unwrap();
    let x16 = dev.randn::<f16>([n]).unwrap();
    let abf = dev.randn::<bf16>([m, n]).unwrap();
    let xbf = dev.randn::<bf16>([n]).unwrap();
    let configs = [
        // One warp per row, 1-8 chunks a step, one program per row block.
        knobs(4, 4, 256, 1, 0),
        knobs(4, 4, 256, 3, 0),
        knobs(4, 8, 256, 2, 0),
        knobs(8, 8, 256, 8, 0),
        // Persistent grids: the interpreter has 4 "SMs", so programs loop over row blocks.
        knobs(4, 4, 256, 4, 1),
        knobs(4, 8, 256, 2, 2),
        knobs(4, 16, 256, 1, 3),
        // The earlier wide tiles (warps along the columns), persistent.
        knobs(4, 1, 1024, 1, 2),
        knobs(4, 2, 512, 2, 0),
    ];
    for c in &configs {
        check_config(&a16, &x16, c);
        check_config(&abf, &xbf, c);
    }
    // The default rule for these shapes and for a row shorter than one warp's columns.
    check_config(&a16, &x16, &config(m, n, 1, n, 2));
    let short = dev.randn::<f16>([m, 37]).unwrap();
    check_config(
        &short,
        &dev.randn::<f16>([37]).unwrap(),
        &config(m, 37, 1, 37, 2),
    );
    let a32 = dev.randn::<f32>([m, n]).unwrap();
    check_config(
        &a32,
        &dev.randn::<f32>([n]).unwrap(),
        &config(m, n, 1, n, 4),
    );
}

#[test]
fn default_config_puts_one_warp_on_each_row() {
    // 16-byte loads: 32 lanes cover 256 f16/bf16 or 128 f32 columns; BLOCK_M is the warps, so
    // the layout gives each warp whole rows; four loads per row a step where the row is long.
    let c = config(4096, 14336, 1, 14336, 2);
    assert_eq!(c.get("BLOCK_N"), Some(256));
    assert_eq!(c.get("BLOCK_M"), Some(c.num_warps as i64));
    assert_eq!(c.get("UNROLL"), Some(8));
    // 16-bit rows that 4096 divides, few rows or long ones: one row a program, 4096 columns a
    // step; many rows of fewer columns: one warp a row.
    for (m, n) in [(4096, 4096), (4096, 8192), (16384, 16384), (8192, 16384)] {
        let c = config(m, n, 1, n, 2);
        assert_eq!(
            (c.get("BLOCK_M"), c.get("BLOCK_N")),
            (Some(1), Some(4096)),
            "{m}x{n}"
        );
    }
    for (m, n) in [(8192, 8192), (14336, 4096)] {
        let c = config(m, n, 1, n, 2);
        assert_eq!(
            (c.get("BLOCK_N"), c.get("UNROLL")),
            (Some(256), Some(8)),
            "{m}x{n}"
        );
    }
    let c = config(4096, 4096, 1, 4096, 4);
    assert_eq!(c.get("BLOCK_N"), Some(128));
    let c = config(4096, 300, 1, 300, 2);
    assert_eq!(c.get("UNROLL"), Some(2));
    let c = config(4096, 37, 1, 37, 2);
    assert_eq!((c.get("BLOCK_N"), c.get("UNROLL")), (Some(64), Some(1)));
}

#[test]
fn persistent_grid_gives_every_program_the_same_trips() {
    for &(blocks, max) in &[
        (2048usize, 1056usize),
        (3584, 1056),
        (1024, 1056),
        (7, 4),
        (1, 528),
    ] {
        let (g, trips) = check::persistent_grid(blocks, max);
        assert!(
            g >= 1 && g <= max.max(1) && g <= blocks,
            "{blocks} {max} -> {g}"
        );
        assert_eq!(trips, blocks.div_ceil(g));
        // No fewer trips than the cap allows, and no program idle for a whole trip.
        assert_eq!(trips, blocks.div_ceil(max));
        assert!(blocks > (trips - 1) * g, "{blocks} {max} -> {g}");
    }
    assert_eq!(check::persistent_grid(2048, 1056), (1024, 2));
}

#[test]
fn invalid_knobs_are_typed_errors() {
    let dev = Device::cpu();
    let a = dev.randn::<f16>([5, 40]).unwrap();
    let x = dev.randn::<f16>([40]).unwrap();
    let y = dev.zeros::<f32>([5]).unwrap();
    for c in [
        knobs(4, 4, 256, 0, 0),
        knobs(4, 4, 256, 1, -1),
        knobs(4, 3, 256, 1, 0),
        knobs(4, 4, 8, 1, 0),
    ] {
        assert!(
            matches!(gemv_into_with(&a, &x, &y, &c), Err(Error::Invalid { .. })),
            "{c}"
        );
    }
}
