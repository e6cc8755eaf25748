//! Tutorial 05, layer normalization: a fused forward, and a backward whose weight and bias
//! gradients are summed in two stages through lock-protected partial buffers.
//!
//! # The Triton code
//!
//! `_layer_norm_fwd_fused` gives each program one row of `X`. It moves its row pointers
//! (`X += row * stride`), then makes three passes over the row in blocks of `BLOCK_SIZE`:
//! the mean (a block-wide vector accumulator `_mean`, reduced after the loop), the variance
//! (centred values, zero in the padding lanes), and the normalization `(x - mean) * rstd * w
//! + b`. It stores the row's mean and `1 / std` for the backward.
//!
//! `_layer_norm_bwd_dx_fused` (one program a row, the whole row in one block) computes `dx`
//! from `xhat` and `w * dy` and two row sums, then adds the row's contribution to `dw`
//! (`dy * xhat`) and `db` (`dy`) into one of `GROUP_SIZE_M` partial rows: rows `r` with the same
//! `r % GROUP_SIZE_M` share a partial row, guarded by a spin lock (`tl.atomic_cas` on
//! `Lock[lock_id]`) and a counter (`Count[lock_id]`, after the locks) that says whether the
//! partial row holds anything yet. `_layer_norm_bwd_dwdb` then sums the `GROUP_SIZE_M` partial
//! rows per column block into the final `dw` and `db`. The host `LayerNorm.forward` picks the
//! block (the whole row, at most 64 KB) and the warps; `backward` picks `GROUP_SIZE_M` from N
//! and allocates the zeroed locks and partial buffers.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `Y += row * stride` on a pointer argument | `mut Y: Ptr<T>` and `Y += row * stride` |
//! | `_mean = tl.zeros([BLOCK_SIZE], ..)`, `_mean += a` in `for off in range(0, N, BLOCK_SIZE)` | a `let mut _mean` tile carried by the loop |
//! | `tl.sum(_mean, axis=0) / N` | `sum(_mean, 0) / N` (f32 over an i32 scalar promotes to f32) |
//! | `tl.store(Mean + row, mean)` (no mask) | `store_unmasked(Mean + row, mean)` |
//! | `while tl.atomic_cas(Lock, 0, 1) == 1: pass` | `while atomic_cas(Lock, 0, 1).eq(1) {}`: an IR `while` on a run-time condition |
//! | `if count == 0: .. else: partial_dw += ..` | `if count.eq(0) { .. } else { .. }`: an IR `if` whose results are `partial_dw`, `partial_db` |
//! | `tl.atomic_xchg(Count, 1)` | `atomic_xchg(Count, 1, None)` |
//! | `tl.debug_barrier()` | `debug_barrier()` |
//! | `tl.load(W + cols, mask=mask)` (no `other`) | `load_masked(W + cols, mask)` |
//! | `torch.zeros(2 * GROUP_SIZE_M, dtype=torch.int32)` | `dev.zeros::<i32>([2 * GROUP_SIZE_M])` |
//!
//! # What differs
//!
//! Nothing in the kernels: `tl.debug_barrier()` before the lock is released is
//! [`debug_barrier`] (`bar.sync 0`: every thread of the
//! program has stored its part of the partial sums before one thread's `atomic_xchg` releases
//! the lock, whose acq_rel ordering publishes them; docs/semantics.md, "Ordering a program's
//! stores before its atomics"). The interpreter runs a program as one thread in program
//! order, where the barrier is a no-op.
//!
//! The host side is `LayerNorm.forward` and `.backward` without autograd: [`layer_norm`]
//! returns the output and a [`LayerNormCtx`] (what `ctx.save_for_backward` keeps), and
//! [`layer_norm_backward`] takes it with `dy`. Each is split into an allocation and a launch
//! ([`layer_norm_fwd_into`], [`layer_norm_bwd_into`]) so that a benchmark can time the launches
//! on prepared outputs; the backward's zeroed locks and partial buffers are allocated by every
//! call, as in the tutorial. x must be contiguous (the tutorial's `reshape(-1, N)` of a
//! contiguous tensor); weight and bias are `[N]` of x's dtype.
#![allow(non_snake_case)]

use crate::common::{self, next_power_of_2};
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::{LaunchConfig, Result};

#[tegula::kernel]
pub fn _layer_norm_fwd_fused<T: Element>(
    mut X: Ptr<T>,  // pointer to the input
    mut Y: Ptr<T>,  // pointer to the output
    W: Ptr<T>,      // pointer to the weights
    B: Ptr<T>,      // pointer to the biases
    Mean: Ptr<f32>, // pointer to the mean
    Rstd: Ptr<f32>, // pointer to the 1/std
    stride: i32,    // how much to increase the pointer when moving by 1 row
    N: i32,         // number of columns in X
    eps: f32,       // epsilon to avoid division by zero
    #[constexpr] BLOCK_SIZE: usize,
) {
    // Map the program id to the row of X and Y it should compute.
    let row = program_id(0);
    Y += row * stride;
    X += row * stride;
    // Compute mean (the tutorial's `mean = 0` before the loop is a dead store)
    let mut _mean = zeros::<f32>([BLOCK_SIZE]);
    for off in range(0, N, BLOCK_SIZE) {
        let cols = off + arange(0, BLOCK_SIZE as i64);
        let a = load(X + cols, cols.lt(N), 0.0).to::<f32>();
        _mean += a;
    }
    let mean = sum(_mean, 0) / N;
    // Compute variance
    let mut _var = zeros::<f32>([BLOCK_SIZE]);
    for off in range(0, N, BLOCK_SIZE) {
        let cols = off + arange(0, BLOCK_SIZE as i64);
        let x = load(X + cols, cols.lt(N), 0.0).to::<f32>();
        let x = select(cols.lt(N), x - mean, 0.0);
        _var += x * x;
    }
    let var = sum(_var, 0) / N;
    let rstd = 1 / sqrt(var + eps);
    // Write mean / rstd
    store_unmasked(Mean + row, mean);
    store_unmasked(Rstd + row, rstd);
    // Normalize and apply linear transformation
    for off in range(0, N, BLOCK_SIZE) {
        let cols = off + arange(0, BLOCK_SIZE as i64);
        let mask = cols.lt(N);
        let w = load_masked(W + cols, mask);
        let b = load_masked(B + cols, mask);
        let x = load(X + cols, mask, 0.0).to::<f32>();
        let x_hat = (x - mean) * rstd;
        let y = x_hat * w + b;
        // Write output
        store(Y + cols, y, mask);
    }
}

#[tegula::kernel]
pub fn _layer_norm_bwd_dx_fused<T: Element>(
    mut DX: Ptr<T>,     // pointer to the input gradient
    mut DY: Ptr<T>,     // pointer to the output gradient
    mut DW: Ptr<T>,     // pointer to the partial sum of weights gradient
    mut DB: Ptr<T>,     // pointer to the partial sum of biases gradient
    mut X: Ptr<T>,      // pointer to the input
    W: Ptr<T>,          // pointer to the weights
    Mean: Ptr<f32>,     // pointer to the mean
    Rstd: Ptr<f32>,     // pointer to the 1/std
    mut Lock: Ptr<i32>, // pointer to the lock
    stride: i32,        // how much to increase the pointer when moving by 1 row
    N: i32,             // number of columns in X
    #[constexpr] GROUP_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
) {
    // Map the program id to the elements of X, DX, and DY it should compute.
    let row = program_id(0);
    let cols = arange(0, BLOCK_SIZE_N as i64);
    let mask = cols.lt(N);
    X += row * stride;
    DY += row * stride;
    DX += row * stride;
    // Offset locks and weights/biases gradient pointer for parallel reduction
    let lock_id = row % GROUP_SIZE_M;
    Lock += lock_id;
    let Count = Lock + GROUP_SIZE_M;
    DW = DW + lock_id * N + cols;
    DB = DB + lock_id * N + cols;
    // Load data to SRAM
    let x = load(X + cols, mask, 0).to::<f32>();
    let dy = load(DY + cols, mask, 0).to::<f32>();
    let w = load_masked(W + cols, mask).to::<f32>();
    let mean = load_unmasked(Mean + row);
    let rstd = load_unmasked(Rstd + row);
    // Compute dx
    let xhat = (x - mean) * rstd;
    let wdy = w * dy;
    let xhat = select(mask, xhat, 0.0);
    let wdy = select(mask, wdy, 0.0);
    let c1 = sum(xhat * wdy, 0) / N;
    let c2 = sum(wdy, 0) / N;
    let dx = (wdy - (xhat * c1 + c2)) * rstd;
    // Write dx
    store(DX + cols, dx, mask);
    // Accumulate partial sums for dw/db (in w.dtype, which is float32 after the cast above)
    let mut partial_dw = (dy * xhat).to::<f32>();
    let mut partial_db = dy.to::<f32>();
    while atomic_cas(Lock, 0, 1).eq(1) {}
    let count = load_unmasked(Count);
    // First store doesn't accumulate
    if count.eq(0) {
        atomic_xchg(Count, 1, None);
    } else {
        partial_dw += load_masked(DW, mask);
        partial_db += load_masked(DB, mask);
    }
    store(DW, partial_dw, mask);
    store(DB, partial_db, mask);

    // need a barrier to ensure all threads finished before
    // releasing the lock
    debug_barrier();

    // Release the lock
    atomic_xchg(Lock, 0, None);
}

#[tegula::kernel]
pub fn _layer_norm_bwd_dwdb<T: Element>(
    DW: Ptr<T>,       // pointer to the partial sum of weights gradient
    DB: Ptr<T>,       // pointer to the partial sum of biases gradient
    FINAL_DW: Ptr<T>, // pointer to the weights gradient
    FINAL_DB: Ptr<T>, // pointer to the biases gradient
    M: i32,           // GROUP_SIZE_M
    N: i32,           // number of columns
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
) {
    // Map the program id to the elements of DW and DB it should compute.
    let pid = program_id(0);
    let cols = pid * BLOCK_SIZE_N + arange(0, BLOCK_SIZE_N as i64);
    let mut dw = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
    let mut db = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
    // Iterate through the rows of DW and DB to sum the partial sums.
    for i in range(0, M, BLOCK_SIZE_M) {
        let rows = i + arange(0, BLOCK_SIZE_M as i64);
        let mask = rows.col().lt(M) & cols.row().lt(N);
        let offs = rows.col() * N + cols.row();
        dw += load(DW + offs, mask, 0.0);
        db += load(DB + offs, mask, 0.0);
    }
    // Write the final sum to the output.
    let sum_dw = sum(dw, 0);
    let sum_db = sum(db, 0);
    store(FINAL_DW + cols, sum_dw, cols.lt(N));
    store(FINAL_DB + cols, sum_db, cols.lt(N));
}

const OP: &str = "tutorial-05-layer-norm";

/// What `LayerNorm.forward` keeps for the backward (`ctx.save_for_backward(x, weight, bias,
/// mean, rstd)`, `ctx.BLOCK_SIZE`, `ctx.num_warps`, `ctx.eps`).
#[derive(Clone, Debug)]
pub struct LayerNormCtx<T: Element> {
    pub x: Tensor<T>,
    pub weight: Tensor<T>,
    pub bias: Tensor<T>,
    pub mean: Tensor<f32>,
    pub rstd: Tensor<f32>,
    pub block_size: usize,
    pub num_warps: u32,
    pub eps: f32,
}

/// `x` as `[M, N]` (`x.reshape(-1, x.shape[-1])`) with `weight` and `bias` of shape `[N]`.
fn rows_of<T: Element>(x: &Tensor<T>, weight: &Tensor<T>, bias: &Tensor<T>) -> Result<Tensor<T>> {
    common::expect_contiguous(OP, "x", x)?;
    let n = x.shape().last().copied().unwrap_or(1);
    common::expect_shape(OP, "weight", weight, &[n])?;
    common::expect_shape(OP, "bias", bias, &[n])?;
    common::expect_contiguous(OP, "weight", weight)?;
    common::expect_contiguous(OP, "bias", bias)?;
    common::expect_same_device(OP, x, weight)?;
    common::expect_same_device(OP, x, bias)?;
    let m = x.numel() / n.max(1);
    let x_arg = x.reshape([m, n])?;
    common::expect_i32_extent(OP, "x", &x_arg)?;
    Ok(x_arg)
}

/// The forward's block and warps: `BLOCK_SIZE = min(65536 // element_size, next_pow2(N))`,
/// `num_warps = min(max(BLOCK_SIZE // 256, 1), 8)`; an error past 64 KB a row.
pub fn forward_meta<T: Element>(n: usize) -> Result<(usize, u32)> {
    // Less than 64KB per feature: enqueue fused kernel
    let MAX_FUSED_SIZE = 65536 / T::DTYPE.size_bytes();
    let BLOCK_SIZE = MAX_FUSED_SIZE.min(next_power_of_2(n));
    if n > BLOCK_SIZE {
        return Err(common::invalid(
            OP,
            "This layer norm doesn't support feature dim >= 64KB.",
        ));
    }
    // heuristics for number of warps
    let num_warps = (BLOCK_SIZE / 256).clamp(1, 8) as u32;
    Ok((BLOCK_SIZE, num_warps))
}

/// The launch of `LayerNorm.forward` into prepared `y` (x's shape), `mean` and `rstd` (`[M]`).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_fwd_into<T: Element>(
    x: &Tensor<T>,
    weight: &Tensor<T>,
    bias: &Tensor<T>,
    eps: f32,
    y: &Tensor<T>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
) -> Result<LayerNormCtx<T>> {
    // reshape input data into 2D tensor
    let x_arg = rows_of(x, weight, bias)?;
    let (M, N) = (x_arg.shape()[0], x_arg.shape()[1]);
    common::expect_shape(OP, "y", y, x.shape())?;
    common::expect_contiguous(OP, "y", y)?;
    common::expect_shape(OP, "mean", mean, &[M])?;
    common::expect_shape(OP, "rstd", rstd, &[M])?;
    let (BLOCK_SIZE, num_warps) = forward_meta::<T>(N)?;
    let ctx = LayerNormCtx {
        x: x.clone(),
        weight: weight.clone(),
        bias: bias.clone(),
        mean: mean.clone(),
        rstd: rstd.clone(),
        block_size: BLOCK_SIZE,
        num_warps,
        eps,
    };
    if M == 0 || N == 0 {
        return Ok(ctx);
    }
    // enqueue kernel
    _layer_norm_fwd_fused::launch_with::<T>(
        x.device(),
        M,
        LaunchConfig {
            num_warps,
            ..Default::default()
        },
        &x_arg,
        y,
        weight,
        bias,
        mean,
        rstd,
        x_arg.strides()[0] as i32,
        N as i32,
        eps,
        BLOCK_SIZE,
    )?;
    Ok(ctx)
}

/// `LayerNorm.forward(x, normalized_shape, weight, bias, eps)`: the output and the saved
/// context.
pub fn layer_norm<T: Element>(
    x: &Tensor<T>,
    weight: &Tensor<T>,
    bias: &Tensor<T>,
    eps: f32,
) -> Result<(Tensor<T>, LayerNormCtx<T>)> {
    let x_arg = rows_of(x, weight, bias)?;
    let dev = x.device();
    // allocate output
    let y = dev.empty::<T>(x.shape())?;
    let mean = dev.empty::<f32>([x_arg.shape()[0]])?;
    let rstd = dev.empty::<f32>([x_arg.shape()[0]])?;
    let ctx = layer_norm_fwd_into(x, weight, bias, eps, &y, &mean, &rstd)?;
    Ok((y, ctx))
}

/// The backward's `GROUP_SIZE_M`: how many partial rows the weight and bias gradients are
/// summed into.
pub fn group_size_m(n: usize) -> usize {
    // heuristics for amount of parallel reduction stream for DW/DB
    let mut GROUP_SIZE_M = 64;
    if n <= 8192 {
        GROUP_SIZE_M = 96;
    }
    if n <= 4096 {
        GROUP_SIZE_M = 128;
    }
    if n <= 1024 {
        GROUP_SIZE_M = 256;
    }
    GROUP_SIZE_M
}

/// The launches of `LayerNorm.backward` into prepared `dx` (dy's shape), `dw` and `db` (`[N]`):
/// allocates the zeroed locks and partial sums, runs the dx kernel and the column sums.
pub fn layer_norm_bwd_into<T: Element>(
    ctx: &LayerNormCtx<T>,
    dy: &Tensor<T>,
    dx: &Tensor<T>,
    dw: &Tensor<T>,
    db: &Tensor<T>,
) -> Result<()> {
    let (x, w) = (&ctx.x, &ctx.weight);
    let x_arg = rows_of(x, w, &ctx.bias)?;
    let (M, N) = (x_arg.shape()[0], x_arg.shape()[1]);
    common::expect_shape(OP, "dy", dy, x.shape())?;
    common::expect_contiguous(OP, "dy", dy)?;
    common::expect_shape(OP, "dx", dx, x.shape())?;
    common::expect_contiguous(OP, "dx", dx)?;
    common::expect_shape(OP, "dw", dw, &[N])?;
    common::expect_shape(OP, "db", db, &[N])?;
    let dev = x.device();
    let GROUP_SIZE_M = group_size_m(N);
    // allocate output
    let locks = dev.zeros::<i32>([2 * GROUP_SIZE_M])?;
    let _dw = dev.zeros::<T>([GROUP_SIZE_M, N])?;
    let _db = dev.zeros::<T>([GROUP_SIZE_M, N])?;
    if M == 0 || N == 0 {
        return Ok(());
    }
    // enqueue kernel using forward pass heuristics
    // also compute partial sums for DW and DB
    _layer_norm_bwd_dx_fused::launch_with::<T>(
        dev,
        M,
        LaunchConfig {
            num_warps: ctx.num_warps,
            ..Default::default()
        },
        dx,
        dy,
        &_dw,
        &_db,
        x,
        w,
        &ctx.mean,
        &ctx.rstd,
        &locks,
        x_arg.strides()[0] as i32,
        N as i32,
        GROUP_SIZE_M,
        ctx.block_size,
    )?;
    let BLOCK_SIZE_N = 128;
    // accumulate partial sums in separate kernel
    _layer_norm_bwd_dwdb::launch::<T>(
        dev,
        common::cdiv(N, BLOCK_SIZE_N),
        &_dw,
        &_db,
        dw,
        db,
        GROUP_SIZE_M.min(M) as i32,
        N as i32,
        32,
        BLOCK_SIZE_N,
    )
}

/// `LayerNorm.backward(ctx, dy)`: `(dx, dw, db)`.
pub fn layer_norm_backward<T: Element>(
    ctx: &LayerNormCtx<T>,
    dy: &Tensor<T>,
) -> Result<(Tensor<T>, Tensor<T>, Tensor<T>)> {
    let dev = ctx.x.device();
    let n = ctx.weight.numel();
    let dx = dev.empty::<T>(dy.shape())?;
    let dw = dev.empty::<T>([n])?;
    let db = dev.empty::<T>([n])?;
    layer_norm_bwd_into(ctx, dy, &dx, &dw, &db)?;
    Ok((dx, dw, db))
}

/// The float64 forward of rows of `n`: `(y, mean, rstd)`.
pub fn reference_forward(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    n: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut means, mut rstds) = (Vec::new(), Vec::new(), Vec::new());
    for row in x.chunks(n) {
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        y.extend(
            row.iter()
                .zip(w)
                .zip(b)
                .map(|((v, w), b)| (v - mean) * rstd * w + b),
        );
        means.push(mean);
        rstds.push(rstd);
    }
    (y, means, rstds)
}

/// The float64 gradients `(dx, dw, db)` of rows of `n`, and the magnitudes of their terms
/// (`rstd (|w dy| + |xhat c1| + |c2|)`, `sum |dy xhat|`, `sum |dy|`).
#[allow(clippy::type_complexity)]
pub fn reference_backward(
    x: &[f64],
    w: &[f64],
    dy: &[f64],
    n: usize,
    eps: f64,
) -> ([Vec<f64>; 3], [Vec<f64>; 3]) {
    let b = vec![0.0; n];
    let (_, means, rstds) = reference_forward(x, w, &b, n, eps);
    let (mut dx, mut dx_mag) = (Vec::new(), Vec::new());
    let (mut dw, mut db) = (vec![0.0; n], vec![0.0; n]);
    let (mut dw_mag, mut db_mag) = (vec![0.0; n], vec![0.0; n]);
    for (r, (row, dyr)) in x.chunks(n).zip(dy.chunks(n)).enumerate() {
        let (mean, rstd) = (means[r], rstds[r]);
        let xhat: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
        let wdy: Vec<f64> = w.iter().zip(dyr).map(|(w, d)| w * d).collect();
        let c1 = xhat.iter().zip(&wdy).map(|(a, b)| a * b).sum::<f64>() / n as f64;
        let c2 = wdy.iter().sum::<f64>() / n as f64;
        for j in 0..n {
            dx.push((wdy[j] - (xhat[j] * c1 + c2)) * rstd);
            dx_mag.push(rstd * (wdy[j].abs() + (xhat[j] * c1).abs() + c2.abs()));
            dw[j] += dyr[j] * xhat[j];
            db[j] += dyr[j];
            dw_mag[j] += (dyr[j] * xhat[j]).abs();
            db_mag[j] += dyr[j].abs();
        }
    }
    ([dx, dw, db], [dx_mag, dw_mag, db_mag])
}

/// `torch.randn(shape) * scale + shift` on `dev`.
fn randn_affine<T: Element>(
    dev: &Device,
    shape: &[usize],
    shift: f64,
    scale: f64,
) -> Result<Tensor<T>> {
    let v: Vec<T> = dev
        .randn::<f32>(shape.to_vec())?
        .to_vec()?
        .into_iter()
        .map(|z| T::from_f64(shift + scale * z as f64))
        .collect();
    dev.from_slice(&v, shape.to_vec())
}

/// The harness's inputs: `weight`, `bias` uniform in [0, 1), `x = -2.3 + 0.5 randn`,
/// `dy = 0.1 randn`.
#[allow(clippy::type_complexity)]
fn inputs<T: Element>(
    dev: &Device,
    m: usize,
    n: usize,
) -> Result<(Tensor<T>, Tensor<T>, Tensor<T>, Tensor<T>)> {
    Ok((
        randn_affine::<T>(dev, &[m, n], -2.3, 0.5)?,
        dev.rand_uniform::<T>([n], 0.0, 1.0)?,
        dev.rand_uniform::<T>([n], 0.0, 1.0)?,
        randn_affine::<T>(dev, &[m, n], 0.0, 0.1)?,
    ))
}

/// A unit roundoff of `dtype`.
fn unit(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

const EPS: f32 = 1e-5;

/// Runs the forward and the backward on fresh inputs of `[m, n]` and compares `y`, `mean`,
/// `rstd` (forward) or `dx`, `dw`, `db` (backward) with float64.
pub fn check_typed<T: Element>(
    dev: &Device,
    (m, n): (usize, usize),
    backward: bool,
) -> Result<CheckReport> {
    let (x, w, b, dy) = inputs::<T>(dev, m, n)?;
    let (y, ctx) = layer_norm(&x, &w, &b, EPS)?;
    let (xv, wv, bv) = (x.to_f64_vec()?, w.to_f64_vec()?, b.to_f64_vec()?);
    let shape = format!("M={m} N={n}");
    let u = unit(T::DTYPE);
    // The f32 statistics err by about sqrt(n) roundings of their terms.
    let f32_stats = (n as f64).sqrt() * 2f64.powi(-22) + 2f64.powi(-20);
    if !backward {
        let (want_y, want_mean, want_rstd) = reference_forward(&xv, &wv, &bv, n, EPS as f64);
        let y_mag: Vec<f64> = xv
            .chunks(n)
            .zip(want_mean.iter().zip(&want_rstd))
            .flat_map(|(row, (mu, r))| {
                row.iter()
                    .zip(wv.iter().zip(&bv))
                    .map(
                        |(v, (w, b))| // x - mean cancels: the statistics' errors scale with |x|
                        (v.abs() + mu.abs()) * r * w.abs() + b.abs(),
                    )
                    .collect::<Vec<_>>()
            })
            .collect();
        return Ok(common::worst(vec![
            common::compare_scaled(
                OP,
                shape.clone() + " y",
                T::DTYPE,
                &y.to_f64_vec()?,
                &want_y,
                &y_mag,
                (1e-6, 2.0 * u + f32_stats),
            ),
            common::compare(
                OP,
                shape.clone() + " mean",
                DType::F32,
                &ctx.mean.to_f64_vec()?,
                &want_mean,
                (1e-6, f32_stats),
            ),
            common::compare(
                OP,
                shape + " rstd",
                DType::F32,
                &ctx.rstd.to_f64_vec()?,
                &want_rstd,
                (1e-6, f32_stats),
            ),
        ]));
    }
    let (dx, dw, db) = layer_norm_backward(&ctx, &dy)?;
    let ([want_dx, want_dw, want_db], [dx_mag, dw_mag, db_mag]) =
        reference_backward(&xv, &wv, &dy.to_f64_vec()?, n, EPS as f64);
    // The partial sums are stored in T after each row of a group is added: ceil(M / G) roundings,
    // then the column sums (f32) and the final rounding to T.
    let roundings = m.div_ceil(group_size_m(n)) as f64 + 2.0;
    Ok(common::worst(vec![
        common::compare_scaled(
            OP,
            shape.clone() + " dx",
            T::DTYPE,
            &dx.to_f64_vec()?,
            &want_dx,
            &dx_mag,
            (1e-6, 2.0 * u + f32_stats),
        ),
        common::compare_scaled(
            OP,
            shape.clone() + " dw",
            T::DTYPE,
            &dw.to_f64_vec()?,
            &want_dw,
            &dw_mag,
            (1e-6, roundings * u + f32_stats),
        ),
        common::compare_scaled(
            OP,
            shape + " db",
            T::DTYPE,
            &db.to_f64_vec()?,
            &want_db,
            &db_mag,
            (1e-6, roundings * u + f32_stats),
        ),
    ]))
}

fn mn(shape: &[usize]) -> (usize, usize) {
    (common::dim(shape, 0, 151), common::dim(shape, 1, 1031))
}

fn check_fwd(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::F32 => check_typed::<f32>(dev, mn(shape), false),
        DType::BF16 => check_typed::<bf16>(dev, mn(shape), false),
        _ => check_typed::<f16>(dev, mn(shape), false),
    }
}

fn check_bwd(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::F32 => check_typed::<f32>(dev, mn(shape), true),
        DType::BF16 => check_typed::<bf16>(dev, mn(shape), true),
        _ => check_typed::<f16>(dev, mn(shape), true),
    }
}

fn bench_typed<T: Element>(dev: &Device, shape: &[usize], backward: bool) -> Result<Bench> {
    let (m, n) = mn(shape);
    let s = T::DTYPE.size_bytes() as f64;
    let (x, w, b, dy) = inputs::<T>(dev, m, n)?;
    let (mn, nf, mf) = ((m * n) as f64, n as f64, m as f64);
    let y = dev.empty::<T>([m, n])?;
    let mean = dev.empty::<f32>([m])?;
    let rstd = dev.empty::<f32>([m])?;
    if !backward {
        return Ok(Bench {
            // mean, centre, square, sum, scale, weight, bias
            flops: 8.0 * mn,
            // x read, y written, w and b read, mean and rstd written
            bytes: 2.0 * mn * s + 2.0 * nf * s + 8.0 * mf,
            input_copies: 1,
            launch: Box::new(move || {
                layer_norm_fwd_into(&x, &w, &b, EPS, &y, &mean, &rstd).map(|_| ())
            }),
        });
    }
    let ctx = layer_norm_fwd_into(&x, &w, &b, EPS, &y, &mean, &rstd)?;
    let dx = dev.empty::<T>([m, n])?;
    let dw = dev.empty::<T>([n])?;
    let db = dev.empty::<T>([n])?;
    Ok(Bench {
        flops: 10.0 * mn,
        // dy and x read, dx written; w, mean and rstd read; dw and db written
        bytes: 3.0 * mn * s + 3.0 * nf * s + 8.0 * mf,
        input_copies: 1,
        launch: Box::new(move || layer_norm_bwd_into(&ctx, &dy, &dx, &dw, &db)),
    })
}

fn bench_fwd(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    match dtype {
        DType::F32 => bench_typed::<f32>(dev, shape, false),
        DType::BF16 => bench_typed::<bf16>(dev, shape, false),
        _ => bench_typed::<f16>(dev, shape, false),
    }
}

fn bench_bwd(dev: &Device, shape: &[usize], dtype: DType) -> Result<Bench> {
    match dtype {
        DType::F32 => bench_typed::<f32>(dev, shape, true),
        DType::BF16 => bench_typed::<bf16>(dev, shape, true),
        _ => bench_typed::<f16>(dev, shape, true),
    }
}

const SHAPES: &[BenchShape] = &[BenchShape {
    label: "4096x8192",
    dims: &[4096, 8192],
}];

/// The registry entries: the harness's `05-layer-norm-fwd` and `05-layer-norm-bwd` at
/// 4096 x 8192, fp16.
pub fn tutorials() -> Vec<Port> {
    vec![
        Port {
            name: "tutorial-05-layer-norm-fwd",
            about: "layer norm forward: three passes over a row (mean, variance, normalize)",
            dims: &["M", "N"],
            default_shape: &[151, 1031],
            bench_shapes: SHAPES,
            dtypes: &[DType::F16, DType::BF16, DType::F32],
            check: check_fwd,
            bench: bench_fwd,
        },
        Port {
            name: "tutorial-05-layer-norm-bwd",
            about: "layer norm backward: dx, and dw/db summed through locked partial rows",
            dims: &["M", "N"],
            default_shape: &[151, 1031],
            bench_shapes: SHAPES,
            dtypes: &[DType::F16, DType::BF16, DType::F32],
            check: check_bwd,
            bench: bench_bwd,
        },
    ]
}
