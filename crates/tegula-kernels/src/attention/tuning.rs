//! Autotuned block sizes, warps and stages for the attention forward and backward.
//!
//! The fields of [`AttentionOptions`] left at [`AUTO`] / [`AUTO_LAUNCH`] (the default) are
//! chosen by the autotuner among [`forward_candidates`] / [`backward_candidates`] for the
//! problem's [`key`]; fields the caller sets are held.

use super::contract::{padded_head_dim, Dims};
use super::AttentionOptions;
use crate::tuned::{self, cx, AUTO, AUTO_LAUNCH};
use tegula::autotune::Config;
use tegula::compiler::{OperandHome, Report};
use tegula::ir::DType;
use tegula::{LaunchConfig, Result};

/// f32 values (accumulators and scores) a thread should hold at most before registers spill.
const VALUES_PER_THREAD: usize = 160;

/// The forward's bound when Q does not stay in registers (the compiler's plan keeps a large
/// loop-invariant dot operand resident in shared memory and reads it at each step: the report
/// says `A from resident`), which frees those registers for 32 more values.
/// ptxas (sm_90a): 128 x 64 blocks at D = 128 over 4 warps (192 values) take 255 registers
/// with 300-350 bytes of spills (loop-invariant row offsets of the K/V copies, about 15 local
/// loads a step against 256 mmas), where holding Q spilled 660-680 bytes.
const VALUES_PER_THREAD_Q_IN_SHARED: usize = 192;

/// The autotuner's key: `B*H`, Nq and Nk rounded up to powers of two (occupancy and the
/// number of key steps), the exact head dim, the dtype, the mask and the GQA group size
/// (`H / Hkv`: the backward's dK/dV sweep grows with it), e.g.
/// `bh=128,nq=4096,nk=4096,d=128,bf16,causal=true,group=1`.
pub fn key(dims: &Dims, dtype: DType, causal: bool) -> String {
    let b = |n: usize| n.max(1).next_power_of_two();
    format!(
        "bh={},nq={},nk={},d={},{},causal={causal},group={}",
        b(dims.batch * dims.heads),
        b(dims.n_q),
        b(dims.n_k),
        dims.head_dim,
        dtype.name(),
        dims.group_size().max(1)
    )
}

/// f16/bf16 dots run on tensor cores with `cp.async` pipelining; f32 dots are not pipelined
/// (stages do not matter there).
fn pipelined(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

fn with(options: &AttentionOptions, bm: usize, bn: usize, w: u32, s: u32) -> AttentionOptions {
    let pick = |fixed: usize, c: usize| if fixed == AUTO { c } else { fixed };
    AttentionOptions {
        block_m: pick(options.block_m, bm),
        block_n: pick(options.block_n, bn),
        config: if options.config == AUTO_LAUNCH {
            LaunchConfig::new(w, s)
        } else {
            options.config
        },
        ..*options
    }
}

/// The grid and its pruning, shared by forward and backward; `fits` is the kernel's own test.
#[allow(clippy::too_many_arguments)]
fn grid(
    dims: &Dims,
    options: &AttentionOptions,
    (bm_floor, bn_floor): (usize, usize),
    stages: &[u32],
    fits: impl Fn(usize, usize, u32, u32) -> bool,
    default: (usize, usize, u32),
) -> Vec<AttentionOptions> {
    let sizes = [16, 32, 64, 128];
    let bms = tuned::block_band(dims.n_q, &sizes, bm_floor);
    let bns = tuned::block_band(dims.n_k, &sizes, bn_floor);
    let mut out = Vec::new();
    for &bm in &bms {
        for &bn in &bns {
            for w in [4, 8] {
                for &s in stages {
                    if fits(bm, bn, w, s) {
                        out.push(with(options, bm, bn, w, s));
                    }
                }
            }
        }
    }
    let clamp = |band: &[usize], want: usize| {
        band.iter()
            .copied()
            .filter(|&b| b <= want)
            .max()
            .unwrap_or(band[0])
    };
    let first = with(
        options,
        clamp(&bms, default.0),
        clamp(&bns, default.1),
        4,
        default.2.min(*stages.iter().max().unwrap_or(&1)),
    );
    let mut out = tuned::dedup(out);
    tuned::put_first(&mut out, first);
    out
}

/// The forward's candidates, default first, with `options`' set fields held.
///
/// The grid (Triton's tutorial 06): BLOCK_M in {64, 128}, BLOCK_N in {32, 64, 128}, 4 or 8
/// warps, 1 to 3 stages (1 for f32); blocks of 16 and 32 join only for short sequences.
/// Pruned by shape:
/// - no block above the sequence length rounded up to a power of two, none below half of it;
/// - at most 160 f32 values per thread for the accumulator and the scores
///   (`(BLOCK_M * D + BLOCK_M * BLOCK_N) / (32 warps)`, D padded to a power of two), which
///   bounds the head dim's effect, or 192 when the plan keeps Q resident in shared memory and
///   reads it at each step (128 x 64 at D = 128 over 4 warps: 32 query rows a warp, as
///   FlashAttention-2);
///   8 warps only for tiles of at least 64 x 128;
/// - no more stages than key steps (at least 2).
///
/// On a device with `wgmma` (`wgmma_device`), each pipelined candidate gets a wgmma twin, and
/// the timings choose between the two lowerings per shape (docs/performance.md, "The autotuner
/// and its twins"). The compiler's plans prune before any timing: candidates whose stages
/// shared memory cuts, wgmma twins with no dot on wgmma (`tuned::plan_or_prune`), and those
/// `forward_plan_fits` refuses (the 160-value bound where Q stays in registers).
///
/// The default is BLOCK_M 64, BLOCK_N 64, 4 warps, 2 stages, clamped to the lengths
/// (`mma.sync`). On a GPU the tuner ranks the candidates by their distance from
/// [`forward_heuristic`] and times the nearest [`FORWARD_TOP_K`]; with tuning off the nearest
/// runs.
pub fn forward_candidates(
    dims: &Dims,
    dtype: DType,
    options: &AttentionOptions,
    wgmma_device: bool,
) -> Vec<AttentionOptions> {
    let d = padded_head_dim(dims.head_dim);
    let fits = |bm: usize, bn: usize, w: u32, s: u32| {
        let threads = 32 * w as usize;
        let steps = dims.n_k.div_ceil(bn).max(2);
        (bm * d + bm * bn) / threads <= VALUES_PER_THREAD_Q_IN_SHARED
            && (w == 4 || bm * bn >= 64 * 128)
            && s as usize <= steps
    };
    let stages: &[u32] = if pipelined(dtype) { &[2, 3, 1] } else { &[1] };
    let plain = grid(dims, options, (64, 32), stages, fits, (64, 64, 2));
    let mut out = Vec::with_capacity(2 * plain.len());
    for c in plain {
        out.push(c);
        if wgmma_device && options.wgmma.is_none() && pipelined(dtype) {
            out.push(AttentionOptions {
                wgmma: Some(true),
                ..c
            });
        }
    }
    out
}

/// Candidates a forward miss times, nearest [`forward_heuristic`] first (`tuned::distance`):
/// within 2% of the best of all candidates at every recorded shape (`tests/tune_data.rs`).
pub const FORWARD_TOP_K: usize = 4;

/// The forward's config the tuner times first and runs with tuning off (rule *head-dim
/// tile*): 64 x 128 for head dims up to 64, 64 x 64 above, over 4 warps and 2 stages (1 for
/// f32), the wgmma twin where the device has wgmma and the inputs are 16-bit; `options`' set
/// fields held. The winners of every candidate's timing at the library's benchmark shapes on
/// the H200 (`benchmarks/tune-data`).
pub fn forward_heuristic(
    dims: &Dims,
    dtype: DType,
    options: &AttentionOptions,
    wgmma_device: bool,
) -> AttentionOptions {
    let (bm, bn) = if padded_head_dim(dims.head_dim) <= 64 {
        (64, 128)
    } else {
        (64, 64)
    };
    let pick = |held: usize, h: usize| if held == AUTO { h } else { held };
    let stages = if pipelined(dtype) { 2 } else { 1 };
    AttentionOptions {
        block_m: pick(options.block_m, bm),
        block_n: pick(options.block_n, bn),
        config: if options.config == AUTO_LAUNCH {
            LaunchConfig::new(4, stages)
        } else {
            options.config
        },
        wgmma: options
            .wgmma
            .or((wgmma_device && pipelined(dtype)).then_some(true)),
        ..*options
    }
}

/// The forward's own rule over a candidate's compiled plans (after the tuner's, see
/// `tuned::plan_or_prune`): more than [`VALUES_PER_THREAD`] values a thread only when the plan
/// keeps Q resident in shared memory on `mma.sync` (on `wgmma` Q is resident whatever its
/// size, and the accumulators over the bound spill).
pub(super) fn forward_plan_fits(
    c: &AttentionOptions,
    dims: &Dims,
    reports: &[Report],
) -> Result<()> {
    let d = padded_head_dim(dims.head_dim);
    let threads = 32 * c.config.num_warps as usize;
    let values = (c.block_m * d + c.block_m * c.block_n) / threads;
    let q_resident = reports
        .iter()
        .flat_map(|r| &r.dots)
        .any(|dot| dot.a == OperandHome::Resident);
    let pruned = |why: &str| Err(tegula::Error::Pruned { why: why.into() });
    if values > VALUES_PER_THREAD && (!q_resident || c.wgmma == Some(true)) {
        return pruned("over 160 values a thread with Q in registers or on wgmma");
    }
    Ok(())
}

/// The backward's candidates (one block pair, warps and stages for its three kernels),/// The backward's candidates (one block pair, warps and stages for its three kernels),
/// default first, with `options`' set fields held.
///
/// The grid: BLOCK_M and BLOCK_N in {32, 64, 128}, 4 or 8 warps, 1 to 3 stages (1 for
/// f32); blocks of 16 join only for short sequences. Pruned by shape as the forward, with the
/// dK/dV kernel's resident `2 * BLOCK_N * D` accumulators and the dQ kernel's `BLOCK_M * D`
/// (plus the `BLOCK_M * BLOCK_N` scores) under 160 f32 values per thread; 8 warps only for
/// tiles of at least 64 x 64; 3 stages only when there are at least 3 query blocks.
///
/// On a device with `wgmma` (`wgmma_device`), each pipelined candidate gets a wgmma twin, and
/// the timings choose between the two lowerings per shape (docs/performance.md, "Attention
/// backward"). The compiler's plans prune before any timing (`tuned::plan_or_prune`):
/// candidates whose dK/dV sweep's shared memory (K and V resident, dS^T staged, the streamed
/// Q and dO) cuts its stages, and wgmma twins with no dot on wgmma.
///
/// The default is BLOCK_M 32, BLOCK_N 64, 4 warps, 2 stages, clamped to the lengths
/// (`mma.sync`).
pub fn backward_candidates(
    dims: &Dims,
    dtype: DType,
    options: &AttentionOptions,
    wgmma_device: bool,
) -> Vec<AttentionOptions> {
    let d = padded_head_dim(dims.head_dim);
    let fits = |bm: usize, bn: usize, w: u32, s: u32| {
        let threads = 32 * w as usize;
        let dkdv = (2 * bn * d + bm * bn) / threads;
        let dq = (bm * d + bm * bn) / threads;
        dkdv.max(dq) <= VALUES_PER_THREAD
            && (w == 4 || bm * bn >= 64 * 64)
            && (s <= 2 || s as usize <= dims.n_q.div_ceil(bm))
    };
    let stages: &[u32] = if pipelined(dtype) { &[2, 3, 1] } else { &[1] };
    let plain = grid(dims, options, (32, 32), stages, fits, (32, 64, 2));
    let mut out = Vec::with_capacity(2 * plain.len());
    for c in plain {
        out.push(c);
        if wgmma_device && options.wgmma.is_none() && pipelined(dtype) {
            out.push(AttentionOptions {
                wgmma: Some(true),
                ..c
            });
        }
    }
    out
}

impl AttentionOptions {
    /// True when a block size or the warps/stages are left to the autotuner.
    pub fn is_tuned(&self) -> bool {
        self.block_m == AUTO || self.block_n == AUTO || self.config == AUTO_LAUNCH
    }

    /// The tuner's config: the blocks, warps and stages, and `WGMMA=1` for a wgmma twin.
    pub fn to_tuner(self) -> Config {
        let c = Config::new(self.config.num_warps, self.config.num_stages)
            .with("BLOCK_M", cx(self.block_m))
            .with("BLOCK_N", cx(self.block_n));
        if self.wgmma == Some(true) {
            c.with("WGMMA", 1)
        } else {
            c
        }
    }

    /// These options with a tuner's config applied (a wgmma twin's `WGMMA=1`; without it the
    /// option stays as it was, which launches `mma.sync` unless held on).
    pub(super) fn with_tuned(&self, c: &Config) -> Result<AttentionOptions> {
        Ok(AttentionOptions {
            block_m: c.usize("BLOCK_M")?,
            block_n: c.usize("BLOCK_N")?,
            config: c.launch_config(),
            wgmma: c.get("WGMMA").map(|v| v > 0).or(self.wgmma),
            ..*self
        })
    }
}
