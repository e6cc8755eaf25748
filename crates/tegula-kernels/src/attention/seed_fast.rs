//! A fast path for the seed walkthrough's contract (Q `[M, D]`, K and V `[N, D]`, f32, one
//! head, the walkthrough's tolerance): the same online softmax as [`super::seed`], with larger
//! blocks, `D` specialized, exp2 with the scale folded in, and the key range split over
//! programs when the query blocks alone leave SMs idle (flash-decoding).
//!
//! With `S` splits, program `(i, s)` runs the online softmax of query block `i` over the keys
//! of split `s` and writes its normalized partial output `O_s` and base-2 logsumexp `L_s`; a
//! second kernel combines them per row: `O = sum_s 2^(L_s - L) O_s` with
//! `L = log2(sum_s 2^L_s)` (computed online, like the softmax itself). With one split the first
//! kernel writes the output directly.

use super::contract::{and_mask, feature_mask, padded_head_dim};
use super::forward::LOG2E;
use crate::check;
use tegula::ir::{InputPrecision, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

const OP: &str = "attention_seed";

/// SMs assumed when the device does not say (the interpreter): an H100/H200.
const DEFAULT_SMS: usize = 132;

/// How the fast path runs. [`SeedOptions::for_shape`] picks them from the shape; set fields
/// to override (the bench's `--config`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeedOptions {
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

impl SeedOptions {
    /// The default for `m` queries, `n` keys and head dim `d` on a GPU of `sms` SMs: blocks of
    /// 64 queries and 64 keys (32 keys past D = 64), and enough key splits that the programs fill every SM about
    /// twice (none when the query blocks already do).
    pub fn for_shape(m: usize, n: usize, d: usize, sms: usize) -> SeedOptions {
        let block_m = check::next_pow2(m, 16).min(64);
        // Measured on the H200 (1024 x 4096, 3xTF32, 17 splits): 64 keys a block beat 32 at
        // D = 128 too (0.117 ms against 0.130).
        let block_n = 64;
        let query_blocks = m.div_ceil(block_m);
        let key_blocks = n.div_ceil(block_n);
        let splits = if query_blocks >= sms {
            1
        } else {
            (2 * sms).div_ceil(query_blocks).min(key_blocks)
        };
        SeedOptions {
            block_m,
            block_n,
            splits,
            // 3xTF32 on tensor cores: about f32's accuracy (max error against float64 on the
            // interpreter as IEEE's, about 2e-7 to 5e-7 at D = 64, 128), far more throughput.
            precision: InputPrecision::Tf32x3,
            // ptxas (sm_90a, 3xTF32): 8 warps hold D = 64 in 255 registers without spills and
            // D = 128 with 32 bytes spilled (4 warps: 24 and 644 bytes). Measured on the H200
            // (1024 x 4096 x 64): 4 warps 0.059 ms against 0.065 for 8, despite the small
            // spill; at D = 128 8 warps.
            config: LaunchConfig {
                num_warps: if d > 64 { 8 } else { 4 },
                num_stages: 1,
            },
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
pub fn seed_split_kernel(
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

/// Combines the partials of [`seed_split_kernel`]: per row, the log-sum-exp weighted mean of
/// the `splits` partial outputs, computed online (running maximum of the logsumexps).
#[tegula::kernel]
pub fn seed_combine_kernel(
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

/// `softmax(Q K^T / sqrt(D)) V` into `out` by the fast path with the options chosen for the
/// shape ([`SeedOptions::for_shape`]). Same contract as [`super::seed_attention_into`].
pub fn seed_attention_fast_into(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
) -> Result<()> {
    let (m, n, d) = super::seed::check_contract(q, k, v, out)?;
    let options = SeedOptions::for_shape(m, n, d, check::sm_count(q.device(), DEFAULT_SMS));
    launch(q, k, v, out, &options, (m, n, d))
}

/// [`seed_attention_fast_into`] with every option given.
pub fn seed_attention_fast_with(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
    options: &SeedOptions,
) -> Result<()> {
    let dims = super::seed::check_contract(q, k, v, out)?;
    launch(q, k, v, out, options, dims)
}

/// The fast path's result in a new `[M, D]` tensor; the inputs are checked before the output
/// is allocated.
pub fn seed_attention_fast(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
) -> Result<Tensor<f32>> {
    super::seed::check_inputs(q, k, v)?;
    let out = q.device().empty::<f32>(super::seed::out_shape(q))?;
    seed_attention_fast_into(q, k, v, &out)?;
    Ok(out)
}

/// The options [`seed_attention_fast_into`] uses for these inputs on `dev`.
pub fn seed_options(dev: &Device, m: usize, n: usize, d: usize) -> SeedOptions {
    SeedOptions::for_shape(m, n, d, check::sm_count(dev, DEFAULT_SMS))
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
    options: &SeedOptions,
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
        return seed_split_kernel::launch_with(
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
    seed_split_kernel::launch_with(
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
    seed_combine_kernel::launch_with(
        dev,
        m.div_ceil(rows),
        LaunchConfig {
            num_warps: 4,
            num_stages: 1,
        },
        &o_part,
        &lse_part,
        out,
        m32,
        splits as i32,
        d,
        rows,
    )
}

/// The split kernel as the fast path launches it for `(m, n, d)` (default options, 132 SMs).
pub(super) fn trace_split(m: usize, n: usize, d: usize) -> std::result::Result<Kernel, TraceError> {
    let o = SeedOptions::for_shape(m, n, d, DEFAULT_SMS);
    let partial = o.key_ranges(n).1 > 1;
    seed_split_kernel::trace(
        d,
        o.block_m,
        o.block_n,
        o.precision == InputPrecision::Tf32x3,
        partial,
    )
}
