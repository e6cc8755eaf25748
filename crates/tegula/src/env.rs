//! Reading `TEGULA_*` switches from the environment: [`Settings`], read once
//! ([`Settings::global`]) and used by the device, the autotuner and the caches.
//!
//! A boolean switch takes `1`, `true`, `on`, `yes` or `0`, `false`, `off`, `no`, in any case
//! and with surrounding blanks ignored. An empty or unset variable is the switch's default.
//! Anything else is also the default, with a warning on stderr that names the variable and
//! the value, so that `TEGULA_CHECK_RACES=ture` does not leave a check off silently.

/// `Some(true)` for `1`/`true`/`on`/`yes`, `Some(false)` for `0`/`false`/`off`/`no` (any
/// case, blanks around ignored), `None` for anything else, the empty string included.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// The boolean switch `name` (see [`parse_bool`]), or `default` when it is unset or empty,
/// or (with a warning on stderr) when it holds anything else.
pub fn bool_var(name: &str, default: bool) -> bool {
    match std::env::var(name) {
        Ok(v) => bool_value(name, &v, default),
        Err(std::env::VarError::NotPresent) => default,
        Err(std::env::VarError::NotUnicode(v)) => {
            eprintln!("tegula: warning: {name}={v:?} is not a boolean (1/0, true/false, on/off, yes/no); using {default}");
            default
        }
    }
}

/// [`bool_var`] on a value already read: `value` of variable `name`.
pub fn bool_value(name: &str, value: &str, default: bool) -> bool {
    bool_or_warning(name, value, default).unwrap_or_else(|warning| {
        eprintln!("tegula: warning: {warning}");
        default
    })
}

/// `value` of switch `name` as a boolean (`default` when blank), or the warning that it is
/// not one.
pub fn bool_or_warning(name: &str, value: &str, default: bool) -> Result<bool, String> {
    if value.trim().is_empty() {
        return Ok(default);
    }
    parse_bool(value).ok_or_else(|| {
        format!(
            "{name}={value:?} is not a boolean (1/0, true/false, on/off, yes/no); using {default}"
        )
    })
}

use crate::autotune::Mode;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Which device [`crate::Device::default`] opens (`TEGULA_DEVICE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// Unset or empty: the GPU when there is one, else the interpreter.
    Auto,
    /// `cpu`: the interpreter.
    Cpu,
    /// `cuda` (ordinal 0) or `cuda:N`.
    Cuda(usize),
    /// Anything else, kept so that `Device::default` can refuse it with the value.
    Invalid(String),
}

/// Every `TEGULA_*` variable the user crate reads, parsed:
///
/// | variable | field | values |
/// | --- | --- | --- |
/// | `TEGULA_DEVICE` | [`Settings::device`] | `cpu`, `cuda`, `cuda:N` |
/// | `TEGULA_CACHE_DIR` | [`Settings::cache_dir`] | a directory, or `off` / `0` / empty for none |
/// | `TEGULA_AUTOTUNE` | [`Settings::autotune`] | `off`, `cached`, `full` |
/// | `TEGULA_TUNE_THREADS` | [`Settings::tune_threads`] | a positive number |
/// | `TEGULA_TUNE_TOP_K` | [`Settings::tune_top_k`] | a positive number, or `all` |
/// | `TEGULA_TUNE_LOG` | [`Settings::tune_log`] | a file (JSON lines appended) |
/// | `TEGULA_CHECK_RACES` | [`Settings::check_races`] | a boolean ([`parse_bool`]) |
/// | `TEGULA_POISON_EMPTY` | [`Settings::poison_empty`] | a boolean |
/// | `TEGULA_LAUNCH_BLOCKING` | [`Settings::launch_blocking`] | a boolean |
/// | `TEGULA_OCCUPANCY_STEP` | [`Settings::occupancy_step`] | a boolean (default on) |
///
/// A value that does not parse is the default with a warning (said once, by
/// [`Settings::global`]). Tests build a `Settings` with [`Settings::from_lookup`] instead of
/// setting variables. The kernel library's own switches (`TEGULA_WGMMA`,
/// `TEGULA_ATTN_BWD_*`) are its settings, in `tegula_kernels`.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub device: DeviceChoice,
    /// Where the autotune file (`autotune.json`) and the cubins live: the variable's
    /// directory (both in it), or by default the user cache dir's `tegula/` (cubins in its
    /// `cubins/`); `None` when caching is off.
    pub cache_dir: Option<CacheDir>,
    pub autotune: Mode,
    /// `None`: the machine's available parallelism.
    pub tune_threads: Option<usize>,
    /// How many of a ranked request's candidates are timed ([`crate::autotune::TopK`]);
    /// `None`: the request's own `top_k` (see [`crate::autotune::Tuning::rank_with`]).
    pub tune_top_k: Option<crate::autotune::TopK>,
    /// Where each tuning appends one JSON line: the kernel, the key, every timed candidate's
    /// milliseconds and the seconds spent compiling and timing.
    pub tune_log: Option<PathBuf>,
    pub check_races: bool,
    pub poison_empty: bool,
    /// Every launch waits for its kernel, so a fault is named at the launch that made it.
    pub launch_blocking: bool,
    /// A kernel without dots whose registers leave its SM under half full is loaded again
    /// with one block more a SM, when ptxas fits that without spilling (rule *occupancy
    /// step*, `tegula_ptx::Target::occupancy_step`).
    pub occupancy_step: bool,
    /// What did not parse, one line each.
    pub warnings: Vec<String>,
}

/// The cache directory and where in it each cache lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheDir {
    pub autotune_file: PathBuf,
    pub cubin_dir: PathBuf,
}

impl Settings {
    /// The settings that `get` (a variable's value, `None` when unset) describes.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Settings {
        let mut warnings = Vec::new();
        let mut boolean = |name: &str, default: bool| match get(name) {
            None => default,
            Some(v) => bool_or_warning(name, &v, default).unwrap_or_else(|warning| {
                warnings.push(warning);
                default
            }),
        };
        let check_races = boolean("TEGULA_CHECK_RACES", false);
        let poison_empty = boolean("TEGULA_POISON_EMPTY", false);
        let launch_blocking = boolean("TEGULA_LAUNCH_BLOCKING", false);
        let occupancy_step = boolean("TEGULA_OCCUPANCY_STEP", true);
        let device = match get("TEGULA_DEVICE").unwrap_or_default().trim() {
            "" => DeviceChoice::Auto,
            "cpu" => DeviceChoice::Cpu,
            "cuda" => DeviceChoice::Cuda(0),
            c => match c.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(n)) => DeviceChoice::Cuda(n),
                _ => DeviceChoice::Invalid(c.to_string()),
            },
        };
        let autotune_text = get("TEGULA_AUTOTUNE").unwrap_or_default();
        let autotune = Mode::parse(&autotune_text).unwrap_or_else(|| {
            warnings.push(format!(
                "TEGULA_AUTOTUNE={autotune_text}: expected off, cached or full; using full"
            ));
            Mode::Full
        });
        let tune_threads = match get("TEGULA_TUNE_THREADS") {
            None => None,
            Some(v) if v.trim().is_empty() => None,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    warnings.push(format!(
                        "TEGULA_TUNE_THREADS={v:?} is not a positive number; using the cores"
                    ));
                    None
                }
            },
        };
        let tune_top_k = match get("TEGULA_TUNE_TOP_K") {
            None => None,
            Some(v) if v.trim().is_empty() => None,
            Some(v) => match crate::autotune::TopK::parse(&v) {
                Some(k) => Some(k),
                None => {
                    warnings.push(format!(
                        "TEGULA_TUNE_TOP_K={v:?} is neither a positive number nor `all`; \
                         using each request's own"
                    ));
                    None
                }
            },
        };
        let tune_log = get("TEGULA_TUNE_LOG")
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from);
        let cache_dir = match get("TEGULA_CACHE_DIR") {
            Some(v) if matches!(v.as_str(), "" | "off" | "0") => None,
            Some(v) => Some(CacheDir {
                autotune_file: PathBuf::from(&v).join("autotune.json"),
                cubin_dir: PathBuf::from(v),
            }),
            None => dirs::cache_dir().map(|d| CacheDir {
                autotune_file: d.join("tegula").join("autotune.json"),
                cubin_dir: d.join("tegula").join("cubins"),
            }),
        };
        Settings {
            device,
            cache_dir,
            autotune,
            tune_threads,
            tune_top_k,
            tune_log,
            check_races,
            poison_empty,
            launch_blocking,
            occupancy_step,
            warnings,
        }
    }

    /// The process's environment, now.
    pub fn from_env() -> Settings {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// The process's settings: the environment as it was at the first call; its warnings are
    /// said on stderr then.
    pub fn global() -> &'static Settings {
        static GLOBAL: OnceLock<Settings> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let s = Settings::from_env();
            for w in &s.warnings {
                eprintln!("tegula: warning: {w}");
            }
            s
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_in_every_spelling() {
        for v in ["1", "true", "TRUE", "True", "on", "ON", "yes", " Yes "] {
            assert_eq!(parse_bool(v), Some(true), "{v}");
        }
        for v in ["0", "false", "False", "off", "OFF", "no", "No\n"] {
            assert_eq!(parse_bool(v), Some(false), "{v}");
        }
        for v in ["", "2", "ture", "enable", "y", "-1"] {
            assert_eq!(parse_bool(v), None, "{v}");
        }
        assert!(bool_value("X", "on", false));
        assert!(!bool_value("X", "off", true));
        assert!(bool_value("X", "", true));
        // Not a boolean: the default (and a warning).
        assert!(!bool_value("X", "ture", false));
        assert!(bool_value("X", "maybe", true));
    }

    fn settings(vars: &[(&str, &str)]) -> Settings {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn settings_parse_every_variable_and_warn_on_the_rest() {
        let s = settings(&[]);
        assert_eq!(s.device, DeviceChoice::Auto);
        assert_eq!(s.autotune, Mode::Full);
        assert_eq!(s.tune_threads, None);
        assert!(!s.check_races && !s.poison_empty && !s.launch_blocking);
        assert!(s.warnings.is_empty());

        let s = settings(&[
            ("TEGULA_DEVICE", "cuda:3"),
            ("TEGULA_CACHE_DIR", "/tmp/tg"),
            ("TEGULA_AUTOTUNE", "cached"),
            ("TEGULA_TUNE_THREADS", " 6 "),
            ("TEGULA_CHECK_RACES", "yes"),
            ("TEGULA_POISON_EMPTY", "on"),
            ("TEGULA_LAUNCH_BLOCKING", "1"),
            ("TEGULA_TUNE_TOP_K", " 5"),
            ("TEGULA_TUNE_LOG", "/tmp/tune.jsonl"),
        ]);
        assert_eq!(s.device, DeviceChoice::Cuda(3));
        assert_eq!(s.tune_top_k, Some(crate::autotune::TopK::First(5)));
        assert_eq!(s.tune_log, Some(PathBuf::from("/tmp/tune.jsonl")));
        assert_eq!(
            settings(&[("TEGULA_TUNE_TOP_K", "ALL")]).tune_top_k,
            Some(crate::autotune::TopK::All)
        );
        let dir = s.cache_dir.clone().unwrap();
        assert_eq!(dir.autotune_file, PathBuf::from("/tmp/tg/autotune.json"));
        assert_eq!(dir.cubin_dir, PathBuf::from("/tmp/tg"));
        assert_eq!(s.autotune, Mode::Cached);
        assert_eq!(s.tune_threads, Some(6));
        assert!(s.check_races && s.poison_empty && s.launch_blocking);
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);

        assert_eq!(settings(&[("TEGULA_CACHE_DIR", "off")]).cache_dir, None);
        assert_eq!(
            settings(&[("TEGULA_DEVICE", "cpu")]).device,
            DeviceChoice::Cpu
        );
        assert_eq!(
            settings(&[("TEGULA_DEVICE", "cuda")]).device,
            DeviceChoice::Cuda(0)
        );

        let s = settings(&[
            ("TEGULA_DEVICE", "gpu"),
            ("TEGULA_AUTOTUNE", "fast"),
            ("TEGULA_TUNE_THREADS", "0"),
            ("TEGULA_CHECK_RACES", "ture"),
            ("TEGULA_TUNE_TOP_K", "0"),
        ]);
        assert_eq!(s.device, DeviceChoice::Invalid("gpu".into()));
        assert_eq!(s.autotune, Mode::Full);
        assert_eq!(s.tune_threads, None);
        assert_eq!(s.tune_top_k, None);
        assert!(!s.check_races);
        assert_eq!(s.warnings.len(), 4, "{:?}", s.warnings);
        assert!(s
            .warnings
            .iter()
            .any(|w| w.contains("TEGULA_CHECK_RACES=\"ture\"")));
    }
}
