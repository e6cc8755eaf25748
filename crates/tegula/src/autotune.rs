//! The autotuner: pick the fastest of a kernel's candidate configs for a key, and remember it.
//!
//! A library kernel's host wrapper lists [`Config`] candidates (constexpr values, warps,
//! stages), says which argument values select a config (the key, e.g. `M=4096,N=4096,f16`),
//! and hands the tuner a closure that times one candidate. The winner is stored per
//! (kernel, source hash, key, device, driver) in a JSON file, `$TEGULA_CACHE_DIR/autotune.json`
//! (default: the user cache dir's `tegula/autotune.json`), so later processes reuse it without
//! timing. The key also holds the compiler ([`COMPILER`]: the version and a build-time hash of
//! the tracer, the IR passes, the specialization and the PTX lowering) and a hash of the whole
//! candidate list, so neither another compiler's winner nor one picked from another list is
//! reused. `TEGULA_AUTOTUNE=off|cached|full` chooses how much work a miss costs:
//!
//! - `off`: the default config (the first candidate that pruning keeps; on a GPU, a ranked
//!   request's first by its model), no timing;
//! - `cached`: the cached winner if there is one, else the default, no timing;
//! - `full` (default): time every candidate on a miss and store the winner.
//!
//! A request with a performance model ([`Tuning::rank_with`], Triton's `perf_model` and
//! `top_k`) times only the candidates its model ranks first, and its model's first is the
//! default on a GPU; `TEGULA_TUNE_TOP_K` (a number, or `all`) overrides how many are timed.
//!
//! On the interpreter there is nothing to tune: the default config, no timing.
//!
//! Timing is one candidate at a time (two kernels timed at once would disturb each other),
//! but compiling need not be: a request that says how to compile a candidate without
//! running it ([`Tuning::prepare_with`], usually [`Device::prepare`] around the benchmark's
//! launches) has every candidate traced, lowered and loaded on [`tune_threads`] threads
//! first, and the timing that follows finds the kernels ready.
//!
//! Candidates whose benchmark fails (the PTX backend refuses them, shared memory or registers
//! run out, the driver will not launch them) are dropped with a note; a kernel fault stops
//! tuning, since the CUDA context is then unusable.
//!
//! The cache survives its own corruption: a file that does not parse is ignored (and
//! rewritten by the next tuning); a stored config that is not among the candidates is dropped
//! with a note; and through [`Autotuner::tune_and_run`], a stored config that fails to trace,
//! compile or launch is dropped with a note and the choice is made again (retuned in `full`
//! mode). Writers of one file take a lock file beside it (`autotune.json.lock`), so concurrent
//! tuners (processes or threads) merge their entries instead of losing them.
//!
//! Tuned configs can be shipped: [`Autotuner::export`] writes the cache file's entries to a
//! file of the same format, and [`Autotuner::import`] (or [`Autotuner::import_json`], for a
//! file embedded with `include_str!`) merges such a file into this tuner's cache file and its
//! memory, imported entries winning, so another machine (CI, a fleet) answers from the cache
//! without timing. An imported entry is used only where its whole key matches: another GPU,
//! driver, compiler, kernel source or candidate list never selects it. A file that does not
//! parse, has another version, or holds an entry whose key is not the one its fields give (a
//! hand-edited file) is refused whole with a [`CacheError`], and the cache is left as it was.
//! `tegula tune --export FILE` and `tegula tune --import FILE` do the same from the command line.

use crate::device::{Backend, Device};
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// One candidate: constexpr values by name, warps per program, pipeline stages.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Config {
    pub constexprs: BTreeMap<String, i64>,
    pub num_warps: u32,
    pub num_stages: u32,
}

impl Config {
    /// A config with no constexprs.
    pub fn new(num_warps: u32, num_stages: u32) -> Config {
        Config {
            constexprs: BTreeMap::new(),
            num_warps,
            num_stages,
        }
    }

    /// This config with constexpr `name` set to `value`.
    pub fn with(mut self, name: &str, value: i64) -> Config {
        self.constexprs.insert(name.to_string(), value);
        self
    }

    /// The value of constexpr `name`.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.constexprs.get(name).copied()
    }

    /// The value of constexpr `name` as a `usize`, or a typed error naming the kernel's missing
    /// or negative constexpr (a bug in the candidate list, reported rather than panicking).
    pub fn usize(&self, name: &str) -> Result<usize> {
        self.get(name)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| Error::Invalid {
                op: "autotune".into(),
                message: format!("config {self} has no non-negative constexpr `{name}`"),
            })
    }

    pub fn launch_config(&self) -> LaunchConfig {
        LaunchConfig::new(self.num_warps, self.num_stages)
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, value) in &self.constexprs {
            write!(f, "{name}={value},")?;
        }
        write!(f, "warps={},stages={}", self.num_warps, self.num_stages)
    }
}

/// How much work a cache miss may cost (`TEGULA_AUTOTUNE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The default config, no timing, the cache untouched.
    Off,
    /// The cached winner, else the default; never times.
    Cached,
    /// Times every candidate on a miss and stores the winner.
    Full,
}

impl Mode {
    /// Parses `off`, `cached` or `full` (case-insensitive; empty is `full`).
    pub fn parse(text: &str) -> Option<Mode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "false" => Some(Mode::Off),
            "cached" | "cache" => Some(Mode::Cached),
            "full" | "on" | "1" | "true" | "" => Some(Mode::Full),
            _ => None,
        }
    }

    /// `TEGULA_AUTOTUNE` ([`crate::env::Settings::autotune`]); an unknown value is reported
    /// once and read as `full`.
    pub fn from_env() -> Mode {
        crate::env::Settings::global().autotune
    }
}

/// How many of a ranked request's candidates a miss times (`TEGULA_TUNE_TOP_K`; see
/// [`Tuning::rank_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopK {
    /// Every candidate that pruning keeps.
    All,
    /// The first `n` by the request's model (`n` at least 1).
    First(usize),
}

impl TopK {
    /// Parses `all` (any case) or a positive number.
    pub fn parse(text: &str) -> Option<TopK> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("all") {
            return Some(TopK::All);
        }
        match text.parse::<usize>() {
            Ok(n) if n > 0 => Some(TopK::First(n)),
            _ => None,
        }
    }
}

/// Where configs are tuned: the part of the cache key that says which machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The device's name as the driver reports it, e.g. `NVIDIA H200`.
    pub device: String,
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: i32,
    /// False on the interpreter: timing there says nothing about a GPU.
    pub tunable: bool,
}

impl Target {
    /// The target of a device.
    pub fn of(dev: &Device) -> Target {
        match (dev.backend(), dev.cuda_runtime()) {
            (Backend::Cuda(_), Some(rt)) => {
                let info = rt.device_info();
                Target {
                    device: info.name,
                    driver_version: info.driver_version,
                    tunable: true,
                }
            }
            _ => match dev.stand_in() {
                // A recording device times nothing, but answers from the cache as its GPU would.
                Some(stand_in) => Target {
                    tunable: false,
                    ..stand_in.tuned_as.clone()
                },
                None => Target {
                    device: "interpreter".into(),
                    driver_version: 0,
                    tunable: false,
                },
            },
        }
    }
}

/// The compiler a config is tuned for, part of every cache key: `tegula-ptx <version>+src.<hash>`,
/// where the hash is FNV-1a over the sources of `tegula-ir/src`, `tegula-ptx/src` and
/// `tegula/src/gpu.rs` at build time (`build.rs`). A build without those sources beside it
/// says `+src.unhashed` and is then told apart by its version only.
pub const COMPILER: &str = env!("TEGULA_COMPILER_ID");

/// A stable 64-bit FNV-1a hash of `text` as 16 hex digits (stable across Rust versions, unlike
/// `std`'s hasher, since it names cache entries on disk).
pub fn source_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A candidate filter: true keeps the config.
type Prune<'a> = Box<dyn Fn(&Config) -> bool + 'a>;

/// Compiles one candidate's kernels ahead of its timing (see [`Tuning::prepare_with`]).
type Prepare<'a> = Box<dyn Fn(&Config) -> Result<()> + Sync + 'a>;

/// A performance model and how many of its best to time (see [`Tuning::rank_with`]).
struct Rank<'a> {
    top_k: usize,
    model: Box<dyn Fn(&Config) -> f64 + 'a>,
    /// Whether the ranking applies ([`Tuning::rank_when`]): asked once, when first needed.
    when: Option<Box<dyn Fn() -> bool + 'a>>,
    applies: std::cell::OnceCell<bool>,
}

/// A tuning request: which kernel, which version of its source, which key, which candidates.
pub struct Tuning<'a> {
    pub kernel: String,
    /// Changes whenever the kernel's code changes (see [`Tuning::new`]).
    pub source_hash: String,
    /// The argument values that select a config, e.g. `M=4096,N=4096,f16`.
    pub key: String,
    pub configs: Vec<Config>,
    /// A hash of `configs` (all of them, in order): a winner picked from another list is not
    /// reused.
    pub candidates_hash: String,
    prune: Option<Prune<'a>>,
    prepare: Option<Prepare<'a>>,
    rank: Option<Rank<'a>>,
}

impl<'a> Tuning<'a> {
    /// A request for `kernel` whose code is summarized by `source` (the printed Tile IR of its
    /// default config is a good choice: any change to the kernel body changes it).
    pub fn new(
        kernel: &str,
        source: &str,
        key: impl Into<String>,
        configs: Vec<Config>,
    ) -> Tuning<'a> {
        let listed: Vec<String> = configs.iter().map(Config::to_string).collect();
        Tuning {
            kernel: kernel.to_string(),
            source_hash: source_hash(source),
            key: key.into(),
            candidates_hash: source_hash(&listed.join(";")),
            configs,
            prune: None,
            prepare: None,
            rank: None,
        }
    }

    /// Keeps only candidates for which `keep` is true (before any timing). Use it for configs
    /// that cannot work for this key (a block larger than the problem, shared memory that the
    /// device lacks) or that are known to lose.
    pub fn prune(mut self, keep: impl Fn(&Config) -> bool + 'a) -> Tuning<'a> {
        self.prune = Some(Box::new(keep));
        self
    }

    /// Compiles a candidate's kernels without running them (typically [`Device::prepare`]
    /// around the launches the benchmark makes). When tuning times the candidates, it first
    /// prepares all of them on several threads ([`tune_threads`]), so that the benchmark of
    /// each finds its kernels compiled and loaded: tracing, lowering, ptxas or the driver's
    /// JIT run in parallel instead of one candidate after another. A failure here is left for
    /// the benchmark to meet and report.
    pub fn prepare_with(
        mut self,
        prepare: impl Fn(&Config) -> Result<()> + Sync + 'a,
    ) -> Tuning<'a> {
        self.prepare = Some(Box::new(prepare));
        self
    }

    /// Ranks the candidates by `model`, a predicted time (any unit: only the order counts),
    /// and has a miss compile and time only the `top_k` it ranks first, as Triton's
    /// `prune_configs_by={'perf_model': .., 'top_k': ..}` does: a first call at a new key then
    /// pays for a handful of candidates instead of all of them. On a GPU the model's first is
    /// also the default (tuning off, or `cached` without an entry); the interpreter keeps the
    /// list's first. Ties keep the list's order; a NaN ranks last. `TEGULA_TUNE_TOP_K`
    /// overrides `top_k` (`all`: every candidate is timed).
    pub fn rank_with(mut self, top_k: usize, model: impl Fn(&Config) -> f64 + 'a) -> Tuning<'a> {
        self.rank = Some(Rank {
            top_k: top_k.max(1),
            model: Box::new(model),
            when: None,
            applies: std::cell::OnceCell::new(),
        });
        self
    }

    /// [`Tuning::rank_with`] where `when` says so: a model that holds only where, say, the
    /// plans take its first candidate. `when` is asked once, and only by what needs the rank
    /// (a miss, or the default with tuning off), not by a cache hit: a check that plans a
    /// launch costs a hit nothing.
    pub fn rank_when(
        self,
        top_k: usize,
        model: impl Fn(&Config) -> f64 + 'a,
        when: impl Fn() -> bool + 'a,
    ) -> Tuning<'a> {
        let mut tuning = self.rank_with(top_k, model);
        if let Some(rank) = &mut tuning.rank {
            rank.when = Some(Box::new(when));
        }
        tuning
    }

    /// The ranking, where it applies.
    fn rank(&self) -> Option<&Rank<'a>> {
        self.rank.as_ref().filter(|r| {
            *r.applies
                .get_or_init(|| r.when.as_ref().is_none_or(|when| when()))
        })
    }

    /// The candidates that pruning keeps, in their given order.
    pub fn candidates(&self) -> Vec<Config> {
        self.configs
            .iter()
            .filter(|c| self.prune.as_ref().is_none_or(|keep| keep(c)))
            .cloned()
            .collect()
    }

    /// [`Tuning::candidates`] by the model's rank, fastest first (their given order without a
    /// model).
    pub fn ranked(&self) -> Vec<Config> {
        let candidates = self.candidates();
        let Some(rank) = self.rank() else {
            return candidates;
        };
        let mut scored: Vec<(f64, Config)> = candidates
            .into_iter()
            .map(|c| {
                let t = (rank.model)(&c);
                (if t.is_nan() { f64::INFINITY } else { t }, c)
            })
            .collect();
        // A stable sort: ties keep the list's order.
        scored.sort_by(|a, b| a.0.total_cmp(&b.0));
        scored.into_iter().map(|(_, c)| c).collect()
    }

    /// How many candidates a miss times: the model's `top_k` (`override_k` replacing the
    /// request's), or every candidate without a model.
    fn how_many(&self, override_k: Option<TopK>, kept: usize) -> usize {
        match (override_k, self.rank()) {
            (_, None) | (Some(TopK::All), _) => kept,
            (Some(TopK::First(n)), Some(_)) => n.min(kept),
            (None, Some(rank)) => rank.top_k.min(kept),
        }
    }

    /// `kernel|source|compiler|candidates|key|device|driver`.
    fn cache_key(&self, target: &Target) -> String {
        keyed_for(&self.request_key(), &target.device, target.driver_version)
    }

    /// The cache key without its target: what was tuned, by which compiler, among which
    /// candidates.
    fn request_key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}",
            self.kernel, self.source_hash, COMPILER, self.candidates_hash, self.key
        )
    }
}

/// Where a chosen config came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Timed now: the winner's median milliseconds and how many candidates were timed.
    Tuned { ms: f64, timed: usize },
    /// From the cache (this process's memory or the file), with the milliseconds measured
    /// when it was tuned.
    Cached { ms: f64 },
    /// The default: tuning is off, the cache had no entry in `cached` mode, or the device is
    /// the interpreter.
    Default,
    /// Pinned by the caller ([`with_pinned`]): neither timed nor cached.
    Pinned,
}

/// The tuner's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    pub config: Config,
    pub source: Source,
    /// Candidates dropped because their benchmark failed, with the reason.
    pub dropped: Vec<(Config, String)>,
    /// Candidates the benchmark skipped as the same kernels as others ([`Error::Pruned`]).
    pub pruned: usize,
    /// Every candidate timed now with its sweep timing (median milliseconds), in the order
    /// timed; empty unless [`Source::Tuned`].
    pub timings: Vec<(Config, f64)>,
    /// Wall seconds spent compiling the candidates ahead of their timing
    /// ([`Tuning::prepare_with`]) and timing them (the sweep and the confirmation); zero
    /// unless [`Source::Tuned`].
    pub compile_s: f64,
    pub timing_s: f64,
}

/// One stored winner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    kernel: String,
    source_hash: String,
    /// [`COMPILER`] when it was tuned.
    compiler: String,
    /// [`Tuning::candidates_hash`].
    candidates_hash: String,
    key: String,
    device: String,
    driver_version: i32,
    config: Config,
    ms: f64,
    /// Seconds since the Unix epoch.
    tuned_at: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    entries: BTreeMap<String, Entry>,
}

/// 2: entries hold the compiler and the candidate list's hash (and the key both).
const CACHE_VERSION: u32 = 2;

/// The autotuner: an in-process memo over the on-disk cache.
pub struct Autotuner {
    /// `None`: nothing persists (`TEGULA_CACHE_DIR=off`).
    path: Option<PathBuf>,
    mode: Mode,
    progress: bool,
    /// `TEGULA_TUNE_TOP_K`: replaces ranked requests' own `top_k`.
    top_k: Option<TopK>,
    /// `TEGULA_TUNE_LOG`: a file each tuning appends a JSON line to.
    log: Option<PathBuf>,
    memo: Mutex<HashMap<String, (Config, f64)>>,
    /// The cached configs a recording device's lookups found ([`Autotuner::take_stand_in_hits`]).
    stand_in_hits: Mutex<Vec<TunedChoice>>,
    /// Notes for the user: corrupt cache files, failed writes. Each is said once.
    notes: Mutex<Vec<String>>,
    said: Mutex<HashSet<String>>,
}

impl Autotuner {
    /// A tuner over the cache file at `path` (`None`: memory only) in `mode`. Quiet: no progress
    /// bar, notes kept for [`Autotuner::notes`] and not printed.
    pub fn new(path: Option<PathBuf>, mode: Mode) -> Autotuner {
        Autotuner {
            path,
            mode,
            progress: false,
            top_k: None,
            log: None,
            memo: Mutex::new(HashMap::new()),
            stand_in_hits: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
            said: Mutex::new(HashSet::new()),
        }
    }

    /// The tuner that `TEGULA_AUTOTUNE` and `TEGULA_CACHE_DIR` describe, with a progress bar
    /// when stderr is a terminal and `CI` is unset.
    pub fn from_env() -> Autotuner {
        Autotuner::from_settings(crate::env::Settings::global())
    }

    /// The tuner that `settings` describe (cache file and mode), with a progress bar when
    /// stderr is a terminal and `CI` is unset.
    pub fn from_settings(settings: &crate::env::Settings) -> Autotuner {
        let path = settings.cache_dir.as_ref().map(|d| d.autotune_file.clone());
        let mut tuner = Autotuner::new(path, settings.autotune)
            .with_top_k(settings.tune_top_k)
            .with_log(settings.tune_log.clone());
        tuner.progress = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        tuner
    }

    /// This tuner with ranked requests timing `top_k` of their candidates instead of their
    /// own number (`None`: their own; see [`Tuning::rank_with`]).
    pub fn with_top_k(mut self, top_k: Option<TopK>) -> Autotuner {
        self.top_k = top_k;
        self
    }

    /// This tuner appending one JSON line a tuning to `log` (see [`Autotuner::tune_for`]).
    pub fn with_log(mut self, log: Option<PathBuf>) -> Autotuner {
        self.log = log;
        self
    }

    /// The process-wide tuner that library kernels use (from the environment, made once).
    pub fn global() -> &'static Autotuner {
        static GLOBAL: OnceLock<Autotuner> = OnceLock::new();
        GLOBAL.get_or_init(Autotuner::from_env)
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn cache_path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What the tuner had to say so far (corrupt cache files, failed writes).
    pub fn notes(&self) -> Vec<String> {
        lock(&self.notes).clone()
    }

    /// [`Autotuner::tune_for`] on a device's [`Target`].
    pub fn tune(
        &self,
        dev: &Device,
        tuning: &Tuning<'_>,
        bench: impl FnMut(&Config) -> Result<f64>,
    ) -> Result<Tuned> {
        self.tune_for(&Target::of(dev), tuning, bench)
    }

    /// The config to use for `tuning` on `target`: from the cache, the default, or the fastest
    /// candidate by `bench` (median milliseconds of one candidate; an error drops it) among
    /// those a miss times (all that pruning keeps, or a ranked request's first `top_k`:
    /// [`Tuning::rank_with`]). The candidates within 5% of the fastest are timed again under
    /// [`confirming`] (the full budget, through [`median_ms`]) and ranked by that second
    /// timing. With a log ([`Autotuner::with_log`], `TEGULA_TUNE_LOG`), each tuning appends
    /// one JSON line: every timing, the winner and the seconds spent compiling and timing.
    pub fn tune_for(
        &self,
        target: &Target,
        tuning: &Tuning<'_>,
        mut bench: impl FnMut(&Config) -> Result<f64>,
    ) -> Result<Tuned> {
        if tuning.configs.is_empty() {
            return Err(Error::Invalid {
                op: "autotune".into(),
                message: format!("kernel `{}` offers no candidate config", tuning.kernel),
            });
        }
        if let Some(config) = pinned() {
            return if tuning.configs.contains(&config) {
                PINNED_USED.with(|u| u.set(true));
                Ok(Tuned {
                    config,
                    source: Source::Pinned,
                    dropped: Vec::new(),
                    pruned: 0,
                    timings: Vec::new(),
                    compile_s: 0.0,
                    timing_s: 0.0,
                })
            } else {
                Err(Error::Invalid {
                    op: "autotune".into(),
                    message: format!(
                        "the pinned config {config} is not one of kernel `{}`'s candidates ({})",
                        tuning.kernel,
                        tuning
                            .configs
                            .iter()
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                })
            };
        }
        let target_default =
            |candidates: &[Config]| candidates.first().unwrap_or(&tuning.configs[0]).clone();
        let answer = |config: Config, source: Source| Tuned {
            config,
            source,
            dropped: Vec::new(),
            pruned: 0,
            timings: Vec::new(),
            compile_s: 0.0,
            timing_s: 0.0,
        };
        if !target.tunable {
            // A recording device standing for a GPU answers from that GPU's cache entries
            // (the interpreter's target has none: nothing is tuned for it).
            if self.mode != Mode::Off {
                if let Some((config, ms)) = self.lookup(&tuning.cache_key(target)) {
                    if tuning.configs.contains(&config) {
                        lock(&self.stand_in_hits).push(TunedChoice {
                            request: tuning.request_key(),
                            device: target.device.clone(),
                            config: config.clone(),
                            ms,
                        });
                        return Ok(answer(config, Source::Cached { ms }));
                    }
                }
            }
            return Ok(answer(
                target_default(&tuning.candidates()),
                Source::Default,
            ));
        }
        // On a GPU the default is the model's first (the list's first without a model).
        if self.mode == Mode::Off {
            return Ok(answer(target_default(&tuning.ranked()), Source::Default));
        }
        let key = tuning.cache_key(target);
        if let Some((config, ms)) = self.lookup(&key) {
            if tuning.configs.contains(&config) {
                return Ok(answer(config, Source::Cached { ms }));
            }
            self.forget(
                target,
                tuning,
                &config,
                "it is not one of the kernel's candidates",
            );
        }
        // The first `k` by rank that the benchmark does not skip as another's kernels
        // ([`Error::Pruned`]): a pruned candidate leaves its place to the next.
        let ranked = tuning.ranked();
        let k = tuning.how_many(self.top_k, ranked.len());
        if self.mode == Mode::Cached || k <= 1 {
            return Ok(answer(target_default(&ranked), Source::Default));
        }

        let bar = self.progress_bar(tuning, k);
        let started = std::time::Instant::now();
        if let Some(prepare) = &tuning.prepare {
            bar.set_message("compiling the candidates");
            prepare_short_list(prepare, &ranked, k);
        }
        let compile_s = started.elapsed().as_secs_f64();
        let mut timed: Vec<(Config, f64)> = Vec::new();
        let mut dropped = Vec::new();
        let mut pruned = 0;
        let mut first_error = None;
        for config in &ranked {
            if timed.len() + dropped.len() >= k {
                break;
            }
            bar.set_message(config.to_string());
            let best = timed
                .iter()
                .map(|(_, ms)| *ms)
                .fold(f64::INFINITY, f64::min);
            let bound = best * (1.0 + EARLY_STOP_ABOVE);
            let _bound = SweepBound::set(best.is_finite().then_some(bound));
            match bench(config) {
                Ok(ms) if valid_ms(ms) => timed.push((config.clone(), ms)),
                Err(Error::Pruned { .. }) => {
                    pruned += 1;
                    if k < ranked.len() {
                        // Its place on the short list passes to the next candidate.
                        bar.inc_length(1);
                    }
                }
                Ok(ms) => dropped.push((config.clone(), format!("benchmark returned {ms} ms"))),
                Err(e) if is_fatal(&e) => {
                    bar.finish_and_clear();
                    return Err(e);
                }
                Err(e) => {
                    dropped.push((config.clone(), e.to_string()));
                    first_error.get_or_insert(e);
                }
            }
            bar.inc(1);
        }
        if timed.is_empty() {
            bar.finish_and_clear();
            return Err(first_error.unwrap_or_else(|| Error::Invalid {
                op: "autotune".into(),
                message: format!("no config of `{}` could be timed", tuning.kernel),
            }));
        }
        let confirmed = confirm_close_candidates(&timed, &mut bench, &bar, tuning.rank().is_some());
        bar.finish_and_clear();
        let (config, ms) = confirmed?;
        let timing_s = started.elapsed().as_secs_f64() - compile_s;
        self.store(
            &key,
            Entry {
                kernel: tuning.kernel.clone(),
                source_hash: tuning.source_hash.clone(),
                compiler: COMPILER.to_string(),
                candidates_hash: tuning.candidates_hash.clone(),
                key: tuning.key.clone(),
                device: target.device.clone(),
                driver_version: target.driver_version,
                config: config.clone(),
                ms,
                tuned_at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            },
        );
        let tuned = Tuned {
            config,
            source: Source::Tuned {
                ms,
                timed: timed.len(),
            },
            dropped,
            pruned,
            timings: timed,
            compile_s,
            timing_s,
        };
        self.append_to_log(target, tuning, ranked.len(), &tuned);
        Ok(tuned)
    }

    /// One JSON line for `tuned` in the `TEGULA_TUNE_LOG` file: the kernel, key and device,
    /// how many candidates pruning kept, every timed candidate's milliseconds (and the
    /// model's prediction, for a ranked request), the winner, and the seconds spent. A write
    /// that fails is a note, not an error.
    fn append_to_log(&self, target: &Target, tuning: &Tuning<'_>, kept: usize, tuned: &Tuned) {
        let Some(path) = &self.log else { return };
        let Source::Tuned { ms, .. } = tuned.source else {
            return;
        };
        let timed: Vec<serde_json::Value> = tuned
            .timings
            .iter()
            .map(|(c, ms)| {
                let predicted = tuning.rank().map(|r| (r.model)(c));
                serde_json::json!({"config": c, "ms": ms, "predicted": predicted})
            })
            .collect();
        let line = serde_json::json!({
            "kernel": tuning.kernel,
            "key": tuning.key,
            "device": target.device,
            "listed": tuning.configs.len(),
            "kept": kept,
            "timed": timed,
            "pruned": tuned.pruned,
            "dropped": tuned.dropped.len(),
            "winner": tuned.config,
            "winner_ms": ms,
            "compile_s": tuned.compile_s,
            "timing_s": tuned.timing_s,
        });
        let _guard = FileLock::acquire(path);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            self.note(format!(
                "tegula: could not append to the tuning log {}: {e}",
                path.display()
            ));
        }
    }

    /// [`Autotuner::tune_for`], then `run` with the chosen config (the launch the config is
    /// for). When the config came from the cache and `run` fails (it no longer traces,
    /// compiles or launches: a corrupt, hand-edited or stale entry; see [`may_blame_config`]),
    /// the entry is dropped with a note and the choice is made again (retuned in `full` mode,
    /// the default otherwise), and `run` runs once more. Errors of a config that was not
    /// cached, and errors no config causes, are returned as they are.
    pub fn tune_and_run<R>(
        &self,
        target: &Target,
        tuning: &Tuning<'_>,
        mut bench: impl FnMut(&Config) -> Result<f64>,
        mut run: impl FnMut(&Config) -> Result<R>,
    ) -> Result<(Tuned, R)> {
        let tuned = self.tune_for(target, tuning, &mut bench)?;
        match run(&tuned.config) {
            Ok(r) => Ok((tuned, r)),
            Err(e) if matches!(tuned.source, Source::Cached { .. }) && may_blame_config(&e) => {
                let why = e.to_string();
                let first = why.lines().next().unwrap_or("");
                self.forget(
                    target,
                    tuning,
                    &tuned.config,
                    &format!("it failed: {first}"),
                );
                let again = self.tune_for(target, tuning, &mut bench)?;
                let r = run(&again.config)?;
                Ok((again, r))
            }
            Err(e) => Err(e),
        }
    }

    /// Drops the stored winner of `tuning` on `target` (this process's memo and the file),
    /// with a note saying `why`, so that the next request tunes again.
    pub fn forget(&self, target: &Target, tuning: &Tuning<'_>, config: &Config, why: &str) {
        let key = tuning.cache_key(target);
        lock(&self.memo).remove(&key);
        self.note(format!(
            "tegula: the autotune cache's config {config} for {} [{}] was dropped: {why}; \
             choosing again",
            tuning.kernel, tuning.key
        ));
        let Some(path) = &self.path else { return };
        let _guard = FileLock::acquire(path);
        let Some(mut file) = self.read_file() else {
            return;
        };
        if file.entries.remove(&key).is_some() {
            if let Err(e) = write_atomically(path, &file) {
                self.note(format!(
                    "tegula: could not write the autotune cache {}: {e}",
                    path.display()
                ));
            }
        }
    }

    fn progress_bar(&self, tuning: &Tuning<'_>, n: usize) -> indicatif::ProgressBar {
        if !self.progress {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::new(n as u64);
        let style =
            indicatif::ProgressStyle::with_template("tuning {prefix} [{bar:24}] {pos}/{len} {msg}")
                .map(|s| s.progress_chars("=> "));
        if let Ok(style) = style {
            bar.set_style(style);
        }
        bar.set_prefix(format!("{} ({})", tuning.kernel, tuning.key));
        bar
    }

    /// The memo, else the file (which another process may have written since).
    fn lookup(&self, key: &str) -> Option<(Config, f64)> {
        if let Some(hit) = lock(&self.memo).get(key) {
            return Some(hit.clone());
        }
        let file = self.read_file()?;
        let mut memo = lock(&self.memo);
        for (k, e) in file.entries {
            memo.entry(k).or_insert((e.config, e.ms));
        }
        memo.get(key).cloned()
    }

    /// Adds the entry to the memo and the file: under the file's lock, read, merge, write a
    /// temporary file, rename (so a reader never sees half a file, and concurrent writers
    /// merge their entries).
    fn store(&self, key: &str, entry: Entry) {
        lock(&self.memo).insert(key.to_string(), (entry.config.clone(), entry.ms));
        let Some(path) = &self.path else { return };
        let _guard = FileLock::acquire(path);
        let mut file = self.read_file().unwrap_or_default();
        file.version = CACHE_VERSION;
        file.entries.insert(key.to_string(), entry);
        if let Err(e) = write_atomically(path, &file) {
            self.note(format!(
                "tegula: could not write the autotune cache {}: {e}",
                path.display()
            ));
        }
    }

    /// The cache file's contents; `None` if there is none or it is unreadable (said once).
    fn read_file(&self) -> Option<CacheFile> {
        let path = self.path.as_ref()?;
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.note(format!(
                    "tegula: cannot read the autotune cache {}: {e}; ignoring it",
                    path.display()
                ));
                return None;
            }
        };
        match serde_json::from_str::<CacheFile>(&text) {
            Ok(file) if file.version == CACHE_VERSION => Some(file),
            Ok(file) => {
                self.note(format!(
                    "tegula: autotune cache {} has version {}, expected {CACHE_VERSION}; ignoring it",
                    path.display(),
                    file.version
                ));
                None
            }
            Err(e) => {
                self.note(format!(
                    "tegula: autotune cache {} is corrupt ({e}); ignoring it (it is rewritten on \
                     the next tuning)",
                    path.display()
                ));
                None
            }
        }
    }

    /// Records a note and prints it to stderr, once per distinct text.
    fn note(&self, text: String) {
        if !lock(&self.said).insert(text.clone()) {
            return;
        }
        eprintln!("{text}");
        lock(&self.notes).push(text);
    }
}

/// Threads that prepare candidates at once: `TEGULA_TUNE_THREADS` when it is a positive
/// number, else the machine's available parallelism; never more than `candidates`.
pub fn tune_threads(candidates: usize) -> usize {
    let asked = crate::env::Settings::global().tune_threads;
    let n = asked.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    n.min(candidates).max(1)
}

/// Prepares the `k` candidates a miss times, from the front of `ranked`: a candidate the plans
/// prune ([`Error::Pruned`]) leaves its place on the list to the next, so that one is prepared
/// too, in a further round. Cores the first `k` leave idle prepare the next candidates in the
/// first round already (at most `k` more): a pruned one's replacement then costs no round of
/// its own (a JIT of a few hundred milliseconds in the middle of the timing before).
fn prepare_short_list(prepare: &Prepare<'_>, ranked: &[Config], k: usize) {
    let threads = tune_threads(ranked.len());
    let spare = threads.saturating_sub(k).min(k);
    let (mut start, mut wanted, mut ahead) = (0, k, spare);
    while wanted > 0 && start < ranked.len() {
        let end = (start + wanted + ahead).min(ranked.len());
        let batch = &ranked[start..end];
        let pruned = prepare_all(prepare, batch, tune_threads(batch.len()));
        // Those prepared ahead fill the places of the pruned first.
        wanted = (wanted + pruned).saturating_sub(batch.len());
        start = end;
        ahead = 0;
    }
}

/// Runs `prepare` on every candidate, `threads` at a time, each candidate once; errors are
/// dropped (the benchmark meets them again and reports them with the candidate). Returns how
/// many the plans pruned.
fn prepare_all(prepare: &Prepare<'_>, candidates: &[Config], threads: usize) -> usize {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let pruned = std::sync::atomic::AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(config) = candidates.get(i) else {
            break;
        };
        if let Err(Error::Pruned { .. }) = prepare(config) {
            pruned.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(work);
            }
        });
    }
    pruned.into_inner()
}

/// `$TEGULA_CACHE_DIR/autotune.json` (`off`, `0` or empty: none), else the user cache dir's
/// `tegula/autotune.json`.
pub fn default_cache_path() -> Option<PathBuf> {
    let dir = crate::env::Settings::global().cache_dir.as_ref()?;
    Some(dir.autotune_file.clone())
}

/// Whether a config could be the cause of `e`: a trace, lowering, interpreter, argument or
/// driver error (a launch the driver refuses, shared memory it will not give), or a config
/// the wrapper calls invalid. Not a kernel fault (the CUDA context is then unusable: nothing
/// should run again), nor errors about the tensors or memory, which every config meets.
pub fn may_blame_config(e: &Error) -> bool {
    match e {
        Error::Cuda(c) => !c.is_kernel_fault(),
        Error::Trace(_)
        | Error::Ptx(_)
        | Error::Interp(_)
        | Error::Arguments { .. }
        | Error::Invalid { .. } => true,
        Error::Pruned { .. }
        | Error::Shape { .. }
        | Error::DType { .. }
        | Error::Stride { .. }
        | Error::Device { .. }
        | Error::Aliasing { .. }
        | Error::Dlpack(_)
        | Error::Cache(_)
        | Error::Bundle(_)
        | Error::TooLarge { .. }
        | Error::OutOfMemory { .. } => false,
    }
}

/// Errors after which timing more candidates is pointless: a kernel fault leaves the CUDA
/// context unusable.
fn is_fatal(e: &Error) -> bool {
    matches!(e, Error::Cuda(c) if c.is_kernel_fault())
}

/// A lock file beside the cache (`autotune.json.lock`), held while a writer reads, merges and
/// replaces the file. Made with `create_new` (atomic on local file systems); a lock older than
/// [`FileLock::STALE`] is taken to be left by a dead process and broken. If the lock cannot be
/// had within [`FileLock::WAIT`], the writer goes on without it (at worst an entry of a
/// concurrent writer is lost, as before locking): the cache is an optimisation, never a reason
/// to stop.
struct FileLock {
    path: Option<PathBuf>,
}

impl FileLock {
    const WAIT: std::time::Duration = std::time::Duration::from_secs(5);
    const STALE: std::time::Duration = std::time::Duration::from_secs(30);

    fn acquire(cache: &Path) -> FileLock {
        let path = cache.with_extension("json.lock");
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let start = std::time::Instant::now();
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => return FileLock { path: Some(path) },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > Self::STALE);
                    if stale {
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    if start.elapsed() > Self::WAIT {
                        return FileLock { path: None };
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                // An unwritable directory: no lock, and the write reports the failure.
                Err(_) => return FileLock { path: None },
            }
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn write_atomically(path: &Path, file: &CacheFile) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(file).map_err(std::io::Error::other)?;
    write_text_atomically(path, &text)
}

/// Writes `text` to a temporary file beside `path` and renames it over `path`.
fn write_text_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Unique per process and per write, so that writers never share a temporary file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("json.tmp{}.{n}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Why a cache file could not be exported or imported ([`Autotuner::export`],
/// [`Autotuner::import`]). `file` names the file (or `the imported JSON` for
/// [`Autotuner::import_json`]).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The tuner keeps its cache in memory only (`TEGULA_CACHE_DIR=off`): nothing to export.
    #[error(
        "this autotuner keeps no cache file (TEGULA_CACHE_DIR=off), so it has nothing to export"
    )]
    NoCacheFile,
    /// The file to import, or the cache file to export, cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The export's file, or the cache file that an import merges into, cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not JSON, or not the shape of a cache file.
    #[error("{file} is not an autotune cache file: {message}")]
    Parse { file: String, message: String },
    /// A cache file of another format version.
    #[error(
        "{file} is an autotune cache file of version {found}; this tegula reads version {expected}"
    )]
    Version {
        file: String,
        found: u64,
        expected: u32,
    },
    /// An entry whose map key is not the key its own fields give (a hand-edited file), or
    /// whose milliseconds are not a time.
    #[error("{file}: entry `{key}`: {message}")]
    Entry {
        file: String,
        key: String,
        message: String,
    },
}

/// What [`Autotuner::import`] did with the file's entries, against the tuner's cache file (its
/// memory when it has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Entries whose key the cache did not hold.
    pub added: usize,
    /// Entries whose key the cache held with another config, time or tuning date.
    pub replaced: usize,
    /// Entries the cache held as they are.
    pub unchanged: usize,
}

impl fmt::Display for ImportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} added, {} replaced, {} unchanged",
            self.added, self.replaced, self.unchanged
        )
    }
}

/// A tuned config as an ahead-of-time bundle carries it ([`crate::aot::Bundle::tuned`]):
/// the request it answers and the GPU it was tuned on, by name (the driver's version, part of
/// the cache's key, is not: a bundle keeps its configs across driver updates).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TunedChoice {
    /// The tuning request's key without its target (kernel, source, compiler, candidates,
    /// the wrapper's key).
    pub request: String,
    /// The GPU's name, as [`Target::device`].
    pub device: String,
    pub config: Config,
    /// Its milliseconds when it was tuned.
    pub ms: f64,
}

impl Autotuner {
    /// The cached configs that lookups of recording devices standing for a GPU found since
    /// the last call ([`crate::Device::recording_as`]), oldest first, each once.
    pub fn take_stand_in_hits(&self) -> Vec<TunedChoice> {
        let mut hits = std::mem::take(&mut *lock(&self.stand_in_hits));
        let mut seen = HashSet::new();
        hits.retain(|h| seen.insert((h.request.clone(), h.device.clone())));
        hits
    }

    /// Makes `choice` this process's answer on `target` (in memory; the cache file is left
    /// as it is) when it was tuned on a GPU of the target's name. Whether it did.
    pub fn remember(&self, target: &Target, choice: &TunedChoice) -> bool {
        if choice.device != target.device || !valid_ms(choice.ms) {
            return false;
        }
        let key = keyed_for(&choice.request, &target.device, target.driver_version);
        lock(&self.memo).insert(key, (choice.config.clone(), choice.ms));
        true
    }
}

impl Entry {
    /// The key of this entry's fields: the same text as [`Tuning`]'s key for the request and
    /// target it was tuned for.
    fn cache_key(&self) -> String {
        let request = format!(
            "{}|{}|{}|{}|{}",
            self.kernel, self.source_hash, self.compiler, self.candidates_hash, self.key
        );
        keyed_for(&request, &self.device, self.driver_version)
    }
}

/// A cache key: a request's key ([`Tuning::request_key`]) on a target.
fn keyed_for(request: &str, device: &str, driver_version: i32) -> String {
    format!("{request}|{device}|{driver_version}")
}

/// Parses a cache file's text (`file` names it in errors): JSON, an object whose `version` is
/// [`CACHE_VERSION`], of the cache file's shape, each entry under the key its fields give and
/// with a valid time.
fn parse_cache(text: &str, file: &str) -> std::result::Result<CacheFile, CacheError> {
    let parse = |message: String| CacheError::Parse {
        file: file.to_string(),
        message,
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| parse(e.to_string()))?;
    let version = value
        .as_object()
        .ok_or_else(|| parse("expected a JSON object".into()))?
        .get("version")
        .ok_or_else(|| parse("it has no `version`".into()))?;
    let version = version
        .as_u64()
        .ok_or_else(|| parse(format!("its `version` is {version}, not a number")))?;
    if version != u64::from(CACHE_VERSION) {
        return Err(CacheError::Version {
            file: file.to_string(),
            found: version,
            expected: CACHE_VERSION,
        });
    }
    // From the text again, for errors with a line and column.
    let parsed: CacheFile = serde_json::from_str(text).map_err(|e| parse(e.to_string()))?;
    for (key, entry) in &parsed.entries {
        let bad = |message: String| CacheError::Entry {
            file: file.to_string(),
            key: key.clone(),
            message,
        };
        let want = entry.cache_key();
        if *key != want {
            return Err(bad(format!(
                "its fields give the key `{want}` (the key and the fields must agree)"
            )));
        }
        if !valid_ms(entry.ms) {
            return Err(bad(format!("`ms` is {}, not a time", entry.ms)));
        }
    }
    Ok(parsed)
}

/// A cache file's text (serializing it cannot fail: its maps have string keys).
fn to_json(file: &CacheFile) -> Result<String> {
    serde_json::to_string_pretty(file).map_err(|e| Error::Invalid {
        op: "autotune export".into(),
        message: e.to_string(),
    })
}

/// Exporting and importing the cache: tune on one machine, ship the file.
impl Autotuner {
    /// Writes every entry of this tuner's cache file to `path` (atomically: a temporary file
    /// beside it, renamed), in the cache file's own format; returns how many. A missing cache
    /// file exports none. Errors: the tuner has no cache file ([`CacheError::NoCacheFile`]),
    /// the cache file cannot be read or does not parse (it would not import), or `path` cannot
    /// be written.
    pub fn export(&self, path: &Path) -> Result<usize> {
        let file = self.file_to_export()?;
        let text = to_json(&file)?;
        write_text_atomically(path, &text).map_err(|source| CacheError::Write {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(file.entries.len())
    }

    /// [`Autotuner::export`]'s text: every entry of this tuner's cache file as JSON.
    pub fn export_json(&self) -> Result<String> {
        to_json(&self.file_to_export()?)
    }

    /// Merges the cache file at `path` (as [`Autotuner::export`] writes it) into this tuner's
    /// cache file, under its lock, and into its memory, so that this process and later ones
    /// answer from it. Imported entries replace the cache's entries of the same key. With no
    /// cache file (`TEGULA_CACHE_DIR=off`), the entries go to memory only. A file that cannot
    /// be read, does not parse, has another version, or holds an entry whose key is not the
    /// one its fields give (a hand-edited file: it is refused, not re-keyed) is an error that
    /// names the file and the fault, and the cache is left untouched.
    pub fn import(&self, path: &Path) -> Result<ImportReport> {
        let text = std::fs::read_to_string(path).map_err(|source| CacheError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.import_text(&text, &path.display().to_string())
    }

    /// [`Autotuner::import`] of a cache file's text, e.g. one a crate embeds with
    /// `include_str!("tuned.json")`; errors call it `the imported JSON`.
    pub fn import_json(&self, text: &str) -> Result<ImportReport> {
        self.import_text(text, "the imported JSON")
    }

    /// [`Autotuner::import_json`] into this tuner's memory only: this process answers from the
    /// entries, its cache file is left as it is (`tegula aot --tuned`, which records a bundle
    /// from a shipped tuning file). Returns the GPUs the entries were tuned on, each once.
    pub fn import_json_in_memory(&self, text: &str) -> Result<Vec<Target>> {
        let incoming = parse_cache(text, "the imported JSON")?;
        let mut targets: Vec<Target> = Vec::new();
        let mut memo = lock(&self.memo);
        for (key, e) in incoming.entries {
            let target = Target {
                device: e.device.clone(),
                driver_version: e.driver_version,
                tunable: true,
            };
            if !targets.contains(&target) {
                targets.push(target);
            }
            memo.insert(key, (e.config, e.ms));
        }
        Ok(targets)
    }

    fn import_text(&self, text: &str, file: &str) -> Result<ImportReport> {
        let incoming = parse_cache(text, file)?;
        let mut report = ImportReport::default();
        let Some(path) = &self.path else {
            let mut memo = lock(&self.memo);
            for (key, e) in incoming.entries {
                let value = (e.config, e.ms);
                match memo.get(&key) {
                    None => report.added += 1,
                    Some(old) if *old == value => report.unchanged += 1,
                    Some(_) => report.replaced += 1,
                }
                memo.insert(key, value);
            }
            return Ok(report);
        };
        let _guard = FileLock::acquire(path);
        // As a store does: a cache file that does not parse is noted and replaced.
        let mut cache = self.read_file().unwrap_or_default();
        cache.version = CACHE_VERSION;
        for (key, e) in &incoming.entries {
            match cache.entries.get(key) {
                None => report.added += 1,
                Some(old) if old == e => report.unchanged += 1,
                Some(_) => report.replaced += 1,
            }
        }
        if report.added + report.replaced > 0 {
            cache.entries.extend(incoming.entries.clone());
            write_atomically(path, &cache).map_err(|source| CacheError::Write {
                path: path.clone(),
                source,
            })?;
        }
        let mut memo = lock(&self.memo);
        for (key, e) in incoming.entries {
            memo.insert(key, (e.config, e.ms));
        }
        Ok(report)
    }

    /// The cache file, strictly: missing is empty, anything unreadable is an error.
    fn file_to_export(&self) -> std::result::Result<CacheFile, CacheError> {
        let path = self.path.as_ref().ok_or(CacheError::NoCacheFile)?;
        match std::fs::read_to_string(path) {
            Ok(text) => parse_cache(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CacheFile {
                version: CACHE_VERSION,
                entries: BTreeMap::new(),
            }),
            Err(source) => Err(CacheError::Read {
                path: path.clone(),
                source,
            }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded maps stay consistent even if a holder panicked.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Candidates whose sweep timing is within this fraction of the best are timed again with
/// the full budget.
const CONFIRM_WITHIN: f64 = 0.05;
/// At most this many of them, the fastest in the sweep: small launch-bound kernels time many
/// candidates within 5% of each other, and each full-budget timing costs ~0.15 s.
const CONFIRM_AT_MOST: usize = 4;
/// At most this many for a ranked request ([`Tuning::rank_with`]), whose short list is there
/// to keep a first call short: confirming four of four would time the list twice.
const CONFIRM_AT_MOST_RANKED: usize = 2;

/// A sweep candidate slower than the best so far by more than this fraction (in its first
/// samples) cannot win, nor be among the close candidates timed again (within 5% of the best).
pub const EARLY_STOP_ABOVE: f64 = 0.25;

thread_local! {
    /// Whether this thread's tuner is confirming its close candidates: [`median_ms`] then
    /// times with the full `do_bench` budget instead of the quick one.
    static CONFIRMING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether that confirmation is a ranked request's, timed with
    /// [`MeasureOptions::confirm_ranked`].
    static CONFIRMING_RANKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The sweep's bound for the candidate being timed on this thread ([`median_ms`]).
    static SWEEP_BOUND: std::cell::Cell<Option<f64>> = const { std::cell::Cell::new(None) };
    /// The config every tuning on this thread answers with ([`with_pinned`]).
    static PINNED: std::cell::RefCell<Option<Config>> = const { std::cell::RefCell::new(None) };
    /// Whether a tuning answered with [`PINNED`] since [`with_pinned`] set it.
    static PINNED_USED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every tuning on this thread ([`Autotuner::tune_for`]) answered by `config`
/// ([`Source::Pinned`]: not timed, not looked up, not cached; an error for a tuning that does
/// not list it), as `tegula bench --config` pins a tuned host function. Returns what `f`
/// returned and whether any tuning answered with the pin.
pub fn with_pinned<R>(config: &Config, f: impl FnOnce() -> R) -> (R, bool) {
    struct Unpin(Option<Config>, bool);
    impl Drop for Unpin {
        fn drop(&mut self) {
            PINNED.with(|p| *p.borrow_mut() = self.0.take());
            PINNED_USED.with(|u| u.set(self.1));
        }
    }
    let outer = PINNED.with(|p| p.borrow_mut().replace(config.clone()));
    let _unpin = Unpin(outer, PINNED_USED.with(|u| u.replace(false)));
    let r = f();
    (r, PINNED_USED.with(|u| u.get()))
}

/// The config [`with_pinned`] set on this thread, if any.
pub fn pinned() -> Option<Config> {
    PINNED.with(|p| p.borrow().clone())
}

/// The sweep's bound for the candidate this thread's tuner is timing: the milliseconds above
/// which it cannot win ([`EARLY_STOP_ABOVE`] over the best so far), `None` for the first
/// candidate, outside tuning and while confirming. [`median_ms`] stops sampling there; a
/// benchmark closure of its own can pass it as [`MeasureOptions::stop_above`].
pub fn sweep_bound() -> Option<f64> {
    SWEEP_BOUND.with(|b| b.get())
}

/// Sets [`SWEEP_BOUND`] for its lifetime, and clears it however the scope ends.
struct SweepBound;

impl SweepBound {
    fn set(bound: Option<f64>) -> SweepBound {
        SWEEP_BOUND.with(|b| b.set(bound));
        SweepBound
    }
}

impl Drop for SweepBound {
    fn drop(&mut self) {
        SWEEP_BOUND.with(|b| b.set(None));
    }
}

/// Whether the tuner on this thread is timing its close candidates again (for benchmark
/// closures that do not time through [`median_ms`]).
pub fn confirming() -> bool {
    CONFIRMING.with(|c| c.get())
}

/// The budget [`median_ms`] confirms with on this thread: `do_bench`'s, or for a ranked
/// request [`MeasureOptions::confirm_ranked`]; `None` when the tuner is not confirming.
pub fn confirming_budget() -> Option<MeasureOptions> {
    match (confirming(), CONFIRMING_RANKED.with(|c| c.get())) {
        (false, _) => None,
        (true, false) => Some(MeasureOptions::default()),
        (true, true) => Some(MeasureOptions::confirm_ranked()),
    }
}

/// Sets [`confirming`] for its lifetime, and clears it however the scope ends.
struct Confirming;

impl Confirming {
    fn start(ranked: bool) -> Confirming {
        CONFIRMING.with(|c| c.set(true));
        CONFIRMING_RANKED.with(|c| c.set(ranked));
        Confirming
    }
}

impl Drop for Confirming {
    fn drop(&mut self) {
        CONFIRMING.with(|c| c.set(false));
        CONFIRMING_RANKED.with(|c| c.set(false));
    }
}

fn valid_ms(ms: f64) -> bool {
    ms.is_finite() && ms >= 0.0
}

/// The winner among `timed` (each candidate's sweep timing, at least one). The candidates
/// within [`CONFIRM_WITHIN`] of the best (at most [`CONFIRM_AT_MOST`], or
/// [`CONFIRM_AT_MOST_RANKED`] for a `ranked` request) are timed again under
/// [`confirming`], with the full budget (a ranked request's shorter one:
/// [`MeasureOptions::confirm_ranked`]), and ranked by that timing alone. The sweep's quick
/// budget can misrank configs: a config can time several percent faster under it than under
/// the full budget while its neighbour times the same under both (the causal attention
/// forward at 4k; docs/performance.md, "The autotuner and its twins"). A close candidate whose
/// second timing fails drops out.
fn confirm_close_candidates(
    timed: &[(Config, f64)],
    bench: &mut impl FnMut(&Config) -> Result<f64>,
    bar: &indicatif::ProgressBar,
    ranked: bool,
) -> Result<(Config, f64)> {
    let at_most = if ranked {
        CONFIRM_AT_MOST_RANKED
    } else {
        CONFIRM_AT_MOST
    };
    let best = timed
        .iter()
        .map(|(_, ms)| *ms)
        .fold(f64::INFINITY, f64::min);
    let mut close: Vec<&(Config, f64)> = timed
        .iter()
        .filter(|(_, ms)| *ms <= best * (1.0 + CONFIRM_WITHIN))
        .collect();
    close.sort_by(|a, b| a.1.total_cmp(&b.1));
    close.truncate(at_most);
    if let [only] = close[..] {
        return Ok(only.clone());
    }
    bar.inc_length(close.len() as u64);
    let _confirming = Confirming::start(ranked);
    let mut winner: Option<(Config, f64)> = None;
    for (config, _) in close {
        bar.set_message(format!("{config} (full budget)"));
        match bench(config) {
            Ok(ms) if valid_ms(ms) && winner.as_ref().is_none_or(|(_, w)| ms < *w) => {
                winner = Some((config.clone(), ms));
            }
            Err(e) if is_fatal(&e) => return Err(e),
            _ => {}
        }
        bar.inc(1);
    }
    winner.ok_or_else(|| Error::Invalid {
        op: "autotune".into(),
        message: "every close candidate failed when timed again".into(),
    })
}

/// Summary statistics of repeated timings, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Every sample, sorted ascending.
    pub samples: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// First and third quartiles.
    pub q1: f64,
    pub q3: f64,
    /// Milliseconds a call when the same calls run back to back after one L2 clear (nvbench's
    /// "batch" time), when [`MeasureOptions::batch`] asked for it. With inputs that rotate, the
    /// L2 then holds clean lines of inputs already used instead of the clear's dirty ones, and
    /// no call waits for the previous one's launch: the rate a stream of such calls sustains.
    /// Meaningful only for calls longer than the host's launch (a few microseconds).
    pub batch: Option<f64>,
}

impl Timing {
    /// Statistics of `samples` (at least one, finite).
    pub fn from_samples(mut samples: Vec<f64>) -> Option<Timing> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let q = |p: f64| {
            // Linear interpolation between the closest ranks.
            let pos = p * (samples.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            samples[lo] + (samples[hi] - samples[lo]) * (pos - lo as f64)
        };
        Some(Timing {
            median: q(0.5),
            q1: q(0.25),
            q3: q(0.75),
            min: samples[0],
            max: samples[samples.len() - 1],
            samples,
            batch: None,
        })
    }
}

/// How long [`measure`] warms up and repeats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeasureOptions {
    /// Device time spent warming up, in milliseconds (beyond the first calls).
    pub warmup_ms: f64,
    /// Device time spent on timed repetitions, in milliseconds.
    pub rep_ms: f64,
    pub min_reps: usize,
    pub max_reps: usize,
    /// A cap on the timed repetitions' total device time, above `min_reps` (slow kernels then
    /// get fewer samples, at least 3, instead of minutes of timing).
    pub max_total_ms: f64,
    /// Also time the repetitions back to back ([`Timing::batch`]).
    pub batch: bool,
    /// Stop sampling once [`EARLY_STOP_SAMPLES`] samples have a median above this many
    /// milliseconds: the tuner's bound for a candidate that cannot win (see [`median_ms`]).
    pub stop_above: Option<f64>,
}

/// Samples [`MeasureOptions::stop_above`] waits for before it judges a candidate.
pub const EARLY_STOP_SAMPLES: usize = 5;

impl Default for MeasureOptions {
    /// Triton's `do_bench` budget: 25 ms warm-up, 100 ms of repetitions.
    fn default() -> Self {
        MeasureOptions {
            warmup_ms: 25.0,
            rep_ms: 100.0,
            min_reps: 10,
            max_reps: 1000,
            max_total_ms: 5000.0,
            batch: false,
            stop_above: None,
        }
    }
}

impl MeasureOptions {
    /// A short budget for the autotuner's many candidates.
    pub fn quick() -> Self {
        MeasureOptions {
            warmup_ms: 5.0,
            rep_ms: 25.0,
            min_reps: 5,
            max_reps: 200,
            max_total_ms: 500.0,
            batch: false,
            stop_above: None,
        }
    }

    /// The budget a ranked request ([`Tuning::rank_with`]) confirms its close candidates
    /// with: 10 ms of warm-up and 40 ms of repetitions, against `do_bench`'s 25 and 100. A
    /// short list is there to keep a first call short, and the full budget's two
    /// confirmations were about half of its timing (0.3 of 0.6 s for an attention forward of
    /// 0.017 ms a call, each sample behind an L2 clear); 40 ms still takes the 400 samples
    /// this allows of a kernel under 0.1 ms.
    pub fn confirm_ranked() -> Self {
        MeasureOptions {
            warmup_ms: 10.0,
            rep_ms: 40.0,
            max_reps: 400,
            max_total_ms: 2000.0,
            ..MeasureOptions::default()
        }
    }

    /// How many timed repetitions for calls of `per_call` milliseconds.
    pub fn reps_for(&self, per_call: f64) -> usize {
        let per_call = per_call.max(1e-4);
        let wanted = ((self.rep_ms / per_call) as usize).clamp(self.min_reps, self.max_reps);
        let affordable = ((self.max_total_ms / per_call) as usize).max(3);
        wanted.min(affordable)
    }
}

/// Times `work` (which enqueues device work) with [`Device::time`], one sample per call. The
/// first call (compilation and module load happen there), a probe and the warm-up are not
/// among the samples.
pub fn measure(
    dev: &Device,
    options: &MeasureOptions,
    mut work: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    work()?;
    dev.synchronize()?;
    // Estimate one call, to size the warm-up and the repetitions.
    let mut per_call = dev.time(&mut work)?;
    if per_call < 1.0 {
        let probe = 5;
        per_call = dev.time(|| (0..probe).try_for_each(|_| work()))? / probe as f64;
    }
    let warmups = ((options.warmup_ms / per_call.max(1e-4)) as usize).min(options.max_reps);
    for _ in 0..warmups {
        work()?;
    }
    let reps = options.reps_for(per_call);
    let mut samples = Vec::with_capacity(reps);
    while samples.len() < reps {
        // Enqueued a batch at a time and read after (`Device::time_each`); a bounded sweep
        // reads its first samples early, to stop a loser there.
        let bounded = options.stop_above.is_some() && samples.len() < EARLY_STOP_SAMPLES;
        let batch = (reps - samples.len()).min(if bounded { EARLY_STOP_SAMPLES } else { 64 });
        // As do_bench: the launches queue behind the L2 clear, so the sample is GPU time.
        samples.extend(dev.time_each(batch, || dev.clear_l2(), &mut work)?);
        if let Some(bound) = options.stop_above {
            let median = Timing::from_samples(samples.clone()).map_or(0.0, |t| t.median);
            if samples.len() >= EARLY_STOP_SAMPLES && median > bound {
                break;
            }
        }
    }
    let batch = if options.batch {
        dev.clear_l2()?;
        Some(dev.time(|| (0..reps).try_for_each(|_| work()))? / reps as f64)
    } else {
        None
    };
    dev.synchronize()?;
    let mut timing = Timing::from_samples(samples).ok_or_else(|| Error::Invalid {
        op: "measure".into(),
        message: "timing produced no finite sample".into(),
    })?;
    timing.batch = batch;
    Ok(timing)
}

/// A benchmark closure for the tuner: the median of [`measure`] with the quick budget, or
/// with the full one while the tuner confirms its close candidates ([`confirming`]). In the
/// sweep, a candidate whose first [`EARLY_STOP_SAMPLES`] samples are slower than the tuner's
/// bound ([`EARLY_STOP_ABOVE`] above the best so far) stops there: most of a grid's
/// candidates lose by more than that, and their full quick budget was most of a tuning's
/// time. Its median then stands for a loser, not for a measurement to compare closely.
pub fn median_ms(dev: &Device, work: impl FnMut() -> Result<()>) -> Result<f64> {
    let budget = confirming_budget().unwrap_or(MeasureOptions {
        stop_above: sweep_bound(),
        ..MeasureOptions::quick()
    });
    Ok(measure(dev, &budget, work)?.median)
}
