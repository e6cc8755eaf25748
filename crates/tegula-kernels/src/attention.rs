//! FlashAttention: the single-head f32 attention, the batched forward, and the backward,
//! structured like Triton's fused-attention tutorial (06).
//!
//! - [`single_head_f32`] / [`single_head_f32_into`]: Q `[M, D]`, K and V `[N, D]`, f32,
//!   contiguous, one head, within rtol = atol = 2e-3 of float64 (3xTF32 dots, keys split over
//!   programs); [`single_head_f32_basic`] is the same contract by the textbook kernel (blocks
//!   of 16 rows, `input_precision = "ieee"`).
//! - [`forward`] / [`forward_into`]: Q `[B, H, Nq, D]`, K and V `[B, Hkv, Nk, D]` described by
//!   strides (any strides with unit stride on D, so `[B, N, H, D]` buffers passed as
//!   `transpose(1, 2)` views need no copy), `Hkv` dividing `H` (grouped-query and multi-query
//!   attention: query head `h` reads KV head `h / (H / Hkv)`), D up to 256 (padded to a power of
//!   two >= 16 with masks), f16/bf16/f32 inputs with f32 accumulation. Returns the output (input
//!   dtype) and the per-row logsumexp (f32).
//! - [`backward`] / [`backward_into`]: dQ, dK, dV from dO, O, Q, K, V and the logsumexp.
//!
//! Conventions shared by forward and backward:
//! - **Causal alignment.** With `causal`, queries are aligned to the *end* of the keys: query
//!   row `i` sees key `j` when `j <= i + Nk - Nq` (the usual rule for decoding with a KV cache;
//!   with `Nq == Nk` it is `j <= i`).
//! - **Logsumexp.** `lse[b, h, i] = ln(sum_j exp(scale * q_i . k_j))` over the keys row `i`
//!   sees: natural log, of the *scaled* scores. (Inside, the kernels work in base 2 with the
//!   scale folded as `scale * log2(e)`, like the tutorial, and convert at the boundary.)
//! - **Rows with no visible key** (causal with `Nq > Nk`: rows `i < Nq - Nk`; or `Nk == 0`):
//!   output 0, logsumexp `-inf`, and zero gradients. No NaN is produced: the kernels guard the
//!   `-inf - -inf` of the running maximum and the division by an empty sum.
//! - **Scale.** `sm_scale` defaults to `1 / sqrt(D)`.
//!
//! Offsets are i32 inside the kernels: every tensor's largest element offset must fit in i32
//! (a typed error otherwise).

mod backward;
mod contract;
mod forward;
pub mod reference;
mod single_head;
mod single_head_basic;
mod tuning;

pub use backward::{
    backward, backward_adds_a_kernel, backward_config, backward_into, backward_tail_split,
    Gradients, TailSplit,
};
pub use contract::{padded_head_dim, Dims, MAX_HEAD_DIM};
pub use forward::{forward, forward_adds_a_kernel, forward_config, forward_into};
pub use single_head::{
    single_head_f32, single_head_f32_into, single_head_f32_options, single_head_f32_with,
    SingleHeadOptions,
};
pub use single_head_basic::{
    single_head_f32_basic, single_head_f32_basic_into, SINGLE_HEAD_BASIC_BLOCK,
    SINGLE_HEAD_TOLERANCE,
};
pub use tuning::{backward_candidates, forward_candidates, forward_heuristic, key, FORWARD_TOP_K};

/// The kernels themselves, for tracing and for launching without the host checks.
pub mod kernels {
    pub use super::backward::{
        attn_bwd_dkdv, attn_bwd_dkdv_convert, attn_bwd_dq, attn_bwd_preprocess,
    };
    pub use super::forward::attn_fwd;
    pub use super::single_head::{single_head_combine_kernel, single_head_split_kernel};
    pub use super::single_head_basic::single_head_basic_kernel;
}

use crate::tuned::{AUTO, AUTO_LAUNCH};
use crate::LibraryKernel;
use tegula::ir::DType;
use tegula::LaunchConfig;

/// Options of the batched forward and the backward.
///
/// The default leaves the block sizes, warps and stages to the autotuner ([`AUTO`],
/// [`AUTO_LAUNCH`]; see [`forward_candidates`], [`backward_candidates`] and [`key`]); fields
/// the caller sets are held, and options with every field set launch as given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionOptions {
    /// Query row `i` sees key `j` only when `j <= i + Nk - Nq`.
    pub causal: bool,
    /// The softmax scale; `None` is `1 / sqrt(D)`.
    pub sm_scale: Option<f32>,
    /// Query rows per program (a power of two, 16 to 128), or [`AUTO`].
    pub block_m: usize,
    /// Key rows per inner step (a power of two, 16 to 128), or [`AUTO`].
    pub block_n: usize,
    /// Warps and pipeline stages on the GPU (the interpreter ignores them), or [`AUTO_LAUNCH`].
    pub config: LaunchConfig,
    /// Hopper's `wgmma` for the forward's two dots and the backward dK/dV kernel's dots
    /// (sm_90a, f16/bf16; the compiler's plan says which tiles qualify: the accumulator's
    /// rows a multiple of 16 x warps, warps a multiple of 4, pipelined; others keep
    /// `mma.sync`; `tegula plan attention`): `Some(true)` asks for it, `Some(false)` keeps `mma.sync`, `None` is
    /// the tuner's (on a device with wgmma, twins of the candidates it takes:
    /// [`forward_candidates`], [`backward_candidates`]). A lowering choice only: results are
    /// the same.
    pub wgmma: Option<bool>,
    /// How the backward computes dQ ([`DqPath`]); the default is `TEGULA_ATTN_BWD_DQ`'s
    /// ([`crate::settings`]), [`DqPath::Auto`] when unset. The forward ignores it.
    pub dq_path: DqPath,
    /// Whether the backward may split its last key blocks' work across programs
    /// ([`backward_tail_split`] says when it does); the default is on unless
    /// `TEGULA_ATTN_BWD_SPLIT=off`. The forward ignores it.
    pub tail_split: bool,
}

/// How the backward computes dQ. Both give the same results within rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DqPath {
    /// Added into an f32 buffer by the dK/dV kernel (5 dots a block pair) wherever the
    /// buffer's element offsets fit in i32, else [`DqPath::Kernel`].
    Auto,
    /// A separate kernel sweeping the key blocks: 7 dots a block pair, deterministic.
    Kernel,
}

impl Default for AttentionOptions {
    fn default() -> Self {
        AttentionOptions {
            causal: false,
            sm_scale: None,
            block_m: AUTO,
            block_n: AUTO,
            config: AUTO_LAUNCH,
            wgmma: None,
            dq_path: crate::settings::Settings::global().backward_dq,
            tail_split: crate::settings::Settings::global().backward_tail_split,
        }
    }
}

impl AttentionOptions {
    /// Default options with the causal mask on.
    pub fn causal() -> Self {
        AttentionOptions {
            causal: true,
            ..Default::default()
        }
    }
}

/// Dimensions of the batched entries, in `--shape` order. `CAUSAL` is 0 or 1.
const BATCHED_DIMS: &[&str] = &["B", "H", "HKV", "NQ", "NK", "D", "CAUSAL"];

/// The single-head f32 attention (library name `attention_single_head_f32`).
pub fn single_head_entry() -> LibraryKernel {
    LibraryKernel {
        name: "attention_single_head_f32",
        about: "FlashAttention forward of one head in f32: Q [M,D], K,V [N,D]; the fast path \
                (large blocks, 3xTF32 dots, keys split over programs) and the basic 16x16 \
                IEEE kernel",
        dims: &["M", "N", "D"],
        default_shape: &[35, 67, 32],
        dtypes: &[DType::F32],
        check: single_head::check_entry,
        trace: single_head::trace_entry,
    }
}

/// The batched forward (library name `attention`).
pub fn forward_entry() -> LibraryKernel {
    LibraryKernel {
        name: "attention",
        about: "FlashAttention forward: [B,H,N,D] by strides, GQA/MQA, causal (end-aligned), \
                D <= 256, returns output and logsumexp",
        dims: BATCHED_DIMS,
        default_shape: &[2, 4, 2, 37, 53, 64, 1],
        dtypes: &[DType::F16, DType::BF16, DType::F32],
        check: forward::check_entry,
        trace: forward::trace_entry,
    }
}

/// The backward (library name `attention_backward`).
pub fn backward_entry() -> LibraryKernel {
    LibraryKernel {
        name: "attention_backward",
        about: "FlashAttention backward: delta preprocess, dK/dV (K,V resident, sweeping Q \
                blocks and the group's query heads), dQ",
        dims: BATCHED_DIMS,
        default_shape: &[2, 4, 2, 37, 53, 64, 1],
        dtypes: &[DType::F16, DType::BF16, DType::F32],
        check: backward::check_entry,
        trace: backward::trace_entry,
    }
}
