//! Matrix multiplication `C = A B` (Triton tutorial 03) with grouped program ordering.
//!
//! Each program computes one `block_m x block_n` tile of C, looping over K in `block_k` steps
//! with an f32 accumulator (`dot`). Masks cover any M, N, K. A and B are addressed through
//! strides, so row- and column-major inputs (and transposed or sliced views) work without copies.
//!
//! Program order: the 1-D program id is mapped to tiles in groups of `group_m` tile-rows:
//! consecutive programs sweep down a column of `group_m` tiles before moving right, so the A
//! rows and B columns they read stay in L2 across the group.
//!
//! Inputs are f16, bf16 or f32; the output dtype is the caller's choice (`Tensor<O>` for any
//! float `O`): the f32 accumulator is rounded once when stored. [`matmul`] returns f32.
//! f32 inputs are multiplied exactly ([`InputPrecision::Ieee`]) unless the caller asks for tf32.

use crate::check;
use crate::tuned::{self, cx, AUTO, AUTO_LAUNCH};
use crate::{CheckReport, LibraryKernel};
use tegula::autotune::{median_ms, Config, Tuning};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::{Error, LaunchConfig, Result};

/// The tile `(pid_m, pid_n)` of a `num_pid_m x num_pid_n` grid of C tiles that the `tile`-th
/// program (or trip of a persistent program) computes, in grouped order (Triton's
/// `tl.swizzle2d`): tiles go down a column of `group_m` tile-rows before moving right, so the
/// programs running together read the same few rows of A and columns of B from L2.
pub fn grouped_tile(tile: Tile, num_pid_m: Tile, num_pid_n: Tile, group_m: usize) -> (Tile, Tile) {
    let num_pid_in_group = num_pid_n * group_m;
    let group_id = tile / num_pid_in_group;
    let first_pid_m = group_id * group_m;
    let group_size_m = minimum(num_pid_m - first_pid_m, group_m);
    let pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m;
    let pid_n = (tile % num_pid_in_group) / group_size_m;
    (pid_m, pid_n)
}

#[tegula::kernel]
pub fn matmul_kernel<T: Element, O: Element>(
    a: Ptr<T>,
    b: Ptr<T>,
    c: Ptr<O>,
    m: i32,
    n: i32,
    k: i32,
    stride_am: i32,
    stride_ak: i32,
    stride_bk: i32,
    stride_bn: i32,
    stride_cm: i32,
    stride_cn: i32,
    #[constexpr] block_m: usize,
    #[constexpr] block_n: usize,
    #[constexpr] block_k: usize,
    #[constexpr] group_m: usize,
    #[constexpr] precision: InputPrecision,
    #[constexpr] persistent: bool,
) {
    let num_pid_m = cdiv(m, block_m);
    let num_pid_n = cdiv(n, block_n);
    // One tile of C: the k-loop and the store.
    let tile_of_c = |tile| {
        let (pid_m, pid_n) = grouped_tile(tile, num_pid_m, num_pid_n, group_m);
        let offs_m = pid_m * block_m + arange(0, block_m as i64);
        let offs_n = pid_n * block_n + arange(0, block_n as i64);
        let offs_k = arange(0, block_k as i64);
        let mask_m = offs_m.lt(m).col();
        let mask_n = offs_n.lt(n).row();
        let mut acc = zeros::<f32>([block_m, block_n]);
        for start in range(0, k, block_k) {
            let ks = start + offs_k;
            let a_ptrs = a + offs_m.col() * stride_am + ks.row() * stride_ak;
            let b_ptrs = b + ks.col() * stride_bk + offs_n.row() * stride_bn;
            let a_tile = load(a_ptrs, mask_m & ks.row().lt(k), 0);
            let b_tile = load(b_ptrs, ks.col().lt(k) & mask_n, 0);
            acc = dot_with(a_tile, b_tile, Some(acc), precision);
        }
        let c_ptrs = c + offs_m.col() * stride_cm + offs_n.row() * stride_cn;
        store(c_ptrs, acc, mask_m & mask_n);
    };
    if persistent {
        // A grid of a few programs per SM: program p computes tiles p, p + P, p + 2P, ..
        // (P programs), so the next tile's loads follow this tile's store without a new block.
        for tile in range(program_id(0), num_pid_m * num_pid_n, num_programs(0)) {
            tile_of_c(tile);
        }
    } else {
        tile_of_c(program_id(0));
    }
}

const OP: &str = "matmul";
const DTYPES: &[DType] = &[DType::F16, DType::BF16, DType::F32];

/// Tile sizes, program grouping, warps and stages. Every block is a power of two of at least
/// 16 (`dot`), or [`AUTO`]; warps and stages are [`AUTO`] when both are 0.
///
/// [`MatmulConfig::default`] leaves tiles, warps and stages to the autotuner (see
/// [`candidates`] and [`key`]); a field the caller sets is held and only the others are tuned,
/// and a config with every field set is launched as given, without the tuner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulConfig {
    pub block_m: usize,
    pub block_n: usize,
    pub block_k: usize,
    /// Tile-rows per program group (the L2-reuse grouping; not tuned).
    pub group_m: usize,
    /// How f32 inputs are multiplied (f16/bf16 products are always exact; not tuned).
    pub precision: InputPrecision,
    /// Warps and pipeline stages on the GPU ([`AUTO_LAUNCH`]: tuned).
    pub launch: LaunchConfig,
    /// The grid: `Some(0)` one program a tile; `Some(p)` a persistent grid of at most `p`
    /// programs a SM, each looping over tiles (see [`persistent_programs`]); `None`: the
    /// tuner's (one program a tile, and `Some(1)` twins of large tiles: [`candidates`]).
    /// Persistent grids copy the next tile's first stages while this tile's store runs (the
    /// compiler pipelines the tile loop, a block then needs the slots plus the store's
    /// exchange in shared memory; docs/performance.md, "Loop nests pipelined across the outer
    /// loop").
    pub persistent: Option<usize>,
    /// Hopper's `wgmma` for the k-loop's dot (sm_90a, f16/bf16, pipelined; the compiler's
    /// plan says whether a tile takes it, others keep `mma.sync`: `tegula plan matmul`):
    /// `Some(true)` asks for it, `Some(false)` keeps `mma.sync`, `None` is the tuner's (on a
    /// device with wgmma, twins whose plans put the dot on it: [`candidates`]). `TEGULA_WGMMA=1` in the environment
    /// asks for it in every launch.
    pub wgmma: Option<bool>,
}

impl Default for MatmulConfig {
    /// Tuned tiles, warps and stages; GROUP_M 8; exact f32 products.
    fn default() -> Self {
        MatmulConfig {
            block_m: AUTO,
            block_n: AUTO,
            block_k: AUTO,
            group_m: 8,
            precision: InputPrecision::Ieee,
            launch: AUTO_LAUNCH,
            persistent: None,
            wgmma: None,
        }
    }
}

impl MatmulConfig {
    /// A fully fixed config: these tiles, GROUP_M 8, exact f32 products, 4 warps, 3 stages,
    /// one program a tile, `mma.sync`.
    pub fn fixed(block_m: usize, block_n: usize, block_k: usize) -> MatmulConfig {
        MatmulConfig {
            block_m,
            block_n,
            block_k,
            launch: LaunchConfig::default(),
            persistent: Some(0),
            wgmma: Some(false),
            ..Default::default()
        }
    }

    /// True when some field is left to the autotuner.
    pub fn is_tuned(&self) -> bool {
        self.block_m == AUTO
            || self.block_n == AUTO
            || self.block_k == AUTO
            || self.launch == AUTO_LAUNCH
            || self.persistent.is_none()
            || self.wgmma.is_none()
    }

    fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("block_m", self.block_m),
            ("block_n", self.block_n),
            ("block_k", self.block_k),
        ] {
            if v != AUTO && (!v.is_power_of_two() || v < 16) {
                return Err(Error::Invalid {
                    op: OP.into(),
                    message: format!("{name} must be a power of two >= 16 (or AUTO), got {v}"),
                });
            }
        }
        if self.group_m == 0 {
            return Err(Error::Invalid {
                op: OP.into(),
                message: "group_m must be at least 1".into(),
            });
        }
        let LaunchConfig {
            num_warps,
            num_stages,
            ..
        } = self.launch;
        if self.launch != AUTO_LAUNCH && (num_warps == 0 || num_stages == 0) {
            return Err(Error::Invalid {
                op: OP.into(),
                message: format!(
                    "num_warps and num_stages must both be set or both AUTO, got {num_warps} \
                     and {num_stages}"
                ),
            });
        }
        Ok(())
    }

    /// This config with the caller's fixed fields of `fixed` laid over it.
    fn held(self, fixed: &MatmulConfig) -> MatmulConfig {
        let pick = |f: usize, c: usize| if f == AUTO { c } else { f };
        MatmulConfig {
            block_m: pick(fixed.block_m, self.block_m),
            block_n: pick(fixed.block_n, self.block_n),
            block_k: pick(fixed.block_k, self.block_k),
            group_m: fixed.group_m,
            precision: fixed.precision,
            launch: if fixed.launch == AUTO_LAUNCH {
                self.launch
            } else {
                fixed.launch
            },
            persistent: fixed.persistent.or(self.persistent),
            wgmma: fixed.wgmma.or(self.wgmma),
        }
    }

    /// This config as the autotuner's candidate (constexprs, warps, stages).
    pub fn to_tuner(self) -> Config {
        Config::new(self.launch.num_warps, self.launch.num_stages)
            .with("BLOCK_M", cx(self.block_m))
            .with("BLOCK_N", cx(self.block_n))
            .with("BLOCK_K", cx(self.block_k))
            .with("GROUP_M", cx(self.group_m))
            .with("PERSISTENT", cx(self.persistent.unwrap_or(0)))
            .with("WGMMA", i64::from(self.wgmma.unwrap_or(false)))
    }

    fn from_tuner(c: &Config, like: &MatmulConfig) -> Result<MatmulConfig> {
        Ok(MatmulConfig {
            block_m: c.usize("BLOCK_M")?,
            block_n: c.usize("BLOCK_N")?,
            block_k: c.usize("BLOCK_K")?,
            group_m: c.usize("GROUP_M")?,
            precision: like.precision,
            launch: c.launch_config(),
            // Absent from configs cached before the option existed: one program a tile.
            persistent: Some(c.usize("PERSISTENT").unwrap_or(0)),
            wgmma: Some(c.usize("WGMMA").unwrap_or(0) > 0),
        })
    }
}

/// What selects a matmul config: the problem as the tuner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulProblem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub input: DType,
    pub output: DType,
    /// A stored column-major (unit stride down M), and B column-major (unit stride down K):
    /// transposed operands load differently.
    pub a_col_major: bool,
    pub b_col_major: bool,
    /// The device runs `wgmma` ([`Device::has_wgmma`]): the candidates get wgmma twins.
    pub wgmma: bool,
}

impl MatmulProblem {
    fn of<T: Element, O: Element>(a: &Tensor<T>, b: &Tensor<T>) -> MatmulProblem {
        let col_major = |t: &Tensor<T>| t.strides()[0] == 1 && t.strides()[1] != 1;
        MatmulProblem {
            m: a.shape()[0],
            n: b.shape()[1],
            k: a.shape()[1],
            input: T::DTYPE,
            output: O::DTYPE,
            a_col_major: col_major(a),
            b_col_major: col_major(b),
            wgmma: a.device().has_wgmma(),
        }
    }
}

/// The autotuner's key: M, N and K rounded up to powers of two (shapes in one bucket share a
/// config and the same pruned candidates), the input and output dtypes, the f32 precision
/// and the operand layouts, e.g. `M=4096,N=4096,K=4096,bf16->bf16,ieee,a=row,b=row`.
pub fn key(p: &MatmulProblem, precision: InputPrecision) -> String {
    let b = |n: usize| n.max(1).next_power_of_two();
    let layout = |col: bool| if col { "col" } else { "row" };
    format!(
        "M={},N={},K={},{}->{},{:?},a={},b={}",
        b(p.m),
        b(p.n),
        b(p.k),
        p.input.name(),
        p.output.name(),
        precision,
        layout(p.a_col_major),
        layout(p.b_col_major)
    )
    .to_lowercase()
}

/// Whether f16/bf16 tensor-core dots with `cp.async` pipelining run this problem (f32 inputs
/// use FMA or tf32 dots, which are not pipelined: stages do not matter there).
fn pipelined(p: &MatmulProblem) -> bool {
    matches!(p.input, DType::F16 | DType::BF16)
}

/// The candidates the tuner times for `p`, default first, with `fixed`'s set fields held.
///
/// The grid (in the spirit of Triton's tutorial 03): BLOCK_M and BLOCK_N in {64, 128, 256},
/// BLOCK_K in {32, 64}, 4 or 8 warps, 2 to 4 stages (one stage for f32 inputs), GROUP_M from
/// `fixed`. Blocks of 16 and 32 join only for small dimensions. Pruned by shape:
/// - no block above the dimension rounded up to a power of two, none below half of that
///   (e.g. M = 100 tries 64 and 128; M = 17 tries 16 and 32);
/// - at most 128 f32 accumulators per thread (BLOCK_M * BLOCK_N / (32 warps)); 8 warps only
///   for tiles of at least 64 x 128;
/// - no more stages than K steps (at least 2);
/// - a persistent twin (one program a SM walking tiles, the next tile's first stages copied
///   during this tile's store) of every pipelined 8-warp config of at least 128 x 128 (such
///   twins can run a little ahead of their one-program-a-tile configs: docs/performance.md,
///   "Matmul");
/// - on a device with `wgmma` (Hopper), a wgmma twin of every pipelined config (and
///   persistent twin), and of those with BLOCK_K 32 one at 6 stages, where a k-tile stays in
///   flight (docs/performance.md, "wgmma and its k-tile in flight").
///
/// The compiler's plans prune the rest before any timing (`tuned::plan_or_prune`, through
/// [`adds_a_kernel`]): candidates whose stages shared memory cuts (another candidate's
/// kernel) and wgmma twins none of whose dots the plan puts on wgmma.
///
/// The default is 64 x 64 x 32 with 4 warps and 3 stages, each block clamped to the
/// dimension's range: fast on the interpreter and sound on every GPU. On a GPU whose plans
/// put [`heuristic`]'s tile on wgmma, the tuner ranks the candidates by their distance from
/// it and times the nearest [`TOP_K`], and with tuning off it runs.
pub fn candidates(p: &MatmulProblem, fixed: &MatmulConfig) -> Vec<MatmulConfig> {
    let bm = tuned::block_band(p.m, &[16, 32, 64, 128, 256], 64);
    let bn = tuned::block_band(p.n, &[16, 32, 64, 128, 256], 64);
    let bk = tuned::block_band(p.k, &[16, 32, 64], 32);
    let stages: &[u32] = if pipelined(p) { &[3, 4, 2] } else { &[1] };
    let keep = |c: &MatmulConfig| {
        let LaunchConfig {
            num_warps: w,
            num_stages: s,
            ..
        } = c.launch;
        let tile = c.block_m * c.block_n;
        let k_steps = p.k.div_ceil(c.block_k).max(2);
        tile / (32 * w as usize) <= tuned::ACC_PER_THREAD
            && (w == 4 || tile >= 64 * 128)
            && s as usize <= k_steps
    };
    let mut out = Vec::new();
    for &m in &bm {
        for &n in &bn {
            for &k in &bk {
                for w in [4, 8] {
                    for &s in stages {
                        let c = MatmulConfig {
                            block_m: m,
                            block_n: n,
                            block_k: k,
                            group_m: fixed.group_m,
                            precision: fixed.precision,
                            launch: LaunchConfig::new(w, s),
                            persistent: Some(0),
                            wgmma: Some(false),
                        };
                        if !keep(&c) {
                            continue;
                        }
                        let mut grids = vec![c];
                        if persistent_twin_fits(p, &c) {
                            grids.push(MatmulConfig {
                                persistent: Some(1),
                                ..c
                            });
                        }
                        for g in grids {
                            out.push(g.held(fixed));
                            if fixed.wgmma == Some(false) || !(p.wgmma && pipelined(p)) {
                                continue;
                            }
                            let twin = MatmulConfig {
                                wgmma: Some(true),
                                ..g
                            };
                            out.push(twin.held(fixed));
                            // BLOCK_K 32 keeps a k-tile in flight from 6 stages on.
                            let deep = MatmulConfig {
                                launch: LaunchConfig::new(w, IN_FLIGHT_STAGES_K32),
                                ..twin
                            };
                            let grid_fits =
                                deep.persistent == Some(0) || persistent_twin_fits(p, &deep);
                            if k == 32 && s == 4 && keep(&deep) && grid_fits {
                                out.push(deep.held(fixed));
                            }
                        }
                    }
                }
            }
        }
    }
    let clamp = |band: &[usize], want: usize| band.iter().copied().filter(|&b| b <= want).max();
    let default_stages = if pipelined(p) { 3 } else { 1 };
    let default = MatmulConfig {
        block_m: clamp(&bm, 64).unwrap_or(bm[0]),
        block_n: clamp(&bn, 64).unwrap_or(bn[0]),
        block_k: clamp(&bk, 32).unwrap_or(bk[0]),
        group_m: fixed.group_m,
        precision: fixed.precision,
        launch: LaunchConfig::new(4, default_stages.min(p.k.div_ceil(32).max(2) as u32)),
        persistent: Some(0),
        wgmma: Some(false),
    };
    let mut out = tuned::dedup(out);
    tuned::put_first(&mut out, default.held(fixed));
    out
}

/// The tiles [`heuristic`] picks from, largest first: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages
/// (pipelined inputs), persistent. The winners of every candidate's timing at the library's
/// benchmark shapes on the H200 (`benchmarks/tune-data`).
const HEURISTIC_TILES: [(usize, usize, usize, u32, u32, usize); 4] = [
    (128, 256, 64, 8, 3, 1),
    (128, 128, 64, 4, 3, 0),
    (64, 128, 64, 4, 4, 0),
    (64, 64, 64, 4, 4, 0),
];

/// Candidates a miss times, nearest [`heuristic`] first (`tuned::distance`), where the
/// heuristic's wgmma tile runs (elsewhere every candidate is timed): within 3% of the best of
/// all candidates at every recorded shape (`tests/tune_data.rs`).
pub const TOP_K: usize = 6;

/// The config the tuner times first and runs with tuning off (rule *fill the SMs*): the first
/// of 128 x 256 x 64 (8 warps, 3 stages, persistent), 128 x 128 x 64 (4 warps, 3 stages),
/// 64 x 128 x 64 and 64 x 64 x 64 (4 warps, 4 stages) whose grid has at least one tile per SM
/// (`sm_count`: fewer leaves SMs idle for the whole call), the smallest when none has; a wgmma twin where
/// the device has wgmma and the inputs are 16-bit; one stage for f32 inputs. `fixed`'s set
/// fields are held.
pub fn heuristic(p: &MatmulProblem, sm_count: usize, fixed: &MatmulConfig) -> MatmulConfig {
    let tiles = |bm: usize, bn: usize| p.m.div_ceil(bm) * p.n.div_ceil(bn);
    let last = HEURISTIC_TILES[HEURISTIC_TILES.len() - 1];
    let (bm, bn, bk, w, s, persistent) = HEURISTIC_TILES
        .into_iter()
        .find(|&(bm, bn, ..)| tiles(bm, bn) >= sm_count)
        .unwrap_or(last);
    let c = MatmulConfig {
        block_m: bm,
        block_n: bn,
        block_k: bk,
        group_m: fixed.group_m,
        precision: fixed.precision,
        launch: LaunchConfig::new(w, if pipelined(p) { s } else { 1 }),
        persistent: Some(if pipelined(p) { persistent } else { 0 }),
        wgmma: Some(p.wgmma && pipelined(p)),
    };
    c.held(fixed)
}

/// Whether the tuner also times `c` on a persistent grid: pipelined, 8 warps, at least
/// 128 x 128 (whether its slots and the store's exchange fit in shared memory together is the
/// compiler's to say: a twin whose stages it cuts is pruned, see `tuned::plan_or_prune`).
fn persistent_twin_fits(p: &MatmulProblem, c: &MatmulConfig) -> bool {
    let tile = c.block_m * c.block_n;
    pipelined(p) && c.launch.num_warps == 8 && c.launch.num_stages >= 2 && tile >= 128 * 128
}

/// BLOCK_K 32 `wgmma` twins are also timed at 6 stages, which copy 4 k-tiles (128 elements of
/// K) ahead: enough for the compiler to keep a k-tile in flight (docs/performance.md, "wgmma
/// and its k-tile in flight"); BLOCK_K 64 gets there from 4 stages, which the grid has.
const IN_FLIGHT_STAGES_K32: u32 = 6;

/// Whether the launch of `config` on these operands adds a kernel to the tuner's candidates
/// (see `tuned::plan_or_prune`); `Ok(false)` when its plan is another candidate's.
pub fn adds_a_kernel<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: &MatmulConfig,
) -> Result<bool> {
    match tuned::plan_or_prune(a.device(), config.wgmma == Some(true), || {
        launch(a, b, c, config)
    }) {
        Ok(_) => Ok(true),
        Err(Error::Pruned { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The config [`matmul_into_with`] launches for these operands: `config` itself when every
/// field is set, else the autotuner's choice among [`candidates`] (on the interpreter: the
/// first). On a GPU a miss may time every candidate, writing `c`.
pub fn chosen_config<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: MatmulConfig,
) -> Result<MatmulConfig> {
    check_operands(a, b, c, &config)?;
    resolve(a, b, c, config)
}

fn resolve<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: MatmulConfig,
) -> Result<MatmulConfig> {
    resolve_then(a, b, c, config, |c| Ok(*c))
}

/// `then` with the config [`chosen_config`] says; a tuned config that fails in `then` is
/// dropped from the autotune cache and chosen again ([`tuned::run`]).
fn resolve_then<T: Element, O: Element, R>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: MatmulConfig,
    mut then: impl FnMut(&MatmulConfig) -> Result<R>,
) -> Result<R> {
    if !config.is_tuned() {
        return then(&config);
    }
    let p = MatmulProblem::of::<T, O>(a, b);
    // Held fields select their own entry (GROUP_M 8 is every default's).
    let group = if config.group_m == 8 {
        AUTO
    } else {
        config.group_m
    };
    // Held as programs a SM plus one (AUTO is 0: tuned).
    let persistent = config.persistent.map_or(AUTO, |p| p + 1);
    let held = [
        ("block_m", config.block_m),
        ("block_n", config.block_n),
        ("block_k", config.block_k),
        ("group_m", group),
        ("persistent", persistent),
    ];
    let key = key(&p, config.precision)
        + &tuned::held_suffix(&held, config.launch)
        + tuned::held_wgmma_suffix(config.wgmma);
    let dev = a.device();
    tuned::run(
        dev,
        "tegula_kernels::matmul",
        &key,
        || {
            // Only on a memo miss: a launch whose config is known builds no candidate list.
            let cands = candidates(&p, &config);
            // The source hash: the Tile IR of the default candidate.
            let r = cands[0];
            let ir = matmul_kernel::trace::<T, O>(
                r.block_m,
                r.block_n,
                r.block_k,
                r.group_m,
                r.precision,
                r.persistent.unwrap_or(0) > 0,
            )?;
            let first = heuristic(&p, dev.sm_count().unwrap_or(132), &config);
            // The short list is measured only where the heuristic's wgmma tile runs: where
            // the plans refuse it (operands the wgmma path cannot take) or the GPU has no
            // wgmma, every candidate is timed. Planned only if the rank is needed (not on
            // a cache hit).
            let shortlist = move || {
                first.wgmma == Some(true)
                    && dev.cuda_runtime().is_some()
                    && adds_a_kernel(a, b, c, &first).unwrap_or(false)
            };
            let first = first.to_tuner();
            let tuning = Tuning::new(
                "tegula_kernels::matmul",
                &ir.to_string(),
                key.clone(),
                cands.iter().map(|c| c.to_tuner()).collect(),
            )
            .rank_when(TOP_K, move |c| tuned::distance(c, &first), shortlist);
            Ok(tuning.prepare_with(move |t| {
                let c_cfg = MatmulConfig::from_tuner(t, &config)?;
                tuned::prepare(dev, c_cfg.wgmma == Some(true), || launch(a, b, c, &c_cfg))
            }))
        },
        |t| {
            let c_cfg = MatmulConfig::from_tuner(t, &config)?;
            tuned::plan_or_prune(dev, c_cfg.wgmma == Some(true), || launch(a, b, c, &c_cfg))?;
            median_ms(dev, || launch(a, b, c, &c_cfg))
        },
        |t| then(&MatmulConfig::from_tuner(t, &config)?),
    )
}

/// `C = A B` into `c`, with tiles, warps and stages chosen by the autotuner.
///
/// Contract: `T` is f16, bf16 or f32 and `O` is a float dtype; `a` is `[M, K]`, `b` `[K, N]`,
/// `c` `[M, N]`, each with any strides (row-major, column-major, sliced); one device; `c` shares
/// no memory with `a` or `b`. Accumulation is f32, rounded once to `O`.
pub fn matmul_into<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
) -> Result<()> {
    matmul_into_with(a, b, c, MatmulConfig::default())
}

/// [`matmul_into`] with tile sizes, grouping, f32 precision, warps and stages from `config`
/// (its [`AUTO`] fields tuned).
pub fn matmul_into_with<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: MatmulConfig,
) -> Result<()> {
    check_operands(a, b, c, &config)?;
    if a.shape()[0] == 0 || b.shape()[1] == 0 {
        return Ok(());
    }
    resolve_then(a, b, c, config, |config| launch(a, b, c, config))
}

fn check_operands<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: &MatmulConfig,
) -> Result<()> {
    check_inputs(a, b, config)?;
    check::expect_dtype_in::<O>(OP, "c", &[DType::F16, DType::BF16, DType::F32, DType::F64])?;
    let (m, n) = (a.shape()[0], b.shape()[1]);
    check::expect_shape(OP, "c", c, &[m, n])?;
    check::expect_same_device(OP, ("a", a), ("c", c))?;
    check::expect_no_alias(OP, ("c", c), ("a", a))?;
    check::expect_no_alias(OP, ("c", c), ("b", b))?;
    check::expect_i32_extent(OP, "c", c)?;
    Ok(())
}

/// The contract on the inputs and the config.
fn check_inputs<T: Element>(a: &Tensor<T>, b: &Tensor<T>, config: &MatmulConfig) -> Result<()> {
    check::expect_dtype_in::<T>(OP, "a", DTYPES)?;
    config.validate()?;
    check::expect_rank(OP, "a", a, 2)?;
    check::expect_rank(OP, "b", b, 2)?;
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let n = b.shape()[1];
    check::expect_shape(OP, "b", b, &[k, n])?;
    check::expect_same_device(OP, ("a", a), ("b", b))?;
    check::expect_i32_extent(OP, "a", a)?;
    check::expect_i32_extent(OP, "b", b)?;
    check::as_i32(OP, "M", m)?;
    check::as_i32(OP, "N", n)?;
    check::as_i32(OP, "K", k)?;
    Ok(())
}

/// Launches one fully set config on checked operands.
fn launch<T: Element, O: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<O>,
    config: &MatmulConfig,
) -> Result<()> {
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    let tiles = m.div_ceil(config.block_m) * n.div_ceil(config.block_n);
    let per_sm = config.persistent.unwrap_or(0);
    let programs = if per_sm > 0 {
        persistent_programs(a.device(), tiles, per_sm)
    } else {
        tiles
    };
    let s = |t: &[usize], i: usize| t[i] as i32; // fit i32: checked by expect_i32_extent
    matmul_kernel::launch_with::<T, O>(
        a.device(),
        programs,
        config
            .launch
            .with_mma(if tuned::held_wgmma(config.wgmma) == Some(true) {
                MmaChoice::Wgmma
            } else {
                MmaChoice::Sync
            }),
        a,
        b,
        c,
        m as i32, // fits: checked by check_operands
        n as i32,
        k as i32,
        s(a.strides(), 0),
        s(a.strides(), 1),
        s(b.strides(), 0),
        s(b.strides(), 1),
        s(c.strides(), 0),
        s(c.strides(), 1),
        config.block_m,
        config.block_n,
        config.block_k,
        config.group_m,
        config.precision,
        per_sm > 0,
    )
}

/// SMs the interpreter pretends to have: few, so that CPU runs of the persistent grid walk
/// several tiles a program.
const INTERPRETER_SMS: usize = 2;

/// The programs of a persistent grid over `tiles` tiles with at most `per_sm` programs a SM:
/// the fewest tiles a program that fit, then the fewest programs that still give each that
/// many (512 tiles on 132 SMs: 128 programs of 4 tiles, the same 4 rounds as 132 programs).
pub fn persistent_programs(dev: &Device, tiles: usize, per_sm: usize) -> usize {
    let sms = check::sm_count(dev, INTERPRETER_SMS);
    check::persistent_grid(tiles, sms * per_sm).0
}

/// `A B` in a new contiguous f32 tensor; see [`matmul_into`]. The inputs are checked before
/// the output is allocated.
pub fn matmul<T: Element>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<f32>> {
    check_inputs(a, b, &MatmulConfig::default())?;
    let shape = [a.shape()[0], b.shape()[1]];
    check::expect_i32_output(OP, "c", &shape)?;
    let c = a.device().empty::<f32>(shape)?;
    matmul_into(a, b, &c)?;
    Ok(c)
}

/// Tolerances `(atol, rtol)` for a product with inner dimension `k` of unit-normal inputs of
/// dtype `input`, accumulated in f32 and stored as `output`. f16/bf16 products are exact in f32;
/// the f32 sum errs by about `sqrt(k)` ulps of its terms, and each of the `k` additions rounds
/// a partial sum of size up to `sqrt(k)`: over the millions of outputs of a large product the
/// worst reaches a few `k` ulps of 1 (2.2e-3 measured at K = 4096 on the H200's wgmma, past
/// the `sqrt(k)` term alone), so `4 k f32::EPSILON` more; tf32 rounds each input to 11 bits.
pub fn tolerance(input: DType, output: DType, precision: InputPrecision, k: usize) -> (f64, f64) {
    let sk = (k.max(1) as f64).sqrt();
    let accumulation = 4.0 * k as f64 * f32::EPSILON as f64;
    let (mut atol, mut rtol): (f64, f64) = (1e-5 * sk + accumulation, 1e-5);
    if input == DType::F32 && precision != InputPrecision::Ieee {
        atol = 2e-3 * sk;
        rtol = 2e-3;
    }
    match output {
        DType::F16 => (atol + 1e-3, rtol.max(2e-3)),
        DType::BF16 => (atol + 8e-3, rtol.max(1.6e-2)),
        _ => (atol, rtol),
    }
}

fn dims(shape: &[usize]) -> (usize, usize, usize) {
    (
        shape.first().copied().unwrap_or(1),
        shape.get(1).copied().unwrap_or(1),
        shape.get(2).copied().unwrap_or(1),
    )
}

fn check_typed<T: Element>(dev: &Device, shape: &[usize]) -> Result<CheckReport> {
    let (m, n, k) = dims(shape);
    let a = dev.randn::<T>([m, k])?;
    let b = dev.randn::<T>([k, n])?;
    let c = matmul(&a, &b)?;
    // The persistent grid is only a candidate for large tiles, so it is checked explicitly on
    // the same inputs (two programs a SM, several tiles each; output poisoned): its compiler
    // path pipelines the tile loop and copies the next tile's stages during the store.
    let persistent = dev.full::<f32>([m, n], f32::NAN)?;
    let config = MatmulConfig {
        launch: LaunchConfig::new(4, 3),
        persistent: Some(2),
        ..MatmulConfig::fixed(64, 64, 32)
    };
    matmul_into_with(&a, &b, &persistent, config)?;
    let want = check::matmul_f64(&a.to_f64_vec()?, &b.to_f64_vec()?, m, k, n);
    let mut got = c.to_f64_vec()?;
    got.extend(persistent.to_f64_vec()?);
    let mut what = format!("M={m} N={n} K={k}, tuned and persistent 64x64x32");
    let mut want = [want.as_slice(), want.as_slice()].concat();
    let mut tolerance_k = k;
    if (dev.has_wgmma() || tuned::wgmma_forced()) && matches!(T::DTYPE, DType::F16 | DType::BF16) {
        // The wgmma lowering reads pipelined slots only, which need rows of whole 16-element
        // multiples: N and K rounded up to 16 (M stays, so rows are masked), fresh inputs.
        // Its tile variants (64- and 128-byte A rows, B in one or several 64-column panels,
        // 1 or 2 warpgroups, two 64-row blocks a warpgroup), outputs poisoned.
        let (n16, k16) = (n.next_multiple_of(16), k.next_multiple_of(16));
        let a = dev.randn::<T>([m, k16])?;
        let b = dev.randn::<T>([k16, n16])?;
        let want16 = check::matmul_f64(&a.to_f64_vec()?, &b.to_f64_vec()?, m, k16, n16);
        for (bm, bn, bk, warps, stages) in WGMMA_CHECKED {
            let out = dev.full::<f32>([m, n16], f32::NAN)?;
            let config = MatmulConfig {
                launch: LaunchConfig::new(warps, stages),
                wgmma: Some(true),
                ..MatmulConfig::fixed(bm, bn, bk)
            };
            matmul_into_with(&a, &b, &out, config)?;
            got.extend(out.to_f64_vec()?);
            want.extend_from_slice(&want16);
        }
        what += &format!(", {} wgmma tiles at N={n16} K={k16}", WGMMA_CHECKED.len());
        tolerance_k = k16;
    }
    Ok(check::compare(
        OP,
        what,
        T::DTYPE,
        &got,
        &want,
        tolerance(T::DTYPE, DType::F32, InputPrecision::Ieee, tolerance_k),
    ))
}

/// Tiles `tegula check matmul` runs on `wgmma` besides the tuned one, on a device with wgmma
/// or with `TEGULA_WGMMA=1`:
/// (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages).
const WGMMA_CHECKED: [(usize, usize, usize, u32, u32); 5] = [
    (128, 256, 64, 8, 3),
    (128, 256, 32, 8, 4),
    (256, 128, 64, 8, 4),
    (128, 128, 128, 4, 2),
    (64, 32, 32, 4, 3),
];

fn check_entry(dev: &Device, shape: &[usize], dtype: DType) -> Result<CheckReport> {
    match dtype {
        DType::BF16 => check_typed::<bf16>(dev, shape),
        DType::F32 => check_typed::<f32>(dev, shape),
        _ => check_typed::<f16>(dev, shape),
    }
}

/// The Tile IR of the default candidate for `shape` (what the interpreter launches).
fn trace_typed<T: Element>(shape: &[usize]) -> std::result::Result<Kernel, TraceError> {
    let (m, n, k) = dims(shape);
    let p = MatmulProblem {
        m,
        n,
        k,
        input: T::DTYPE,
        output: DType::F32,
        a_col_major: false,
        b_col_major: false,
        wgmma: false,
    };
    let c = candidates(&p, &MatmulConfig::default())[0];
    matmul_kernel::trace::<T, f32>(
        c.block_m,
        c.block_n,
        c.block_k,
        c.group_m,
        c.precision,
        c.persistent.unwrap_or(0) > 0,
    )
}

fn trace_entry(shape: &[usize], dtype: DType) -> std::result::Result<Kernel, TraceError> {
    match dtype {
        DType::BF16 => trace_typed::<bf16>(shape),
        DType::F32 => trace_typed::<f32>(shape),
        _ => trace_typed::<f16>(shape),
    }
}

/// The library entry.
pub fn entry() -> LibraryKernel {
    LibraryKernel {
        name: "matmul",
        about:
            "C = A B, autotuned tiles/warps/stages (default 64x64x32), f32 accumulation, grouped \
                program order (GROUP_M = 8)",
        dims: &["M", "N", "K"],
        default_shape: &[200, 150, 130],
        dtypes: DTYPES,
        check: check_entry,
        trace: trace_entry,
    }
}
