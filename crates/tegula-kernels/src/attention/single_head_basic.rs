//! The single-head f32 attention in its basic form: the textbook FlashAttention forward loop
//! with nothing tuned, kept as the readable version of the kernel and as a second check of
//! the contract. Q `[M, D]`, K and V `[N, D]`, f32, contiguous, one head; blocks of 16 query
//! and 16 key rows; D padded to `max(16, next_power_of_two(D))` with masks;
//! `input_precision = "ieee"`; natural `exp`. The fast path of the same contract is
//! [`super::single_head`].

use super::contract::{
    check_single_head, check_single_head_inputs, single_head_out_shape, SINGLE_HEAD_OP as OP,
};
use crate::check;
use tegula::prelude::*;
use tegula::Result;

/// BLOCK_M = BLOCK_N of the basic kernel.
pub const SINGLE_HEAD_BASIC_BLOCK: usize = 16;

/// The contract's elementwise tolerance (rtol = atol = 2e-3, relative to `|want|`).
pub const SINGLE_HEAD_TOLERANCE: (f64, f64) = (2e-3, 2e-3);

/// One program per block of `block_m` query rows; it streams K and V in blocks of `block_n`
/// rows through the online softmax (running max `m_i`, sum `l_i`, weighted sum `acc`).
#[tegula::kernel]
pub fn single_head_basic_kernel(
    q_ptr: Ptr<f32>,
    k_ptr: Ptr<f32>,
    v_ptr: Ptr<f32>,
    out_ptr: Ptr<f32>,
    m: i32,
    n: i32,
    d: i32,
    scale: f32,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
    #[constexpr] block_dmodel: usize,
) {
    // Each program handles a group of query rows.
    let pid_m = program_id(0);
    let offs_m = pid_m * block_m + arange(0, block_m as i64);
    // Feature indices; the padding past `d` is masked to zero.
    let offs_d = arange(0, block_dmodel as i64);
    let offs_n = arange(0, block_n as i64);

    // Load Q once and reuse it for every K/V block.
    let q = load(
        q_ptr + offs_m.col() * d + offs_d.row(),
        offs_m.col().lt(m) & offs_d.row().lt(d),
        0.0,
    );

    // Online softmax state: running maximum, running sum of exponentials, weighted sum of V.
    let mut m_i = full::<f32>([block_m], f32::NEG_INFINITY);
    let mut l_i = zeros::<f32>([block_m]);
    let mut acc = zeros::<f32>([block_m, block_dmodel]);

    for start_n in range(0, cdiv(n, block_n), 1) {
        let cols_n = start_n * block_n + offs_n;
        let kv_mask = cols_n.col().lt(n) & offs_d.row().lt(d);
        let k = load(k_ptr + cols_n.col() * d + offs_d.row(), kv_mask, 0.0);
        let v = load(v_ptr + cols_n.col() * d + offs_d.row(), kv_mask, 0.0);

        let mut qk = dot_with(q, k.trans(), None, InputPrecision::Ieee);
        qk *= scale;
        // Ignore padded key columns. (Setting padded query rows to -inf too, as some versions
        // of this kernel do, only turns those never-stored rows into NaN; they stay finite.)
        qk = select(cols_n.row().lt(n), qk, f32::NEG_INFINITY);

        let m_ij = max(qk, 1);
        let m_new = maximum(m_i, m_ij);
        // Rescale the earlier state to the new maximum (0 on the first block: m_i = -inf).
        let alpha = exp(m_i - m_new);
        let p = exp(qk - m_new.col());
        let l_new = alpha * l_i + sum(p, 1);
        acc *= alpha.col();
        acc = dot_with(p, v, Some(acc), InputPrecision::Ieee);
        m_i = m_new;
        l_i = l_new;
    }

    let out = acc / l_i.col();
    store(
        out_ptr + offs_m.col() * d + offs_d.row(),
        out,
        offs_m.col().lt(m) & offs_d.row().lt(d),
    );
}

/// `softmax(Q K^T / sqrt(D)) V` into `out`. Contract: Q `[M, D]`, K and V `[N, D]` with
/// `M, N, D >= 1`, all f32, contiguous, on one device; `out` is `[M, D]`, contiguous, and shares
/// no memory with the inputs.
pub fn single_head_f32_basic_into(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
) -> Result<()> {
    let (m, n, d) = check_single_head(q, k, v, out)?;
    let scale = (1.0 / (d as f64).sqrt()) as f32;
    let grid = m.div_ceil(SINGLE_HEAD_BASIC_BLOCK);
    single_head_basic_kernel::launch(
        q.device(),
        grid,
        q,
        k,
        v,
        out,
        check::as_i32(OP, "M", m)?,
        check::as_i32(OP, "N", n)?,
        check::as_i32(OP, "D", d)?,
        scale,
        SINGLE_HEAD_BASIC_BLOCK,
        SINGLE_HEAD_BASIC_BLOCK,
        check::next_pow2(d, 16),
    )
}

/// `softmax(Q K^T / sqrt(D)) V` in a new `[M, D]` tensor (see [`single_head_f32_basic_into`]).
pub fn single_head_f32_basic(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
) -> Result<Tensor<f32>> {
    check_single_head_inputs(q, k, v)?;
    let out = q.device().empty::<f32>(single_head_out_shape(q))?;
    single_head_f32_basic_into(q, k, v, &out)?;
    Ok(out)
}
