//! Reductions and scans along each axis, NaN rules, arg-reduction ties.

mod common;
use common::*;
use half::f16;
use std::sync::Arc;
use tegula_interp::{run, Buffer, Options};
use tegula_ir::prelude::*;

/// Loads a [4, 8] i32 tile, applies `f`, stores the (1-D or 2-D) result flat.
fn eval_2d<T: Element>(data: &[T], f: impl FnOnce(Tile) -> Tile) -> Arc<Buffer> {
    let x = buf(data);
    let mut out_dtype = DType::I32;
    let mut out_len = 0;
    let k = trace("red2d", |p| {
        let xp = p.ptr("x", T::DTYPE);
        let offs = arange(0, 4).col() * 8 + arange(0, 8).row();
        let y = f(load_unmasked(xp + offs));
        out_dtype = y.dtype();
        out_len = y.shape().numel();
        let out = p.ptr("out", y.dtype());
        let o = if y.shape().rank() == 1 {
            arange(0, out_len as i64)
        } else {
            arange(0, 4).col() * 8 + arange(0, 8).row()
        };
        store_unmasked(out + o, y);
    })
    .unwrap();
    let out = Arc::new(Buffer::zeroed(out_dtype, out_len));
    run(&k, [1, 1, 1], &[ptr(&x), ptr(&out)], &Options::default()).unwrap();
    out
}

fn grid_values() -> Vec<i32> {
    // x[r][c] = (r+1) * (c - 3) squared-ish, distinct rows and columns.
    (0..32)
        .map(|i| (i / 8 + 1) * ((i % 8) - 3) + (i % 5))
        .collect()
}

#[test]
fn sums_along_each_axis_match_hand_sums() {
    let v = grid_values();
    let rows = eval_2d(&v, |t| sum(t, 1)).to_vec::<i32>().unwrap();
    let cols = eval_2d(&v, |t| sum(t, 0)).to_vec::<i32>().unwrap();
    for r in 0..4 {
        assert_eq!(rows[r], v[r * 8..r * 8 + 8].iter().sum::<i32>());
    }
    for c in 0..8 {
        assert_eq!(cols[c], (0..4).map(|r| v[r * 8 + c]).sum::<i32>());
    }
    let mx = eval_2d(&v, |t| max(t, 1)).to_vec::<i32>().unwrap();
    let mn = eval_2d(&v, |t| min(t, 0)).to_vec::<i32>().unwrap();
    for r in 0..4 {
        assert_eq!(mx[r], *v[r * 8..r * 8 + 8].iter().max().unwrap());
    }
    for c in 0..8 {
        assert_eq!(mn[c], (0..4).map(|r| v[r * 8 + c]).min().unwrap());
    }
}

#[test]
fn integer_reductions_wrap_and_narrow_sums_accumulate_in_i32() {
    let out = eval(&[buf(&[i32::MAX, 1, 0])], |t| sum(t[0], 0).to::<i32>());
    // eval pads to 4 lanes with 1s: MAX + 1 + 0 + 1 wraps.
    assert_eq!(out.to_vec::<i32>().unwrap()[0], i32::MIN + 1);
    let out = eval(&[buf(&[100i8, 100, 100, 100])], |t| sum(t[0], 0));
    assert_eq!(out.dtype(), DType::I32);
    assert_eq!(out.to_vec::<i32>().unwrap()[0], 400);
    let out = eval(&[buf(&[3i64, -5, 7, 2])], |t| prod(t[0], 0));
    assert_eq!(out.to_vec::<i64>().unwrap()[0], -210);
    let x = buf(&[0b1110u32, 0b0111, 0b1101, 0b1111]);
    let a = eval(std::slice::from_ref(&x), |t| reduce_and(t[0], 0))
        .to_vec::<u32>()
        .unwrap();
    let o = eval(std::slice::from_ref(&x), |t| reduce_or(t[0], 0))
        .to_vec::<u32>()
        .unwrap();
    let e = eval(&[x], |t| reduce_xor(t[0], 0)).to_vec::<u32>().unwrap();
    assert_eq!(
        (a[0], o[0], e[0]),
        (0b0100, 0b1111, 0b1110 ^ 0b0111 ^ 0b1101 ^ 0b1111)
    );
    let out = eval(&[buf(&[1u32, 0xFFFF_FFFF, 2, 3])], |t| max(t[0], 0));
    assert_eq!(out.to_vec::<u32>().unwrap()[0], 0xFFFF_FFFF);
}

#[test]
fn float_sums_round_each_step_in_index_order() {
    // f32: (1e8 + 1) rounds back to 1e8, then -1e8 and +1: 1, not the exact 2.
    let out = eval(&[buf(&[1e8f32, 1.0, -1e8, 1.0])], |t| sum(t[0], 0));
    assert_eq!(out.to_vec::<f32>().unwrap()[0], 1.0);
    // f16: 2048 + 1 is a tie and stays 2048, twice: 2048, not 2050.
    let h = |x: f64| f16::from_f64(x);
    let out = eval(&[buf(&[h(2048.0), h(1.0), h(1.0), h(0.0)])], |t| {
        sum(t[0], 0)
    });
    assert_eq!(out.to_f64()[0], 2048.0);
}

#[test]
fn float_max_and_min_reductions_propagate_nan() {
    let out = eval(&[buf(&[1.0f32, f32::NAN, 3.0, 0.5])], |t| max(t[0], 0));
    assert!(out.to_vec::<f32>().unwrap()[0].is_nan());
    let out = eval(&[buf(&[1.0f32, f32::NAN, 3.0, 0.5])], |t| min(t[0], 0));
    assert!(out.to_vec::<f32>().unwrap()[0].is_nan());
    let out = eval(&[buf(&[1.0f32, -7.0, f32::INFINITY, 0.5])], |t| {
        max(t[0], 0) * 10.0 + min(t[0], 0)
    });
    assert_eq!(out.to_vec::<f32>().unwrap()[0], f32::INFINITY);
    let out = eval(&[buf(&[1.0f32, -7.0, 3.0, 0.5])], |t| {
        max(t[0], 0) * 10.0 + min(t[0], 0)
    });
    assert_eq!(out.to_vec::<f32>().unwrap()[0], 23.0);
}

#[test]
fn argmax_and_argmin_take_the_first_index_on_ties() {
    let out = eval(&[buf(&[1.0f32, 5.0, 5.0, 2.0])], |t| argmax(t[0], 0));
    assert_eq!(out.to_vec::<i32>().unwrap()[0], 1);
    let out = eval(&[buf(&[3i32, 0, 1, 0])], |t| argmin(t[0], 0));
    assert_eq!(out.to_vec::<i32>().unwrap()[0], 1);
    // NaN counts as the largest and as the smallest; the first NaN wins.
    let x = buf(&[1.0f32, f32::NAN, 9.0, f32::NAN]);
    assert_eq!(
        eval(std::slice::from_ref(&x), |t| argmax(t[0], 0))
            .to_vec::<i32>()
            .unwrap()[0],
        1
    );
    assert_eq!(
        eval(&[x], |t| argmin(t[0], 0)).to_vec::<i32>().unwrap()[0],
        1
    );
    let out = eval(&[buf(&[1u32, 0xFFFF_FFFF, 2, 0xFFFF_FFFF])], |t| {
        argmax(t[0], 0)
    });
    assert_eq!(out.to_vec::<i32>().unwrap()[0], 1);
    let v = grid_values();
    let am = eval_2d(&v, |t| argmax(t, 0)).to_vec::<i32>().unwrap();
    for c in 0..8 {
        let col: Vec<i32> = (0..4).map(|r| v[r * 8 + c]).collect();
        let best = *col.iter().max().unwrap();
        assert_eq!(am[c], col.iter().position(|&x| x == best).unwrap() as i32);
    }
}

#[test]
fn scans_are_inclusive_forward_and_reverse() {
    let x = buf(&[1i32, 2, 3, 4]);
    let fwd = eval(std::slice::from_ref(&x), |t| cumsum(t[0], 0));
    assert_eq!(fwd.to_vec::<i32>().unwrap(), vec![1, 3, 6, 10]);
    let rev = eval(std::slice::from_ref(&x), |t| {
        scan(t[0], ReduceOp::Sum, 0, true)
    });
    assert_eq!(rev.to_vec::<i32>().unwrap(), vec![10, 9, 7, 4]);
    let cp = eval(&[x], |t| cumprod(t[0], 0));
    assert_eq!(cp.to_vec::<i32>().unwrap(), vec![1, 2, 6, 24]);
    let m = eval(&[buf(&[3.0f32, 1.0, 4.0, 1.5])], |t| {
        scan(t[0], ReduceOp::Max, 0, false)
    });
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![3.0, 3.0, 4.0, 4.0]);
    let v = grid_values();
    let down = eval_2d(&v, |t| cumsum(t, 0)).to_vec::<i32>().unwrap();
    let left = eval_2d(&v, |t| scan(t, ReduceOp::Sum, 1, true))
        .to_vec::<i32>()
        .unwrap();
    for r in 0..4 {
        for c in 0..8 {
            assert_eq!(down[r * 8 + c], (0..=r).map(|q| v[q * 8 + c]).sum::<i32>());
            assert_eq!(left[r * 8 + c], (c..8).map(|q| v[r * 8 + q]).sum::<i32>());
        }
    }
}
