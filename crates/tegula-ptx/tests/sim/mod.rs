//! What the simulator tests share: compiling a kernel and running it on the PTX simulator
//! (`tegula-ptx-sim`), test data, and the float64 references two test files use.
// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use half::{bf16, f16};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, Compiled, MmaChoice, Target};
pub use tegula_ptx_sim::{run_ptx, tf32, Arg};

/// `k` compiled for target `sm` with `warps` warps and `stages` stages, on `mma.sync`.
pub fn compiled(k: &Kernel, sm: u32, warps: u32, stages: u32) -> Compiled {
    compiled_with(k, sm, warps, stages, MmaChoice::Sync)
}

/// [`compiled`] with `wgmma` asked for.
pub fn compiled_wgmma(k: &Kernel, sm: u32, warps: u32, stages: u32) -> Compiled {
    compiled_with(k, sm, warps, stages, MmaChoice::Wgmma)
}

pub fn compiled_with(k: &Kernel, sm: u32, warps: u32, stages: u32, mma: MmaChoice) -> Compiled {
    let options = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm }, &options).unwrap()
}

/// The PTX of [`compiled`].
pub fn ptx_of(k: &Kernel, sm: u32, warps: u32, stages: u32) -> String {
    compiled(k, sm, warps, stages).ptx
}

/// Runs `k` over `grid` and returns the final contents of each buffer argument.
pub fn run(k: &Kernel, warps: u32, grid: [u64; 3], args: &[Arg]) -> Vec<Vec<u8>> {
    run_staged(k, warps, 1, grid, args)
}

pub fn run_staged(
    k: &Kernel,
    warps: u32,
    stages: u32,
    grid: [u64; 3],
    args: &[Arg],
) -> Vec<Vec<u8>> {
    run_on(80, k, warps, stages, grid, args)
}

/// [`run_staged`] for target `sm`.
pub fn run_on(
    sm: u32,
    k: &Kernel,
    warps: u32,
    stages: u32,
    grid: [u64; 3],
    args: &[Arg],
) -> Vec<Vec<u8>> {
    let c = compiled(k, sm, warps, stages);
    if let Ok(path) = std::env::var("TEGULA_SIM_DUMP") {
        std::fs::write(path, &c.ptx).unwrap();
    }
    run_ptx(
        &c.ptx,
        c.shared_bytes as usize,
        &param_names(k),
        warps,
        grid,
        args,
    )
}

/// The PTX names of `k`'s parameters, in order.
pub fn param_names(k: &Kernel) -> Vec<String> {
    k.params
        .iter()
        .enumerate()
        .map(|(i, p)| format!("p{i}_{}", p.name))
        .collect()
}

/// Deterministic values in [-1, 1) with a few bits, so that products are exact everywhere.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) % 1024) as f32 / 512.0 - 1.0
        })
        .collect()
}

pub fn encode(dt: DType, v: &[f32]) -> Vec<u8> {
    match dt {
        DType::F16 => v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect(),
        DType::F8E4M3 | DType::F8E5M2 => {
            let e5m2 = dt == DType::F8E5M2;
            v.iter()
                .map(|&x| tegula_ir::fp8::fp8_bits(e5m2, x as f64))
                .collect()
        }
        _ => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
    }
}

pub fn decode(dt: DType, b: &[u8]) -> Vec<f32> {
    match dt {
        DType::F16 => b
            .chunks(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => b
            .chunks(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::F8E4M3 | DType::F8E5M2 => b
            .iter()
            .map(|&x| tegula_ir::fp8::fp8_value(dt == DType::F8E5M2, x) as f32)
            .collect(),
        _ => b
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

/// `v` (`rows x cols`, row-major) transposed: `cols x rows`, row-major.
pub fn transposed(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| v[(i % rows) * cols + i / rows])
        .collect()
}

/// The operand as the tensor cores see it (rounded to the dtype, and to tf32 for f32).
pub fn rounded(dt: DType, v: &[f32]) -> Vec<f64> {
    decode(dt, &encode(dt, v))
        .into_iter()
        .map(|x| {
            if dt == DType::F32 {
                tf32(x) as f64
            } else {
                x as f64
            }
        })
        .collect()
}

pub fn assert_close(got: &[f32], want: &[f64], scale: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, ((&g, &w), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(
            err <= tol * s.max(1e-3),
            "{what}: element {i}: got {g}, want {w} (scale {s})"
        );
    }
}

/// [`check_attention`] for `kern` compiled for target `sm`, which takes the key split point
/// after the scale when `split` is given.
pub fn check_attention_kernel(
    kern: &Kernel,
    split: Option<i32>,
    sm: u32,
    (dt, bm, bn, d, warps, stages): (DType, usize, usize, usize, u32, u32),
) {
    let nk = 3 * bn;
    let (qv, kv, vv) = (values(bm * d, 11), values(nk * d, 13), values(nk * d, 17));
    let scale = 0.7f32;
    let (want, _) = attention_reference(dt, [&qv, &kv, &vv], (bm, bn, d), scale);
    let out = vec![0u8; bm * d * 2];
    let (qb, kb, vb) = (encode(dt, &qv), encode(dt, &kv), encode(dt, &vv));
    let mut args = vec![
        Arg::Buf(&qb),
        Arg::Buf(&kb),
        Arg::Buf(&vb),
        Arg::Buf(&out),
        Arg::I32(nk as i32),
        Arg::F32(scale),
    ];
    args.extend(split.map(Arg::I32));
    let bufs = run_on(sm, kern, warps, stages, [1, 1, 1], &args);
    let got = decode(dt, &bufs[3]);
    // The output is rounded to the input dtype; P to 8 (bf16) or 11 (f16) bits.
    let ones = vec![1f64; bm * d];
    assert_close(
        &got,
        &want,
        &ones,
        2e-2,
        &format!("attention {dt} {bm}x{bn}x{d}, {stages} stages"),
    );
}

/// The online softmax of [`check_attention`] in f64 over the 3 key blocks of `[q, k, v]`
/// (`bm`, `3 * bn` and `3 * bn` rows of `d`): each output element, and each row's base-2
/// log-sum-exp of its scaled scores (`m + log2(l)`).
pub fn attention_reference(
    dt: DType,
    [qv, kv, vv]: [&[f32]; 3],
    (bm, bn, d): (usize, usize, usize),
    scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let (qr, kr, vr) = (rounded(dt, qv), rounded(dt, kv), rounded(dt, vv));
    let round = |x: f64| rounded(dt, &[x as f32])[0];
    let mut want = vec![0f64; bm * d];
    let mut lse = vec![0f64; bm];
    for i in 0..bm {
        let (mut m_i, mut l_i) = (f64::NEG_INFINITY, 0f64);
        let mut acc = vec![0f64; d];
        for blk in 0..3 {
            let s: Vec<f64> = (0..bn)
                .map(|j| {
                    let r = blk * bn + j;
                    let dotp: f64 = (0..d).map(|c| qr[i * d + c] * kr[r * d + c]).sum();
                    (dotp as f32 * scale) as f64
                })
                .collect();
            let m_ij = s.iter().fold(m_i, |a, &b| a.max(b));
            let p: Vec<f64> = s.iter().map(|&x| (x - m_ij).exp2()).collect();
            let alpha = (m_i - m_ij).exp2();
            l_i = l_i * alpha + p.iter().sum::<f64>();
            for (c, a) in acc.iter_mut().enumerate() {
                *a = *a * alpha
                    + (0..bn)
                        .map(|j| round(p[j]) * vr[(blk * bn + j) * d + c])
                        .sum::<f64>();
            }
            m_i = m_ij;
        }
        for c in 0..d {
            want[i * d + c] = acc[c] / l_i;
        }
        lse[i] = m_i + l_i.log2();
    }
    (want, lse)
}

/// `C = A B` in float64 from `a` [m, k] and `b` [k, n] rounded to `dt`, and each element's sum
/// of |products| (the scale its rounding error grows with).
pub fn matmul_reference(
    dt: DType,
    a: &[f32],
    b: &[f32],
    mnk: (usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    matmul_reference_of((dt, dt), a, b, mnk)
}

/// [`matmul_reference`] with `a` rounded to `da` and `b` to `db` (an fp8 pair of formats).
pub fn matmul_reference_of(
    (da, db): (DType, DType),
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let (ar, br) = (rounded(da, a), rounded(db, b));
    let mut want = vec![0f64; m * n];
    let mut scale = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for kk in 0..k {
                want[i * n + j] += ar[i * k + kk] * br[kk * n + j];
                scale[i * n + j] += (ar[i * k + kk] * br[kk * n + j]).abs();
            }
        }
    }
    (want, scale)
}

/// xorshift64*.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("TEGULA_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("{test}: seed {seed} (TEGULA_TEST_SEED={seed} repeats it)");
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// A kernel argument, for both sides.
pub enum A {
    /// A buffer of `dtype` holding these bits per element.
    Buf(DType, Vec<u64>),
    I32(i32),
}

pub fn bytes(dt: DType, bits: &[u64]) -> Vec<u8> {
    let w = dt.size_bytes();
    bits.iter()
        .flat_map(|b| b.to_le_bytes()[..w].to_vec())
        .collect()
}

pub fn bits_of(dt: DType, bytes: &[u8]) -> Vec<u64> {
    let w = dt.size_bytes();
    bytes
        .chunks(w)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect()
}

/// Runs `k` over `grid` on the interpreter and, compiled for `sm` with `warps` warps, on the
/// simulator, and checks that every buffer ends with the same bits on both.
pub fn agree(what: &str, k: &Kernel, grid: [u32; 3], args: &[A], sm: u32, warps: u32) {
    agree_up_to(what, k, grid, args, sm, warps, |_, a, b| a == b)
}

/// [`agree`] with `same(dtype, interpreter's bits, simulator's bits)` deciding equality (for
/// example, any NaN for any NaN).
pub fn agree_up_to(
    what: &str,
    k: &Kernel,
    grid: [u32; 3],
    args: &[A],
    sm: u32,
    warps: u32,
    same: impl Fn(DType, u64, u64) -> bool,
) {
    let ibufs: Vec<Option<std::sync::Arc<tegula_interp::Buffer>>> = args
        .iter()
        .map(|a| match a {
            A::Buf(dt, bits) => {
                let b = tegula_interp::Buffer::zeroed(*dt, bits.len());
                for (i, &v) in bits.iter().enumerate() {
                    b.write_bits(i, v);
                }
                Some(std::sync::Arc::new(b))
            }
            A::I32(_) => None,
        })
        .collect();
    let iargs: Vec<tegula_interp::Arg> = args
        .iter()
        .zip(&ibufs)
        .map(|(a, b)| match (a, b) {
            (_, Some(b)) => tegula_interp::Arg::ptr(b),
            (A::I32(v), None) => tegula_interp::Arg::Int(*v as i64),
            _ => unreachable!(),
        })
        .collect();
    tegula_interp::run(k, grid, &iargs, &tegula_interp::Options::default())
        .unwrap_or_else(|e| panic!("{what}: the interpreter refused it: {e}\n{k}"));
    let compiled = compile(
        k,
        &Target { sm },
        &CompileOptions {
            num_warps: warps,
            num_stages: 1,
            mma: MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        },
    )
    .unwrap_or_else(|e| panic!("{what}: the backend refused it: {e}\n{k}"));
    let names: Vec<String> = k
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| format!("p{i}_{}", p.name))
        .collect();
    let raw: Vec<Vec<u8>> = args
        .iter()
        .map(|a| match a {
            A::Buf(dt, bits) => bytes(*dt, bits),
            A::I32(_) => Vec::new(),
        })
        .collect();
    let sargs: Vec<Arg> = args
        .iter()
        .zip(&raw)
        .map(|(a, r)| match a {
            A::Buf(..) => Arg::Buf(r),
            A::I32(v) => Arg::I32(*v),
        })
        .collect();
    let out = tegula_ptx_sim::try_run_ptx(
        &compiled.ptx,
        compiled.shared_bytes as usize,
        &names,
        warps,
        [grid[0] as u64, grid[1] as u64, grid[2] as u64],
        &sargs,
    )
    .unwrap_or_else(|e| panic!("{what}: the simulator refused it: {e}\n{k}"));
    let mut sim = out.into_iter();
    for (i, (a, b)) in args.iter().zip(&ibufs).enumerate() {
        let (A::Buf(dt, _), Some(b)) = (a, b) else {
            continue;
        };
        let want: Vec<u64> = (0..b.len()).map(|e| b.read_bits(e)).collect();
        let got = bits_of(*dt, &sim.next().expect("a buffer per buffer argument"));
        if let Some(e) = (0..want.len()).find(|&e| !same(*dt, want[e], got[e])) {
            panic!(
                "{what} (sm_{sm}, {warps} warps): buffer {i} element {e}: the interpreter has \
                 {:#x}, the simulator {:#x}\n{k}",
                want[e], got[e]
            );
        }
    }
}
