//! Helpers shared by the interpreter's tests.
#![allow(dead_code)]

use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, InterpError, Options};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;

pub fn ptr(b: &Arc<Buffer>) -> Arg {
    Arg::ptr(b)
}

pub fn buf<T: Element>(data: &[T]) -> Arc<Buffer> {
    Arc::new(Buffer::from_slice(data))
}

/// Traces a one-program kernel that loads each input buffer (all of one length `n`) into a tile
/// of `n.next_power_of_two()` lanes (masked; padding lanes read 1, so divisions stay defined),
/// applies `f`, and stores the result into a
/// new buffer of the result's dtype, which it returns.
pub fn eval(inputs: &[Arc<Buffer>], f: impl FnOnce(&[Tile]) -> Tile) -> Arc<Buffer> {
    let (kernel, out) = eval_kernel(inputs, f);
    let mut args: Vec<Arg> = inputs.iter().map(ptr).collect();
    args.push(ptr(&out));
    run(&kernel, [1, 1, 1], &args, &Options::default()).expect("kernel runs");
    out
}

/// [`eval`] that returns the run's error.
pub fn eval_err(inputs: &[Arc<Buffer>], f: impl FnOnce(&[Tile]) -> Tile) -> InterpError {
    let (kernel, out) = eval_kernel(inputs, f);
    let mut args: Vec<Arg> = inputs.iter().map(ptr).collect();
    args.push(ptr(&out));
    run(&kernel, [1, 1, 1], &args, &Options::default()).expect_err("kernel fails")
}

fn eval_kernel(inputs: &[Arc<Buffer>], f: impl FnOnce(&[Tile]) -> Tile) -> (Kernel, Arc<Buffer>) {
    let n = inputs[0].len();
    let block = n.next_power_of_two() as i64;
    let kernel = trace("eval", |p| {
        let ptrs: Vec<Tile> = inputs
            .iter()
            .enumerate()
            .map(|(i, b)| p.ptr(&format!("x{i}"), b.dtype()))
            .collect();
        let offs = arange(0, block);
        let mask = offs.lt(n as i64);
        let tiles: Vec<Tile> = ptrs.iter().map(|&x| load(x + offs, mask, 1)).collect();
        let y = f(&tiles);
        let out = p.ptr("out", y.dtype());
        store(out + offs, y, mask);
    })
    .expect("kernel traces");
    let dtype = kernel.params.last().unwrap().ty.dtype();
    (kernel, Arc::new(Buffer::zeroed(dtype, n)))
}

/// A small deterministic generator (xorshift) for test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    pub fn f32s(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi) as f32).collect()
    }
}

pub fn pow2(k: i32) -> f64 {
    2f64.powi(k)
}
