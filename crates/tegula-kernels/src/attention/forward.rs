//! The batched FlashAttention forward (Triton tutorial 06's `_attn_fwd`): grid
//! `(cdiv(Nq, BLOCK_M), B * H)` (causal: the heaviest query blocks first), Q block resident, K/V
//! streamed, exp2 with the scale folded in, an unmasked loop over the key blocks every row sees
//! and a masked loop over the rest (left out of the kernel when no key block needs a mask: not
//! causal, and Nk a multiple of BLOCK_N).

use super::contract::{
    and_mask, check_output, check_qkv, dot_precision, expect_block_sizes, feature_mask,
    heavy_blocks_first, load_key_block, load_or_zero, padded_head_dim, size_i32, softmax_scale,
    strides_i32, visible_keys, visible_scores, Dims,
};
use super::{reference, AttentionOptions};
use crate::check;
use crate::tuned;
use crate::CheckReport;
use tegula::autotune::{median_ms, Tuning};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

const OP: &str = "attention";

/// Scores are scaled by `sm_scale * log2(e)` so the softmax runs on exp2.
pub(super) const LOG2E: f32 = std::f32::consts::LOG2_E;

/// One step of the online softmax in base 2: folds a block of raw scores `qk` (Q K^T, -inf
/// where masked) and its values `v` into the state `(m_i, l_i, acc)`, where `m_i` is the
/// running row maximum of the scaled scores `qk * qk_scale`.
///
/// `qk_scale` (`|sm_scale| * log2 e`) must be positive: the maximum of the scaled scores is
/// then the scaled maximum (one multiply per row), and each exponent is one FMA,
/// `qk * qk_scale - m`, instead of a multiply and a subtraction per score.
/// P is cast to the input dtype before the PV dot, as FlashAttention does.
pub(super) fn online_softmax_step<T: Element>(
    qk: Tile,
    qk_scale: Tile,
    v: Tile,
    m_i: Tile,
    l_i: Tile,
    acc: Tile,
) -> (Tile, Tile, Tile) {
    let m_ij = maximum(m_i, max(qk, 1) * qk_scale);
    // A row that has seen no visible key keeps m = -inf; subtracting 0 instead of -inf keeps
    // exp2(-inf - -inf) from making NaN (its p and alpha are then exactly 0).
    let m_sub = select(m_ij.eq(f32::NEG_INFINITY), 0.0, m_ij);
    let p = exp2(fma(qk, qk_scale, -m_sub.col()));
    let alpha = exp2(m_i - m_sub);
    let l_ij = sum(p, 1);
    let acc = acc * alpha.col();
    let acc = dot_with(p.to::<T>(), v, Some(acc), dot_precision::<T>());
    (m_ij, l_i * alpha + l_ij, acc)
}

/// One program per (block of `block_m` query rows, batch * head). Query head `h` reads KV head
/// `h / group_size`. Writes the output and the natural-log logsumexp of each row.
///
/// `qk_scale` is `|sm_scale| * log2 e` and positive (see [`kernel_scale`]); `negate_scores` carries
/// the sign of a negative `sm_scale` (Q is negated once, which is exact). `ragged_keys` says
/// that `n_k` is not a multiple of `block_n` (see [`has_ragged_keys`]); without it and without
/// `causal` every key block is whole and visible, and the masked loop is not traced at all
/// (half the kernel's code, which the driver's JIT would compile for a loop of no steps).
/// `ragged_queries` says that `n_q` is not a multiple of `block_m` (see
/// [`has_ragged_queries`]); without it every row of every query block exists, and Q's load and
/// the stores of the output and the logsumexp take no row mask (16 row predicates a thread
/// at 128 rows over 4 warps, held from Q's load to the output's store across the key loop).
#[tegula::kernel]
pub fn attn_fwd<T: Element>(
    q_ptr: Ptr<T>,
    k_ptr: Ptr<T>,
    v_ptr: Ptr<T>,
    o_ptr: Ptr<T>,
    lse_ptr: Ptr<f32>,
    stride_qz: i32,
    stride_qh: i32,
    stride_qm: i32,
    stride_kz: i32,
    stride_kh: i32,
    stride_kn: i32,
    stride_vz: i32,
    stride_vh: i32,
    stride_vn: i32,
    stride_oz: i32,
    stride_oh: i32,
    stride_om: i32,
    num_heads: i32,
    group_size: i32,
    n_q: i32,
    n_k: i32,
    qk_scale: f32,
    #[constexpr] negate_scores: bool,
    #[constexpr] causal: bool,
    #[constexpr] ragged_keys: bool,
    #[constexpr] ragged_queries: bool,
    #[constexpr] head_dim: usize,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
) {
    let block_d = padded_head_dim(head_dim);
    // Causal: query block i sees i + 1 key blocks, so the last blocks do the most work; they
    // start first, and light ones fill the tail (see `heavy_blocks_first`).
    let (query_block, off_hz) = if causal {
        let (heaviness, head) = heavy_blocks_first();
        (num_programs(0) - 1 - heaviness, head)
    } else {
        (program_id(0), program_id(1))
    };
    let start_m = query_block * block_m;
    let off_z = off_hz / num_heads;
    let off_h = off_hz % num_heads;
    let off_hkv = off_h / group_size;
    let q_base = q_ptr + off_z * stride_qz + off_h * stride_qh;
    // This head's K and V, each as (base, row stride).
    let keys = (k_ptr + off_z * stride_kz + off_hkv * stride_kh, stride_kn);
    let values = (v_ptr + off_z * stride_vz + off_hkv * stride_vh, stride_vn);
    let o_base = o_ptr + off_z * stride_oz + off_h * stride_oh;

    let offs_m = start_m + arange(0, block_m as i64);
    let offs_n = arange(0, block_n as i64);
    let offs_d = arange(0, block_d as i64);
    let d_mask = feature_mask(offs_d, head_dim, block_d);
    let q_mask = if ragged_queries {
        Some(and_mask(offs_m.col().lt(n_q), d_mask))
    } else {
        d_mask
    };
    let mut q = load_or_zero(q_base + offs_m.col() * stride_qm + offs_d.row(), q_mask);
    if negate_scores {
        q = -q;
    }

    let mut m_i = full::<f32>([block_m], f32::NEG_INFINITY);
    let mut l_i = zeros::<f32>([block_m]);
    let mut acc = zeros::<f32>([block_m, block_d]);

    // Keys [0, full) are inside the keys and visible to every row of this block: no mask.
    let (full, hi) = visible_keys(start_m, block_m, n_q, n_k, causal);
    let unmasked_end = full / block_n * block_n;
    for start_n in range(0, unmasked_end, block_n) {
        let offs_kv = start_n + offs_n;
        let (k, v) = load_key_block(keys, values, offs_kv, offs_d, d_mask, None);
        let qk = dot_with(q, k.trans(), None, dot_precision::<T>());
        (m_i, l_i, acc) = online_softmax_step::<T>(qk, qk_scale, v, m_i, l_i, acc);
    }
    // The causal diagonal band and the ragged last block of keys, masked (no such block
    // when neither is there).
    if causal || ragged_keys {
        for start_n in range(unmasked_end, hi, block_n) {
            let offs_kv = start_n + offs_n;
            let (k, v) = load_key_block(keys, values, offs_kv, offs_d, d_mask, Some(n_k));
            let visible = visible_scores(offs_m, offs_kv, n_q, n_k, causal);
            let qk = dot_with(q, k.trans(), None, dot_precision::<T>());
            let qk = select(visible, qk, f32::NEG_INFINITY);
            (m_i, l_i, acc) = online_softmax_step::<T>(qk, qk_scale, v, m_i, l_i, acc);
        }
    }

    // A row that saw no key has l_i = 0: its output is 0 and its logsumexp -inf.
    // One division per row and a multiply per element: a correctly rounded f32 division is a
    // fast path plus a slow-path call in SASS, and one per accumulator element made up a
    // quarter of the kernel's code, which the driver's JIT compiles on the first launch.
    let l_rcp: Tile = 1.0 / select(l_i.eq(0.0), 1.0, l_i);
    let out = (acc * l_rcp.col()).to::<T>();
    let o_ptrs = o_base + offs_m.col() * stride_om + offs_d.row();
    match q_mask {
        Some(mask) => store(o_ptrs, out, mask),
        None => store_unmasked(o_ptrs, out),
    }
    // Base 2 inside, natural log outside: ln(sum e^s) = (m_i + log2(l_i)) * ln 2.
    let lse = (m_i + log2(l_i)) * std::f32::consts::LN_2;
    let lse_ptrs = lse_ptr + off_hz * n_q + offs_m;
    if ragged_queries {
        store(lse_ptrs, lse, offs_m.lt(n_q));
    } else {
        store_unmasked(lse_ptrs, lse);
    }
}

/// Whether the last of the key blocks of `block_n` keys is partial: the forward's
/// `ragged_keys`, a trace-time fact of each launch (a new specialization when it changes).
pub(super) fn has_ragged_keys(n_k: usize, block_n: usize) -> bool {
    !n_k.is_multiple_of(block_n)
}

/// Whether the last of the query blocks of `block_m` rows is partial: the forward's
/// `ragged_queries`, a trace-time fact of each launch like [`has_ragged_keys`].
pub(super) fn has_ragged_queries(n_q: usize, block_m: usize) -> bool {
    !n_q.is_multiple_of(block_m)
}

/// The kernel's positive score scale `|sm_scale| * log2 e` and whether scores are negated (a
/// negative `sm_scale`). A zero scale becomes the smallest normal f32: every product with a
/// finite score is then 0 (as with a zero scale), while masked scores stay -inf rather than
/// making NaN (`-inf * 0`).
pub(super) fn kernel_scale(sm_scale: f32) -> (f32, bool) {
    let magnitude = (sm_scale.abs() * LOG2E).max(f32::MIN_POSITIVE);
    (magnitude, sm_scale < 0.0)
}

/// Attention into `out` `[B, H, Nq, D]` and `lse` `[B, H, Nq]` (natural log, f32).
///
/// Contract: Q `[B, H, Nq, D]`, K and V `[B, Hkv, Nk, D]` of one float dtype (f16, bf16, f32)
/// with `Hkv` dividing `H` and `1 <= D <= 256`, any strides with unit stride on D, one device.
/// `out` and `lse` may be strided views (unit stride on their last axis) that do not overlap
/// themselves, each other or the inputs. See the module docs for the causal alignment and the
/// result of rows that see no key. Block sizes, warps and stages left at `AUTO` are chosen by
/// the autotuner (see [`forward_config`]).
pub fn forward_into<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    out: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
) -> Result<()> {
    let dims = check_forward(q, k, v, out, lse, options)?;
    if dims.n_q == 0 || dims.batch * dims.heads == 0 {
        return Ok(());
    }
    resolve_then(q, k, v, out, lse, options, &dims, |o| {
        launch(q, k, v, out, lse, o, &dims)
    })
}

/// The options [`forward_into`] launches with for these tensors: `options` when every block
/// size and the warps/stages are set, else the autotuner's choice among
/// [`super::forward_candidates`] for [`super::key`] (on the interpreter: the first). On a GPU a
/// miss may time every candidate, writing `out` and `lse`.
pub fn forward_config<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    out: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOptions> {
    let dims = check_forward(q, k, v, out, lse, options)?;
    resolve(q, k, v, out, lse, options, &dims)
}

fn check_forward<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    out: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
) -> Result<Dims> {
    let dims = check_inputs(q, k, v, options)?;
    let inputs = [("q", q), ("k", k), ("v", v)];
    check_output(OP, "out", out, &dims.q_shape(), q, &inputs)?;
    check_output(OP, "lse", lse, &dims.lse_shape(), q, &inputs)?;
    check::expect_no_alias(OP, ("lse", lse), ("out", out))?;
    if !lse.is_contiguous() {
        return Err(tegula::Error::Stride {
            op: OP.into(),
            message: format!("`lse` must be contiguous, got strides {:?}", lse.strides()),
        });
    }
    strides_i32::<3, T>(OP, "out", out)?;
    strides_i32::<1, f32>(OP, "lse", lse)?;
    Ok(dims)
}

/// The contract on the inputs and the options.
fn check_inputs<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    options: &AttentionOptions,
) -> Result<Dims> {
    let dims = check_qkv(OP, q, k, v)?;
    expect_block_sizes(OP, options)?;
    softmax_scale(OP, options, dims.head_dim)?;
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        strides_i32::<3, T>(OP, name, t)?;
    }
    size_i32(OP, "B * H", dims.batch * dims.heads)?;
    size_i32(OP, "Nk", dims.n_k)?;
    size_i32(OP, "Nq", dims.n_q)?;
    Ok(dims)
}

#[allow(clippy::too_many_arguments)]
fn resolve<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    out: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
    dims: &Dims,
) -> Result<AttentionOptions> {
    resolve_then(q, k, v, out, lse, options, dims, |o| Ok(*o))
}

/// `then` with the options [`forward_config`] says; a tuned config that fails in `then` is
/// dropped from the autotune cache and chosen again ([`tuned::run`]).
#[allow(clippy::too_many_arguments)]
fn resolve_then<T: Element, R>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    out: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
    dims: &Dims,
    mut then: impl FnMut(&AttentionOptions) -> Result<R>,
) -> Result<R> {
    if !options.is_tuned() && options.wgmma.is_some() {
        return then(options);
    }
    let held = [("block_m", options.block_m), ("block_n", options.block_n)];
    let mut key =
        super::key(dims, T::DTYPE, options.causal) + &tuned::held_suffix(&held, options.config);
    if matches!(T::DTYPE, DType::F16 | DType::BF16) {
        // f32 dots never take wgmma: for them the choice changes nothing.
        key += tuned::held_wgmma_suffix(options.wgmma);
    }
    let dev = q.device();
    tuned::run(
        dev,
        "tegula_kernels::attention::forward",
        &key,
        || {
            // Only on a memo miss: a launch whose config is known builds no candidate list.
            let candidates = super::forward_candidates(dims, T::DTYPE, options, dev.has_wgmma());
            // The source hash: the Tile IR of the default candidate.
            let r = candidates[0];
            let ir = attn_fwd::trace::<T>(
                false,
                options.causal,
                has_ragged_keys(dims.n_k, r.block_n),
                has_ragged_queries(dims.n_q, r.block_m),
                dims.head_dim,
                r.block_m,
                r.block_n,
            )?;
            let first = super::tuning::forward_heuristic(dims, T::DTYPE, options, dev.has_wgmma())
                .to_tuner();
            Ok(Tuning::new(
                "tegula_kernels::attention::forward",
                &ir.to_string(),
                key.clone(),
                candidates.iter().map(|c| c.to_tuner()).collect(),
            )
            .rank_with(super::tuning::FORWARD_TOP_K, move |c| {
                tuned::distance(c, &first)
            })
            .prepare_with(move |c| {
                let o = options.with_tuned(c)?;
                let run = || launch(q, k, v, out, lse, &o, dims);
                let reports = tuned::plan_or_prune(dev, wgmma(&o), run)?;
                super::tuning::forward_plan_fits(&o, dims, &reports)?;
                dev.prepare(run)
            }))
        },
        |c| {
            let o = options.with_tuned(c)?;
            let reports =
                tuned::plan_or_prune(dev, wgmma(&o), || launch(q, k, v, out, lse, &o, dims))?;
            super::tuning::forward_plan_fits(&o, dims, &reports)?;
            median_ms(dev, || launch(q, k, v, out, lse, &o, dims))
        },
        |c| then(&options.with_tuned(c)?),
    )
}

/// Launches the forward with every option set, on checked tensors.
fn launch<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    out: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
    dims: &Dims,
) -> Result<()> {
    let (qk_scale, negate_scores) = kernel_scale(softmax_scale(OP, options, dims.head_dim)?);
    let [sqz, sqh, sqm] = strides_i32::<3, T>(OP, "q", q)?;
    let [skz, skh, skn] = strides_i32::<3, T>(OP, "k", k)?;
    let [svz, svh, svn] = strides_i32::<3, T>(OP, "v", v)?;
    let [soz, soh, som] = strides_i32::<3, T>(OP, "out", out)?;
    let programs_m = dims.n_q.div_ceil(options.block_m);
    let programs_bh = dims.batch * dims.heads;
    if programs_m == 0 || programs_bh == 0 {
        return Ok(());
    }
    let grid = (
        size_i32(OP, "query blocks", programs_m)? as u32,
        size_i32(OP, "B * H", programs_bh)? as u32,
    );
    attn_fwd::launch_with::<T>(
        q.device(),
        grid,
        // Without fp fusion: the kernel writes its fmas (the scale, the rescales), and
        // ptxas's own contraction grew the D = 128 step by 23 instructions and 36 spill bytes
        // (docs/archive/findings.md).
        options
            .config
            .with_mma(mma_of(wgmma(options)))
            .with_fp_fusion(false),
        q,
        k,
        v,
        out,
        lse,
        sqz,
        sqh,
        sqm,
        skz,
        skh,
        skn,
        svz,
        svh,
        svn,
        soz,
        soh,
        som,
        size_i32(OP, "H", dims.heads)?,
        size_i32(OP, "H / Hkv", dims.group_size())?,
        size_i32(OP, "Nq", dims.n_q)?,
        size_i32(OP, "Nk", dims.n_k)?,
        qk_scale,
        negate_scores,
        options.causal,
        has_ragged_keys(dims.n_k, options.block_n),
        has_ragged_queries(dims.n_q, options.block_m),
        dims.head_dim,
        options.block_m,
        options.block_n,
    )
}

/// The tensor-core instructions of a launch that asks for `wgmma` or not: a held choice either
/// way (the library's tuner offers both as candidates).
pub(super) fn mma_of(wgmma: bool) -> MmaChoice {
    if wgmma {
        MmaChoice::Wgmma
    } else {
        MmaChoice::Sync
    }
}

/// Whether the launch of `options` adds a kernel to the tuner's candidates: `Ok(false)` when
/// its plan is another candidate's (`tuned::plan_or_prune`) or the forward's own rule
/// refuses it (`forward_plan_fits`).
pub fn forward_adds_a_kernel<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    options: &AttentionOptions,
) -> Result<bool> {
    let dims = check_qkv(OP, q, k, v)?;
    let out = q.device().empty::<T>(dims.q_shape())?;
    let lse = q.device().empty::<f32>(dims.lse_shape())?;
    let planned = tuned::plan_or_prune(q.device(), wgmma(options), || {
        launch(q, k, v, &out, &lse, options, &dims)
    })
    .and_then(|reports| super::tuning::forward_plan_fits(options, &dims, &reports));
    match planned {
        Ok(()) => Ok(true),
        Err(tegula::Error::Pruned { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether a launch with `options` asks for `wgmma`: the option, or `TEGULA_WGMMA=1`.
fn wgmma(options: &AttentionOptions) -> bool {
    tuned::held_wgmma(options.wgmma) == Some(true)
}

/// Attention in new tensors: the output `[B, H, Nq, D]` (input dtype, contiguous) and the
/// logsumexp `[B, H, Nq]` (f32, natural log). See [`forward_into`] for the contract; the
/// inputs and options are checked before the outputs are allocated.
pub fn forward<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    options: &AttentionOptions,
) -> Result<(Tensor<T>, Tensor<f32>)> {
    let dims = check_inputs(q, k, v, options)?;
    check::expect_i32_output(OP, "out", &dims.q_shape())?;
    let out = q.device().empty::<T>(dims.q_shape())?;
    let lse = q.device().empty::<f32>(dims.lse_shape())?;
    forward_into(q, k, v, &out, &lse, options)?;
    Ok((out, lse))
}

/// `(Dims, causal)` from a library `--shape` (`B H HKV NQ NK D CAUSAL`), defaults filled in.
pub(super) fn parse_shape(shape: &[usize]) -> (Dims, bool) {
    let defaults = [2, 4, 2, 37, 53, 64, 1];
    let dim = |i: usize| shape.get(i).copied().unwrap_or(defaults[i]);
    let dims = Dims {
        batch: dim(0),
        heads: dim(1),
        kv_heads: dim(2),
        n_q: dim(3),
        n_k: dim(4),
        head_dim: dim(5),
    };
    (dims, dim(6) != 0)
}

/// Compares `got` with the float64 `want` under `|got - want| <= atol + rtol * magnitude`
/// (see [`reference`] for the magnitudes); equal values, infinities included, are exact.
pub(super) fn compare_bounded(
    name: &str,
    shape: String,
    dtype: DType,
    got: &[f64],
    want: &[f64],
    magnitude: &[f64],
    (atol, rtol): (f64, f64),
) -> CheckReport {
    let mut max_abs_err = 0.0f64;
    let mut worst_ratio = if got.len() == want.len() && want.len() == magnitude.len() {
        0.0f64
    } else {
        f64::INFINITY
    };
    for ((&g, &w), &m) in got.iter().zip(want).zip(magnitude) {
        if g == w {
            continue;
        }
        let err = (g - w).abs();
        let err = if err.is_nan() { f64::INFINITY } else { err };
        max_abs_err = max_abs_err.max(err);
        worst_ratio = worst_ratio.max(err / (atol + rtol * m));
    }
    CheckReport {
        kernel: name.to_string(),
        shape,
        dtype,
        max_abs_err,
        worst_ratio,
        atol,
        rtol,
    }
}

/// The worse of two reports (same kernel and shape).
pub(super) fn worse(a: CheckReport, b: CheckReport) -> CheckReport {
    if b.worst_ratio > a.worst_ratio {
        CheckReport {
            max_abs_err: a.max_abs_err.max(b.max_abs_err),
            ..b
        }
    } else {
        CheckReport {
            max_abs_err: a.max_abs_err.max(b.max_abs_err),
            ..a
        }
    }
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (dims, causal) = parse_shape(shape);
    let q = dev.randn::<T>(dims.q_shape())?;
    let k = dev.randn::<T>(dims.kv_shape())?;
    let v = dev.randn::<T>(dims.kv_shape())?;
    let options = AttentionOptions {
        causal,
        ..Default::default()
    };
    let scale = softmax_scale(OP, &options, dims.head_dim)? as f64;
    let want = reference::attention(
        &q.to_f64_vec()?,
        &k.to_f64_vec()?,
        &v.to_f64_vec()?,
        dims,
        causal,
        scale,
    );
    let mut runs = vec![options];
    let mut label = format!("{} causal={causal}", dims.describe());
    if (dev.has_wgmma() || tuned::wgmma_forced()) && matches!(T::DTYPE, DType::F16 | DType::BF16) {
        // The wgmma tile variants besides the tuned one (outputs poisoned): 1 or 2
        // warpgroups, two 64-row blocks a warpgroup, N from 32 to 128.
        runs.extend(wgmma_runs(&options, &WGMMA_CHECKED));
        label += &format!(", {} wgmma tiles", WGMMA_CHECKED.len());
    }
    let mut report: Option<CheckReport> = None;
    for run in &runs {
        let out = dev.full::<T>(dims.q_shape(), T::from_f64(f64::NAN))?;
        let lse = dev.full::<f32>(dims.lse_shape(), f32::NAN)?;
        forward_into(&q, &k, &v, &out, &lse, run)?;
        let out_report = compare_bounded(
            OP,
            label.clone(),
            T::DTYPE,
            &out.to_f64_vec()?,
            &want.out,
            &want.out_magnitude,
            check::tolerance(T::DTYPE),
        );
        // The logsumexp is f32 from f32 accumulation whatever the input dtype.
        let lse_magnitude: Vec<f64> = want.lse.iter().map(|x| x.abs()).collect();
        let lse_report = compare_bounded(
            OP,
            label.clone(),
            T::DTYPE,
            &lse.to_f64_vec()?,
            &want.lse,
            &lse_magnitude,
            check::tolerance(DType::F32),
        );
        let this = worse(out_report, lse_report);
        report = Some(match report {
            Some(r) => worse(r, this),
            None => this,
        });
    }
    Ok(report.expect("the tuned run at least"))
}

/// `options` on wgmma at each of `tiles` (BLOCK_M, BLOCK_N, warps, stages): the extra runs of
/// the forward's and the backward's GPU checks.
pub(super) fn wgmma_runs(
    options: &AttentionOptions,
    tiles: &[(usize, usize, u32, u32)],
) -> Vec<AttentionOptions> {
    tiles
        .iter()
        .map(
            |&(block_m, block_n, num_warps, num_stages)| AttentionOptions {
                block_m,
                block_n,
                config: tegula::LaunchConfig::new(num_warps, num_stages),
                wgmma: Some(true),
                ..*options
            },
        )
        .collect()
}

/// Tiles `tegula check attention` runs on wgmma besides the tuned one, on a device with wgmma
/// or with `TEGULA_WGMMA=1`:
/// (BLOCK_M, BLOCK_N, warps, stages).
const WGMMA_CHECKED: [(usize, usize, u32, u32); 4] = [
    (128, 64, 8, 2),
    (128, 64, 4, 2),
    (64, 128, 4, 3),
    (64, 32, 4, 2),
];

pub(super) fn check_entry(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::F16 => check_typed::<f16>(dev, shape),
        DType::BF16 => check_typed::<bf16>(dev, shape),
        DType::F32 => check_typed::<f32>(dev, shape),
        got => Err(tegula::Error::DType {
            op: OP.into(),
            name: "q".into(),
            expected: "f16, bf16 or f32".into(),
            got,
        }),
    }
}

pub(super) fn trace_entry(
    shape: &[usize],
    dtype: DType,
) -> std::result::Result<Kernel, TraceError> {
    // The default candidate: what the interpreter launches.
    let (dims, causal) = parse_shape(shape);
    let b = super::forward_candidates(&dims, dtype, &AttentionOptions::default(), false)[0];
    let d = dims.head_dim;
    let ragged_k = has_ragged_keys(dims.n_k, b.block_n);
    let ragged_q = has_ragged_queries(dims.n_q, b.block_m);
    let (bm, bn) = (b.block_m, b.block_n);
    match dtype {
        DType::F16 => attn_fwd::trace::<f16>(false, causal, ragged_k, ragged_q, d, bm, bn),
        DType::BF16 => attn_fwd::trace::<bf16>(false, causal, ragged_k, ragged_q, d, bm, bn),
        _ => attn_fwd::trace::<f32>(false, causal, ragged_k, ragged_q, d, bm, bn),
    }
}
