//! Times a 512x512x512 f32 matmul kernel (64x64 tiles, `dot` in a loop over K) on the
//! interpreter and checks it against an f64 reference.
//!
//! `cargo run --release -p tegula-interp --example matmul_speed`

use std::sync::Arc;
use std::time::Instant;
use tegula_interp::{run, Arg, Buffer, Options};
use tegula_ir::prelude::*;

const BLOCK: usize = 64;

fn matmul_kernel(precision: InputPrecision) -> tegula_ir::Kernel {
    trace("matmul", |p| {
        let (a, b, c) = (
            p.ptr("a", DType::F32),
            p.ptr("b", DType::F32),
            p.ptr("c", DType::F32),
        );
        let (n, k) = (p.scalar("n", DType::I32), p.scalar("k", DType::I32));
        let rm = program_id(0) * BLOCK + arange(0, BLOCK as i64);
        let rn = program_id(1) * BLOCK + arange(0, BLOCK as i64);
        let rk = arange(0, BLOCK as i64);
        let a_ptrs = a + rm.col() * k + rk.row();
        let b_ptrs = b + rk.col() * n + rn.row();
        let init = (zeros::<f32>([BLOCK, BLOCK]), a_ptrs, b_ptrs);
        let (acc, _, _) = for_range(0, k, BLOCK, init, |_, (acc, ap, bp)| {
            let acc = dot_with(load_unmasked(ap), load_unmasked(bp), Some(acc), precision);
            (acc, ap + BLOCK, bp + n * BLOCK)
        });
        store_unmasked(c + rm.col() * n + rn.row(), acc);
    })
    .expect("matmul traces")
}

fn main() {
    let (m, n, k) = (512usize, 512usize, 512usize);
    // Deterministic pseudo-random inputs in [-1, 1).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let a: Vec<f32> = (0..m * k).map(|_| next() as f32).collect();
    let b: Vec<f32> = (0..k * n).map(|_| next() as f32).collect();
    let mut reference = vec![0f64; m * n];
    for i in 0..m {
        for kk in 0..k {
            let aik = a[i * k + kk] as f64;
            for j in 0..n {
                reference[i * n + j] += aik * b[kk * n + j] as f64;
            }
        }
    }
    for precision in [InputPrecision::Ieee, InputPrecision::Tf32] {
        let kernel = matmul_kernel(precision);
        let (ba, bb) = (
            Arc::new(Buffer::from_slice(&a)),
            Arc::new(Buffer::from_slice(&b)),
        );
        let bc = Arc::new(Buffer::zeroed(DType::F32, m * n));
        let args = [
            Arg::ptr(&ba),
            Arg::ptr(&bb),
            Arg::ptr(&bc),
            Arg::Int(n as i64),
            Arg::Int(k as i64),
        ];
        let grid = [(m / BLOCK) as u32, (n / BLOCK) as u32, 1];
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            run(&kernel, grid, &args, &Options::default()).expect("matmul runs");
            best = best.min(t.elapsed().as_secs_f64());
        }
        let out = bc.to_f64();
        let max_err = out
            .iter()
            .zip(&reference)
            .map(|(x, r)| (x - r).abs())
            .fold(0.0, f64::max);
        println!(
            "{precision:?}: {m}x{n}x{k} f32 matmul in {:.1} ms (best of 3, {} threads), \
             max |error| vs f64 {max_err:.2e}",
            best * 1e3,
            rayon::current_num_threads()
        );
    }
}
