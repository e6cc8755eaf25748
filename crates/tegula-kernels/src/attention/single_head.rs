//! The single-head f32 attention: Q `[M, D]`, K and V `[N, D]`, f32, contiguous, one head,
//! `softmax(Q K^T / sqrt(D)) V` within rtol = atol = 2e-3 of float64. The same online softmax
//! as the basic kernel ([`super::single_head_basic`]), with larger blocks, `D` specialized,
//! exp2 with the scale folded in, 3xTF32 tensor-core dots by default, and the key range split over
//! programs when the query blocks alone leave SMs idle (flash-decoding).
//!
//! With `S` splits, program `(i, s)` runs the online softmax of query block `i` over the keys
//! of split `s` and writes its normalized partial output `O_s` and base-2 logsumexp `L_s`; a
//! second kernel combines them per row: `O = sum_s 2^(L_s - L) O_s` with
//! `L = log2(sum_s 2^L_s)` (computed online, like the softmax itself). With one split the first
//! kernel writes the output directly.

use super::contract::{
    and_mask, check_single_head, check_single_head_inputs, feature_mask, padded_head_dim,
    single_head_out_shape, SINGLE_HEAD_OP as OP,
};
use super::forward::LOG2E;
use super::single_head_basic::{single_head_f32_basic, SINGLE_HEAD_TOLERANCE};
use super::{reference, Dims};
use crate::check;
use crate::CheckReport;
use tegula::ir::{DType, InputPrecision, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

/// SMs assumed when the device does not say (the interpreter): a Hopper part's 132.
const DEFAULT_SMS: usize = 132;

/// How the single-head attention runs. [`SingleHeadOptions::for_shape`] picks them from the
/// shape; set fields to override (the bench's `--config`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SingleHeadOptions {
    /// Query rows per program (a power of two, 16 to 128).
    pub block_m: usize,
    /// Key rows per inner step (a power of two, 16 to 128).
    pub block_n: usize,
    /// Programs along the keys (each takes a contiguous range of key blocks); 1 writes the
    /// output directly, more adds the combine kernel. Clamped so that no split is empty.
    pub splits: usize,
    /// The dots' precision: `Ieee` (exact f32 products, FMA) or `Tf32x3` (three tf32 products
    /// on tensor cores, about f32's accuracy).
    pub precision: InputPrecision,
    /// Warps (and stages) of the split kernel.
    pub config: LaunchConfig,
}

impl SingleHeadOptions {
    /// The default for `m` queries, `n` keys and head dim `d` on a GPU of `sms` SMs: blocks of
    /// 64 queries and 64 keys, and enough key splits that the programs fill every SM about
    /// twice (none when the query blocks already do).
    pub fn for_shape(m: usize, n: usize, d: usize, sms: usize) -> SingleHeadOptions {
        let block_m = check::next_pow2(m, 16).min(64);
        // 64 keys a block at every D: at D = 128 they ran ahead of 32 (docs/performance.md,
        // "Single-head f32 attention").
        let block_n = 64;
        let query_blocks = m.div_ceil(block_m);
        let key_blocks = n.div_ceil(block_n);
        let splits = if query_blocks >= sms {
            1
        } else {
            (2 * sms).div_ceil(query_blocks).min(key_blocks)
        };
        SingleHeadOptions {
            block_m,
            block_n,
            splits,
            // 3xTF32 on tensor cores: about f32's accuracy (max error against float64 on the
            // interpreter as IEEE's, about 2e-7 to 5e-7 at D = 64, 128), far more throughput.
            precision: InputPrecision::Tf32x3,
            // 4 warps up to D = 64 (ahead of 8 there despite a small spill), 8 beyond, where
            // 4 warps spill heavily (docs/performance.md, "Single-head f32 attention").
            config: LaunchConfig::new(if d > 64 { 8 } else { 4 }, 1),
        }
    }

    /// Keys per split (a multiple of `block_n`) and the number of non-empty splits.
    fn key_ranges(&self, n: usize) -> (usize, usize) {
        let key_blocks = n.div_ceil(self.block_n);
        let per_split = key_blocks.div_ceil(self.splits.clamp(1, key_blocks)) * self.block_n;
        (per_split, n.div_ceil(per_split))
    }
}

/// Program `(i, s)`: query rows `[i * block_m, ...)` against keys
/// `[s * keys_per_split, min(n, (s + 1) * keys_per_split))`. With `partial`, writes the
/// normalized partial output to `o_ptr[s]` (`[splits, m, head_dim]`) and the base-2
/// logsumexp to `lse_ptr[s]` (`[splits, m]`); without, the output to `o_ptr` (`[m, head_dim]`)
/// and nothing to `lse_ptr`.
#[tegula::kernel]
pub fn single_head_split_kernel(
    q_ptr: Ptr<f32>,
    k_ptr: Ptr<f32>,
    v_ptr: Ptr<f32>,
    o_ptr: Ptr<f32>,
    lse_ptr: Ptr<f32>,
    m: i32,
    n: i32,
    keys_per_split: i32,
    qk_scale: f32,
    #[constexpr] head_dim: usize,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
    #[constexpr] tf32x3: bool,
    #[constexpr] partial: bool,
) {
    let precision = if tf32x3 {
        InputPrecision::Tf32x3
    } else {
        InputPrecision::Ieee
    };
    let block_d = padded_head_dim(head_dim);
    let d = head_dim as i64;
    let split = program_id(1);
    let offs_m = program_id(0) * block_m + arange(0, block_m as i64);
    let offs_n = arange(0, block_n as i64);
    let offs_d = arange(0, block_d as i64);
    let d_mask = feature_mask(offs_d, head_dim, block_d);
    let q_mask = and_mask(offs_m.col().lt(m), d_mask);
    let q = load(q_ptr + offs_m.col() * d + offs_d.row(), q_mask, 0.0);

    let mut m_i = full::<f32>([block_m], f32::NEG_INFINITY);
    let mut l_i = zeros::<f32>([block_m]);
    let mut acc = zeros::<f32>([block_m, block_d]);

    // The host makes every split non-empty, so each block below holds at least one key and
    // the running maximum is finite after the first.
    let lo = split * keys_per_split;
    let hi = minimum(lo + keys_per_split, n);
    for start_n in range(lo, hi, block_n) {
        let cols = start_n + offs_n;
        let kv_mask = and_mask(cols.col().lt(n), d_mask);
        let k = load(k_ptr + cols.col() * d + offs_d.row(), kv_mask, 0.0);
        let v = load(v_ptr + cols.col() * d + offs_d.row(), kv_mask, 0.0);
        let qk = dot_with(q, k.trans(), None, precision) * qk_scale;
        let qk = select(cols.row().lt(n), qk, f32::NEG_INFINITY);
        let m_new = maximum(m_i, max(qk, 1));
        let p = exp2(qk - m_new.col());
        let alpha = exp2(m_i - m_new);
        l_i = l_i * alpha + sum(p, 1);
        acc = dot_with(p, v, Some(acc * alpha.col()), precision);
        m_i = m_new;
    }

    let out = acc / l_i.col();
    if partial {
        store(
            o_ptr + (split * m + offs_m.col()) * d + offs_d.row(),
            out,
            q_mask,
        );
        store(lse_ptr + split * m + offs_m, m_i + log2(l_i), offs_m.lt(m));
    } else {
        store(o_ptr + offs_m.col() * d + offs_d.row(), out, q_mask);
    }
}

/// Combines the partials of [`single_head_split_kernel`]: per row, the log-sum-exp weighted mean of
/// the `splits` partial outputs, computed online (running maximum of the logsumexps).
#[tegula::kernel]
pub fn single_head_combine_kernel(
    o_part_ptr: Ptr<f32>,
    lse_part_ptr: Ptr<f32>,
    out_ptr: Ptr<f32>,
    m: i32,
    splits: i32,
    #[constexpr] head_dim: usize,
    #[constexpr] block_m: usize,
) {
    let block_d = padded_head_dim(head_dim);
    let d = head_dim as i64;
    let offs_m = program_id(0) * block_m + arange(0, block_m as i64);
    let offs_d = arange(0, block_d as i64);
    let row_mask = offs_m.lt(m);
    let mask = and_mask(offs_m.col().lt(m), feature_mask(offs_d, head_dim, block_d));

    let mut lse_max = full::<f32>([block_m], f32::NEG_INFINITY);
    let mut weight_sum = zeros::<f32>([block_m]);
    let mut acc = zeros::<f32>([block_m, block_d]);
    for s in range(0, splits, 1) {
        let lse = load(lse_part_ptr + s * m + offs_m, row_mask, 0.0);
        let o = load(
            o_part_ptr + (s * m + offs_m.col()) * d + offs_d.row(),
            mask,
            0.0,
        );
        let new_max = maximum(lse_max, lse);
        // 0 on the first split (lse_max = -inf; every partial logsumexp is finite).
        let alpha = exp2(lse_max - new_max);
        let w = exp2(lse - new_max);
        acc = acc * alpha.col() + o * w.col();
        weight_sum = weight_sum * alpha + w;
        lse_max = new_max;
    }
    store(
        out_ptr + offs_m.col() * d + offs_d.row(),
        acc / weight_sum.col(),
        mask,
    );
}

/// Rows per combine program: about 512 elements a program, so even 1024 rows make a few
/// hundred programs.
fn combine_rows(head_dim: usize) -> usize {
    (512 / padded_head_dim(head_dim)).max(1)
}

/// `softmax(Q K^T / sqrt(D)) V` into `out`, with the options chosen for the shape
/// ([`SingleHeadOptions::for_shape`]). Contract: Q `[M, D]`, K and V `[N, D]` with
/// `M, N, D >= 1`, all f32, contiguous, on one device; `out` is `[M, D]`, contiguous, and
/// shares no memory with the inputs.
pub fn single_head_f32_into(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
) -> Result<()> {
    let (m, n, d) = check_single_head(q, k, v, out)?;
    let options = SingleHeadOptions::for_shape(m, n, d, check::sm_count(q.device(), DEFAULT_SMS));
    launch(q, k, v, out, &options, (m, n, d))
}

/// [`single_head_f32_into`] with every option given.
pub fn single_head_f32_with(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
    options: &SingleHeadOptions,
) -> Result<()> {
    let dims = check_single_head(q, k, v, out)?;
    launch(q, k, v, out, options, dims)
}

/// `softmax(Q K^T / sqrt(D)) V` in a new `[M, D]` tensor (see [`single_head_f32_into`]); the
/// inputs are checked before the output is allocated.
pub fn single_head_f32(q: &Tensor<f32>, k: &Tensor<f32>, v: &Tensor<f32>) -> Result<Tensor<f32>> {
    check_single_head_inputs(q, k, v)?;
    let out = q.device().empty::<f32>(single_head_out_shape(q))?;
    single_head_f32_into(q, k, v, &out)?;
    Ok(out)
}

/// The options [`single_head_f32_into`] uses for these inputs on `dev`.
pub fn single_head_f32_options(dev: &Device, m: usize, n: usize, d: usize) -> SingleHeadOptions {
    SingleHeadOptions::for_shape(m, n, d, check::sm_count(dev, DEFAULT_SMS))
}

fn invalid(message: String) -> tegula::Error {
    tegula::Error::Invalid {
        op: OP.into(),
        message,
    }
}

fn launch(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
    options: &SingleHeadOptions,
    (m, n, d): (usize, usize, usize),
) -> Result<()> {
    for (name, b) in [("block_m", options.block_m), ("block_n", options.block_n)] {
        if !b.is_power_of_two() || !(16..=128).contains(&b) {
            return Err(invalid(format!(
                "{name} = {b}: a power of two from 16 to 128"
            )));
        }
    }
    let tf32x3 = match options.precision {
        InputPrecision::Ieee => false,
        InputPrecision::Tf32x3 => true,
        other => {
            return Err(invalid(format!(
                "precision {other:?}: the contract needs ieee or tf32x3"
            )))
        }
    };
    let (keys_per_split, splits) = options.key_ranges(n);
    // Offsets are i32 in the kernels; the partials are the largest buffer.
    let partial_elems = splits * m * d;
    check::as_i32(OP, "splits * M * D", partial_elems.max(n * d))?;
    let dev = q.device();
    let qk_scale = (1.0 / (d as f64).sqrt()) as f32 * LOG2E;
    let grid = (
        check::as_i32(OP, "query blocks", m.div_ceil(options.block_m))? as u32,
        splits as u32,
    );
    let (m32, n32) = (check::as_i32(OP, "M", m)?, check::as_i32(OP, "N", n)?);
    let kps = check::as_i32(OP, "keys per split", keys_per_split)?;
    if splits == 1 {
        // `lse_ptr` is not written without `partial`; `out` stands in for it.
        return single_head_split_kernel::launch_with(
            dev,
            grid,
            options.config,
            q,
            k,
            v,
            out,
            out,
            m32,
            n32,
            kps,
            qk_scale,
            d,
            options.block_m,
            options.block_n,
            tf32x3,
            false,
        );
    }
    let o_part = dev.empty::<f32>([splits, m, d])?;
    let lse_part = dev.empty::<f32>([splits, m])?;
    single_head_split_kernel::launch_with(
        dev,
        grid,
        options.config,
        q,
        k,
        v,
        &o_part,
        &lse_part,
        m32,
        n32,
        kps,
        qk_scale,
        d,
        options.block_m,
        options.block_n,
        tf32x3,
        true,
    )?;
    let rows = combine_rows(d);
    single_head_combine_kernel::launch_with(
        dev,
        m.div_ceil(rows),
        LaunchConfig::new(4, 1),
        &o_part,
        &lse_part,
        out,
        m32,
        splits as i32,
        d,
        rows,
    )
}

/// The split kernel as [`single_head_f32_into`] launches it for `(m, n, d)` (default options,
/// 132 SMs).
pub(super) fn trace_split(m: usize, n: usize, d: usize) -> std::result::Result<Kernel, TraceError> {
    let o = SingleHeadOptions::for_shape(m, n, d, DEFAULT_SMS);
    let partial = o.key_ranges(n).1 > 1;
    single_head_split_kernel::trace(
        d,
        o.block_m,
        o.block_n,
        o.precision == InputPrecision::Tf32x3,
        partial,
    )
}

/// Checks both paths on fresh random inputs: the fast path as launched for the shape, and the
/// basic kernel; the worse of the two is reported.
pub(super) fn check_entry(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let dim = |i: usize, default: usize| shape.get(i).copied().unwrap_or(default);
    let (m, n, d) = (dim(0, 35), dim(1, 67), dim(2, 32));
    let q = dev.randn::<f32>([m, d])?;
    let k = dev.randn::<f32>([n, d])?;
    let v = dev.randn::<f32>([n, d])?;
    let fast = single_head_f32(&q, &k, &v)?;
    let basic = single_head_f32_basic(&q, &k, &v)?;
    let dims = Dims::single_head(m, n, d);
    let scale = 1.0 / (d as f64).sqrt();
    let want = reference::attention(
        &q.to_f64_vec()?,
        &k.to_f64_vec()?,
        &v.to_f64_vec()?,
        dims,
        false,
        scale,
    );
    // The contract's elementwise check: rtol relative to |want|.
    let options = single_head_f32_options(dev, m, n, d);
    let report = |label: String, got: &Tensor<f32>| -> Result<CheckReport> {
        Ok(check::compare(
            OP,
            label,
            DType::F32,
            &got.to_f64_vec()?,
            &want.out,
            SINGLE_HEAD_TOLERANCE,
        ))
    };
    let fast = report(
        format!(
            "M={m} N={n} D={d} fast {}x{} splits {}",
            options.block_m, options.block_n, options.splits
        ),
        &fast,
    )?;
    let basic = report(format!("M={m} N={n} D={d} basic"), &basic)?;
    Ok(super::forward::worse(fast, basic))
}

/// The fast path's split kernel as it launches for the shape (what `tegula bench` times).
pub(super) fn trace_entry(
    shape: &[usize],
    _dtype: DType,
) -> std::result::Result<Kernel, TraceError> {
    let dim = |i: usize, default: usize| shape.get(i).copied().unwrap_or(default);
    trace_split(dim(0, 35), dim(1, 67), dim(2, 32))
}
