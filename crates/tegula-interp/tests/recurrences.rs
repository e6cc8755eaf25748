//! `passes::affine_recurrences`: pointers and offsets a loop advances by a constant become
//! functions of its counter. The interpreter runs each kernel before and after the pass on
//! fresh random inputs, and the results must be the same bits.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, Options};
use tegula_ir::prelude::*;
use tegula_ir::{passes, Kernel, Op};

/// Runs `k` on one program with `inputs` (f32 buffers) and `ints`, returning the output buffer.
fn outputs(k: &Kernel, inputs: &[Vec<f32>], out_len: usize, ints: &[i64]) -> Vec<f32> {
    let out = Arc::new(Buffer::zeroed(DType::F32, out_len));
    let bufs: Vec<Arc<Buffer>> = inputs.iter().map(|x| buf(x)).collect();
    let mut args: Vec<Arg> = bufs.iter().map(ptr).collect();
    args.push(ptr(&out));
    args.extend(ints.iter().map(|&i| Arg::Int(i)));
    run(k, [2, 1, 1], &args, &Options::default()).unwrap();
    out.to_vec::<f32>().unwrap()
}

fn carried_count(k: &Kernel) -> Vec<usize> {
    k.walk()
        .into_iter()
        .filter(|&i| matches!(k.insts[i].op, Op::For { .. }))
        .map(|i| k.insts[i].results.len())
        .collect()
}

/// The pass applied, then cleaned up as the compile pipeline does.
fn rewritten(k: &Kernel) -> (Kernel, bool) {
    let mut r = k.clone();
    let changed = passes::affine_recurrences(&mut r);
    passes::canonicalize(&mut r);
    tegula_ir::verify::verify(&r).unwrap();
    (r, changed)
}

/// Triton's matmul idiom on a 1-D reduction: `ptrs += BLOCK * stride` with the step computed
/// in the loop, an integer offset `off += BLOCK`, a decreasing counter `left -= 1` whose result
/// is used after the loop, over `range(lo, hi, step)` with a constant step of 3.
#[test]
fn pointer_and_offset_recurrences_give_the_same_bits() {
    let k = trace("recur", |p| {
        let (x, y, out) = (
            p.ptr("x", DType::F32),
            p.ptr("y", DType::F32),
            p.ptr("out", DType::F32),
        );
        let (n, stride) = (p.scalar("n", DType::I32), p.scalar("stride", DType::I32));
        let pid = program_id(0);
        let r = arange(0, 16);
        let init = (
            zeros::<f32>([16]),
            x + pid * 7 + r * stride,
            pid * 5 + r,
            scalar(100),
        );
        let (acc, _, _, left) = for_range(1, n, 3, init, |_, (acc, ptrs, off, left)| {
            let a = load(ptrs, r.lt(16), 0.0);
            let b = load(y + off, off.lt(1000), 0.0);
            let step = stride * 4;
            (acc + a * b, ptrs + step, off + 16, left - 1)
        });
        store_unmasked(out + pid * 16 + r, acc + left.to::<f32>());
    })
    .unwrap();
    let (r, changed) = rewritten(&k);
    assert!(changed);
    // The pointer and the offset are no longer carried; the counter, used after the loop, is.
    assert_eq!(carried_count(&k), vec![4]);
    assert_eq!(carried_count(&r), vec![2]);
    let mut rng = Rng::new(7);
    for (n, stride) in [(40, 1), (41, 3), (2, 2), (1, 5)] {
        let x = rng.f32s(4096, -1.0, 1.0);
        let y = rng.f32s(1000, -1.0, 1.0);
        let want = outputs(&k, &[x.clone(), y.clone()], 32, &[n, stride]);
        let got = outputs(&r, &[x, y], 32, &[n, stride]);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "n={n} stride={stride}");
        assert!(want.iter().any(|&v| v != 0.0));
    }
}

/// A run-time step (the division by it stays) and a step that is not a multiple of the loop's.
#[test]
fn runtime_steps_give_the_same_bits() {
    let k = trace("recur_rt", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let (n, step) = (p.scalar("n", DType::I32), p.scalar("step", DType::I32));
        let r = arange(0, 8);
        let (acc, _) = for_range(2, n, step, (zeros::<f32>([8]), x + r), |_, (acc, ptrs)| {
            (acc + load(ptrs, r.lt(8), 0.0), ptrs + 5)
        });
        store_unmasked(out + program_id(0) * 8 + r, acc);
    })
    .unwrap();
    let (r, changed) = rewritten(&k);
    assert!(changed);
    assert_eq!(carried_count(&r), vec![1]);
    let mut rng = Rng::new(11);
    for (n, step) in [(50, 3), (30, 1), (100, 7), (-4, 2)] {
        let x = rng.f32s(1024, -1.0, 1.0);
        let want = outputs(&k, std::slice::from_ref(&x), 16, &[n, step]);
        let got = outputs(&r, &[x], 16, &[n, step]);
        assert_eq!(got, want, "n={n} step={step}");
    }
}

/// What the pass leaves alone: float recurrences, updates inside a branch, and steps computed
/// from values of the iteration.
#[test]
fn other_updates_are_left_alone() {
    let k = trace("not_affine", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let r = arange(0, 8);
        let (f, ptrs, off) = for_range(
            0,
            n,
            1,
            (zeros::<f32>([8]), x + r, r),
            |i, (f, ptrs, off)| {
                let v = load(ptrs, r.lt(8), 0.0);
                let next = if_else(i.lt(3), || ptrs + 8, || ptrs + 16);
                (f + v, next, off + off)
            },
        );
        store_unmasked(out + r, f + load(ptrs, off.lt(0), 0.0));
    })
    .unwrap();
    let (_, changed) = rewritten(&k);
    assert!(!changed);
}
