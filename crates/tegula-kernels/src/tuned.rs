//! How the library's matmul and attention wrappers pick a config with the autotuner.
//!
//! A wrapper whose caller left tile sizes or warps/stages at [`AUTO`] asks `run` to launch the
//! config of its key (the shape bucket that selects a config). The first call per key and
//! device in a process builds the [`Tuning`] (tracing the reference config, whose printed Tile
//! IR is the source hash) and asks [`Autotuner::global`]: the cached winner, the default, or a
//! fresh timing of every candidate (compiled first on several threads: `prepare`). Later calls find the answer in this module's memo, so a
//! wrapper called in a loop neither traces nor touches the cache file again. A config that
//! fails to launch (a corrupt or stale cache entry) is dropped and chosen again.
//!
//! On a GPU, the choice is said once per key on stderr (`tegula bench` relies on this to show
//! which config won); on the interpreter the tuner returns the first candidate, silently.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tegula::autotune::{Autotuner, Config, Source, Target, Tuning};
use tegula::{Device, LaunchConfig, Result};

/// A block size or a warp/stage count left to the autotuner.
pub const AUTO: usize = 0;

/// Warps and stages left to the autotuner.
pub const AUTO_LAUNCH: LaunchConfig = LaunchConfig::new(0, 0);

/// The largest f32 accumulator a thread should hold (in elements) before registers spill.
pub(crate) const ACC_PER_THREAD: usize = 128;

/// The tuner's performance model for a wrapper with a heuristic config (rule *nearest the
/// heuristic*): a candidate ranks by its distance from `heuristic`, so a miss times the
/// heuristic and its neighbours first ([`Tuning::rank_with`]), and with tuning off the
/// heuristic itself (or the candidate nearest it) runs. The distance adds, per constexpr
/// named `BLOCK_*`, the octaves between the two sizes; `WGMMA` apart 1.5, `PERSISTENT` apart
/// 0.6, any other constexpr apart 1; the warps apart 0.7; half a unit a stage. A constexpr
/// that one config lacks counts as 0 there. The weights put a tile's own stages and twins
/// before the next tile size, which the timings of every candidate at the library's benchmark
/// shapes on the H200 bear out (`benchmarks/tune-data`; tested in `tests/tune_data.rs`).
pub fn distance(a: &Config, b: &Config) -> f64 {
    let names: std::collections::BTreeSet<&String> =
        a.constexprs.keys().chain(b.constexprs.keys()).collect();
    let mut d = 0.0;
    for name in names {
        let (x, y) = (a.get(name).unwrap_or(0), b.get(name).unwrap_or(0));
        d += if name.starts_with("BLOCK") && x > 0 && y > 0 {
            (x as f64 / y as f64).log2().abs()
        } else if x == y {
            0.0
        } else {
            match name.as_str() {
                "WGMMA" => 1.5,
                "PERSISTENT" => 0.6,
                _ => 1.0,
            }
        };
    }
    if a.num_warps != b.num_warps {
        d += 0.7;
    }
    d + 0.5 * f64::from(a.num_stages.abs_diff(b.num_stages))
}

/// The block sizes worth trying for a dimension of `size` among `sizes`: none above the size
/// rounded up to a power of two (at least 16), none below half of that or below `floor`
/// (smaller blocks only serve small problems, where they are the only ones kept).
pub(crate) fn block_band(size: usize, sizes: &[usize], floor: usize) -> Vec<usize> {
    let largest = sizes.iter().copied().max().unwrap_or(16);
    let hi = size.max(1).next_power_of_two().clamp(16, largest);
    let lo = (hi / 2).clamp(16, floor.max(16));
    sizes
        .iter()
        .copied()
        .filter(|&b| (lo..=hi).contains(&b))
        .collect()
}

/// Moves the first candidate equal to `preferred` to the front (the default: what the
/// interpreter and `TEGULA_AUTOTUNE=off` run), or inserts it there.
pub(crate) fn put_first<C: PartialEq>(candidates: &mut Vec<C>, preferred: C) {
    candidates.retain(|c| *c != preferred);
    candidates.insert(0, preferred);
}

/// Keeps the first of equal candidates (fixed fields can make several equal).
pub(crate) fn dedup<C: PartialEq>(candidates: Vec<C>) -> Vec<C> {
    let mut out: Vec<C> = Vec::with_capacity(candidates.len());
    for c in candidates {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn memo() -> &'static Mutex<HashMap<String, Config>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Config>>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `launch` with the config of `kernel` for `key` on `dev`: from this process's memo, else
/// from the tuner, which gets the request that `tuning` builds (called only here, on a miss)
/// and times candidates with `bench` when it has to (a wrapper that only wants the config
/// passes a `launch` that returns it). A config that fails to launch (it does not
/// trace, compile or launch: a corrupt or stale autotune cache entry) is dropped from the memo
/// and from the cache, with a note, and the choice is made again (retuned on a GPU in `full`
/// mode) before `launch` runs once more ([`Autotuner::tune_and_run`]).
pub(crate) fn run<'a, R>(
    dev: &Device,
    kernel: &str,
    key: &str,
    tuning: impl FnOnce() -> Result<Tuning<'a>>,
    bench: impl FnMut(&Config) -> Result<f64>,
    mut launch: impl FnMut(&Config) -> Result<R>,
) -> Result<R> {
    // Per device: a recording device standing for a GPU answers as that GPU, not as the
    // interpreter whose backend it shares.
    let memo_key = format!("{kernel}|{key}|{:?}|{}", dev.backend(), dev.id());
    let lock = || memo().lock().unwrap_or_else(|p| p.into_inner());
    let hit = lock().get(&memo_key).cloned();
    if let Some(hit) = hit {
        match launch(&hit) {
            Err(e) if tegula::autotune::may_blame_config(&e) => {
                // Ran before in this process (or was only chosen): ask the tuner again, which
                // checks its cache entry the same way.
                lock().remove(&memo_key);
            }
            done => return done,
        }
    }
    let tuning = tuning()?;
    let target = Target::of(dev);
    let (tuned, result) = Autotuner::global().tune_and_run(&target, &tuning, bench, &mut launch)?;
    if target.tunable {
        let how = match tuned.source {
            Source::Tuned { ms, timed } => {
                format!(
                    "tuned now ({timed} of {} timed, {} pruned by their plans, best {ms:.4} ms; \
                     {:.2} s compiling, {:.2} s timing)",
                    tuning.configs.len(),
                    tuned.pruned,
                    tuned.compile_s,
                    tuned.timing_s
                )
            }
            Source::Cached { ms } => format!("from the autotune cache ({ms:.4} ms when tuned)"),
            Source::Default => {
                "the default (TEGULA_AUTOTUNE=off or cached without an entry)".into()
            }
            Source::Pinned => "pinned (--config)".into(),
        };
        eprintln!("tegula: {kernel} [{key}]: {} {how}", tuned.config);
        for (c, why) in &tuned.dropped {
            let first = why.lines().next().unwrap_or("");
            eprintln!("tegula: {kernel} [{key}]: dropped {c}: {first}");
        }
    }
    lock().insert(memo_key, tuned.config.clone());
    Ok(result)
}

/// Whether a candidate's kernels are another candidate's, by the compiler's plans of the
/// launches `launch` makes (planned on `dev`, not run): [`tegula::Error::Pruned`] when shared
/// memory cuts a loop's stages (the kernels of the candidate with fewer stages), or when the
/// candidate asks for `wgmma` and none of its dots runs on it (its `mma.sync` twin's kernels).
/// The reports are returned for rules of the wrapper's own.
pub(crate) fn plan_or_prune(
    dev: &Device,
    asks_wgmma: bool,
    launch: impl FnOnce() -> Result<()>,
) -> Result<Vec<tegula::Report>> {
    let reports = dev.plans(launch)?;
    let pruned = |why: &str| Err(tegula::Error::Pruned { why: why.into() });
    if reports.iter().any(|r| r.stages_cut_by_shared_memory()) {
        return pruned("shared memory cuts its stages (a candidate with fewer stages)");
    }
    if asks_wgmma && reports.iter().all(|r| r.wgmma_dots() == 0) {
        return pruned("no dot runs on wgmma (its mma.sync twin)");
    }
    Ok(reports)
}

/// A wrapper's [`Tuning::prepare_with`] step for one candidate: its plans' pruning
/// ([`plan_or_prune`]; a pruned candidate is not compiled further), then the launches
/// compiled and loaded without running ([`Device::prepare`]).
pub(crate) fn prepare(
    dev: &Device,
    asks_wgmma: bool,
    launch: impl Fn() -> Result<()>,
) -> Result<()> {
    plan_or_prune(dev, asks_wgmma, &launch)?;
    dev.prepare(launch)
}

/// `n` as an `i64` constexpr value (block sizes are small).
pub(crate) fn cx(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `TEGULA_WGMMA=1`: every matmul and attention launch asks for `wgmma` (to check that path
/// everywhere), as if each had held `wgmma: Some(true)`.
pub(crate) fn wgmma_forced() -> bool {
    crate::settings::Settings::global().force_wgmma
}

/// The `wgmma` choice a launch holds: the caller's, or `Some(true)` under `TEGULA_WGMMA=1`.
pub(crate) fn held_wgmma(wgmma: Option<bool>) -> Option<bool> {
    if wgmma_forced() {
        Some(true)
    } else {
        wgmma
    }
}

/// A held `wgmma` choice ([`held_wgmma`]) appended to a key (`,WGMMA=1` or `,WGMMA=0`): it
/// selects its own winner, so candidates timed on `wgmma` under `TEGULA_WGMMA=1` never answer a
/// later plain call. `None` (the tuner's twins) adds nothing.
pub(crate) fn held_wgmma_suffix(wgmma: Option<bool>) -> &'static str {
    match held_wgmma(wgmma) {
        Some(true) => ",WGMMA=1",
        Some(false) => ",WGMMA=0",
        None => "",
    }
}

/// What the caller fixed, appended to a key (`,block_n=16,warps=8,stages=2`): a request with
/// held fields has its own candidates, hence its own winner.
pub(crate) fn held_suffix(fields: &[(&str, usize)], launch: LaunchConfig) -> String {
    let mut out = String::new();
    for &(name, value) in fields {
        if value != AUTO {
            out.push_str(&format!(",{name}={value}"));
        }
    }
    if launch != AUTO_LAUNCH {
        out.push_str(&format!(
            ",warps={},stages={}",
            launch.num_warps, launch.num_stages
        ));
    }
    out
}
