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
//! | `tl.where(x_keep, a, b)` with an int32 `x_keep` | `select(x_keep.cast(DType::I1), a, b)`: tegula's `select` takes an i1 condition, and the cast is Triton's implicit one (`x != 0`) |
//! | `x / (1 - p)` with a float scalar `p` | the same |
//! | `tl.rand(seed, offsets)` | [`rand()`], a port of `triton.language.random` over tiles |
//! | `math.umulhi(a, b)` | [`umulhi`]: the u32 operands widened to u64, multiplied, shifted |
//! | `x.to(tl.uint32, bitcast=True)` | `x.bitcast::<u32>()` |
//! | `tl.static_range(n_rounds)` | a Rust `for` loop (unrolled at trace time) |
//!
//! # What differs
//!
//! tegula has no random-number builtins, so `tl.rand` and what it stands on (`randint`,
//! `randint4x`, `philox`, `philox_impl`, `uint_to_uniform_float`) are ported here, function
//! by function, from `triton/language/random.py` for 32-bit offsets. They compute the same
//! bits: the host implementation [`philox4x32`] checks the Random123 known-answer vectors,
//! and the tests compare the kernel's mask with it element by element.
#![allow(non_snake_case)]
// random.py's scale, 4.6566127342e-10, as written there.
#![allow(clippy::excessive_precision)]

use crate::common;
use crate::{Bench, BenchShape, CheckReport, Tutorial};
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
    let x = load(x_ptr + offsets, mask, 0);
    let x_keep = load(x_keep_ptr + offsets, mask, 0);
    // The line below is the crucial part, described in the paragraph above!
    let output = select(x_keep.cast(DType::I1), x / (1 - p), 0.0);
    // Write-back output
    store(output_ptr + offsets, output, mask);
}

// workaround: tl.rand / tl.randint (triton.language.random, Philox) are missing; the
// functions below port them over tiles, 32-bit offsets only.

/// Philox's constants for 32-bit words.
pub const PHILOX_KEY_A: u32 = 0x9E3779B9;
pub const PHILOX_KEY_B: u32 = 0xBB67AE85;
pub const PHILOX_ROUND_A: u32 = 0xD2511F53;
pub const PHILOX_ROUND_B: u32 = 0xCD9E8D57;
/// `N_ROUNDS_DEFAULT`.
pub const N_ROUNDS_DEFAULT: usize = 10;

/// `math.umulhi(a, b)`: the high 32 bits of the 64-bit product of a u32 constant and a u32
/// tile.
pub fn umulhi(a: u32, b: Tile) -> Tile {
    ((b.to::<u64>() * a as u64) >> 32).to::<u32>()
}

/// `philox_impl(c0, c1, c2, c3, k0, k1, n_rounds)`: `n_rounds` rounds of Philox on the
/// state `(c0, c1, c2, c3)` (u32 tiles) with the key `(k0, k1)`.
pub fn philox_impl(
    c0: Tile,
    c1: Tile,
    c2: Tile,
    c3: Tile,
    k0: Tile,
    k1: Tile,
    n_rounds: usize,
) -> (Tile, Tile, Tile, Tile) {
    let (mut c0, mut c1, mut c2, mut c3, mut k0, mut k1) = (c0, c1, c2, c3, k0, k1);
    for _ in 0..n_rounds {
        // update random state
        let A = PHILOX_ROUND_A;
        let B = PHILOX_ROUND_B;
        let (_c0, _c2) = (c0, c2);
        c0 = umulhi(B, _c2) ^ c1 ^ k0;
        c2 = umulhi(A, _c0) ^ c3 ^ k1;
        c1 = _c2 * B;
        c3 = _c0 * A;
        // raise key
        k0 += PHILOX_KEY_A;
        k1 += PHILOX_KEY_B;
    }
    (c0, c1, c2, c3)
}

/// `philox(seed, c0, c1, c2, c3, n_rounds)` for 32-bit counters: the seed (any integer
/// scalar) split into the key's low and high words.
pub fn philox(
    seed: Tile,
    c0: Tile,
    c1: Tile,
    c2: Tile,
    c3: Tile,
    n_rounds: usize,
) -> (Tile, Tile, Tile, Tile) {
    let seed = seed.to::<u64>();
    let seed_hi = ((seed >> 32u64) & 0xffffffffu64).to::<u32>();
    let seed_lo = (seed & 0xffffffffu64).to::<u32>();
    let c0 = c0.bitcast::<u32>();
    let c1 = c1.bitcast::<u32>();
    let c2 = c2.bitcast::<u32>();
    let c3 = c3.bitcast::<u32>();
    philox_impl(c0, c1, c2, c3, seed_lo, seed_hi, n_rounds)
}

/// `randint4x(seed, offset, n_rounds)`: four random u32 tiles for the counter `offset`.
#[allow(clippy::just_underscores_and_digits, clippy::erasing_op)] // the tutorial's `_0 = offset * 0`
pub fn randint4x(seed: Tile, offset: Tile, n_rounds: usize) -> (Tile, Tile, Tile, Tile) {
    let _0 = offset * 0;
    philox(seed, offset, _0, _0, _0, n_rounds)
}

/// `randint(seed, offset, n_rounds)`: one random u32 tile.
pub fn randint(seed: Tile, offset: Tile, n_rounds: usize) -> Tile {
    randint4x(seed, offset, n_rounds).0
}

/// `uint_to_uniform_float(x)`: a u32 tile as f32 uniform in `[0, 1)`.
pub fn uint_to_uniform_float(x: Tile) -> Tile {
    // maximum value such that `MAX_INT * scale < 1.0` (with float rounding)
    let x = x.bitcast::<i32>();
    let scale = 4.6566127342e-10;
    let x = select(x.lt(0), -x - 1, x);
    x * scale
}

/// `tl.rand(seed, offset)`: a uniform f32 in `[0, 1)` per element of `offset`.
pub fn rand(seed: Tile, offset: Tile) -> Tile {
    let source = randint(seed, offset, N_ROUNDS_DEFAULT);
    uint_to_uniform_float(source)
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
    let x = load(x_ptr + offsets, mask, 0);
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

/// Philox 4x32 on the host: `rounds` rounds on `ctr` with `key` (the reference of the tile
/// port; it passes the Random123 known-answer tests).
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
        launch: Box::new(move || seeded_dropout_into(&x, &output, 0.5, 123)),
    })
}

/// The registry entry: the harness's `04-seeded-dropout` at `n=16777216`, p 0.5, seed 123.
pub fn tutorials() -> Vec<Tutorial> {
    vec![Tutorial {
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
