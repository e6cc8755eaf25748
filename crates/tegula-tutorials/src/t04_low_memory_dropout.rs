//! Tutorial 04, low-memory dropout: zero each element with probability `p` and scale the
//! others by `1 / (1 - p)`, first from a stored keep mask, then from a seeded random stream
//! (Philox) that needs no mask in memory.
//!
//! # The Triton code
//!
//! `_dropout` is tutorial 01's shape with a third input: `x_keep`, a tensor of 0s and 1s;
//! `tl.where(x_keep, x / (1 - p), 0.0)`. `_seeded_dropout` draws the mask in the kernel:
//! `tl.rand(seed, offsets)` gives each element a uniform number in `[0, 1)` that depends
//! only on the seed and the element's offset (Philox 4x32 with 10 rounds, the counter being
//! the offset, the key the seed), so the same seed reproduces the same mask with nothing
//! stored, and the element is kept when that number is above `p`.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `tl.load(p, mask=m)` | `load_masked(p, m)` (masked-off lanes read 0) |
//! | `tl.where(x_keep, a, b)` with an int32 `x_keep` | `select(x_keep, a, b)`: a numeric condition is true where nonzero, as Triton's |
//! | `x / (1 - p)` with a float scalar `p` | the same |
//! | `tl.rand(seed, offsets)` | [`rand`](tegula::ir::builder::rand): Philox 4x32-10, bit for bit Triton's |
//!
//! # What differs
//!
//! Nothing in the kernels. The host functions check what the tutorial assumes (contiguous
//! inputs of one shape, `0 <= p < 1`, sizes that fit the i32 offsets) and return typed
//! errors. For the tests the module keeps a host Philox ([`philox4x32`], which passes the
//! Random123 known-answer vectors) and `tl.rand` on the host ([`rand_host`]), so that the
//! kernel's mask can be compared with an independent stream element by element.
#![allow(non_snake_case)]
// random.py's scale, 4.6566127342e-10, as written there.
#![allow(clippy::excessive_precision)]

use crate::common;
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::Result;

#[tegula::kernel]
pub fn _dropout(
    x_ptr: Ptr<f32>,      // pointer to the input
    x_keep_ptr: Ptr<i32>, // pointer to a mask of 0s and 1s
    output_ptr: Ptr<f32>, // pointer to the output
    n_elements: i32,      // number of elements in the `x` tensor
    p: f32,               // probability that an element of `x` is changed to zero
    #[constexpr] BLOCK_SIZE: usize,
) {
    let pid = program_id(0);
    let block_start = pid * BLOCK_SIZE;
    let offsets = block_start + arange(0, BLOCK_SIZE as i64);
    let mask = offsets.lt(n_elements);
    // Load data
    let x = load_masked(x_ptr + offsets, mask);
    let x_keep = load_masked(x_keep_ptr + offsets, mask);
    // The line below is the crucial part, described in the paragraph above!
    let output = select(x_keep, x / (1 - p), 0.0);
    // Write-back output
    store(output_ptr + offsets, output, mask);
}

#[tegula::kernel]
pub fn _seeded_dropout(
    x_ptr: Ptr<f32>,
    output_ptr: Ptr<f32>,
    n_elements: i32,
    p: f32,
    seed: i32,
    #[constexpr] BLOCK_SIZE: usize,
) {
    // compute memory offsets of elements handled by this instance
    let pid = program_id(0);
    let block_start = pid * BLOCK_SIZE;
    let offsets = block_start + arange(0, BLOCK_SIZE as i64);
    // load data from x
    let mask = offsets.lt(n_elements);
    let x = load_masked(x_ptr + offsets, mask);
    // randomly prune it
    let random = rand(seed, offsets);
    let x_keep = random.gt(p);
    // write-back
    let output = select(x_keep, x / (1 - p), 0.0);
    store(output_ptr + offsets, output, mask);
}

const OP: &str = "tutorial-04-low-memory-dropout";

/// The tutorial's `BLOCK_SIZE=1024`.
pub const DROPOUT_BLOCK_SIZE: usize = 1024;

fn check_x<T: Element>(x: &Tensor<f32>, other: Option<(&str, &Tensor<T>)>, p: f32) -> Result<i32> {
    common::expect_contiguous(OP, "x", x)?; // assert x.is_contiguous()
    if let Some((name, t)) = other {
        common::expect_shape(OP, name, t, x.shape())?;
        common::expect_contiguous(OP, name, t)?;
        common::expect_same_device(OP, x, t)?;
    }
    if !(0.0..1.0).contains(&p) {
        return Err(common::invalid(OP, format!("p must be in [0, 1), got {p}")));
    }
    common::as_i32(OP, "n_elements", x.numel())
}

/// The tutorial's `dropout(x, x_keep, p)` (x f32, x_keep i32 of 0s and 1s).
pub fn dropout(x: &Tensor<f32>, x_keep: &Tensor<i32>, p: f32) -> Result<Tensor<f32>> {
    let n_elements = check_x(x, Some(("x_keep", x_keep)), p)?;
    let output = x.device().empty::<f32>(x.shape())?;
    if n_elements == 0 {
        return Ok(output);
    }
    let grid = common::cdiv(n_elements as usize, DROPOUT_BLOCK_SIZE);
    _dropout::launch(
        x.device(),
        grid,
        x,
        x_keep,
        &output,
        n_elements,
        p,
        DROPOUT_BLOCK_SIZE,
    )?;
    Ok(output)
}

/// The launch of `seeded_dropout` into a prepared `output`.
pub fn seeded_dropout_into(x: &Tensor<f32>, output: &Tensor<f32>, p: f32, seed: i32) -> Result<()> {
    let n_elements = check_x(x, Some(("output", output)), p)?;
    if n_elements == 0 {
        return Ok(());
    }
    let grid = common::cdiv(n_elements as usize, DROPOUT_BLOCK_SIZE);
    _seeded_dropout::launch(
        x.device(),
        grid,
        x,
        output,
        n_elements,
        p,
        seed,
        DROPOUT_BLOCK_SIZE,
    )
}

/// The tutorial's `seeded_dropout(x, p, seed)`.
pub fn seeded_dropout(x: &Tensor<f32>, p: f32, seed: i32) -> Result<Tensor<f32>> {
    check_x::<f32>(x, None, p)?;
    let output = x.device().empty::<f32>(x.shape())?;
    seeded_dropout_into(x, &output, p, seed)?;
    Ok(output)
}

/// Philox 4x32 on the host: `rounds` rounds on `ctr` with `key` (an independent reference
/// for the kernel's `rand`; it passes the Random123 known-answer tests).
pub fn philox4x32(mut ctr: [u32; 4], mut key: [u32; 2], rounds: usize) -> [u32; 4] {
    let mulhilo = |a: u32, b: u32| {
        let p = a as u64 * b as u64;
        ((p >> 32) as u32, p as u32)
    };
    for _ in 0..rounds {
        let (hi0, lo0) = mulhilo(PHILOX_ROUND_A, ctr[0]);
        let (hi1, lo1) = mulhilo(PHILOX_ROUND_B, ctr[2]);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
        key = [
            key[0].wrapping_add(PHILOX_KEY_A),
            key[1].wrapping_add(PHILOX_KEY_B),
        ];
    }
    ctr
}

/// `tl.rand(seed, offset)` on the host, for an i32 seed and offset.
pub fn rand_host(seed: i32, offset: i32) -> f32 {
    let seed = seed as i64 as u64;
    let key = [(seed & 0xffff_ffff) as u32, (seed >> 32) as u32];
    let r = philox4x32([offset as u32, 0, 0, 0], key, N_ROUNDS_DEFAULT)[0] as i32;
    let r = if r < 0 {
        r.wrapping_neg().wrapping_sub(1)
    } else {
        r
    };
    r as f32 * 4.6566127342e-10f32
}

/// The float64 seeded dropout of `x`.
pub fn reference_seeded(x: &[f64], p: f32, seed: i32) -> Vec<f64> {
    let scale = 1.0 / (1.0 - p as f64);
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            if rand_host(seed, i as i32) > p {
                v * scale
            } else {
                0.0
            }
        })
        .collect()
}

/// The harness's fingerprint of `tl.rand(seed, arange(n)) > p`: how many elements are kept
/// and the sum of their indices (it prints `FINGERPRINT 04-seeded-dropout seed=123
/// n=16777216 kept=.. idxsum=..` for p = 0.5), from the host stream the kernel matches bit for
/// bit.
pub fn fingerprint(seed: i32, n: usize, p: f32) -> (u64, u64) {
    (0..n).fold((0, 0), |(kept, sum), i| {
        if rand_host(seed, i as i32) > p {
            (kept + 1, sum + i as u64)
        } else {
            (kept, sum)
        }
    })
}

fn check(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let n = common::dim(shape, 0, 98431);
    let x = dev.randn::<f32>([n])?;
    let (p, seed) = (0.5, 123);
    let output = seeded_dropout(&x, p, seed)?;
    let want = reference_seeded(&x.to_f64_vec()?, p, seed);
    // 1 - p and the division each round once in f32.
    Ok(common::compare(
        OP,
        format!("n={n} p={p} seed={seed}"),
        DType::F32,
        &output.to_f64_vec()?,
        &want,
        (1e-45, 2f64.powi(-23)),
    ))
}

fn bench(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    let n = common::dim(shape, 0, 1 << 24);
    let x = dev.randn::<f32>([n])?;
    let output = dev.empty::<f32>([n])?;
    Ok(Bench {
        // compare and divide per element (Philox's integer rounds not counted)
        flops: 2.0 * n as f64,
        bytes: 8.0 * n as f64,
        input_copies: 1,
        launch: Box::new(move || seeded_dropout_into(&x, &output, 0.5, 123)),
    })
}

/// The registry entry: the harness's `04-seeded-dropout` at `n=16777216`, p 0.5, seed 123.
pub fn tutorials() -> Vec<Port> {
    vec![Port {
        name: "tutorial-04-seeded-dropout",
        about: "dropout with the mask drawn in the kernel (Philox 4x32-10, tl.rand's bits)",
        dims: &["n"],
        default_shape: &[98431],
        bench_shapes: &[BenchShape {
            label: "n=16777216",
            dims: &[1 << 24],
        }],
        dtypes: &[DType::F32],
        check,
        bench,
    }]
}
