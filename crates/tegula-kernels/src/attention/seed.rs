//! The seed walkthrough's FlashAttention forward, line for line: Q `[M, D]`, K and V `[N, D]`,
//! f32, contiguous, one head; blocks of 16 query and 16 key rows; D padded to
//! `max(16, next_power_of_two(D))` with masks; `input_precision = "ieee"`; natural `exp`.

use super::reference;
use crate::check;
use crate::CheckReport;
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

/// The walkthrough's BLOCK_M = BLOCK_N.
pub const SEED_BLOCK: usize = 16;

/// The walkthrough's tolerance (rtol = atol = 2e-3).
pub const SEED_TOLERANCE: (f64, f64) = (2e-3, 2e-3);

const OP: &str = "attention_seed";

/// One program per block of `block_m` query rows; it streams K and V in blocks of `block_n`
/// rows through the online softmax (running max `m_i`, sum `l_i`, weighted sum `acc`).
#[tegula::kernel]
pub fn flash_attention_fwd_kernel(
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
        // Ignore padded key columns. (The walkthrough also sets padded query rows to -inf,
        // which only turns those never-stored rows into NaN; we leave them finite.)
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
pub fn seed_attention_into(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
) -> Result<()> {
    let (m, n, d) = check_contract(q, k, v, out)?;
    let scale = (1.0 / (d as f64).sqrt()) as f32;
    let grid = m.div_ceil(SEED_BLOCK);
    flash_attention_fwd_kernel::launch(
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
        SEED_BLOCK,
        SEED_BLOCK,
        check::next_pow2(d, 16),
    )
}

/// Checks the contract (shared with the fast path); returns `(M, N, D)`.
pub(super) fn check_contract(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
) -> Result<(usize, usize, usize)> {
    let (m, n, d) = check_inputs(q, k, v)?;
    check_matrix("out", out, q)?;
    check::expect_shape(OP, "out", out, &[m, d])?;
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        check::expect_no_alias(OP, ("out", out), (name, t))?;
    }
    Ok((m, n, d))
}

/// A non-empty contiguous matrix on `q`'s device.
fn check_matrix(name: &str, t: &Tensor<f32>, q: &Tensor<f32>) -> Result<()> {
    if t.rank() != 2 || t.shape().contains(&0) {
        return Err(tegula::Error::Shape {
            op: OP.into(),
            message: format!(
                "`{name}` must be a non-empty matrix ([rows, D]), got shape {:?}",
                t.shape()
            ),
        });
    }
    check::expect_contiguous(OP, name, t)?;
    check::expect_same_device(OP, ("q", q), (name, t))
}

/// The contract on the inputs (shared with the fast path); returns `(M, N, D)`.
pub(super) fn check_inputs(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
) -> Result<(usize, usize, usize)> {
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        check_matrix(name, t, q)?;
    }
    let (m, d) = (q.shape()[0], q.shape()[1]);
    let n = k.shape()[0];
    check::expect_shape(OP, "k", k, &[n, d])?;
    check::expect_shape(OP, "v", v, &[n, d])?;
    check::as_i32(OP, "M", m)?;
    check::as_i32(OP, "N", n)?;
    check::as_i32(OP, "D", d)?;
    check::expect_i32_extent(OP, "q", q)?;
    check::expect_i32_extent(OP, "k", k)?;
    Ok((m, n, d))
}

/// The output shape `[M, D]` for `q` (zeros for a malformed `q`, which the check then rejects).
pub(super) fn out_shape(q: &Tensor<f32>) -> [usize; 2] {
    [
        q.shape().first().copied().unwrap_or(0),
        q.shape().get(1).copied().unwrap_or(0),
    ]
}

/// `softmax(Q K^T / sqrt(D)) V` in a new `[M, D]` tensor (see [`seed_attention_into`]); the
/// inputs are checked before the output is allocated.
pub fn seed_attention(q: &Tensor<f32>, k: &Tensor<f32>, v: &Tensor<f32>) -> Result<Tensor<f32>> {
    check_inputs(q, k, v)?;
    let out = q.device().empty::<f32>(out_shape(q))?;
    seed_attention_into(q, k, v, &out)?;
    Ok(out)
}

/// Checks both paths on fresh random inputs: the fast path as launched for the shape, and the
/// walkthrough's kernel as written; the worse of the two is reported.
pub(super) fn check_entry(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let dim = |i: usize, default: usize| shape.get(i).copied().unwrap_or(default);
    let (m, n, d) = (dim(0, 35), dim(1, 67), dim(2, 32));
    let q = dev.randn::<f32>([m, d])?;
    let k = dev.randn::<f32>([n, d])?;
    let v = dev.randn::<f32>([n, d])?;
    let fast = super::seed_fast::seed_attention_fast(&q, &k, &v)?;
    let walkthrough = seed_attention(&q, &k, &v)?;
    let dims = super::contract::Dims::single_head(m, n, d);
    let scale = 1.0 / (d as f64).sqrt();
    let want = reference::attention(
        &q.to_f64_vec()?,
        &k.to_f64_vec()?,
        &v.to_f64_vec()?,
        dims,
        false,
        scale,
    );
    // The walkthrough's elementwise check: rtol relative to |want|.
    let options = super::seed_fast::seed_options(dev, m, n, d);
    let report = |label: String, got: &Tensor<f32>| -> Result<CheckReport> {
        Ok(check::compare(
            OP,
            label,
            DType::F32,
            &got.to_f64_vec()?,
            &want.out,
            SEED_TOLERANCE,
        ))
    };
    let fast = report(
        format!(
            "M={m} N={n} D={d} fast {}x{} splits {}",
            options.block_m, options.block_n, options.splits
        ),
        &fast,
    )?;
    let walkthrough = report(format!("M={m} N={n} D={d} walkthrough"), &walkthrough)?;
    Ok(super::forward::worse(fast, walkthrough))
}

/// The fast path's split kernel as it launches for the shape (what `tegula bench` times).
pub(super) fn trace_entry(
    shape: &[usize],
    _dtype: DType,
) -> std::result::Result<Kernel, TraceError> {
    let dim = |i: usize, default: usize| shape.get(i).copied().unwrap_or(default);
    super::seed_fast::trace_split(dim(0, 35), dim(1, 67), dim(2, 32))
}
