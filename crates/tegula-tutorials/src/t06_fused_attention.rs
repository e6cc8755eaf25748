//! Tutorial 06, fused attention: FlashAttention-2's forward and backward in fp16,
//! `O = softmax(sm_scale Q K^T) V` over `[Z, H, N_CTX, HEAD_DIM]`, causal or not.
//!
//! # The Triton code
//!
//! *Forward.* `_attn_fwd` runs one program per block of `BLOCK_M` queries and (batch, head).
//! It views Q, K, V and O as `[Z * H * N_CTX, HEAD_DIM]` through tensor descriptors, loads its
//! Q block once and calls the helper `_attn_fwd_inner`, which loops over key blocks: `qk =
//! q k^T`, the running row maximum `m_i` (scores scaled by `sm_scale / ln 2`, so the softmax
//! runs on `exp2`), the correction `alpha = exp2(m_i - m_ij)`, the running sum `l_i`, and `acc =
//! acc * alpha + p v` with `p` cast to fp16. `STAGE` picks the key range: 3 (non-causal) all of
//! them; causal calls the helper twice, with stage 1 for the blocks left of the diagonal
//! (unmasked) and stage 2 for the diagonal block (masked with `-1e6`). The epilogue divides
//! by `l_i`, stores the base-2 logsumexp `M` and the output.
//!
//! *Backward.* `_attn_bwd_preprocess` computes `delta = rowsum(O * dO)`. `_attn_bwd` runs one
//! program per block of `BLOCK_N1` keys and (batch, head): it keeps K and V of its block and
//! sweeps the query blocks with the helper `_attn_bwd_dkdv` (dV `+= P^T dO`, dK `+= dS^T Q`),
//! the diagonal first in slices of `BLOCK_M1 / BLK_SLICE_FACTOR` rows with the causal mask;
//! then the same program computes one block of `BLOCK_M2` rows of dQ with `_attn_bwd_dq`
//! sweeping the key blocks. The host pre-scales K by `sm_scale / ln 2` (a torch multiply), so
//! the kernels work in base 2, and fixes `BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2 = 32, 128,
//! 128, 32`, 4 warps, 5 stages.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `@triton.jit def _attn_fwd_inner(acc, l_i, m_i, ..)` with a `tl.range` loop | `#[tegula::func] fn _attn_fwd_inner(mut acc: Tile, ..)`: its `for start_n in range(lo, hi, BLOCK_N)` is a run-time loop carrying `acc`, `l_i`, `m_i`, `offsetk_y`, `offsetv_y` |
//! | `acc.reshape([BM, 2, BN // 2]).permute(0, 2, 1).split()`, `tl.join(acc0, acc1)` | `split(acc.reshape([BM, 2, BN / 2]).permute(&[0, 2, 1]))`, `join(acc0, acc1)` |
//! | `tl.make_tensor_descriptor(desc_q, shape=[y_dim, HEAD_DIM], ..)`, `desc_q.load([y, 0])` | the same, `desc_q.load((y, 0))` |
//! | `tl.dot(q, k)` with `k = desc_k.load(..).T` | `dot(q, k)` with `k = desc_k.load(..).trans()` |
//! | `tl.math.exp2`, `tl.math.log2` | `exp2`, `log2` |
//! | `m_ij[:, None]`, `m[None, :]` | `m_ij.col()`, `m.row()` |
//! | `if STAGE & 1:` (constexpr) | `if STAGE & 1 != 0` (a Rust `bool`: decided at trace time) |
//! | `tl.multiple_of(lo, BLOCK_M)` | `multiple_of(lo, BLOCK_M)` |
//! | `Q += adj` with `adj = (..).to(tl.int64)` | `Q += adj` with `adj = (..).to::<i64>()` |
//! | `LN2: tl.constexpr = 0.693..` | a Rust `f32` |
//! | `tl.static_assert(BLOCK_N <= HEAD_DIM)` | `static_assert(BLOCK_N <= HEAD_DIM, ..)`: a config that breaks it fails to trace, and the tuner drops it, as Triton's autotuner drops a config whose compile asserts |
//!
//! # What differs
//!
//! The helpers `_attn_fwd_inner`, `_attn_bwd_dkdv` and `_attn_bwd_dq` are `#[tegula::func]`s,
//! whose bodies are rewritten like a kernel's: their `for .. in range(..)` loops read as the
//! tutorial's, and the parameters they update (`mut acc: Tile`, `mut dk: Tile`) are carried by
//! the loops. The fp8 path (`FP8_OUTPUT`, `tl.float8e5`, V transposed so that `P V` reads V
//! with K contiguous, as fp8 tensor cores need) is not ported yet. The warp-specialized Blackwell branch of the forward splits the
//! accumulator in halves (`reshape`, `permute`, `split`, `join`) to scale each by `alpha`, as
//! the tutorial does; it is taken off Hopper with `warp_specialize`, `BLOCK_M = 128` and
//! `HEAD_DIM = 128` (the interpreter is not Hopper, so the tests run it there).
//! `tl.range`'s `warp_specialize=` has no counterpart; the host accepts the flag. The
//! backward's `k * (sm_scale * RCP_LN2)` is torch arithmetic on the host; here it is a small
//! kernel ([`_scale_kernel`]) rounding to fp16 as torch does.
//!
//! The tutorial's kernels mask nothing along the sequence: the descriptors' bounds are the
//! whole `[Z * H * N_CTX, HEAD_DIM]` view, so a ragged last block would read the next head's
//! rows. The host therefore requires `N_CTX` to be a multiple of the blocks (the backward
//! asserts `N_CTX % 128 == 0`, the forward's candidates are pruned to blocks dividing `N_CTX`)
//! and contiguous inputs, and returns typed errors otherwise. The forward's autotune list
//! is the tutorial's (`BLOCK_M` 64 or 128, `BLOCK_N` 32, 64 or 128, 2-4 stages, 4 or 8 warps,
//! less `keep`'s Hopper exclusions and `prune_invalid_configs`), keyed by `N_CTX`, `HEAD_DIM`
//! and `warp_specialize`.
#![allow(non_snake_case)]
// The tutorial's spellings: `acc = acc * alpha[:, None]`, and its literal constants
// (`qk_scale *= 1.44269504`, `LN2 = 0.6931471824645996`, `RCP_LN2 = 1.4426950408889634`).
#![allow(
    clippy::assign_op_pattern,
    clippy::approx_constant,
    clippy::excessive_precision
)]

use crate::common::{self, config, cx};
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::autotune::{median_ms, Config, Tuning};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::{LaunchConfig, Result};

/// `_attn_fwd_inner`: folds the key blocks of one stage into `(acc, l_i, m_i)`.
#[tegula::func]
#[allow(clippy::too_many_arguments)]
pub fn _attn_fwd_inner(
    mut acc: Tile,
    mut l_i: Tile,
    mut m_i: Tile,
    q: Tile,
    desc_k: TensorDescriptor,
    desc_v: TensorDescriptor,
    offset_y: Tile,
    start_m: Tile,
    qk_scale: Tile,
    BLOCK_M: usize,
    HEAD_DIM: usize,
    BLOCK_N: usize,
    STAGE: usize,
    offs_m: Tile,
    offs_n: Tile,
    N_CTX: Tile,
    warp_specialize: bool,
    IS_HOPPER: bool,
) -> (Tile, Tile, Tile) {
    // range of values handled by this stage
    let (lo, hi) = if STAGE == 1 {
        (scalar(0), start_m * BLOCK_M)
    } else if STAGE == 2 {
        let (lo, hi) = (start_m * BLOCK_M, (start_m + 1) * BLOCK_M);
        (multiple_of(lo, BLOCK_M), hi)
    } else {
        // causal = False
        (scalar(0), N_CTX)
    };
    let mut offsetk_y = offset_y + lo;
    // workaround: the fp8 path is not ported yet, so the `dtype == tl.float8e5` branch (V
    // transposed, `offset_y * HEAD_DIM + lo`) is left out.
    let mut offsetv_y = offset_y + lo;
    // loop over k, v and update accumulator
    // workaround: tl.range(.., warp_specialize=) has no counterpart; a plain range loop.
    for start_n in range(lo, hi, BLOCK_N) {
        let start_n = multiple_of(start_n, BLOCK_N);
        // -- compute qk ----
        let k = desc_k.load((offsetk_y, 0)).trans();
        let mut qk = dot(q, k);
        let m_ij;
        if STAGE == 2 {
            let mask = offs_m.col().ge(start_n + offs_n.row());
            qk = qk * qk_scale + select(mask, 0, -1.0e6);
            m_ij = maximum(m_i, max(qk, 1));
            qk -= m_ij.col();
        } else {
            m_ij = maximum(m_i, max(qk, 1) * qk_scale);
            qk = qk * qk_scale - m_ij.col();
        }
        let p = exp2(qk);
        // -- compute correction factor
        let alpha = exp2(m_i - m_ij);
        let l_ij = sum(p, 1);
        // -- update output accumulator --
        if !IS_HOPPER && warp_specialize && BLOCK_M == 128 && HEAD_DIM == 128 {
            let BM: usize = acc.shape().dim(0);
            let BN: usize = acc.shape().dim(1);
            let (mut acc0, mut acc1) = split(acc.reshape([BM, 2, BN / 2]).permute(&[0, 2, 1]));
            acc0 = acc0 * alpha.col();
            acc1 = acc1 * alpha.col();
            acc = join(acc0, acc1).permute(&[0, 2, 1]).reshape([BM, BN]);
        } else {
            acc = acc * alpha.col();
        }
        // prepare p and v for the dot
        let v = desc_v.load((offsetv_y, 0));
        let p = p.to::<f16>();
        acc = dot_acc(p, v, acc);
        // update m_i and l_i
        // place this at the end of the loop to reduce register pressure
        l_i = l_i * alpha + l_ij;
        m_i = m_ij;
        offsetk_y += BLOCK_N;
        offsetv_y += BLOCK_N;
    }
    (acc, l_i, m_i)
}

#[tegula::kernel]
pub fn _attn_fwd(
    sm_scale: f32,
    M: Ptr<f32>,
    Z: i32,
    H: i32,
    desc_q: Ptr<f16>,
    desc_k: Ptr<f16>,
    desc_v: Ptr<f16>,
    desc_o: Ptr<f16>,
    N_CTX: i32,
    #[constexpr] HEAD_DIM: usize,
    #[constexpr] BLOCK_M: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] STAGE: usize,
    #[constexpr] warp_specialize: bool,
    #[constexpr] IS_HOPPER: bool,
) {
    // workaround: the fp8 path is not ported yet (FP8_OUTPUT): dtype is float16.
    static_assert(BLOCK_N <= HEAD_DIM, "BLOCK_N <= HEAD_DIM");
    let start_m = program_id(0);
    let off_hz = program_id(1);
    let off_z = off_hz / H;
    let off_h = off_hz % H;

    let y_dim = Z * H * N_CTX;
    let desc_q = make_tensor_descriptor(
        desc_q,
        (y_dim, HEAD_DIM),
        (HEAD_DIM, 1),
        [BLOCK_M, HEAD_DIM],
    );
    let desc_v = make_tensor_descriptor(
        desc_v,
        (y_dim, HEAD_DIM),
        (HEAD_DIM, 1),
        [BLOCK_N, HEAD_DIM],
    );
    let desc_k = make_tensor_descriptor(
        desc_k,
        (y_dim, HEAD_DIM),
        (HEAD_DIM, 1),
        [BLOCK_N, HEAD_DIM],
    );
    let desc_o = make_tensor_descriptor(
        desc_o,
        (y_dim, HEAD_DIM),
        (HEAD_DIM, 1),
        [BLOCK_M, HEAD_DIM],
    );

    let offset_y = off_z * (N_CTX * H) + off_h * N_CTX;
    let qo_offset_y = offset_y + start_m * BLOCK_M;
    // initialize offsets
    let offs_m = start_m * BLOCK_M + arange(0, BLOCK_M as i64);
    let offs_n = arange(0, BLOCK_N as i64);
    // initialize pointer to m and l
    let mut m_i = zeros::<f32>([BLOCK_M]) - f32::INFINITY;
    let mut l_i = zeros::<f32>([BLOCK_M]) + 1.0;
    let mut acc = zeros::<f32>([BLOCK_M, HEAD_DIM]);
    // load scales
    let mut qk_scale = sm_scale;
    // 1/log(2)
    qk_scale *= 1.44269504;
    // load q: it will stay in SRAM throughout
    let q = desc_q.load((qo_offset_y, 0));
    // stage 1: off-band
    // For causal = True, STAGE = 3 and _attn_fwd_inner gets 1 as its STAGE
    // For causal = False, STAGE = 1, and _attn_fwd_inner gets 3 as its STAGE
    if STAGE & 1 != 0 {
        (acc, l_i, m_i) = _attn_fwd_inner(
            acc,
            l_i,
            m_i,
            q,
            desc_k,
            desc_v,
            offset_y,
            start_m,
            qk_scale,
            BLOCK_M,
            HEAD_DIM,
            BLOCK_N,
            4 - STAGE,
            offs_m,
            offs_n,
            N_CTX,
            warp_specialize,
            IS_HOPPER,
        );
    }
    // stage 2: on-band
    if STAGE & 2 != 0 {
        (acc, l_i, m_i) = _attn_fwd_inner(
            acc,
            l_i,
            m_i,
            q,
            desc_k,
            desc_v,
            offset_y,
            start_m,
            qk_scale,
            BLOCK_M,
            HEAD_DIM,
            BLOCK_N,
            2,
            offs_m,
            offs_n,
            N_CTX,
            warp_specialize,
            IS_HOPPER,
        );
    }
    // epilogue
    m_i += log2(l_i);
    acc = acc / l_i.col();
    let m_ptrs = M + off_hz * N_CTX + offs_m;
    store_unmasked(m_ptrs, m_i);
    desc_o.store((qo_offset_y, 0), acc.to::<f16>());
}

#[tegula::kernel]
pub fn _attn_bwd_preprocess(
    O: Ptr<f16>,
    DO: Ptr<f16>,
    Delta: Ptr<f32>,
    _Z: i32,
    _H: i32,
    N_CTX: i32,
    #[constexpr] BLOCK_M: usize,
    #[constexpr] HEAD_DIM: usize,
) {
    let off_m = program_id(0) * BLOCK_M + arange(0, BLOCK_M as i64);
    let off_hz = program_id(1);
    let off_n = arange(0, HEAD_DIM as i64);
    // load
    let o = load_unmasked(O + off_hz * HEAD_DIM * N_CTX + off_m.col() * HEAD_DIM + off_n.row());
    let do_ = load_unmasked(DO + off_hz * HEAD_DIM * N_CTX + off_m.col() * HEAD_DIM + off_n.row())
        .to::<f32>();
    let delta = sum(o * do_, 1);
    // write-back
    store_unmasked(Delta + off_hz * N_CTX + off_m, delta);
}

/// The main inner-loop logic for computing dK and dV (`_attn_bwd_dkdv`).
#[tegula::func]
#[allow(clippy::too_many_arguments)]
pub fn _attn_bwd_dkdv(
    mut dk: Tile,
    mut dv: Tile,
    Q: Tile,
    k: Tile,
    v: Tile,
    _sm_scale: Tile,
    DO: Tile,
    M: Tile,
    D: Tile,
    // shared by Q/K/V/DO.
    stride_tok: Tile,
    stride_d: Tile,
    _H: Tile,
    _N_CTX: Tile,
    BLOCK_M1: usize,
    BLOCK_N1: usize,
    HEAD_DIM: usize,
    // Filled in by the wrapper.
    start_n: Tile,
    start_m: Tile,
    num_steps: Tile,
    MASK: bool,
) -> (Tile, Tile) {
    let offs_m = start_m + arange(0, BLOCK_M1);
    let offs_n = start_n + arange(0, BLOCK_N1);
    let offs_k = arange(0, HEAD_DIM);
    let mut qT_ptrs = Q + offs_m.row() * stride_tok + offs_k.col() * stride_d;
    let mut do_ptrs = DO + offs_m.col() * stride_tok + offs_k.row() * stride_d;
    // BLOCK_N1 must be a multiple of BLOCK_M1, otherwise the code wouldn't work.
    static_assert(
        BLOCK_N1.is_multiple_of(BLOCK_M1),
        "BLOCK_N1 % BLOCK_M1 == 0",
    );
    let mut curr_m = start_m;
    let step_m = BLOCK_M1;
    for _blk_idx in range(num_steps) {
        let qT = load_unmasked(qT_ptrs);
        // Load m before computing qk to reduce pipeline stall.
        let offs_m = curr_m + arange(0, BLOCK_M1);
        let m = load_unmasked(M + offs_m);
        let qkT = dot(k, qT);
        let mut pT = exp2(qkT - m.row());
        // Autoregressive masking.
        if MASK {
            let mask = offs_m.row().ge(offs_n.col());
            pT = select(mask, pT, 0.0);
        }
        let do_ = load_unmasked(do_ptrs);
        // Compute dV.
        let ppT = pT;
        let ppT = ppT.to::<f16>();
        dv += dot(ppT, do_);
        // D (= delta) is pre-divided by ds_scale.
        let Di = load_unmasked(D + offs_m);
        // Compute dP and dS.
        let dpT = dot(v, trans(do_)).to::<f32>();
        let dsT = pT * (dpT - Di.row());
        let dsT = dsT.to::<f16>();
        dk += dot(dsT, trans(qT));
        // Increment pointers.
        curr_m += step_m;
        qT_ptrs += step_m * stride_tok;
        do_ptrs += step_m * stride_tok;
    }
    (dk, dv)
}

/// The main inner-loop logic for computing dQ (`_attn_bwd_dq`).
#[tegula::func]
#[allow(clippy::too_many_arguments)]
pub fn _attn_bwd_dq(
    mut dq: Tile,
    q: Tile,
    K: Tile,
    V: Tile,
    do_: Tile,
    m: Tile,
    D: Tile,
    // shared by Q/K/V/DO.
    stride_tok: Tile,
    stride_d: Tile,
    _H: Tile,
    _N_CTX: Tile,
    BLOCK_M2: usize,
    BLOCK_N2: usize,
    HEAD_DIM: usize,
    // Filled in by the wrapper.
    start_m: Tile,
    start_n: Tile,
    num_steps: Tile,
    MASK: bool,
) -> Tile {
    let offs_m = start_m + arange(0, BLOCK_M2);
    let offs_n = start_n + arange(0, BLOCK_N2);
    let offs_k = arange(0, HEAD_DIM);
    let mut kT_ptrs = K + offs_n.row() * stride_tok + offs_k.col() * stride_d;
    let mut vT_ptrs = V + offs_n.row() * stride_tok + offs_k.col() * stride_d;
    // D (= delta) is pre-divided by ds_scale.
    let Di = load_unmasked(D + offs_m);
    // BLOCK_M2 must be a multiple of BLOCK_N2, otherwise the code wouldn't work.
    static_assert(
        BLOCK_M2.is_multiple_of(BLOCK_N2),
        "BLOCK_M2 % BLOCK_N2 == 0",
    );
    let mut curr_n = start_n;
    let step_n = BLOCK_N2;
    for _blk_idx in range(num_steps) {
        let kT = load_unmasked(kT_ptrs);
        let vT = load_unmasked(vT_ptrs);
        let qk = dot(q, kT);
        let mut p = exp2(qk - m);
        // Autoregressive masking.
        if MASK {
            let offs_n = curr_n + arange(0, BLOCK_N2);
            let mask = offs_m.col().ge(offs_n.row());
            p = select(mask, p, 0.0);
        }
        // Compute dP and dS.
        let dp = dot(do_, vT).to::<f32>();
        let ds = p * (dp - Di.col());
        let ds = ds.to::<f16>();
        // Compute dQ.
        // NOTE: We need to de-scale dq in the end, because kT was pre-scaled.
        dq += dot(ds, trans(kT));
        // Increment pointers.
        curr_n += step_n;
        kT_ptrs += step_n * stride_tok;
        vT_ptrs += step_n * stride_tok;
    }
    dq
}

#[tegula::kernel]
pub fn _attn_bwd(
    mut Q: Ptr<f16>,
    mut K: Ptr<f16>,
    mut V: Ptr<f16>,
    sm_scale: f32,
    mut DO: Ptr<f16>,
    mut DQ: Ptr<f16>,
    mut DK: Ptr<f16>,
    mut DV: Ptr<f16>,
    mut M: Ptr<f32>,
    mut D: Ptr<f32>,
    // shared by Q/K/V/DO.
    stride_z: i32,
    stride_h: i32,
    stride_tok: i32,
    stride_d: i32,
    H: i32,
    N_CTX: i32,
    #[constexpr] BLOCK_M1: usize,
    #[constexpr] BLOCK_N1: usize,
    #[constexpr] BLOCK_M2: usize,
    #[constexpr] BLOCK_N2: usize,
    #[constexpr] BLK_SLICE_FACTOR: usize,
    #[constexpr] HEAD_DIM: usize,
    #[constexpr] CAUSAL: bool,
) {
    let LN2: f32 = 0.6931471824645996; // = ln(2)

    let bhid = program_id(2);
    let off_chz = (bhid * N_CTX).to::<i64>();
    let adj = (stride_h * (bhid % H) + stride_z * (bhid / H)).to::<i64>();
    let pid = program_id(0);

    // offset pointers for batch/head
    Q += adj;
    K += adj;
    V += adj;
    DO += adj;
    DQ += adj;
    DK += adj;
    DV += adj;
    M += off_chz;
    D += off_chz;

    // load scales
    let offs_k = arange(0, HEAD_DIM as i64);

    let mut start_n = pid * BLOCK_N1;
    let mut start_m = scalar(0);

    let MASK_BLOCK_M1: usize = BLOCK_M1 / BLK_SLICE_FACTOR;
    let offs_n = start_n + arange(0, BLOCK_N1 as i64);

    let mut dv = zeros::<f32>([BLOCK_N1, HEAD_DIM]);
    let mut dk = zeros::<f32>([BLOCK_N1, HEAD_DIM]);

    // load K and V: they stay in SRAM throughout the inner loop.
    let k = load_unmasked(K + offs_n.col() * stride_tok + offs_k.row() * stride_d);
    let v = load_unmasked(V + offs_n.col() * stride_tok + offs_k.row() * stride_d);

    let mut num_steps;
    if CAUSAL {
        start_m = start_n;
        num_steps = scalar((BLOCK_N1 / MASK_BLOCK_M1) as i32);
        (dk, dv) = _attn_bwd_dkdv(
            dk,
            dv,
            Q,
            k,
            v,
            sm_scale,
            DO,
            M,
            D,
            stride_tok,
            stride_d,
            H,
            N_CTX,
            MASK_BLOCK_M1,
            BLOCK_N1,
            HEAD_DIM,
            start_n,
            start_m,
            num_steps,
            true,
        );

        start_m += num_steps * MASK_BLOCK_M1;
    }

    // Compute dK and dV for non-masked blocks.
    num_steps = (N_CTX - start_m) / BLOCK_M1;
    (dk, dv) = _attn_bwd_dkdv(
        dk, dv, Q, k, v, sm_scale, DO, M, D, stride_tok, stride_d, H, N_CTX, BLOCK_M1, BLOCK_N1,
        HEAD_DIM, start_n, start_m, num_steps, false,
    );

    let dv_ptrs = DV + offs_n.col() * stride_tok + offs_k.row() * stride_d;
    store_unmasked(dv_ptrs, dv);

    // Write back dK.
    dk *= sm_scale;
    let dk_ptrs = DK + offs_n.col() * stride_tok + offs_k.row() * stride_d;
    store_unmasked(dk_ptrs, dk);

    // THIS BLOCK DOES DQ:
    start_m = pid * BLOCK_M2;
    start_n = scalar(0);
    num_steps = N_CTX / BLOCK_N2;

    let MASK_BLOCK_N2: usize = BLOCK_N2 / BLK_SLICE_FACTOR;
    let offs_m = start_m + arange(0, BLOCK_M2 as i64);

    let q = load_unmasked(Q + offs_m.col() * stride_tok + offs_k.row() * stride_d);
    let mut dq = zeros::<f32>([BLOCK_M2, HEAD_DIM]);
    let do_ = load_unmasked(DO + offs_m.col() * stride_tok + offs_k.row() * stride_d);

    let m = load_unmasked(M + offs_m);
    let m = m.col();

    if CAUSAL {
        // Compute dQ for masked (diagonal) blocks.
        // NOTE: This code scans each row of QK^T backward (from right to left,
        // but inside each call to _attn_bwd_dq, from left to right), but that's
        // not due to anything important.  I just wanted to reuse the loop
        // structure for dK & dV above as much as possible.
        let mut end_n = start_m + BLOCK_M2;
        num_steps = scalar((BLOCK_M2 / MASK_BLOCK_N2) as i32);
        dq = _attn_bwd_dq(
            dq,
            q,
            K,
            V,
            do_,
            m,
            D,
            stride_tok,
            stride_d,
            H,
            N_CTX,
            BLOCK_M2,
            MASK_BLOCK_N2,
            HEAD_DIM,
            start_m,
            end_n - num_steps * MASK_BLOCK_N2,
            num_steps,
            true,
        );
        end_n -= num_steps * MASK_BLOCK_N2;
        // stage 2
        num_steps = end_n / BLOCK_N2;
        start_n = end_n - num_steps * BLOCK_N2;
    }

    dq = _attn_bwd_dq(
        dq, q, K, V, do_, m, D, stride_tok, stride_d, H, N_CTX, BLOCK_M2, BLOCK_N2, HEAD_DIM,
        start_m, start_n, num_steps, false,
    );
    // Write back dQ.
    let dq_ptrs = DQ + offs_m.col() * stride_tok + offs_k.row() * stride_d;
    dq *= LN2;
    store_unmasked(dq_ptrs, dq);
}

/// `y = x * scale` rounded to fp16.
// workaround: the tutorial's `arg_k = k * (ctx.sm_scale * RCP_LN2)` is torch arithmetic on
// the host (computed in f32, rounded to fp16); tegula has no host tensor arithmetic, so it is
// this kernel.
#[tegula::kernel]
pub fn _scale_kernel(x: Ptr<f16>, y: Ptr<f16>, n: i32, scale: f32, #[constexpr] BLOCK: usize) {
    let offs = program_id(0) * BLOCK + arange(0, BLOCK as i64);
    let mask = offs.lt(n);
    store(y + offs, load(x + offs, mask, 0).to::<f32>() * scale, mask);
}

const OP: &str = "tutorial-06-fused-attention";

/// The tutorial's forward configs: `BLOCK_M` 64 or 128, `BLOCK_N` 32, 64 or 128, 2-4 stages,
/// 4 or 8 warps, less `keep`'s exclusion on Hopper (8 warps for tiles under 128 x 128).
pub fn configs(dev: &Device) -> Vec<Config> {
    let hopper = is_hopper(dev);
    let mut out = Vec::new();
    for BM in [64, 128] {
        for BN in [32, 64, 128] {
            for s in [2, 3, 4] {
                for w in [4, 8] {
                    // keep(conf)
                    if hopper && BM * BN < 128 * 128 && w == 8 {
                        continue;
                    }
                    out.push(config(&[("BLOCK_M", BM), ("BLOCK_N", BN)], w, s));
                }
            }
        }
    }
    out
}

/// `is_hopper()`: a GPU of compute capability 9.
pub fn is_hopper(dev: &Device) -> bool {
    dev.cuda_runtime()
        .is_some_and(|rt| rt.device_info().compute_capability.0 == 9)
}

/// `prune_invalid_configs`: `BLOCK_M <= N_CTX`, and `BLOCK_M >= BLOCK_N` unless `STAGE == 1`;
/// here also blocks that divide `N_CTX` (the kernels mask nothing along the sequence).
fn keep_for(c: &Config, n_ctx: usize, stage: usize) -> bool {
    let (bm, bn) = (
        c.get("BLOCK_M").unwrap_or(0) as usize,
        c.get("BLOCK_N").unwrap_or(0) as usize,
    );
    bm <= n_ctx
        && (bm >= bn || stage == 1)
        && bm > 0
        && bn > 0
        && n_ctx.is_multiple_of(bm)
        && n_ctx.is_multiple_of(bn)
}

/// What the forward saves for the backward (`ctx.save_for_backward(q, k, v, o, M)`,
/// `ctx.sm_scale`, `ctx.HEAD_DIM`, `ctx.causal`).
#[derive(Clone, Debug)]
pub struct AttentionCtx {
    pub q: Tensor<f16>,
    pub k: Tensor<f16>,
    pub v: Tensor<f16>,
    pub o: Tensor<f16>,
    /// The base-2 logsumexp of each query row, `[Z, H, N_CTX]` f32.
    pub M: Tensor<f32>,
    pub sm_scale: f32,
    pub head_dim: usize,
    pub causal: bool,
}

/// `(Z, H, N_CTX, HEAD_DIM)` of q, k, v, all `[Z, H, N_CTX, HEAD_DIM]` contiguous fp16.
fn check_qkv(q: &Tensor<f16>, k: &Tensor<f16>, v: &Tensor<f16>) -> Result<[usize; 4]> {
    common::expect_rank(OP, "q", q, 4)?;
    common::expect_shape(OP, "k", k, q.shape())?;
    common::expect_shape(OP, "v", v, q.shape())?;
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        common::expect_contiguous(OP, name, t)?;
        common::expect_same_device(OP, q, t)?;
        common::expect_i32_extent(OP, name, t)?;
    }
    let s = q.shape();
    // shape constraints
    if ![16, 32, 64, 128, 256].contains(&s[3]) {
        return Err(common::invalid(
            OP,
            format!("HEAD_DIM must be 16, 32, 64, 128 or 256, got {}", s[3]),
        ));
    }
    Ok([s[0], s[1], s[2], s[3]])
}

/// One forward launch with `meta` into prepared `o` (q's shape) and `M` (`[Z, H, N_CTX]`).
#[allow(clippy::too_many_arguments)]
pub fn attention_fwd_launch(
    q: &Tensor<f16>,
    k: &Tensor<f16>,
    v: &Tensor<f16>,
    o: &Tensor<f16>,
    M: &Tensor<f32>,
    causal: bool,
    sm_scale: f32,
    warp_specialize: bool,
    meta: &Config,
) -> Result<()> {
    let [Z, H, N_CTX, HEAD_DIM] = check_qkv(q, k, v)?;
    common::expect_shape(OP, "o", o, q.shape())?;
    common::expect_contiguous(OP, "o", o)?;
    common::expect_shape(OP, "M", M, &[Z, H, N_CTX])?;
    common::expect_contiguous(OP, "M", M)?;
    let stage = if causal { 3 } else { 1 };
    if !keep_for(meta, N_CTX, stage) {
        return Err(common::invalid(
            OP,
            format!(
                "config {meta} does not fit N_CTX = {N_CTX}{}: the blocks must divide N_CTX \
                 (the kernel masks nothing along the sequence)",
                if causal {
                    ", causal (BLOCK_M >= BLOCK_N)"
                } else {
                    ""
                }
            ),
        ));
    }
    if Z * H * N_CTX == 0 {
        return Ok(());
    }
    let (bm, bn) = (cx(meta, "BLOCK_M")?, cx(meta, "BLOCK_N")?);
    let grid = [common::cdiv(N_CTX, bm) as u32, (Z * H) as u32, 1];
    _attn_fwd::launch_with(
        q.device(),
        grid,
        meta.launch_config(),
        sm_scale,
        M,
        Z as i32,
        H as i32,
        q,
        k,
        v,
        o,
        N_CTX as i32,
        HEAD_DIM,
        bm,
        bn,
        stage,
        warp_specialize,
        is_hopper(q.device()),
    )
}

/// The autotuner's forward config (`key=["N_CTX", "HEAD_DIM", "FP8_OUTPUT",
/// "warp_specialize"]`; the stage too, since the pruning depends on it).
#[allow(clippy::too_many_arguments)]
pub fn tuned_fwd_config(
    q: &Tensor<f16>,
    k: &Tensor<f16>,
    v: &Tensor<f16>,
    o: &Tensor<f16>,
    M: &Tensor<f32>,
    causal: bool,
    sm_scale: f32,
    warp_specialize: bool,
) -> Result<Config> {
    let [_, _, N_CTX, HEAD_DIM] = check_qkv(q, k, v)?;
    let dev = q.device();
    let stage = if causal { 3 } else { 1 };
    let candidates: Vec<Config> = configs(dev)
        .into_iter()
        .filter(|c| keep_for(c, N_CTX, stage))
        .collect();
    let Some(first) = candidates.first().cloned() else {
        return Err(common::invalid(
            OP,
            format!("no config fits N_CTX = {N_CTX}: the blocks (64 or 128 by 32, 64 or 128) must divide it"),
        ));
    };
    let key = format!(
        "N_CTX={N_CTX},HEAD_DIM={HEAD_DIM},FP8_OUTPUT=false,warp_specialize={warp_specialize},STAGE={stage}"
    );
    common::autotune(
        dev,
        "tegula_tutorials::t06_attn_fwd",
        &key,
        || {
            let ir = _attn_fwd::trace(
                HEAD_DIM,
                cx(&first, "BLOCK_M")?,
                cx(&first, "BLOCK_N")?,
                stage,
                warp_specialize,
                is_hopper(dev),
            )?;
            Ok(Tuning::new(
                "tegula_tutorials::t06_attn_fwd",
                &ir.to_string(),
                key.clone(),
                candidates,
            )
            .prepare_with(move |meta| {
                dev.prepare(|| {
                    attention_fwd_launch(q, k, v, o, M, causal, sm_scale, warp_specialize, meta)
                })
            }))
        },
        |meta| {
            median_ms(dev, || {
                attention_fwd_launch(q, k, v, o, M, causal, sm_scale, warp_specialize, meta)
            })
        },
    )
}

/// The forward's launch into prepared `o` and `M` with the tuned config; returns the context.
#[allow(clippy::too_many_arguments)]
pub fn attention_fwd_into(
    q: &Tensor<f16>,
    k: &Tensor<f16>,
    v: &Tensor<f16>,
    o: &Tensor<f16>,
    M: &Tensor<f32>,
    causal: bool,
    sm_scale: f32,
    warp_specialize: bool,
) -> Result<AttentionCtx> {
    let [_, _, _, HEAD_DIM] = check_qkv(q, k, v)?;
    let meta = tuned_fwd_config(q, k, v, o, M, causal, sm_scale, warp_specialize)?;
    attention_fwd_launch(q, k, v, o, M, causal, sm_scale, warp_specialize, &meta)?;
    Ok(AttentionCtx {
        q: q.clone(),
        k: k.clone(),
        v: v.clone(),
        o: o.clone(),
        M: M.clone(),
        sm_scale,
        head_dim: HEAD_DIM,
        causal,
    })
}

/// `_attention.forward(ctx, q, k, v, causal, sm_scale, warp_specialize)`: the output and the
/// saved context.
pub fn attention(
    q: &Tensor<f16>,
    k: &Tensor<f16>,
    v: &Tensor<f16>,
    causal: bool,
    sm_scale: f32,
    warp_specialize: bool,
) -> Result<(Tensor<f16>, AttentionCtx)> {
    let [Z, H, N_CTX, _] = check_qkv(q, k, v)?;
    let dev = q.device();
    let o = dev.empty::<f16>(q.shape())?;
    let M = dev.empty::<f32>([Z, H, N_CTX])?;
    let ctx = attention_fwd_into(q, k, v, &o, &M, causal, sm_scale, warp_specialize)?;
    Ok((o, ctx))
}

/// The backward's outputs and scratch: `dq`, `dk`, `dv`, the pre-scaled K and `delta`.
#[derive(Clone, Debug)]
pub struct BackwardBuffers {
    pub dq: Tensor<f16>,
    pub dk: Tensor<f16>,
    pub dv: Tensor<f16>,
    pub arg_k: Tensor<f16>,
    pub delta: Tensor<f32>,
}

impl BackwardBuffers {
    /// `torch.empty_like` of q, k, v, k and M.
    pub fn new(ctx: &AttentionCtx) -> Result<BackwardBuffers> {
        let dev = ctx.q.device();
        Ok(BackwardBuffers {
            dq: dev.empty::<f16>(ctx.q.shape())?,
            dk: dev.empty::<f16>(ctx.k.shape())?,
            dv: dev.empty::<f16>(ctx.v.shape())?,
            arg_k: dev.empty::<f16>(ctx.k.shape())?,
            delta: dev.empty::<f32>(ctx.M.shape())?,
        })
    }
}

/// The backward's block sizes: `(PRE_BLOCK, BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2,
/// BLK_SLICE_FACTOR)`.
pub const BWD_BLOCKS: (usize, usize, usize, usize, usize, usize) = (128, 32, 128, 128, 32, 2);

/// `_attention.backward(ctx, do)`'s launches into prepared buffers.
pub fn attention_backward_into(
    ctx: &AttentionCtx,
    do_: &Tensor<f16>,
    bufs: &BackwardBuffers,
) -> Result<()> {
    let (q, k, v, o) = (&ctx.q, &ctx.k, &ctx.v, &ctx.o);
    let [BATCH, N_HEAD, N_CTX, HEAD_DIM] = check_qkv(q, k, v)?;
    common::expect_shape(OP, "do", do_, q.shape())?;
    common::expect_contiguous(OP, "do", do_)?; // assert do.is_contiguous()
    common::expect_same_device(OP, q, do_)?;
    for (name, t) in [
        ("dq", &bufs.dq),
        ("dk", &bufs.dk),
        ("dv", &bufs.dv),
        ("arg_k", &bufs.arg_k),
    ] {
        common::expect_shape(OP, name, t, q.shape())?;
        common::expect_contiguous(OP, name, t)?;
    }
    common::expect_shape(OP, "delta", &bufs.delta, &[BATCH, N_HEAD, N_CTX])?;
    let (PRE_BLOCK, BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, BLK_SLICE_FACTOR) = BWD_BLOCKS;
    let (NUM_WARPS, NUM_STAGES) = (4, 5);
    let RCP_LN2 = 1.4426950408889634; // = 1.0 / ln(2)
    if !N_CTX.is_multiple_of(PRE_BLOCK) {
        return Err(common::invalid(
            OP,
            format!("the backward needs N_CTX % {PRE_BLOCK} == 0, got N_CTX = {N_CTX}"),
        ));
    }
    if BATCH * N_HEAD * N_CTX == 0 {
        return Ok(());
    }
    let dev = q.device();
    let n = k.numel();
    _scale_kernel::launch(
        dev,
        common::cdiv(n, 1024),
        k,
        &bufs.arg_k,
        common::as_i32(OP, "k.numel()", n)?,
        (ctx.sm_scale as f64 * RCP_LN2) as f32,
        1024,
    )?;
    let pre_grid = [(N_CTX / PRE_BLOCK) as u32, (BATCH * N_HEAD) as u32];
    _attn_bwd_preprocess::launch(
        dev,
        pre_grid,
        o,
        do_,
        &bufs.delta,
        BATCH as i32,
        N_HEAD as i32,
        N_CTX as i32,
        PRE_BLOCK,
        HEAD_DIM,
    )?;
    let grid = [(N_CTX / BLOCK_N1) as u32, 1, (BATCH * N_HEAD) as u32];
    let s = |i: usize| q.strides()[i] as i32;
    _attn_bwd::launch_with(
        dev,
        grid,
        LaunchConfig::new(NUM_WARPS, NUM_STAGES),
        q,
        &bufs.arg_k,
        v,
        ctx.sm_scale,
        do_,
        &bufs.dq,
        &bufs.dk,
        &bufs.dv,
        &ctx.M,
        &bufs.delta,
        s(0),
        s(1),
        s(2),
        s(3),
        N_HEAD as i32,
        N_CTX as i32,
        BLOCK_M1,
        BLOCK_N1,
        BLOCK_M2,
        BLOCK_N2,
        BLK_SLICE_FACTOR,
        HEAD_DIM,
        ctx.causal,
    )
}

/// `_attention.backward(ctx, do)`: `(dq, dk, dv)`.
pub fn attention_backward(
    ctx: &AttentionCtx,
    do_: &Tensor<f16>,
) -> Result<(Tensor<f16>, Tensor<f16>, Tensor<f16>)> {
    let bufs = BackwardBuffers::new(ctx)?;
    attention_backward_into(ctx, do_, &bufs)?;
    Ok((bufs.dq, bufs.dk, bufs.dv))
}

/// Float64 attention of one problem (`[Z, H, N, D]` row-major vectors), with the magnitudes
/// that bound a correct fp16 kernel's error (see [`reference()`]).
pub struct Reference {
    pub o: Vec<f64>,
    /// Base-2 logsumexp `[Z, H, N]` (what the kernel stores in `M`).
    pub m: Vec<f64>,
    /// `|error| <= u * magnitude` for a unit roundoff `u` of fp16 (up to f32 sums).
    pub o_mag: Vec<f64>,
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    pub dq_mag: Vec<f64>,
    pub dk_mag: Vec<f64>,
    pub dv_mag: Vec<f64>,
}

/// The forward and, with `d_o`, the backward in float64, and the error magnitudes of the
/// tutorial's fp16 algorithm. With `u` fp16's unit roundoff: P is rounded before its dot
/// (`u P`); the backward's scores use K pre-scaled and rounded to fp16, which moves a score
/// by up to `u a_ij` with `a_ij = sm_scale sum_d |q_id k_jd|`, hence P by `u P a_ij`; delta
/// comes from the rounded O; dS and each output are rounded once more.
pub fn reference(
    [z, h, n, d]: [usize; 4],
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: Option<&[f64]>,
    causal: bool,
    sm_scale: f64,
) -> Reference {
    let len = z * h * n * d;
    let mut r = Reference {
        o: vec![0.0; len],
        m: vec![0.0; z * h * n],
        o_mag: vec![0.0; len],
        dq: vec![0.0; len],
        dk: vec![0.0; len],
        dv: vec![0.0; len],
        dq_mag: vec![0.0; len],
        dk_mag: vec![0.0; len],
        dv_mag: vec![0.0; len],
    };
    let dotv = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let absdot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum::<f64>();
    for head in 0..z * h {
        let base = head * n * d;
        let row = |t: &[f64], i: usize| t[base + i * d..base + (i + 1) * d].to_vec();
        let visible = |i: usize, j: usize| !causal || j <= i;
        // P, row by row.
        let mut p = vec![0.0; n * n];
        for i in 0..n {
            let qi = row(q, i);
            let s: Vec<f64> = (0..n)
                .map(|j| {
                    if visible(i, j) {
                        sm_scale * dotv(&qi, &row(k, j))
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let l: f64 = e.iter().sum();
            r.m[head * n + i] = (mx + l.ln()) / std::f64::consts::LN_2;
            for j in 0..n {
                p[i * n + j] = e[j] / l;
            }
            for c in 0..d {
                let (mut o, mut mag) = (0.0, 0.0);
                for j in 0..n {
                    o += p[i * n + j] * v[base + j * d + c];
                    mag += (p[i * n + j] * v[base + j * d + c]).abs();
                }
                r.o[base + i * d + c] = o;
                r.o_mag[base + i * d + c] = mag + o.abs();
            }
        }
        let Some(d_o) = d_o else { continue };
        // delta, dP, dS and the error magnitudes of dS.
        let mut ds = vec![0.0; n * n];
        let mut ds_err = vec![0.0; n * n];
        for i in 0..n {
            let (doi, oi) = (row(d_o, i), row(&r.o, i));
            let delta = dotv(&oi, &doi);
            let delta_err: f64 = (0..d)
                .map(|c| (oi[c].abs() + 2.0 * r.o_mag[base + i * d + c]) * doi[c].abs())
                .sum();
            for j in 0..n {
                let pij = p[i * n + j];
                let dp = dotv(&doi, &row(v, j));
                let a = sm_scale * absdot(&row(q, i), &row(k, j));
                ds[i * n + j] = pij * (dp - delta);
                ds_err[i * n + j] =
                    pij * (a * (dp - delta).abs() + delta_err) + ds[i * n + j].abs();
            }
        }
        for j in 0..n {
            for c in 0..d {
                let (mut dv, mut dv_mag, mut dk, mut dk_mag) = (0.0, 0.0, 0.0, 0.0);
                for i in 0..n {
                    let pij = p[i * n + j];
                    let a = sm_scale * absdot(&row(q, i), &row(k, j));
                    let doic = d_o[base + i * d + c];
                    dv += pij * doic;
                    dv_mag += pij * (1.0 + a) * doic.abs();
                    let qic = q[base + i * d + c];
                    dk += sm_scale * ds[i * n + j] * qic;
                    dk_mag += sm_scale * ds_err[i * n + j] * qic.abs();
                }
                r.dv[base + j * d + c] = dv;
                r.dv_mag[base + j * d + c] = dv_mag + dv.abs();
                r.dk[base + j * d + c] = dk;
                r.dk_mag[base + j * d + c] = dk_mag + dk.abs();
            }
        }
        for i in 0..n {
            for c in 0..d {
                let (mut dq, mut dq_mag) = (0.0, 0.0);
                for j in 0..n {
                    let kjc = k[base + j * d + c];
                    dq += sm_scale * ds[i * n + j] * kjc;
                    dq_mag += sm_scale * (ds_err[i * n + j] + ds[i * n + j].abs()) * kjc.abs();
                }
                r.dq[base + i * d + c] = dq;
                r.dq_mag[base + i * d + c] = dq_mag + dq.abs();
            }
        }
    }
    r
}

/// fp16's unit roundoff.
const U: f64 = 1.0 / 2048.0;

/// Runs the forward (and with `backward` the backward) on fresh unit-normal inputs of
/// `[Z, H, N_CTX, HEAD_DIM]` and compares with float64: each element within twice its error
/// magnitude (see [`reference()`]) plus f32 and `exp2` slack.
pub fn check_with(
    dev: &Device,
    dims: [usize; 4],
    causal: bool,
    sm_scale: f32,
    backward: bool,
) -> Result<CheckReport> {
    let q = dev.randn::<f16>(dims.to_vec())?;
    let k = dev.randn::<f16>(dims.to_vec())?;
    let v = dev.randn::<f16>(dims.to_vec())?;
    let (o, ctx) = attention(&q, &k, &v, causal, sm_scale, false)?;
    let d_o = dev.randn::<f16>(dims.to_vec())?;
    let grads = if backward {
        Some(attention_backward(&ctx, &d_o)?)
    } else {
        None
    };
    let (qv, kv, vv, dov) = (
        q.to_f64_vec()?,
        k.to_f64_vec()?,
        v.to_f64_vec()?,
        d_o.to_f64_vec()?,
    );
    let want = reference(
        dims,
        &qv,
        &kv,
        &vv,
        backward.then_some(dov.as_slice()),
        causal,
        sm_scale as f64,
    );
    let [z, h, n, d] = dims;
    let shape = format!(
        "Z={z} H={h} N_CTX={n} HEAD_DIM={d}{}",
        if causal { " causal" } else { "" }
    );
    let tol = (1e-4, 2.0 * U);
    let Some((dq, dk, dv)) = grads else {
        return Ok(common::worst(vec![
            common::compare_scaled(
                OP,
                shape.clone() + " o",
                DType::F16,
                &o.to_f64_vec()?,
                &want.o,
                &want.o_mag,
                tol,
            ),
            common::compare(
                OP,
                shape + " M",
                DType::F32,
                &ctx.M.to_f64_vec()?,
                &want.m,
                (1e-4, 1e-5),
            ),
        ]));
    };
    Ok(common::worst(vec![
        common::compare_scaled(
            OP,
            shape.clone() + " dq",
            DType::F16,
            &dq.to_f64_vec()?,
            &want.dq,
            &want.dq_mag,
            tol,
        ),
        common::compare_scaled(
            OP,
            shape.clone() + " dk",
            DType::F16,
            &dk.to_f64_vec()?,
            &want.dk,
            &want.dk_mag,
            tol,
        ),
        common::compare_scaled(
            OP,
            shape + " dv",
            DType::F16,
            &dv.to_f64_vec()?,
            &want.dv,
            &want.dv_mag,
            tol,
        ),
    ]))
}

/// The harness's `sm_scale`.
pub const SM_SCALE: f32 = 1.3;

fn dims(shape: &[usize]) -> [usize; 4] {
    [
        common::dim(shape, 0, 1),
        common::dim(shape, 1, 3),
        common::dim(shape, 2, 128),
        common::dim(shape, 3, 32),
    ]
}

fn bench_with(dev: &Device, shape: &[usize], causal: bool, backward: bool) -> Result<Bench> {
    let dims = dims(shape);
    let [z, h, n, d] = dims;
    let q = dev.randn::<f16>(dims.to_vec())?;
    let k = dev.randn::<f16>(dims.to_vec())?;
    let v = dev.randn::<f16>(dims.to_vec())?;
    let o = dev.empty::<f16>(dims.to_vec())?;
    let M = dev.empty::<f32>([z, h, n])?;
    let fwd_flops = 4.0 * (z * h) as f64 * (n * n * d) as f64 * if causal { 0.5 } else { 1.0 };
    let qkv = (z * h * n * d) as f64 * 2.0;
    let lse = (z * h * n) as f64 * 4.0;
    if !backward {
        return Ok(Bench {
            flops: fwd_flops,
            // q, k, v read; o and M written
            bytes: 4.0 * qkv + lse,
            input_copies: 1,
            launch: Box::new(move || {
                attention_fwd_into(&q, &k, &v, &o, &M, causal, SM_SCALE, false).map(|_| ())
            }),
        });
    }
    let ctx = attention_fwd_into(&q, &k, &v, &o, &M, causal, SM_SCALE, false)?;
    let d_o = dev.randn::<f16>(dims.to_vec())?;
    let bufs = BackwardBuffers::new(&ctx)?;
    Ok(Bench {
        // The usual convention: the backward does 2.5 times the forward's FLOPs.
        flops: 2.5 * fwd_flops,
        // q, k, v, o, dO, M read; dq, dk, dv written
        bytes: 8.0 * qkv + lse,
        input_copies: 1,
        launch: Box::new(move || attention_backward_into(&ctx, &d_o, &bufs)),
    })
}

macro_rules! entry_fns {
    ($($check:ident, $bench:ident => $causal:expr, $backward:expr;)*) => {$(
        fn $check(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
            check_with(dev, dims(shape), $causal, SM_SCALE, $backward)
        }
        fn $bench(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
            bench_with(dev, shape, $causal, $backward)
        }
    )*};
}

entry_fns! {
    check_fwd, bench_fwd => false, false;
    check_fwd_causal, bench_fwd_causal => true, false;
    check_bwd, bench_bwd => false, true;
    check_bwd_causal, bench_bwd_causal => true, true;
}

/// The registry entries: the harness's `06-attention-fwd`, `-fwd-causal`, `-bwd`,
/// `-bwd-causal` at `Z4H32N4096D64`, fp16, `sm_scale = 1.3`.
pub fn tutorials() -> Vec<Port> {
    const SHAPES: &[BenchShape] = &[BenchShape {
        label: "Z4H32N4096D64",
        dims: &[4, 32, 4096, 64],
    }];
    type Fns = (
        fn(&Device, &[usize], DType) -> Result<CheckReport>,
        fn(&Device, &[usize], DType) -> Result<Bench>,
    );
    let entry = |name, about, (check, bench): Fns| Port {
        name,
        about,
        dims: &["Z", "H", "N_CTX", "HEAD_DIM"],
        default_shape: &[1, 3, 128, 32],
        bench_shapes: SHAPES,
        dtypes: &[DType::F16],
        check,
        bench,
    };
    vec![
        entry(
            "tutorial-06-attention-fwd",
            "FlashAttention forward, fp16, autotuned blocks",
            (check_fwd, bench_fwd),
        ),
        entry(
            "tutorial-06-attention-fwd-causal",
            "FlashAttention forward, causal (off-band and on-band stages)",
            (check_fwd_causal, bench_fwd_causal),
        ),
        entry(
            "tutorial-06-attention-bwd",
            "FlashAttention backward: K pre-scaled, preprocess, dK/dV and dQ in one kernel",
            (check_bwd, bench_bwd),
        ),
        entry(
            "tutorial-06-attention-bwd-causal",
            "FlashAttention backward, causal (diagonal in masked slices)",
            (check_bwd_causal, bench_bwd_causal),
        ),
    ]
}
