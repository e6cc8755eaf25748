//! Whole kernels against float64 references: vector add over an odd length, row softmax.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, Options};
use tegula_ir::prelude::*;

#[test]
fn vector_add_over_an_odd_length_matches_f64_rounded_to_f32() {
    let n = 100_003usize;
    let block = 1024usize;
    let k = trace("add", |p| {
        let (x, y, out, n) = (
            p.ptr("x", DType::F32),
            p.ptr("y", DType::F32),
            p.ptr("out", DType::F32),
            p.scalar("n", DType::I32),
        );
        let offs = program_id(0) * block + arange(0, block as i64);
        let mask = offs.lt(n);
        store(
            out + offs,
            load(x + offs, mask, 0.0) + load(y + offs, mask, 0.0),
            mask,
        );
    })
    .unwrap();
    let mut rng = Rng::new(1);
    let x = rng.f32s(n, -1e3, 1e3);
    let y = rng.f32s(n, -1e-3, 1e-3);
    let out = Arc::new(Buffer::zeroed(DType::F32, n));
    let grid = [n.div_ceil(block) as u32, 1, 1];
    let args = [ptr(&buf(&x)), ptr(&buf(&y)), ptr(&out), Arg::Int(n as i64)];
    let opts = Options {
        check_races: true,
        ..Default::default()
    };
    run(&k, grid, &args, &opts).unwrap();
    let got = out.to_vec::<f32>().unwrap();
    for i in 0..n {
        // The f64 sum of two f32s rounded once to f32 is the correctly rounded f32 sum.
        let want = (x[i] as f64 + y[i] as f64) as f32;
        assert_eq!(got[i].to_bits(), want.to_bits(), "element {i}");
    }
}

#[test]
fn row_softmax_with_a_masked_block_matches_f64() {
    let (rows, cols, block) = (37usize, 781usize, 1024usize);
    let k = trace("softmax", |p| {
        let (x, out, ncols) = (
            p.ptr("x", DType::F32),
            p.ptr("out", DType::F32),
            p.scalar("ncols", DType::I32),
        );
        let row = program_id(0);
        let offs = arange(0, block as i64);
        let mask = offs.lt(ncols);
        let v = load(x + row * ncols + offs, mask, f32::NEG_INFINITY);
        let z = v - max(v, 0);
        let e = exp(z);
        let s = sum(e, 0);
        store(out + row * ncols + offs, e / s, mask);
    })
    .unwrap();
    let mut rng = Rng::new(2);
    let x = rng.f32s(rows * cols, -8.0, 8.0);
    let out = Arc::new(Buffer::zeroed(DType::F32, rows * cols));
    let args = [ptr(&buf(&x)), ptr(&out), Arg::Int(cols as i64)];
    run(&k, [rows as u32, 1, 1], &args, &Options::default()).unwrap();
    let got = out.to_vec::<f32>().unwrap();
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let denom: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
        for c in 0..cols {
            let want = (row[c] as f64 - m).exp() / denom;
            let g = got[r * cols + c] as f64;
            assert!(
                (g - want).abs() <= 1e-5 * want + 1e-12,
                "row {r} col {c}: {g} vs {want}"
            );
        }
        let total: f64 = got[r * cols..(r + 1) * cols]
            .iter()
            .map(|&v| v as f64)
            .sum();
        assert!((total - 1.0).abs() < 1e-5, "row {r} sums to {total}");
    }
}
