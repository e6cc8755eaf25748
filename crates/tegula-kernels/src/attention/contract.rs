//! Host-side contract checks shared by the attention wrappers (the batched forward and
//! backward, and both kernels of the single-head f32 attention), and small kernel-body
//! helpers.

use super::AttentionOptions;
use crate::check;
use crate::tuned::{AUTO, AUTO_LAUNCH};
use tegula::ir::{DType, Element};
use tegula::prelude::*;
use tegula::{Error, Result};

/// The largest head dimension the kernels accept (padded to 256 inside).
pub const MAX_HEAD_DIM: usize = 256;

/// The sizes of one batched attention problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub n_q: usize,
    pub n_k: usize,
    pub head_dim: usize,
}

impl Dims {
    /// One head of `m` queries over `n` keys of `head_dim` (the single-head f32 attention).
    pub fn single_head(m: usize, n: usize, head_dim: usize) -> Dims {
        Dims {
            batch: 1,
            heads: 1,
            kv_heads: 1,
            n_q: m,
            n_k: n,
            head_dim,
        }
    }

    pub fn group_size(&self) -> usize {
        self.heads / self.kv_heads
    }

    pub fn q_shape(&self) -> [usize; 4] {
        [self.batch, self.heads, self.n_q, self.head_dim]
    }

    pub fn kv_shape(&self) -> [usize; 4] {
        [self.batch, self.kv_heads, self.n_k, self.head_dim]
    }

    pub fn lse_shape(&self) -> [usize; 3] {
        [self.batch, self.heads, self.n_q]
    }

    /// `B=2 H=4 HKV=2 NQ=37 NK=53 D=64`, for reports.
    pub fn describe(&self) -> String {
        format!(
            "B={} H={} HKV={} NQ={} NK={} D={}",
            self.batch, self.heads, self.kv_heads, self.n_q, self.n_k, self.head_dim
        )
    }
}

/// The padded head dimension a kernel's tiles use: a power of two, at least 16 (`dot`'s minimum).
pub fn padded_head_dim(head_dim: usize) -> usize {
    check::next_pow2(head_dim, 16)
}

/// The kernels compute in f32 from f16, bf16 or f32 inputs.
pub fn expect_float_input<T: Element>(op: &str, name: &str) -> Result<()> {
    match T::DTYPE {
        DType::F16 | DType::BF16 | DType::F32 => Ok(()),
        got => Err(Error::DType {
            op: op.to_string(),
            name: name.to_string(),
            expected: "f16, bf16 or f32".into(),
            got,
        }),
    }
}

/// Block sizes must be powers of two from 16 (the smallest `dot`) to 128, or `AUTO`; warps
/// and stages both set or both `AUTO`.
pub fn expect_block_sizes(op: &str, options: &AttentionOptions) -> Result<()> {
    for (name, b) in [("block_m", options.block_m), ("block_n", options.block_n)] {
        if b != AUTO && (!(16..=128).contains(&b) || !b.is_power_of_two()) {
            return Err(Error::Invalid {
                op: op.to_string(),
                message: format!("`{name}` = {b} must be a power of two from 16 to 128 (or AUTO)"),
            });
        }
    }
    let c = options.config;
    if c != AUTO_LAUNCH && (c.num_warps == 0 || c.num_stages == 0) {
        return Err(Error::Invalid {
            op: op.to_string(),
            message: format!(
                "num_warps and num_stages must both be set or both AUTO, got {} and {}",
                c.num_warps, c.num_stages
            ),
        });
    }
    Ok(())
}

/// `sm_scale`, or `1 / sqrt(D)`; it must be finite.
pub fn softmax_scale(op: &str, options: &AttentionOptions, head_dim: usize) -> Result<f32> {
    let scale = options
        .sm_scale
        .unwrap_or((1.0 / (head_dim as f64).sqrt()) as f32);
    if !scale.is_finite() {
        return Err(Error::Invalid {
            op: op.to_string(),
            message: format!("`sm_scale` = {scale} must be finite"),
        });
    }
    Ok(scale)
}

/// Q `[B, H, Nq, D]`, K and V `[B, Hkv, Nk, D]` with `Hkv` dividing `H`, `1 <= D <= 256`, unit
/// stride on D, one device.
pub fn check_qkv<T: Element>(
    op: &str,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
) -> Result<Dims> {
    expect_float_input::<T>(op, "q")?;
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        if t.rank() != 4 {
            return Err(Error::Shape {
                op: op.to_string(),
                message: format!(
                    "`{name}` must have rank 4 ([batch, heads, length, head_dim]), got shape {:?}",
                    t.shape()
                ),
            });
        }
    }
    let (qs, ks) = (q.shape(), k.shape());
    let dims = Dims {
        batch: qs[0],
        heads: qs[1],
        kv_heads: ks[1],
        n_q: qs[2],
        n_k: ks[2],
        head_dim: qs[3],
    };
    if ks[0] != dims.batch || ks[3] != dims.head_dim {
        return Err(Error::Shape {
            op: op.to_string(),
            message: format!(
                "`k` {ks:?} must match `q` {qs:?} in batch and head_dim ([B, Hkv, Nk, D])"
            ),
        });
    }
    check::expect_shape(op, "v", v, ks)?;
    if dims.heads.checked_rem(dims.kv_heads) != Some(0) {
        return Err(Error::Shape {
            op: op.to_string(),
            message: format!(
                "the number of KV heads ({}) must divide the number of query heads ({})",
                dims.kv_heads, dims.heads
            ),
        });
    }
    if dims.head_dim == 0 || dims.head_dim > MAX_HEAD_DIM {
        return Err(Error::Shape {
            op: op.to_string(),
            message: format!(
                "head_dim = {} must be from 1 to {MAX_HEAD_DIM}",
                dims.head_dim
            ),
        });
    }
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        check::expect_unit_last_stride(op, name, t)?;
        check::expect_same_device(op, ("q", q), (name, t))?;
    }
    Ok(dims)
}

/// An output: the expected shape, unit stride on the last axis, elements that do not overlap
/// each other, same device as `like` (the query, `q`), and no memory shared with any of `inputs`.
pub fn check_output<O: Element, T: Element>(
    op: &str,
    name: &str,
    out: &Tensor<O>,
    shape: &[usize],
    like: &Tensor<T>,
    inputs: &[(&str, &Tensor<T>)],
) -> Result<()> {
    check::expect_shape(op, name, out, shape)?;
    check::expect_unit_last_stride(op, name, out)?;
    check::expect_same_device(op, ("q", like), (name, out))?;
    expect_distinct_elements(op, name, out)?;
    for &(input_name, input) in inputs {
        check::expect_no_alias(op, (name, out), (input_name, input))?;
    }
    Ok(())
}

/// Two programs writing one element would race: an output view must not map two indices to
/// one element. (Sufficient check: sorted by stride, each axis steps past all smaller ones.)
pub fn expect_distinct_elements<T: Element>(op: &str, name: &str, t: &Tensor<T>) -> Result<()> {
    if t.numel() == 0 {
        return Ok(());
    }
    let mut axes: Vec<(usize, usize)> = t
        .strides()
        .iter()
        .copied()
        .zip(t.shape().iter().copied())
        .filter(|&(_, n)| n > 1)
        .collect();
    axes.sort_unstable();
    let mut reach = 0usize;
    for (stride, n) in axes {
        if stride <= reach {
            return Err(Error::Stride {
                op: op.to_string(),
                message: format!(
                    "output `{name}` (shape {:?}, strides {:?}) maps several indices to one element",
                    t.shape(),
                    t.strides()
                ),
            });
        }
        reach += (n - 1) * stride;
    }
    Ok(())
}

/// The strides of the first `N` axes as i32, after checking that every element offset of the
/// view fits in i32 (the kernels compute offsets in i32).
pub fn strides_i32<const N: usize, T: Element>(
    op: &str,
    name: &str,
    t: &Tensor<T>,
) -> Result<[i32; N]> {
    let reach: usize = t
        .shape()
        .iter()
        .zip(t.strides())
        .map(|(&n, &s)| n.saturating_sub(1).saturating_mul(s))
        .fold(0usize, usize::saturating_add);
    check::as_i32(
        op,
        &format!("the largest element offset of `{name}`"),
        reach,
    )?;
    let mut out = [0i32; N];
    for (o, &s) in out.iter_mut().zip(t.strides()) {
        // A stride can exceed the reach only on a size-1 axis, where it is never multiplied.
        *o = i32::try_from(s).unwrap_or(0);
    }
    Ok(out)
}

/// A size as i32 (typed error when it does not fit).
pub fn size_i32(op: &str, name: &str, n: usize) -> Result<i32> {
    check::as_i32(op, name, n)
}

/// The library name of the single-head f32 attention, in its errors.
pub const SINGLE_HEAD_OP: &str = "attention_single_head_f32";

/// The single-head f32 attention's contract, shared by its fast path and its basic kernel:
/// Q `[M, D]`, K and V `[N, D]` with `M, N, D >= 1`, all contiguous, on one device; `out`
/// `[M, D]`, contiguous, sharing no memory with the inputs. Returns `(M, N, D)`.
pub fn check_single_head(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    out: &Tensor<f32>,
) -> Result<(usize, usize, usize)> {
    let (m, n, d) = check_single_head_inputs(q, k, v)?;
    check_single_head_matrix("out", out, q)?;
    check::expect_shape(SINGLE_HEAD_OP, "out", out, &[m, d])?;
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        check::expect_no_alias(SINGLE_HEAD_OP, ("out", out), (name, t))?;
    }
    Ok((m, n, d))
}

/// The single-head contract on the inputs alone (checked before an output is allocated);
/// returns `(M, N, D)`.
pub fn check_single_head_inputs(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
) -> Result<(usize, usize, usize)> {
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        check_single_head_matrix(name, t, q)?;
    }
    let (m, d) = (q.shape()[0], q.shape()[1]);
    let n = k.shape()[0];
    check::expect_shape(SINGLE_HEAD_OP, "k", k, &[n, d])?;
    check::expect_shape(SINGLE_HEAD_OP, "v", v, &[n, d])?;
    Ok((m, n, d))
}

/// A non-empty contiguous matrix on `q`'s device.
fn check_single_head_matrix(name: &str, t: &Tensor<f32>, q: &Tensor<f32>) -> Result<()> {
    if t.rank() != 2 || t.shape().contains(&0) {
        return Err(Error::Shape {
            op: SINGLE_HEAD_OP.into(),
            message: format!(
                "`{name}` must be a non-empty matrix ([rows, D]), got shape {:?}",
                t.shape()
            ),
        });
    }
    check::expect_contiguous(SINGLE_HEAD_OP, name, t)?;
    check::expect_same_device(SINGLE_HEAD_OP, ("q", q), (name, t))
}

/// The single-head output shape `[M, D]` for `q` (zeros for a malformed `q`, which
/// [`check_single_head`] then rejects).
pub fn single_head_out_shape(q: &Tensor<f32>) -> [usize; 2] {
    [
        q.shape().first().copied().unwrap_or(0),
        q.shape().get(1).copied().unwrap_or(0),
    ]
}

// --- kernel-body helpers (plain Rust over tiles: they inline into the trace) ----------------

/// The feature mask `offs_d < head_dim` as a row, or `None` when `head_dim` fills the padded
/// tile and nothing needs masking.
pub fn feature_mask(offs_d: Tile, head_dim: usize, block_d: usize) -> Option<Tile> {
    if head_dim < block_d {
        Some(offs_d.row().lt(head_dim as i64))
    } else {
        None
    }
}

/// `a & b`, where `b` may be absent (all true).
pub fn and_mask(a: Tile, b: Option<Tile>) -> Tile {
    match b {
        Some(b) => a & b,
        None => a,
    }
}

/// `load(ptr, mask, 0)`, or an unmasked load when there is no mask.
#[track_caller]
pub fn load_or_zero(ptr: Tile, mask: Option<Tile>) -> Tile {
    match mask {
        Some(m) => load(ptr, m, 0.0),
        None => load_unmasked(ptr),
    }
}

/// K and V of the key rows `offs_kv` (features `offs_d`, masked by `d_mask`), each given as
/// its base pointer and row stride. With `n_k`, rows from `n_k` on load zeros (a block that may
/// pass the last key); without it every row exists.
#[track_caller]
pub fn load_key_block(
    (k_base, stride_kn): (Tile, Tile),
    (v_base, stride_vn): (Tile, Tile),
    offs_kv: Tile,
    offs_d: Tile,
    d_mask: Option<Tile>,
    n_k: Option<Tile>,
) -> (Tile, Tile) {
    let mask = n_k
        .map(|n_k| and_mask(offs_kv.col().lt(n_k), d_mask))
        .or(d_mask);
    let k = load_or_zero(k_base + offs_kv.col() * stride_kn + offs_d.row(), mask);
    let v = load_or_zero(v_base + offs_kv.col() * stride_vn + offs_d.row(), mask);
    (k, v)
}

/// Which scores of query rows `offs_m` and keys `offs_kv` exist and are seen: keys before
/// `n_k`, and with `causal` only those at or before each row's diagonal (`n_k - n_q` keys
/// after the row's own index).
pub fn visible_scores(offs_m: Tile, offs_kv: Tile, n_q: Tile, n_k: Tile, causal: bool) -> Tile {
    let mut visible = offs_kv.row().lt(n_k);
    if causal {
        visible &= offs_kv.row().le(offs_m.col() + (n_k - n_q));
    }
    visible
}

/// f32 operands multiply exactly (`ieee`), so f32 attention meets f32 tolerances; f16/bf16
/// products are exact on every path.
pub fn dot_precision<T: Element>() -> InputPrecision {
    if T::DTYPE == DType::F32 {
        InputPrecision::Ieee
    } else {
        InputPrecision::default()
    }
}

/// The `(block, head)` a program of a causal grid `(blocks, heads)` works on, block 0 the
/// heaviest (most key steps). The GPU starts programs in launch order, axis 0 fastest. Taken
/// in that order, the last heads' heaviest blocks start in the last wave and run nearly alone
/// (docs/performance.md, "Causal grids"). This order hands out block 0 of a group of heads,
/// then block 1 of the group, and so on. Every group's heaviest programs start first and its
/// lightest fill the tail. The programs in flight still span only the group's heads, whose
/// K/V (forward) or Q/dO and dQ rows (backward) stay in L2. A group is up to 8 heads, about
/// 512 programs: between 2 and 4 waves of the kernels' usual occupancy.
pub fn heavy_blocks_first() -> (Tile, Tile) {
    let blocks = num_programs(0);
    let heads = num_programs(1);
    let group = minimum(maximum(cdiv(512, blocks), 1), 8);
    let pid = program_id(1) * blocks + program_id(0);
    let per_group = blocks * group;
    let first_head = pid / per_group * group;
    let in_group = pid % per_group;
    // The last group may hold fewer heads.
    let heads_here = minimum(heads - first_head, group);
    (in_group / heads_here, first_head + in_group % heads_here)
}

/// The key range a block of query rows `[start_m, start_m + block_m)` attends to, as
/// `(full, hi)`: keys `[0, full)` are visible to every row of the block, keys `[full, hi)` to
/// some (and need the mask). With `causal`, row `i` sees key `j` when `j <= i + n_k - n_q`.
pub fn visible_keys(
    start_m: Tile,
    block_m: usize,
    n_q: Tile,
    n_k: Tile,
    causal: bool,
) -> (Tile, Tile) {
    if !causal {
        return (n_k, n_k);
    }
    let diag = n_k - n_q;
    let full = minimum(maximum(start_m + diag + 1, 0), n_k);
    let hi = minimum(maximum(start_m + block_m + diag, 0), n_k);
    (full, hi)
}
