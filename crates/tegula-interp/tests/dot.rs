//! dot: exact products, f32 accumulation in k order, tf32 rounding, integer dots, dots in loops.

mod common;
use common::*;
use half::{bf16, f16};
use std::sync::Arc;
use tegula_interp::{run, Buffer, Options};
use tegula_ir::prelude::*;

/// `a[m,k] @ b[k,n]` (+ `acc` when given) with `precision`, one program; returns the f32 result.
fn run_dot(
    a: Arc<Buffer>,
    b: Arc<Buffer>,
    acc: Option<Arc<Buffer>>,
    (m, k, n): (usize, usize, usize),
    precision: InputPrecision,
) -> Arc<Buffer> {
    let with_acc = acc.is_some();
    let kern = trace("dot", |p| {
        let (ap, bp) = (p.ptr("a", a.dtype()), p.ptr("b", b.dtype()));
        let accp = with_acc.then(|| p.ptr("acc", DType::F32));
        let (rm, rk, rn) = (
            arange(0, m as i64),
            arange(0, k as i64),
            arange(0, n as i64),
        );
        let at = load_unmasked(ap + rm.col() * k + rk.row());
        let bt = load_unmasked(bp + rk.col() * n + rn.row());
        let c_offs = rm.col() * n + rn.row();
        let acc = accp.map(|c| load_unmasked(c + c_offs));
        let y = dot_with(at, bt, acc, precision);
        let out = p.ptr("out", y.dtype());
        store_unmasked(out + c_offs, y);
    })
    .unwrap();
    let out_dtype = kern.params.last().unwrap().ty.dtype();
    let out = Arc::new(Buffer::zeroed(out_dtype, m * n));
    let mut args = vec![ptr(&a), ptr(&b)];
    if let Some(c) = &acc {
        args.push(ptr(c));
    }
    args.push(ptr(&out));
    run(&kern, [1, 1, 1], &args, &Options::default()).unwrap();
    out
}

/// The reference: `c = fma(a, b, c)` in f32, k in order.
fn fma_reference(a: &[f32], b: &[f32], acc: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
    let mut c = acc.to_vec();
    for i in 0..m {
        for kk in 0..k {
            for j in 0..n {
                c[i * n + j] = a[i * k + kk].mul_add(b[kk * n + j], c[i * n + j]);
            }
        }
    }
    c
}

#[test]
fn f16_dot_is_exact_products_with_f32_accumulation_in_k_order() {
    let dims = (16, 32, 64);
    let mut rng = Rng::new(3);
    let a: Vec<f16> = (0..16 * 32)
        .map(|_| f16::from_f64(rng.uniform(-3.0, 3.0)))
        .collect();
    let b: Vec<f16> = (0..32 * 64)
        .map(|_| f16::from_f64(rng.uniform(-3.0, 3.0)))
        .collect();
    let out = run_dot(buf(&a), buf(&b), None, dims, InputPrecision::Tf32);
    let af: Vec<f32> = a.iter().map(|x| x.to_f32()).collect();
    let bf: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
    let want = fma_reference(&af, &bf, &vec![0.0; 16 * 64], dims);
    assert_eq!(out.to_vec::<f32>().unwrap(), want);
}

#[test]
fn bf16_dot_adds_the_accumulator() {
    let dims = (32, 16, 32);
    let mut rng = Rng::new(5);
    let a: Vec<bf16> = (0..32 * 16)
        .map(|_| bf16::from_f64(rng.uniform(-2.0, 2.0)))
        .collect();
    let b: Vec<bf16> = (0..16 * 32)
        .map(|_| bf16::from_f64(rng.uniform(-2.0, 2.0)))
        .collect();
    let acc = rng.f32s(32 * 32, -100.0, 100.0);
    let out = run_dot(
        buf(&a),
        buf(&b),
        Some(buf(&acc)),
        dims,
        InputPrecision::Ieee,
    );
    let af: Vec<f32> = a.iter().map(|x| x.to_f32()).collect();
    let bf: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        fma_reference(&af, &bf, &acc, dims)
    );
}

#[test]
fn f32_ieee_dot_is_a_sequence_of_fmas() {
    let dims = (16, 64, 16);
    let mut rng = Rng::new(9);
    let a = rng.f32s(16 * 64, -1.0, 1.0);
    let b = rng.f32s(64 * 16, -1.0, 1.0);
    let out = run_dot(buf(&a), buf(&b), None, dims, InputPrecision::Ieee);
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        fma_reference(&a, &b, &vec![0.0; 256], dims)
    );
}

#[test]
fn tf32_rounds_f32_operands_to_ten_mantissa_bits_ties_away() {
    let dims = (16, 16, 16);
    let ones = buf(&vec![1.0f32; 256]);
    // 1 + 2^-12 is below half a tf32 ulp: tf32 sees 1.0.
    let a = buf(&vec![(1.0 + pow2(-12)) as f32; 256]);
    let tf = run_dot(a.clone(), ones.clone(), None, dims, InputPrecision::Tf32);
    let ieee = run_dot(a, ones.clone(), None, dims, InputPrecision::Ieee);
    assert!(tf.to_vec::<f32>().unwrap().iter().all(|&x| x == 16.0));
    let exact = (16.0 * (1.0 + pow2(-12))) as f32;
    assert!(ieee.to_vec::<f32>().unwrap().iter().all(|&x| x == exact));
    // 1 + 2^-11 is exactly half a tf32 ulp: ties go away from zero, to 1 + 2^-10.
    let a = buf(&vec![(1.0 + pow2(-11)) as f32; 256]);
    let tf = run_dot(a, ones.clone(), None, dims, InputPrecision::Tf32);
    let want = (16.0 * (1.0 + pow2(-10))) as f32;
    assert!(tf.to_vec::<f32>().unwrap().iter().all(|&x| x == want));
    let a = buf(&vec![-(1.0 + pow2(-11)) as f32; 256]);
    let tf = run_dot(a, ones.clone(), None, dims, InputPrecision::Tf32);
    assert!(tf.to_vec::<f32>().unwrap().iter().all(|&x| x == -want));
    // 3xTF32 recovers the f32 operand.
    let a = buf(&vec![(1.0 + pow2(-12)) as f32; 256]);
    let x3 = run_dot(a, ones, None, dims, InputPrecision::Tf32x3);
    assert!(x3.to_vec::<f32>().unwrap().iter().all(|&x| x == exact));
}

#[test]
fn int8_dot_accumulates_in_i32() {
    let dims = (16, 64, 16);
    let mut rng = Rng::new(21);
    let a: Vec<i8> = (0..16 * 64).map(|_| rng.next_u64() as i8).collect();
    let b: Vec<i8> = (0..64 * 16).map(|_| rng.next_u64() as i8).collect();
    let out = run_dot(buf(&a), buf(&b), None, dims, InputPrecision::Ieee);
    assert_eq!(out.dtype(), DType::I32);
    let got = out.to_vec::<i32>().unwrap();
    for i in 0..16 {
        for j in 0..16 {
            let want: i32 = (0..64)
                .map(|k| a[i * 64 + k] as i32 * b[k * 16 + j] as i32)
                .sum();
            assert_eq!(got[i * 16 + j], want);
        }
    }
}

#[test]
fn dot_in_a_loop_over_k_matches_the_sequential_reference() {
    // A 64x48 by 48x32 product in K blocks of 16, f16 operands, masked on the ragged M edge.
    let (m, k, n, bm, bk) = (50usize, 48usize, 32usize, 64usize, 16usize);
    let mut rng = Rng::new(33);
    let a: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f64(rng.uniform(-1.0, 1.0)))
        .collect();
    let b: Vec<f16> = (0..k * n)
        .map(|_| f16::from_f64(rng.uniform(-1.0, 1.0)))
        .collect();
    let kern = trace("mm", |p| {
        let (ap, bp, cp) = (
            p.ptr("a", DType::F16),
            p.ptr("b", DType::F16),
            p.ptr("c", DType::F32),
        );
        let (mm, kk) = (p.scalar("m", DType::I32), p.scalar("k", DType::I32));
        let rm = arange(0, bm as i64);
        let rk = arange(0, bk as i64);
        let rn = arange(0, n as i64);
        let row_ok = rm.lt(mm).col();
        let init = (
            zeros::<f32>([bm, n]),
            ap + rm.col() * kk + rk.row(),
            bp + rk.col() * n + rn.row(),
        );
        let (acc, _, _) = for_range(0, kk, bk, init, |_, (acc, pa, pb)| {
            let at = load(pa, row_ok.broadcast_to([bm, bk]), 0.0);
            let bt = load_unmasked(pb);
            (dot_acc(at, bt, acc), pa + bk, pb + bk * n)
        });
        store(
            cp + rm.col() * n + rn.row(),
            acc,
            row_ok.broadcast_to([bm, n]),
        );
    })
    .unwrap();
    let c = Arc::new(Buffer::zeroed(DType::F32, m * n));
    let args = [
        ptr(&buf(&a)),
        ptr(&buf(&b)),
        ptr(&c),
        tegula_interp::Arg::Int(m as i64),
        tegula_interp::Arg::Int(k as i64),
    ];
    run(&kern, [1, 1, 1], &args, &Options::default()).unwrap();
    let af: Vec<f32> = a.iter().map(|x| x.to_f32()).collect();
    let bf: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
    assert_eq!(
        c.to_vec::<f32>().unwrap(),
        fma_reference(&af, &bf, &vec![0.0; m * n], (m, k, n))
    );
}
