//! Three small kernels written with the builder API (no macro), run on the interpreter and
//! checked against float64 references on fresh random inputs of odd sizes.

use half::f16;
use tegula::ir::builder::{self as tl, trace};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::{Device, Grid, KernelArg, Launch, LaunchConfig, TensorArg};

fn int(v: usize) -> KernelArg {
    KernelArg::Int {
        dtype: DType::I32,
        value: v as i64,
    }
}

fn run(
    dev: &Device,
    name: &'static str,
    key: String,
    trace: &dyn Fn() -> Result<Kernel, TraceError>,
    grid: impl Into<Grid>,
    args: Vec<KernelArg>,
) -> tegula::Result<()> {
    dev.launch(Launch {
        name,
        key,
        trace,
        grid: grid.into(),
        config: LaunchConfig::default(),
        args,
    })
}

fn vector_add(block: usize) -> Result<Kernel, TraceError> {
    trace("vector_add", |p| {
        let (x, y, out) = (
            p.ptr("x", DType::F32),
            p.ptr("y", DType::F32),
            p.ptr("out", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs = tl::program_id(0) * block + tl::arange(0, block as i64);
        let mask = offs.lt(n);
        let sum = tl::load(x + offs, mask, 0.0) + tl::load(y + offs, mask, 0.0);
        tl::store(out + offs, sum, mask);
    })
}

#[test]
fn vector_add_matches_reference() {
    let dev = Device::cpu();
    let block = 256;
    for n in [1usize, 255, 257, 10_007] {
        let x = dev.randn::<f32>([n]).unwrap();
        let y = dev.randn::<f32>([n]).unwrap();
        let out = dev.full::<f32>([n], f32::NAN).unwrap();
        let trace = || vector_add(block);
        let args = vec![
            (&x).kernel_arg(),
            (&y).kernel_arg(),
            (&out).kernel_arg(),
            int(n),
        ];
        run(
            &dev,
            "vector_add",
            format!("{block}"),
            &trace,
            n.div_ceil(block),
            args,
        )
        .unwrap();
        let (xv, yv, ov) = (
            x.to_vec().unwrap(),
            y.to_vec().unwrap(),
            out.to_vec().unwrap(),
        );
        for i in 0..n {
            // f32 addition is exact-rounded, so the result equals the f32 sum bit for bit.
            assert_eq!(ov[i], xv[i] + yv[i], "element {i} of {n}");
        }
    }
    assert_eq!(dev.traced_kernels(), 1, "one specialization serves every n");
}

/// Row softmax: one program per row, the whole row in one masked tile.
fn softmax(block: usize) -> Result<Kernel, TraceError> {
    trace("softmax", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let n_cols = p.scalar("n_cols", DType::I32);
        let row = tl::program_id(0);
        let cols = tl::arange(0, block as i64);
        let mask = cols.lt(n_cols);
        let v = tl::load(x + row * n_cols + cols, mask, f32::NEG_INFINITY);
        let shifted = v - tl::max(v, 0);
        let e = tl::exp(shifted);
        let y = e / tl::sum(e, 0);
        tl::store(out + row * n_cols + cols, y, mask);
    })
}

#[test]
fn row_softmax_matches_float64() {
    let dev = Device::cpu();
    for (rows, cols, block) in [(7usize, 781usize, 1024usize), (3, 1, 1), (5, 64, 64)] {
        let x = dev.randn::<f32>([rows, cols]).unwrap();
        let out = dev.zeros::<f32>([rows, cols]).unwrap();
        let trace = || softmax(block);
        let args = vec![(&x).kernel_arg(), (&out).kernel_arg(), int(cols)];
        run(&dev, "softmax", format!("{block}"), &trace, rows, args).unwrap();
        let (xv, ov) = (x.to_f64_vec().unwrap(), out.to_f64_vec().unwrap());
        for r in 0..rows {
            let row = &xv[r * cols..(r + 1) * cols];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for c in 0..cols {
                let want = (row[c] - m).exp() / z;
                let got = ov[r * cols + c];
                assert!(
                    (got - want).abs() <= 1e-6 + 1e-5 * want,
                    "row {r} col {c}: {got} vs {want}"
                );
            }
        }
    }
}

/// The reference GEMV: A [M, N] f16 row-major, x f16, y f32; one program per row.
fn gemv(block: usize) -> Result<Kernel, TraceError> {
    trace("gemv", |p| {
        let a = p.ptr("a", DType::F16);
        let x = p.ptr("x", DType::F16);
        let y = p.ptr("y", DType::F32);
        let n = p.scalar("n", DType::I32);
        let row = tl::program_id(0);
        let offsets = tl::arange(0, block as i64);
        let acc = tl::for_range(0, n, block, tl::full::<f32>([], 0.0), |start, acc| {
            let cols = start + offsets;
            let mask = cols.lt(n);
            let av = tl::load(a + row * n + cols, mask, 0.0).to::<f32>();
            let xv = tl::load(x + cols, mask, 0.0).to::<f32>();
            acc + tl::sum(av * xv, 0)
        });
        tl::store_unmasked(y + row, acc);
    })
}

#[test]
fn gemv_matches_float64_with_reference_tolerances() {
    let dev = Device::cpu();
    for (m, n, block) in [
        (37usize, 1031usize, 256usize),
        (1, 17, 16),
        (64, 4096, 1024),
    ] {
        let a = dev.randn::<f16>([m, n]).unwrap();
        let x = dev.randn::<f16>([n]).unwrap();
        let y = dev.zeros::<f32>([m]).unwrap();
        let trace = || gemv(block);
        let args = vec![
            (&a).kernel_arg(),
            (&x).kernel_arg(),
            (&y).kernel_arg(),
            int(n),
        ];
        run(&dev, "gemv", format!("{block}"), &trace, m, args).unwrap();
        let (av, xv, yv) = (
            a.to_f64_vec().unwrap(),
            x.to_f64_vec().unwrap(),
            y.to_f64_vec().unwrap(),
        );
        for r in 0..m {
            let want: f64 = (0..n).map(|c| av[r * n + c] * xv[c]).sum();
            // The reference contract's check: rtol 1e-4, atol 1e-3 against the float64 result.
            assert!(
                (yv[r] - want).abs() <= 1e-3 + 1e-4 * want.abs(),
                "row {r}: {} vs {want}",
                yv[r]
            );
        }
    }
}

#[test]
fn unmasked_out_of_bounds_names_the_line_and_program() {
    let dev = Device::cpu();
    let n = 100;
    let x = dev.randn::<f32>([n]).unwrap();
    let out = dev.zeros::<f32>([n]).unwrap();
    let trace = || {
        trace("copy_unmasked", |p| {
            let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
            let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
            let v = tl::load_unmasked(x + offs); // the line the error must name
            tl::store_unmasked(out + offs, v);
        })
    };
    let line = line!() - 4;
    let args = vec![(&x).kernel_arg(), (&out).kernel_arg()];
    let err = run(&dev, "copy_unmasked", String::new(), &trace, 2u32, args).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("copy_unmasked"), "{msg}");
    assert!(msg.contains(&format!("builder_kernels.rs:{line}")), "{msg}");
    assert!(
        msg.contains("100"),
        "the buffer length or index is named: {msg}"
    );
}

#[test]
fn dtype_error_names_the_line() {
    let err = trace("bad_dtype", |p| {
        let x = p.ptr("x", DType::F32);
        let v = tl::load_unmasked(x + tl::arange(0, 16));
        let _ = v << 2; // shifting floats is a dtype error
    })
    .unwrap_err();
    assert!(err.message.contains("integer"), "{err}");
    assert_eq!(err.loc.line, line!() - 4);
    assert!(err.to_string().contains("builder_kernels.rs"), "{err}");
}

#[test]
fn wrong_argument_dtype_is_a_typed_error() {
    let dev = Device::cpu();
    let x = dev.randn::<f64>([16]).unwrap();
    let y = dev.randn::<f32>([16]).unwrap();
    let out = dev.zeros::<f32>([16]).unwrap();
    let trace = || vector_add(16);
    let args = vec![
        (&x).kernel_arg(),
        (&y).kernel_arg(),
        (&out).kernel_arg(),
        int(16),
    ];
    let err = run(&dev, "vector_add", "16".into(), &trace, 1u32, args).unwrap_err();
    assert!(
        matches!(err, tegula::Error::Arguments { .. }),
        "expected an argument error, got {err}"
    );
    assert!(err.to_string().contains("ptr<f64>"), "{err}");
}

/// A block-pointer copy of a transposed view: the strides come in as arguments and the boundary
/// check masks the ragged edge of an odd-sized matrix.
#[test]
fn block_pointer_copy_with_boundary_check() {
    let dev = Device::cpu();
    let (rows, cols, b) = (37usize, 29usize, 16usize);
    let src = dev
        .randn::<f32>([cols, rows])
        .unwrap()
        .transpose(0, 1)
        .unwrap(); // [rows, cols] view
    let dst = dev.full::<f32>([rows, cols], -7.0).unwrap();
    let trace = || {
        trace("block_copy", |p| {
            let (src, dst) = (p.ptr("src", DType::F32), p.ptr("dst", DType::F32));
            let (m, n) = (p.scalar("m", DType::I32), p.scalar("n", DType::I32));
            let (s0, s1) = (p.scalar("s0", DType::I32), p.scalar("s1", DType::I32));
            let (pm, pn) = (tl::program_id(0) * b, tl::program_id(1) * b);
            let from = tl::make_block_ptr(src, (m, n), (s0, s1), (pm, pn), [b, b]);
            let to = tl::make_block_ptr(dst, (m, n), (n, 1), (pm, pn), [b, b]);
            to.store(from.load(&[0, 1], tl::Padding::Zero), &[0, 1]);
        })
    };
    let args = vec![
        (&src).kernel_arg(),
        (&dst).kernel_arg(),
        int(rows),
        int(cols),
        int(src.strides()[0]),
        int(src.strides()[1]),
    ];
    let grid = [rows.div_ceil(b) as u32, cols.div_ceil(b) as u32];
    run(&dev, "block_copy", String::new(), &trace, grid, args).unwrap();
    assert_eq!(dst.to_vec().unwrap(), src.to_vec().unwrap());
}
