//! The FlashAttention backward (Triton tutorial 06's structure): a preprocess computing
//! `delta = rowsum(O * dO)`, a dK/dV kernel (K and V block resident, sweeping the Q blocks of
//! every query head of its KV group), and dQ by one of two strategies ([`DqStrategy`]):
//! - `Atomic` (the default, FlashAttention-2's): the dK/dV kernel also computes each step's
//!   `dS K` and adds it into an f32 buffer with `red.global.add` (zeroed on allocation), and a
//!   small kernel scales and converts it into dQ: 5 dots per (query block, key block) pair.
//!   The f32 sums land in an unspecified order, so dQ may differ by rounding between runs.
//! - `Kernel`: a separate dQ kernel (Q and dO block resident, sweeping K/V blocks) recomputes P
//!   and dP: 7 dots per pair, deterministic.
//!
//! f32 accumulation; P and dS are cast to the input dtype before their dots, as FlashAttention
//! does.
//!
//! The dK/dV grid's programs do equal work (non-causal), so when their count leaves a partial
//! last wave on the GPU's SMs, the blocks of that wave are split into slices of the query
//! blocks ([`TailSplit`]): their dK/dV partial sums go through an f32 buffer and
//! [`attn_bwd_dkdv_convert`]. Causal grids start the heaviest blocks first instead.
//!
//! With `S = scale * Q K^T`, `P = exp(S - lse)`: `dV = P^T dO`, `dP = dO V^T`,
//! `dS = P * (dP - delta)`, `dQ = scale * dS K`, `dK = scale * dS^T Q`. The kernels recompute P
//! in base 2 as `exp2(q.k * scale * log2 e - lse * log2 e)`.
//!
//! Padded query rows (past Nq) load a logsumexp of `+inf`, so their P is exactly 0 and they
//! contribute nothing without a mask; rows that saw no key (logsumexp `-inf`) only ever meet
//! masked keys, and the mask is applied with `select` after the exp2 (never by multiplying).

use super::contract::{
    and_mask, check_output, check_qkv, dot_precision, expect_block_sizes, feature_mask,
    heavy_blocks_first, load_key_block, load_or_zero, padded_head_dim, size_i32, softmax_scale,
    strides_i32, visible_keys, visible_scores, Dims,
};
use super::forward::{
    compare_bounded, forward, has_ragged_queries, mma_of, parse_shape, wgmma_runs, worse, LOG2E,
};
use super::{reference, AttentionOptions, DqPath};
use crate::check;
use crate::tuned;
use crate::CheckReport;
use tegula::autotune::{median_ms, Tuning};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::{Error, Result};

const OP: &str = "attention_backward";

/// `delta[b, h, i] = sum_d O[b, h, i, d] * dO[b, h, i, d]` in f32, into a contiguous
/// `[B, H, Nq]` buffer. Grid `(cdiv(Nq, block_m), B * H)`.
#[tegula::kernel]
pub fn attn_bwd_preprocess<T: Element>(
    o_ptr: Ptr<T>,
    do_ptr: Ptr<T>,
    delta_ptr: Ptr<f32>,
    stride_oz: i32,
    stride_oh: i32,
    stride_om: i32,
    stride_doz: i32,
    stride_doh: i32,
    stride_dom: i32,
    num_heads: i32,
    n_q: i32,
    #[constexpr] head_dim: usize,
    #[constexpr] block_m: usize,
) {
    let block_d = padded_head_dim(head_dim);
    let offs_m = program_id(0) * block_m + arange(0, block_m as i64);
    let off_hz = program_id(1);
    let off_z = off_hz / num_heads;
    let off_h = off_hz % num_heads;
    let offs_d = arange(0, block_d as i64);
    let mask = and_mask(
        offs_m.col().lt(n_q),
        feature_mask(offs_d, head_dim, block_d),
    );
    let o = load(
        o_ptr + off_z * stride_oz + off_h * stride_oh + offs_m.col() * stride_om + offs_d.row(),
        mask,
        0.0,
    );
    let d_o = load(
        do_ptr + off_z * stride_doz + off_h * stride_doh + offs_m.col() * stride_dom + offs_d.row(),
        mask,
        0.0,
    );
    let delta = sum(o.to::<f32>() * d_o.to::<f32>(), 1);
    store(delta_ptr + off_hz * n_q + offs_m, delta, offs_m.lt(n_q));
}

/// The query-side tiles one step of the dK/dV sweep reads: the bases of one query head.
#[derive(Clone, Copy)]
struct QueryHead {
    q: Tile,
    d_o: Tile,
    stride_qm: Tile,
    stride_dom: Tile,
    /// `lse` and `delta` rows of this head.
    lse: Tile,
    delta: Tile,
    /// With atomic dQ: the head's rows of the f32 dQ buffer (row stride `head_dim`).
    dq_acc: Option<Tile>,
}

/// The resident key block of the dK/dV sweep. On tensor cores K and V stay in shared memory
/// for the whole kernel (written once, before the sweep over the heads) and every dot reads
/// them there with `ldmatrix`: K as A of `K Q^T` and, from the same copy, as B of dQ's `dS K`;
/// V as A of `V dO^T` (see `plan/pipeline.rs`, rule *resident operands*). The registers hold
/// dK, dV and one step's P^T and dP^T.
#[derive(Clone, Copy)]
struct KeyBlock {
    k: Tile,
    v: Tile,
    offs_n: Tile,
}

/// One step of the dK/dV sweep: folds the query rows `[start_m, start_m + block_m)` of one head
/// into `(dk, dv)` of the resident key block. With `diag`, the scores of keys a row cannot see
/// are dropped (`diag = Nk - Nq`: row `i` sees key `j` when `j <= i + diag`). `ragged_n_q` is
/// `Some(Nq)` when the last query block is partial; without it every row exists and Q, dO,
/// lse, delta and the dQ additions take no row mask (a predicated `red` costs ptxas a branch
/// around each of the 16 additions a thread makes a step).
#[allow(clippy::too_many_arguments)]
fn dkdv_step<T: Element>(
    head: QueryHead,
    start_m: Tile,
    keys: KeyBlock,
    offs_d: Tile,
    d_mask: Option<Tile>,
    ragged_n_q: Option<Tile>,
    diag: Option<Tile>,
    qk_scale: Tile,
    block_m: usize,
    head_dim: usize,
    dk: Tile,
    dv: Tile,
) -> (Tile, Tile) {
    let offs_m = start_m + arange(0, block_m as i64);
    let m_mask = ragged_n_q.map(|n_q| offs_m.lt(n_q));
    let row_mask = match m_mask {
        Some(m_mask) => Some(and_mask(m_mask.col(), d_mask)),
        None => d_mask,
    };
    // Q and dO each feed two dots (as is and transposed): the pipeliner copies each once a
    // step with cp.async into one slot that both dots read with their own ldmatrix.
    let q = load_or_zero(
        head.q + offs_m.col() * head.stride_qm + offs_d.row(),
        row_mask,
    );
    let d_o = load_or_zero(
        head.d_o + offs_m.col() * head.stride_dom + offs_d.row(),
        row_mask,
    );
    // Padded rows get lse = +inf, hence P = 0.
    let (lse, delta) = match m_mask {
        Some(m_mask) => (
            load(head.lse + offs_m, m_mask, f32::INFINITY),
            load(head.delta + offs_m, m_mask, 0.0),
        ),
        None => (
            load_unmasked(head.lse + offs_m),
            load_unmasked(head.delta + offs_m),
        ),
    };
    let lse2 = lse * LOG2E;
    // Scores transposed: [block_n, block_m].
    let KeyBlock { k, v, offs_n } = keys;
    let qk_t = dot_with(k, q.trans(), None, dot_precision::<T>()) * qk_scale;
    let mut p_t = exp2(qk_t - lse2.row());
    if let Some(diag) = diag {
        p_t = select(offs_n.col().le(offs_m.row() + diag), p_t, 0.0);
    }
    let dv = dot_with(p_t.to::<T>(), d_o, Some(dv), dot_precision::<T>());
    let dp_t = dot_with(v, d_o.trans(), None, dot_precision::<T>());
    // dP^T first: a dot whose product feeds another dot's A operand gets that chain's warp
    // layout, and the lowering follows the product's first operand back to its dot. Listed
    // first, dP^T shares P^T's layout (warps along rows) instead of being converted to it
    // through shared memory every step.
    let ds_t = ((dp_t - delta.row()) * p_t).to::<T>();
    if let Some(dq_acc) = head.dq_acc {
        // This block's share of dQ (unscaled: the conversion applies sm_scale), added from the
        // accumulator's registers; padded rows and features are masked off. Issued before dK's
        // dot, as FlashAttention-2 does: the atomics read their data registers late, and the
        // dot's mmas, which write none of them, cover those reads instead of the next step's
        // first instructions waiting for them at the back edge.
        let dq = dot_with(ds_t.trans(), k, None, dot_precision::<T>());
        atomic_add_relaxed(
            dq_acc + offs_m.col() * head_dim + offs_d.row(),
            dq,
            row_mask,
        );
    }
    let dk = dot_with(ds_t, q, Some(dk), dot_precision::<T>());
    (dk, dv)
}

/// One program per (block of `block_n` keys, batch * KV head): K and V stay resident while the
/// program sweeps the Q blocks of each query head of its group (`group_size` heads) and
/// accumulates dK and dV in f32. With `atomic_dq`, it also adds each step's dQ rows into
/// `dq_acc_ptr` (f32 `[B, H, Nq, head_dim]`, contiguous, zeroed beforehand; unused otherwise).
/// `ragged_queries`: `Nq` is not a multiple of `block_m` (the forward's flag of the same name);
/// without it the steps take no row masks. Grid `(cdiv(Nk, block_n), B * Hkv)`.
///
/// `split_tail` (non-causal only; see [`TailSplit`]): a one-dimensional grid whose first
/// `whole_programs` programs each sweep one whole (key block, KV head) as above, in the same
/// order, and whose remaining programs split the blocks after those: `slices` programs a block,
/// each over `slice_rows` query rows (a multiple of `block_m`) of every head of the group. A
/// split program adds its scaled dK and its dV in f32 into its block's rows of `dkdv_acc_ptr`
/// (`[split blocks, 2, block_n, head_dim]`, zeroed beforehand), which
/// [`attn_bwd_dkdv_convert`] then writes into dK and dV.
#[tegula::kernel]
pub fn attn_bwd_dkdv<T: Element>(
    q_ptr: Ptr<T>,
    k_ptr: Ptr<T>,
    v_ptr: Ptr<T>,
    do_ptr: Ptr<T>,
    lse_ptr: Ptr<f32>,
    delta_ptr: Ptr<f32>,
    dk_ptr: Ptr<T>,
    dv_ptr: Ptr<T>,
    dq_acc_ptr: Ptr<f32>,
    dkdv_acc_ptr: Ptr<f32>,
    stride_qz: i32,
    stride_qh: i32,
    stride_qm: i32,
    stride_kz: i32,
    stride_kh: i32,
    stride_kn: i32,
    stride_vz: i32,
    stride_vh: i32,
    stride_vn: i32,
    stride_doz: i32,
    stride_doh: i32,
    stride_dom: i32,
    stride_dkz: i32,
    stride_dkh: i32,
    stride_dkn: i32,
    stride_dvz: i32,
    stride_dvh: i32,
    stride_dvn: i32,
    num_kv_heads: i32,
    group_size: i32,
    n_q: i32,
    n_k: i32,
    sm_scale: f32,
    whole_programs: i32,
    slices: i32,
    slice_rows: i32,
    #[constexpr] causal: bool,
    #[constexpr] atomic_dq: bool,
    #[constexpr] split_tail: bool,
    #[constexpr] ragged_queries: bool,
    #[constexpr] head_dim: usize,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
) {
    let block_d = padded_head_dim(head_dim);
    let ragged_n_q = if ragged_queries { Some(n_q) } else { None };
    // Causal: key block 0 is swept by the most query blocks; the heaviest start first (see
    // `heavy_blocks_first`).
    // Non-causal with a split tail: the query rows `[m_lo, m_hi)` of each head (all of them
    // for a whole program), and whether this program adds into the f32 partial sums.
    let mut split = None;
    let (key_block, off_hkvz) = if causal {
        heavy_blocks_first()
    } else if split_tail {
        let pid = program_id(0);
        let key_blocks = cdiv(n_k, block_n);
        let is_split = pid.ge(whole_programs);
        let split_index = maximum(pid - whole_programs, 0);
        let block = select(is_split, whole_programs + split_index / slices, pid);
        let m_lo = select(is_split, split_index % slices * slice_rows, 0);
        let m_hi = minimum(m_lo + select(is_split, slice_rows, n_q), n_q);
        split = Some((is_split, block - whole_programs, m_lo, m_hi));
        (block % key_blocks, block / key_blocks)
    } else {
        (program_id(0), program_id(1))
    };
    let start_n = key_block * block_n;
    let off_z = off_hkvz / num_kv_heads;
    let off_hkv = off_hkvz % num_kv_heads;
    let num_heads = num_kv_heads * group_size;

    let offs_n = start_n + arange(0, block_n as i64);
    let offs_d = arange(0, block_d as i64);
    let d_mask = feature_mask(offs_d, head_dim, block_d);
    let kv_mask = and_mask(offs_n.col().lt(n_k), d_mask);
    let k = load(
        k_ptr + off_z * stride_kz + off_hkv * stride_kh + offs_n.col() * stride_kn + offs_d.row(),
        kv_mask,
        0.0,
    );
    let v = load(
        v_ptr + off_z * stride_vz + off_hkv * stride_vh + offs_n.col() * stride_vn + offs_d.row(),
        kv_mask,
        0.0,
    );
    let keys = KeyBlock { k, v, offs_n };
    let qk_scale = sm_scale * LOG2E;
    let mut dk = zeros::<f32>([block_n, block_d]);
    let mut dv = zeros::<f32>([block_n, block_d]);

    // Rows [lo, mid) see only part of this key block (masked); rows [mid, Nq) see all of it;
    // rows before lo see none of it. Keys past Nk need no mask: they only feed dK/dV rows that
    // are never stored.
    let diag = n_k - n_q;
    let (lo, mid) = if causal {
        let lo = minimum(maximum(start_n - diag, 0), n_q) / block_m * block_m;
        let mid = cdiv(maximum(start_n + (block_n - 1) - diag, 0), block_m) * block_m;
        (lo, mid)
    } else {
        (scalar(0), scalar(0))
    };

    for g in range(0, group_size, 1) {
        let off_h = off_hkv * group_size + g;
        let row0 = (off_z * num_heads + off_h) * n_q;
        let head = QueryHead {
            q: q_ptr + off_z * stride_qz + off_h * stride_qh,
            d_o: do_ptr + off_z * stride_doz + off_h * stride_doh,
            stride_qm,
            stride_dom,
            lse: lse_ptr + row0,
            delta: delta_ptr + row0,
            dq_acc: if atomic_dq {
                Some(dq_acc_ptr + row0 * head_dim)
            } else {
                None
            },
        };
        if causal {
            for start_m in range(lo, minimum(mid, n_q), block_m) {
                (dk, dv) = dkdv_step::<T>(
                    head,
                    start_m,
                    keys,
                    offs_d,
                    d_mask,
                    ragged_n_q,
                    Some(diag),
                    qk_scale,
                    block_m,
                    head_dim,
                    dk,
                    dv,
                );
            }
        }
        let (m_lo, m_hi) = match split {
            Some((_, _, m_lo, m_hi)) => (m_lo, m_hi),
            None => (mid, n_q),
        };
        for start_m in range(m_lo, m_hi, block_m) {
            (dk, dv) = dkdv_step::<T>(
                head, start_m, keys, offs_d, d_mask, ragged_n_q, None, qk_scale, block_m, head_dim,
                dk, dv,
            );
        }
    }

    let dk = dk * sm_scale;
    // A whole program stores; a split program adds its partial sums instead. The atomics sit
    // behind one uniform branch, so whole programs skip their masks and addresses at once.
    let store_mask = match split {
        Some((is_split, split_block, _, _)) => {
            if_then(is_split, || {
                let (dk_acc, dv_acc) =
                    split_partials(dkdv_acc_ptr, split_block, offs_d, head_dim, block_n);
                atomic_add_relaxed(dk_acc, dk, Some(kv_mask));
                atomic_add_relaxed(dv_acc, dv, Some(kv_mask));
            });
            kv_mask & !is_split
        }
        None => kv_mask,
    };
    let rows = (off_z, off_hkv, offs_n, offs_d);
    store_head_rows::<T>(
        (dk_ptr, stride_dkz, stride_dkh, stride_dkn),
        rows,
        dk,
        store_mask,
    );
    store_head_rows::<T>(
        (dv_ptr, stride_dvz, stride_dvh, stride_dvn),
        rows,
        dv,
        store_mask,
    );
}

/// The f32 partial dK and dV of split block `split_block` in `dkdv_acc_ptr`
/// (`[split blocks, 2, block_n, head_dim]`; split blocks are numbered from 0 after the whole
/// programs' blocks), as pointers `[block_n, block_d]`.
fn split_partials(
    dkdv_acc_ptr: Tile,
    split_block: Tile,
    offs_d: Tile,
    head_dim: usize,
    block_n: usize,
) -> (Tile, Tile) {
    let rows = split_block * (2 * block_n) + arange(0, block_n as i64);
    let dk = dkdv_acc_ptr + rows.col() * head_dim + offs_d.row();
    (dk, dk + block_n * head_dim)
}

/// Stores `x`, cast to `T`, into rows `offs_n` (columns `offs_d`) of head `off_h` of batch
/// `off_z` of a `[B, H, N, D]` tensor given as (base, batch, head and row strides).
fn store_head_rows<T: Element>(
    (base, stride_z, stride_h, stride_n): (Tile, Tile, Tile, Tile),
    (off_z, off_h, offs_n, offs_d): (Tile, Tile, Tile, Tile),
    x: Tile,
    mask: Tile,
) {
    store(
        base + off_z * stride_z + off_h * stride_h + offs_n.col() * stride_n + offs_d.row(),
        x.to::<T>(),
        mask,
    );
}

/// dK and dV of the split blocks of [`attn_bwd_dkdv`]'s tail, from its f32 partial sums
/// (`[split blocks, 2, block_n, head_dim]`, dK already scaled) into the output dtype. One
/// program a split block: grid `(split blocks)`; block `i` is the grid's (key block, KV head)
/// number `whole_programs + i`, as in the dK/dV kernel.
#[tegula::kernel]
pub fn attn_bwd_dkdv_convert<T: Element>(
    dkdv_acc_ptr: Ptr<f32>,
    dk_ptr: Ptr<T>,
    dv_ptr: Ptr<T>,
    stride_dkz: i32,
    stride_dkh: i32,
    stride_dkn: i32,
    stride_dvz: i32,
    stride_dvh: i32,
    stride_dvn: i32,
    num_kv_heads: i32,
    n_k: i32,
    whole_programs: i32,
    #[constexpr] head_dim: usize,
    #[constexpr] block_n: usize,
) {
    let block_d = padded_head_dim(head_dim);
    let split_block = program_id(0);
    let block = whole_programs + split_block;
    let key_blocks = cdiv(n_k, block_n);
    let off_hkvz = block / key_blocks;
    let off_z = off_hkvz / num_kv_heads;
    let off_hkv = off_hkvz % num_kv_heads;
    let start_n = block % key_blocks * block_n;
    let offs_n = start_n + arange(0, block_n as i64);
    let offs_d = arange(0, block_d as i64);
    let mask = and_mask(
        offs_n.col().lt(n_k),
        feature_mask(offs_d, head_dim, block_d),
    );
    let (dk_acc, dv_acc) = split_partials(dkdv_acc_ptr, split_block, offs_d, head_dim, block_n);
    let dk = load(dk_acc, mask, 0.0);
    let dv = load(dv_acc, mask, 0.0);
    let rows = (off_z, off_hkv, offs_n, offs_d);
    store_head_rows::<T>((dk_ptr, stride_dkz, stride_dkh, stride_dkn), rows, dk, mask);
    store_head_rows::<T>((dv_ptr, stride_dvz, stride_dvh, stride_dvn), rows, dv, mask);
}

/// One step of the dQ sweep: folds the key block `[start_n, start_n + block_n)` into `dq`.
/// `visible` (when present) masks keys outside the keys or the causal band.
#[allow(clippy::too_many_arguments)]
fn dq_step<T: Element>(
    q: Tile,
    d_o: Tile,
    lse2: Tile,
    delta: Tile,
    k: Tile,
    v: Tile,
    visible: Option<Tile>,
    qk_scale: Tile,
    dq: Tile,
) -> Tile {
    let qk = dot_with(q, k.trans(), None, dot_precision::<T>()) * qk_scale;
    let mut p = exp2(qk - lse2.col());
    if let Some(visible) = visible {
        p = select(visible, p, 0.0);
    }
    let dp = dot_with(d_o, v.trans(), None, dot_precision::<T>());
    let ds = p * (dp - delta.col());
    dot_with(ds.to::<T>(), k, Some(dq), dot_precision::<T>())
}

/// One program per (block of `block_m` query rows, batch * head): Q, dO, their logsumexp and
/// delta stay resident while the program sweeps the K/V blocks the rows see, like the forward.
/// Grid `(cdiv(Nq, block_m), B * H)`.
#[tegula::kernel]
pub fn attn_bwd_dq<T: Element>(
    q_ptr: Ptr<T>,
    k_ptr: Ptr<T>,
    v_ptr: Ptr<T>,
    do_ptr: Ptr<T>,
    lse_ptr: Ptr<f32>,
    delta_ptr: Ptr<f32>,
    dq_ptr: Ptr<T>,
    stride_qz: i32,
    stride_qh: i32,
    stride_qm: i32,
    stride_kz: i32,
    stride_kh: i32,
    stride_kn: i32,
    stride_vz: i32,
    stride_vh: i32,
    stride_vn: i32,
    stride_doz: i32,
    stride_doh: i32,
    stride_dom: i32,
    stride_dqz: i32,
    stride_dqh: i32,
    stride_dqm: i32,
    num_heads: i32,
    group_size: i32,
    n_q: i32,
    n_k: i32,
    sm_scale: f32,
    #[constexpr] causal: bool,
    #[constexpr] head_dim: usize,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
) {
    let block_d = padded_head_dim(head_dim);
    let start_m = program_id(0) * block_m;
    let off_hz = program_id(1);
    let off_z = off_hz / num_heads;
    let off_h = off_hz % num_heads;
    let off_hkv = off_h / group_size;
    // This head's K and V, each as (base, row stride).
    let keys = (k_ptr + off_z * stride_kz + off_hkv * stride_kh, stride_kn);
    let values = (v_ptr + off_z * stride_vz + off_hkv * stride_vh, stride_vn);

    let offs_m = start_m + arange(0, block_m as i64);
    let offs_n = arange(0, block_n as i64);
    let offs_d = arange(0, block_d as i64);
    let d_mask = feature_mask(offs_d, head_dim, block_d);
    let m_mask = offs_m.lt(n_q);
    let q_mask = and_mask(m_mask.col(), d_mask);
    let q = load(
        q_ptr + off_z * stride_qz + off_h * stride_qh + offs_m.col() * stride_qm + offs_d.row(),
        q_mask,
        0.0,
    );
    let d_o = load(
        do_ptr + off_z * stride_doz + off_h * stride_doh + offs_m.col() * stride_dom + offs_d.row(),
        q_mask,
        0.0,
    );
    // Padded rows get lse = +inf, hence P = 0.
    let lse2 = load(lse_ptr + off_hz * n_q + offs_m, m_mask, f32::INFINITY) * LOG2E;
    let delta = load(delta_ptr + off_hz * n_q + offs_m, m_mask, 0.0);
    let qk_scale = sm_scale * LOG2E;
    let mut dq = zeros::<f32>([block_m, block_d]);

    let (full, hi) = visible_keys(start_m, block_m, n_q, n_k, causal);
    let unmasked_end = full / block_n * block_n;
    for start_n in range(0, unmasked_end, block_n) {
        let offs_kv = start_n + offs_n;
        let (k, v) = load_key_block(keys, values, offs_kv, offs_d, d_mask, None);
        dq = dq_step::<T>(q, d_o, lse2, delta, k, v, None, qk_scale, dq);
    }
    for start_n in range(unmasked_end, hi, block_n) {
        let offs_kv = start_n + offs_n;
        let (k, v) = load_key_block(keys, values, offs_kv, offs_d, d_mask, Some(n_k));
        let visible = visible_scores(offs_m, offs_kv, n_q, n_k, causal);
        dq = dq_step::<T>(q, d_o, lse2, delta, k, v, Some(visible), qk_scale, dq);
    }

    let dq = dq * sm_scale;
    let rows = (off_z, off_h, offs_m, offs_d);
    store_head_rows::<T>(
        (dq_ptr, stride_dqz, stride_dqh, stride_dqm),
        rows,
        dq,
        q_mask,
    );
}

/// `dq = sm_scale * dq_acc` in the output dtype, from the f32 buffer the dK/dV kernel added
/// into (`[B, H, Nq, head_dim]`, contiguous). Grid `(cdiv(Nq, block_m), B * H)`.
#[tegula::kernel]
pub fn attn_bwd_dq_convert<T: Element>(
    dq_acc_ptr: Ptr<f32>,
    dq_ptr: Ptr<T>,
    stride_dqz: i32,
    stride_dqh: i32,
    stride_dqm: i32,
    num_heads: i32,
    n_q: i32,
    sm_scale: f32,
    #[constexpr] head_dim: usize,
    #[constexpr] block_m: usize,
) {
    let block_d = padded_head_dim(head_dim);
    let offs_m = program_id(0) * block_m + arange(0, block_m as i64);
    let off_hz = program_id(1);
    let off_z = off_hz / num_heads;
    let off_h = off_hz % num_heads;
    let offs_d = arange(0, block_d as i64);
    let mask = and_mask(
        offs_m.col().lt(n_q),
        feature_mask(offs_d, head_dim, block_d),
    );
    let acc = load(
        dq_acc_ptr + (off_hz * n_q + offs_m.col()) * head_dim + offs_d.row(),
        mask,
        0.0,
    );
    let rows = (off_z, off_h, offs_m, offs_d);
    store_head_rows::<T>(
        (dq_ptr, stride_dqz, stride_dqh, stride_dqm),
        rows,
        acc * sm_scale,
        mask,
    );
}

/// How the backward computes dQ (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DqStrategy {
    /// Added into an f32 buffer by the dK/dV kernel, then converted: 5 dots a block pair.
    Atomic,
    /// A separate kernel sweeping the key blocks: 7 dots a block pair, deterministic.
    Kernel,
}

impl DqStrategy {
    /// `Atomic` wherever the f32 buffer's element offsets fit in i32, unless the options ask
    /// for [`DqPath::Kernel`].
    fn choose(dims: &Dims, path: DqPath) -> DqStrategy {
        let fits = (dims.batch * dims.heads)
            .checked_mul(dims.n_q)
            .and_then(|n| n.checked_mul(dims.head_dim))
            .is_some_and(|n| n <= i32::MAX as usize);
        if fits && path == DqPath::Auto {
            DqStrategy::Atomic
        } else {
            DqStrategy::Kernel
        }
    }

    fn name(self) -> &'static str {
        match self {
            DqStrategy::Atomic => "atomic",
            DqStrategy::Kernel => "kernel",
        }
    }
}

/// How the non-causal dK/dV grid splits its last wave (see [`attn_bwd_dkdv`]'s `split_tail`).
///
/// Its programs, one (key block, KV head) each, do equal work, so when their count is not a
/// multiple of the SMs the last wave runs a few programs for a whole program's time while the
/// other SMs idle (4096 programs on 132 SMs: 31 waves and 4 programs). Splitting the blocks
/// of that partial wave, or of it and the last whole wave, into slices of the query blocks
/// spreads their work over all the SMs, at the cost of a prologue a program and the f32
/// partial sums of dK and dV (added with atomics, then converted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailSplit {
    /// The programs that sweep a whole block, first in the grid: a multiple of the SMs.
    pub whole_programs: usize,
    /// The blocks after those, each swept by `slices` programs.
    pub split_blocks: usize,
    pub slices: usize,
    /// Query blocks a slice (the last slice of a block may have fewer).
    pub slice_blocks: usize,
}

impl TailSplit {
    /// Modelled cost of a program beyond its steps, in steps: loading K and V, filling the
    /// pipeline, storing dK and dV. A guess; it only has to keep tiny slices from winning.
    const PROGRAM_STEPS: usize = 1;
    /// Modelled extra cost of a split program, in steps: its `2 * block_n * head_dim` f32
    /// atomics (2 to 4 steps' worth of dQ atomics at 64x128), mostly hidden behind other
    /// programs' math.
    const SPLIT_STEPS: usize = 2;

    /// The split of a grid of `programs` programs of `group * query_blocks` steps each on `sms`
    /// SMs (one program an SM), or `None` when no split beats whole programs by 0.5% in a
    /// list-scheduling model: whole programs in full waves, then the split programs in waves.
    /// The candidates split the partial last wave's blocks, or those and one more wave's, into
    /// slices of 1 to `query_blocks - 1` query blocks.
    pub fn choose(
        programs: usize,
        sms: usize,
        query_blocks: usize,
        group: usize,
    ) -> Option<TailSplit> {
        let sms = sms.max(1);
        let partial = programs % sms;
        if partial == 0 || query_blocks < 2 {
            return None;
        }
        let whole_time = group * query_blocks + Self::PROGRAM_STEPS;
        let unsplit = programs.div_ceil(sms) * whole_time;
        let mut best: Option<(usize, TailSplit)> = None;
        for split_blocks in [partial, partial + sms] {
            if split_blocks > programs {
                continue;
            }
            let whole_programs = programs - split_blocks;
            // Fewest programs first, so a tie keeps the coarser split.
            for slice_blocks in (1..query_blocks).rev() {
                let slices = query_blocks.div_ceil(slice_blocks);
                let split_time = group * slice_blocks + Self::PROGRAM_STEPS + Self::SPLIT_STEPS;
                let time = whole_programs / sms * whole_time
                    + (split_blocks * slices).div_ceil(sms) * split_time;
                if best.is_none_or(|(t, _)| time < t) {
                    let split = TailSplit {
                        whole_programs,
                        split_blocks,
                        slices,
                        slice_blocks,
                    };
                    best = Some((time, split));
                }
            }
        }
        best.filter(|&(time, _)| time * 1000 < unsplit * 995)
            .map(|(_, split)| split)
    }

    /// The grid's programs.
    pub fn programs(&self) -> usize {
        self.whole_programs + self.split_blocks * self.slices
    }
}

/// SMs the interpreter's grids are sized for: few, so that small test shapes take the split
/// tail (see [`TailSplit`]).
const INTERPRETER_SMS: usize = 3;

/// The tail split [`backward_into`] launches the dK/dV kernel with, for these sizes and block
/// sizes on `dev` (from its SM count; on the interpreter, a small count): only the non-causal
/// kernel with atomic dQ splits, and none when the options' `tail_split` is off.
pub fn backward_tail_split(
    dev: &Device,
    dims: &Dims,
    options: &AttentionOptions,
    block_m: usize,
    block_n: usize,
) -> Option<TailSplit> {
    if !options.tail_split
        || options.causal
        || DqStrategy::choose(dims, options.dq_path) != DqStrategy::Atomic
        || dims.n_q == 0
    {
        return None;
    }
    let programs = dims.n_k.div_ceil(block_n) * dims.batch * dims.kv_heads;
    TailSplit::choose(
        programs,
        check::sm_count(dev, INTERPRETER_SMS),
        dims.n_q.div_ceil(block_m),
        dims.group_size(),
    )
}

/// The gradients of attention with respect to its inputs.
pub struct Gradients<T: Element> {
    pub dq: Tensor<T>,
    pub dk: Tensor<T>,
    pub dv: Tensor<T>,
}

/// The backward into `dq` `[B, H, Nq, D]`, `dk` and `dv` `[B, Hkv, Nk, D]`.
///
/// Contract: Q, K, V as for [`super::forward_into`]; `o` and `d_o` shaped like Q (any strides
/// with unit stride on D); `lse` the forward's logsumexp `[B, H, Nq]` (f32, contiguous);
/// `options` as in the forward (same `causal` and `sm_scale`). The outputs may be strided views
/// (unit stride on D) that do not overlap themselves, each other or any input. For GQA, dK and
/// dV of a KV head sum over the query heads of its group, in a fixed order (deterministic).
/// Block sizes, warps and stages left at `AUTO` are chosen by the autotuner (see
/// [`backward_config`]).
#[allow(clippy::too_many_arguments)]
pub fn backward_into<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    dq: &Tensor<T>,
    dk: &Tensor<T>,
    dv: &Tensor<T>,
    options: &AttentionOptions,
) -> Result<()> {
    let dims = check_backward(q, k, v, o, d_o, lse, dq, dk, dv, options)?;
    let run = |opts: &AttentionOptions| launch(q, k, v, o, d_o, lse, dq, dk, dv, opts, &dims);
    resolve_then(q, k, v, o, d_o, lse, dq, dk, dv, options, &dims, run)
}

/// The options [`backward_into`] launches with for these tensors: `options` when every block
/// size and the warps/stages are set, else the autotuner's choice among
/// [`super::backward_candidates`] for [`super::key`] (on the interpreter: the first). On a GPU
/// a miss may time every candidate, writing `dq`, `dk` and `dv`.
#[allow(clippy::too_many_arguments)]
pub fn backward_config<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    dq: &Tensor<T>,
    dk: &Tensor<T>,
    dv: &Tensor<T>,
    options: &AttentionOptions,
) -> Result<AttentionOptions> {
    let dims = check_backward(q, k, v, o, d_o, lse, dq, dk, dv, options)?;
    resolve(q, k, v, o, d_o, lse, dq, dk, dv, options, &dims)
}

#[allow(clippy::too_many_arguments)]
fn check_backward<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    dq: &Tensor<T>,
    dk: &Tensor<T>,
    dv: &Tensor<T>,
    options: &AttentionOptions,
) -> Result<Dims> {
    let dims = check_inputs(q, k, v, o, d_o, lse, options)?;
    let inputs = [("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o)];
    check_output(OP, "dq", dq, &dims.q_shape(), q, &inputs)?;
    check_output(OP, "dk", dk, &dims.kv_shape(), q, &inputs)?;
    check_output(OP, "dv", dv, &dims.kv_shape(), q, &inputs)?;
    for (name, t) in [("dq", dq), ("dk", dk), ("dv", dv)] {
        check::expect_no_alias(OP, (name, t), ("lse", lse))?;
    }
    check::expect_no_alias(OP, ("dk", dk), ("dq", dq))?;
    check::expect_no_alias(OP, ("dv", dv), ("dq", dq))?;
    check::expect_no_alias(OP, ("dv", dv), ("dk", dk))?;
    softmax_scale(OP, options, dims.head_dim)?;
    for (name, t) in [
        ("q", q),
        ("k", k),
        ("v", v),
        ("o", o),
        ("d_o", d_o),
        ("dq", dq),
        ("dk", dk),
        ("dv", dv),
    ] {
        strides_i32::<3, T>(OP, name, t)?;
    }
    strides_i32::<1, f32>(OP, "lse", lse)?;
    size_i32(OP, "B * H", dims.batch * dims.heads)?;
    size_i32(OP, "B * Hkv", dims.batch * dims.kv_heads)?;
    Ok(dims)
}

#[allow(clippy::too_many_arguments)]
fn resolve<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    dq: &Tensor<T>,
    dk: &Tensor<T>,
    dv: &Tensor<T>,
    options: &AttentionOptions,
    dims: &Dims,
) -> Result<AttentionOptions> {
    resolve_then(q, k, v, o, d_o, lse, dq, dk, dv, options, dims, |o| Ok(*o))
}

/// `then` with the options [`backward_config`] says; a tuned config that fails in `then` is
/// dropped from the autotune cache and chosen again ([`tuned::run`]).
#[allow(clippy::too_many_arguments)]
fn resolve_then<T: Element, R>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    dq: &Tensor<T>,
    dk: &Tensor<T>,
    dv: &Tensor<T>,
    options: &AttentionOptions,
    dims: &Dims,
    mut then: impl FnMut(&AttentionOptions) -> Result<R>,
) -> Result<R> {
    if !options.is_tuned() && options.wgmma.is_some() {
        return then(options);
    }
    let held = [("block_m", options.block_m), ("block_n", options.block_n)];
    let strategy = DqStrategy::choose(dims, options.dq_path);
    let key = format!(
        "{},dq={}{}{}",
        super::key(dims, T::DTYPE, options.causal),
        strategy.name(),
        if options.tail_split { "" } else { ",split=off" },
        tuned::held_suffix(&held, options.config)
    ) + tuned::held_wgmma_suffix(options.wgmma);
    let dev = q.device();
    tuned::run(
        dev,
        "tegula_kernels::attention::backward",
        &key,
        || {
            // Only on a memo miss: a launch whose config is known builds no candidate list.
            let candidates = super::backward_candidates(dims, T::DTYPE, options, dev.has_wgmma());
            // The source hash: the Tile IR of the default candidate's three kernels.
            let r = candidates[0];
            let (c, d) = (options.causal, dims.head_dim);
            let atomic = strategy == DqStrategy::Atomic;
            let ir = format!(
                "{}\n{}\n{}",
                attn_bwd_preprocess::trace::<T>(d, r.block_m)?,
                attn_bwd_dkdv::trace::<T>(
                    c,
                    atomic,
                    false,
                    has_ragged_queries(dims.n_q, r.block_m),
                    d,
                    r.block_m,
                    r.block_n,
                )?,
                if atomic {
                    attn_bwd_dq_convert::trace::<T>(d, r.block_m)?
                } else {
                    attn_bwd_dq::trace::<T>(c, d, r.block_m, r.block_n)?
                }
            );
            Ok(Tuning::new(
                "tegula_kernels::attention::backward",
                &ir,
                key.clone(),
                candidates.iter().map(|c| c.to_tuner()).collect(),
            )
            .prepare_with(move |c| {
                let opts = options.with_tuned(c)?;
                tuned::prepare(dev, wgmma(&opts), || {
                    launch(q, k, v, o, d_o, lse, dq, dk, dv, &opts, dims)
                })
            }))
        },
        |c| {
            let opts = options.with_tuned(c)?;
            tuned::plan_or_prune(dev, wgmma(&opts), || {
                launch(q, k, v, o, d_o, lse, dq, dk, dv, &opts, dims)
            })?;
            median_ms(dev, || {
                launch(q, k, v, o, d_o, lse, dq, dk, dv, &opts, dims)
            })
        },
        |c| then(&options.with_tuned(c)?),
    )
}

/// Whether the launch of `options` adds kernels to the tuner's candidates: `Ok(false)` when
/// its plans are another candidate's (`tuned::plan_or_prune`).
#[allow(clippy::too_many_arguments)]
pub fn backward_adds_a_kernel<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
) -> Result<bool> {
    let dims = check_qkv(OP, q, k, v)?;
    let dev = q.device();
    let (dq, dk, dv) = (
        dev.empty::<T>(dims.q_shape())?,
        dev.empty::<T>(dims.kv_shape())?,
        dev.empty::<T>(dims.kv_shape())?,
    );
    match tuned::plan_or_prune(dev, wgmma(options), || {
        launch(q, k, v, o, d_o, lse, &dq, &dk, &dv, options, &dims)
    }) {
        Ok(_) => Ok(true),
        Err(tegula::Error::Pruned { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether the dK/dV kernel asks for `wgmma` (`AttentionOptions::wgmma`, held or a tuner
/// twin on Hopper; f32 dots never take it).
fn wgmma(options: &AttentionOptions) -> bool {
    tuned::held_wgmma(options.wgmma) == Some(true)
}

/// Launches the three kernels with every option set, on checked tensors.
#[allow(clippy::too_many_arguments)]
fn launch<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    dq: &Tensor<T>,
    dk: &Tensor<T>,
    dv: &Tensor<T>,
    options: &AttentionOptions,
    dims: &Dims,
) -> Result<()> {
    let sm_scale = softmax_scale(OP, options, dims.head_dim)?;
    let [sqz, sqh, sqm] = strides_i32::<3, T>(OP, "q", q)?;
    let [skz, skh, skn] = strides_i32::<3, T>(OP, "k", k)?;
    let [svz, svh, svn] = strides_i32::<3, T>(OP, "v", v)?;
    let [soz, soh, som] = strides_i32::<3, T>(OP, "o", o)?;
    let [sdoz, sdoh, sdom] = strides_i32::<3, T>(OP, "d_o", d_o)?;
    let [sdqz, sdqh, sdqm] = strides_i32::<3, T>(OP, "dq", dq)?;
    let [sdkz, sdkh, sdkn] = strides_i32::<3, T>(OP, "dk", dk)?;
    let [sdvz, sdvh, sdvn] = strides_i32::<3, T>(OP, "dv", dv)?;
    strides_i32::<1, f32>(OP, "lse", lse)?;
    let heads = size_i32(OP, "H", dims.heads)?;
    let kv_heads = size_i32(OP, "Hkv", dims.kv_heads)?;
    let group = size_i32(OP, "H / Hkv", dims.group_size())?;
    let n_q = size_i32(OP, "Nq", dims.n_q)?;
    let n_k = size_i32(OP, "Nk", dims.n_k)?;
    let dev = q.device();
    let (bm, bn, d) = (options.block_m, options.block_n, dims.head_dim);
    let q_blocks = size_i32(OP, "query blocks", dims.n_q.div_ceil(bm))? as u32;
    let k_blocks = size_i32(OP, "key blocks", dims.n_k.div_ceil(bn))? as u32;
    let bh = size_i32(OP, "B * H", dims.batch * dims.heads)? as u32;
    let bhkv = size_i32(OP, "B * Hkv", dims.batch * dims.kv_heads)? as u32;

    let delta = dev.empty::<f32>(dims.lse_shape())?;
    let atomic_dq = DqStrategy::choose(dims, options.dq_path) == DqStrategy::Atomic;
    // The f32 dQ sums start at zero; without atomics the kernel never reads it (a stand-in).
    let dq_acc = if atomic_dq {
        dev.zeros::<f32>(dims.q_shape())?
    } else {
        dev.empty::<f32>([1])?
    };
    let split = backward_tail_split(dev, dims, options, bm, bn);
    // The split blocks' f32 dK/dV partial sums start at zero (a stand-in without a split).
    let dkdv_acc = match split {
        Some(s) => dev.zeros::<f32>([s.split_blocks, 2, bn, d])?,
        None => dev.empty::<f32>([1])?,
    };
    let dkdv_grid = match split {
        Some(s) => (size_i32(OP, "dK/dV programs", s.programs())? as u32, 1),
        None => (k_blocks, bhkv),
    };
    let (whole_programs, slices, slice_rows) = match split {
        Some(s) => (
            size_i32(OP, "whole programs", s.whole_programs)?,
            size_i32(OP, "slices", s.slices)?,
            size_i32(OP, "slice rows", s.slice_blocks * bm)?,
        ),
        None => (0, 1, 0),
    };
    // Only the dK/dV kernel's dots may take `wgmma`; the others' stay on `mma.sync`.
    let sync = options.config.with_mma(MmaChoice::Sync);
    if q_blocks > 0 && bh > 0 {
        attn_bwd_preprocess::launch_with::<T>(
            dev,
            (q_blocks, bh),
            sync,
            o,
            d_o,
            &delta,
            soz,
            soh,
            som,
            sdoz,
            sdoh,
            sdom,
            heads,
            n_q,
            d,
            bm,
        )?;
    }
    if k_blocks > 0 && bhkv > 0 {
        // With no query rows the sweep is empty and dK = dV = 0.
        attn_bwd_dkdv::launch_with::<T>(
            dev,
            dkdv_grid,
            options.config.with_mma(mma_of(wgmma(options))),
            q,
            k,
            v,
            d_o,
            lse,
            &delta,
            dk,
            dv,
            &dq_acc,
            &dkdv_acc,
            sqz,
            sqh,
            sqm,
            skz,
            skh,
            skn,
            svz,
            svh,
            svn,
            sdoz,
            sdoh,
            sdom,
            sdkz,
            sdkh,
            sdkn,
            sdvz,
            sdvh,
            sdvn,
            kv_heads,
            group,
            n_q,
            n_k,
            sm_scale,
            whole_programs,
            slices,
            slice_rows,
            options.causal,
            atomic_dq,
            split.is_some(),
            has_ragged_queries(dims.n_q, bm),
            d,
            bm,
            bn,
        )?;
    }
    if let Some(s) = split {
        attn_bwd_dkdv_convert::launch_with::<T>(
            dev,
            (size_i32(OP, "split blocks", s.split_blocks)? as u32, 1),
            sync,
            &dkdv_acc,
            dk,
            dv,
            sdkz,
            sdkh,
            sdkn,
            sdvz,
            sdvh,
            sdvn,
            kv_heads,
            n_k,
            whole_programs,
            d,
            bn,
        )?;
    }
    if atomic_dq && q_blocks > 0 && bh > 0 {
        attn_bwd_dq_convert::launch_with::<T>(
            dev,
            (q_blocks, bh),
            sync,
            &dq_acc,
            dq,
            sdqz,
            sdqh,
            sdqm,
            heads,
            n_q,
            sm_scale,
            d,
            bm,
        )?;
    } else if q_blocks > 0 && bh > 0 {
        attn_bwd_dq::launch_with::<T>(
            dev,
            (q_blocks, bh),
            sync,
            q,
            k,
            v,
            d_o,
            lse,
            &delta,
            dq,
            sqz,
            sqh,
            sqm,
            skz,
            skh,
            skn,
            svz,
            svh,
            svn,
            sdoz,
            sdoh,
            sdom,
            sdqz,
            sdqh,
            sdqm,
            heads,
            group,
            n_q,
            n_k,
            sm_scale,
            options.causal,
            d,
            bm,
            bn,
        )?;
    }
    Ok(())
}

/// The contract on the inputs and the options.
fn check_inputs<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
) -> Result<Dims> {
    let dims = check_qkv(OP, q, k, v)?;
    expect_block_sizes(OP, options)?;
    softmax_scale(OP, options, dims.head_dim)?;
    for (name, t) in [("o", o), ("d_o", d_o)] {
        check::expect_shape(OP, name, t, &dims.q_shape())?;
        check::expect_unit_last_stride(OP, name, t)?;
        check::expect_same_device(OP, ("q", q), (name, t))?;
    }
    check::expect_shape(OP, "lse", lse, &dims.lse_shape())?;
    check::expect_same_device(OP, ("q", q), ("lse", lse))?;
    if !lse.is_contiguous() {
        return Err(Error::Stride {
            op: OP.into(),
            message: format!("`lse` must be contiguous, got strides {:?}", lse.strides()),
        });
    }
    for (name, t) in [("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o)] {
        strides_i32::<3, T>(OP, name, t)?;
    }
    strides_i32::<1, f32>(OP, "lse", lse)?;
    size_i32(OP, "B * H", dims.batch * dims.heads)?;
    size_i32(OP, "B * Hkv", dims.batch * dims.kv_heads)?;
    size_i32(OP, "Nq", dims.n_q)?;
    size_i32(OP, "Nk", dims.n_k)?;
    Ok(dims)
}

/// The backward in new contiguous tensors (see [`backward_into`] for the contract); the inputs
/// and options are checked before the gradients are allocated.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Element>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    o: &Tensor<T>,
    d_o: &Tensor<T>,
    lse: &Tensor<f32>,
    options: &AttentionOptions,
) -> Result<Gradients<T>> {
    let dims = check_inputs(q, k, v, o, d_o, lse, options)?;
    check::expect_i32_output(OP, "dq", &dims.q_shape())?;
    check::expect_i32_output(OP, "dk", &dims.kv_shape())?;
    let dev = q.device();
    let grads = Gradients {
        dq: dev.zeros::<T>(dims.q_shape())?,
        dk: dev.zeros::<T>(dims.kv_shape())?,
        dv: dev.zeros::<T>(dims.kv_shape())?,
    };
    backward_into(
        q, k, v, o, d_o, lse, &grads.dq, &grads.dk, &grads.dv, options,
    )?;
    Ok(grads)
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (dims, causal) = parse_shape(shape);
    let q = dev.randn::<T>(dims.q_shape())?;
    let k = dev.randn::<T>(dims.kv_shape())?;
    let v = dev.randn::<T>(dims.kv_shape())?;
    let d_o = dev.randn::<T>(dims.q_shape())?;
    let options = AttentionOptions {
        causal,
        ..Default::default()
    };
    let (o, lse) = forward(&q, &k, &v, &options)?;
    let scale = softmax_scale(OP, &options, dims.head_dim)? as f64;
    let want = reference::attention_backward(
        &q.to_f64_vec()?,
        &k.to_f64_vec()?,
        &v.to_f64_vec()?,
        &d_o.to_f64_vec()?,
        dims,
        causal,
        scale,
    );
    let mut runs = vec![options];
    let mut label = format!("{} causal={causal}", dims.describe());
    if dev.has_wgmma() && matches!(T::DTYPE, DType::F16 | DType::BF16) {
        // The dK/dV kernel's dots on wgmma at the tiles the tuner picks on Hopper and at one
        // warpgroup, besides the tuned run; outputs poisoned.
        runs.extend(wgmma_runs(&options, &WGMMA_CHECKED));
        label += &format!(", {} wgmma tiles", WGMMA_CHECKED.len());
    }
    let tol = check::tolerance(T::DTYPE);
    let report = |got: &Tensor<T>, want: &[f64], magnitude: &[f64]| -> Result<CheckReport> {
        Ok(compare_bounded(
            OP,
            label.clone(),
            T::DTYPE,
            &got.to_f64_vec()?,
            want,
            magnitude,
            tol,
        ))
    };
    let mut worst: Option<CheckReport> = None;
    for (i, run) in runs.iter().enumerate() {
        let grads = if i == 0 {
            backward(&q, &k, &v, &o, &d_o, &lse, run)?
        } else {
            let poisoned = |shape| dev.full::<T>(shape, T::from_f64(f64::NAN));
            let grads = Gradients {
                dq: poisoned(dims.q_shape())?,
                dk: poisoned(dims.kv_shape())?,
                dv: poisoned(dims.kv_shape())?,
            };
            backward_into(
                &q, &k, &v, &o, &d_o, &lse, &grads.dq, &grads.dk, &grads.dv, run,
            )?;
            grads
        };
        let this = worse(
            worse(
                report(&grads.dq, &want.dq, &want.dq_magnitude)?,
                report(&grads.dk, &want.dk, &want.dk_magnitude)?,
            ),
            report(&grads.dv, &want.dv, &want.dv_magnitude)?,
        );
        worst = Some(match worst {
            Some(r) => worse(r, this),
            None => this,
        });
    }
    Ok(worst.expect("the default run at least"))
}

/// Tiles `tegula check attention_backward` runs with the dK/dV kernel on wgmma besides the
/// default run, on a device with wgmma: (BLOCK_M, BLOCK_N, warps, stages).
const WGMMA_CHECKED: [(usize, usize, u32, u32); 3] =
    [(64, 128, 8, 3), (64, 128, 8, 2), (64, 64, 4, 2)];

pub(super) fn check_entry(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::F16 => check_typed::<f16>(dev, shape),
        DType::BF16 => check_typed::<bf16>(dev, shape),
        DType::F32 => check_typed::<f32>(dev, shape),
        got => Err(Error::DType {
            op: OP.into(),
            name: "q".into(),
            expected: "f16, bf16 or f32".into(),
            got,
        }),
    }
}

/// The dK/dV kernel, the heart of the backward (the CLI prints one kernel's IR).
pub(super) fn trace_entry(
    shape: &[usize],
    dtype: DType,
) -> std::result::Result<Kernel, TraceError> {
    // The default candidate: what the interpreter launches.
    let (dims, causal): (Dims, bool) = parse_shape(shape);
    let options = AttentionOptions {
        causal,
        ..Default::default()
    };
    let b = super::backward_candidates(&dims, dtype, &options, false)[0];
    let d = dims.head_dim;
    let atomic = DqStrategy::choose(&dims, options.dq_path) == DqStrategy::Atomic;
    let ragged_q = has_ragged_queries(dims.n_q, b.block_m);
    let (bm, bn) = (b.block_m, b.block_n);
    let split = backward_tail_split(&Device::cpu(), &dims, &options, bm, bn).is_some();
    match dtype {
        DType::F16 => attn_bwd_dkdv::trace::<f16>(causal, atomic, split, ragged_q, d, bm, bn),
        DType::BF16 => attn_bwd_dkdv::trace::<bf16>(causal, atomic, split, ragged_q, d, bm, bn),
        _ => attn_bwd_dkdv::trace::<f32>(causal, atomic, split, ragged_q, d, bm, bn),
    }
}
