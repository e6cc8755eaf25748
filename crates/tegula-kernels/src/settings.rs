//! The library's own `TEGULA_*` switches, parsed once ([`Settings::global`]); the user
//! crate's are [`tegula::env::Settings`].
//!
//! | variable | field | values |
//! | --- | --- | --- |
//! | `TEGULA_WGMMA` | [`Settings::force_wgmma`] | a boolean ([`tegula::env::parse_bool`]) |
//! | `TEGULA_ATTN_BWD_DQ` | [`Settings::backward_dq`] | `auto` (or unset), `kernel` |
//! | `TEGULA_ATTN_BWD_SPLIT` | [`Settings::backward_tail_split`] | a boolean (default on) |
//!
//! The two attention switches only give [`AttentionOptions`](crate::attention::AttentionOptions)
//! its defaults (its `dq_path` and `tail_split`), so a caller or a test sets either per call;
//! they exist to measure one path against the other without rebuilding.

use crate::attention::DqPath;
use std::sync::OnceLock;

/// The library's switches, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Every matmul and attention launch asks for `wgmma`, as if each had held
    /// `wgmma: Some(true)` (to check that path everywhere).
    pub force_wgmma: bool,
    /// The backward's dQ path by default.
    pub backward_dq: DqPath,
    /// Whether the backward splits its tail by default (see
    /// [`backward_tail_split`](crate::attention::backward_tail_split)).
    pub backward_tail_split: bool,
    /// What did not parse, one line each (the default was used).
    pub warnings: Vec<String>,
}

impl Default for Settings {
    /// No variable set.
    fn default() -> Self {
        Settings::from_lookup(|_| None)
    }
}

impl Settings {
    /// The settings that `get` (a variable's value, `None` when unset) describes.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Settings {
        let mut warnings = Vec::new();
        let mut boolean = |name: &str, default: bool| match get(name) {
            None => default,
            Some(v) => tegula::env::bool_or_warning(name, &v, default).unwrap_or_else(|w| {
                warnings.push(w);
                default
            }),
        };
        let force_wgmma = boolean("TEGULA_WGMMA", false);
        let backward_tail_split = boolean("TEGULA_ATTN_BWD_SPLIT", true);
        let backward_dq = match get("TEGULA_ATTN_BWD_DQ") {
            None => DqPath::Auto,
            Some(v) => match v.trim() {
                "" | "auto" => DqPath::Auto,
                "kernel" => DqPath::Kernel,
                _ => {
                    warnings.push(format!(
                        "TEGULA_ATTN_BWD_DQ={v:?}: expected auto or kernel; using auto"
                    ));
                    DqPath::Auto
                }
            },
        };
        Settings {
            force_wgmma,
            backward_dq,
            backward_tail_split,
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

    fn settings(vars: &[(&str, &str)]) -> Settings {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn unset_variables_are_the_defaults() {
        let s = settings(&[]);
        assert!(!s.force_wgmma);
        assert_eq!(s.backward_dq, DqPath::Auto);
        assert!(s.backward_tail_split);
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn each_variable_sets_its_field() {
        let s = settings(&[
            ("TEGULA_WGMMA", "1"),
            ("TEGULA_ATTN_BWD_DQ", "kernel"),
            ("TEGULA_ATTN_BWD_SPLIT", "off"),
        ]);
        assert!(s.force_wgmma);
        assert_eq!(s.backward_dq, DqPath::Kernel);
        assert!(!s.backward_tail_split);
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn values_that_do_not_parse_are_the_default_with_a_warning() {
        let s = settings(&[
            ("TEGULA_WGMMA", "ture"),
            ("TEGULA_ATTN_BWD_DQ", "kernal"),
            ("TEGULA_ATTN_BWD_SPLIT", "of"),
        ]);
        assert_eq!(
            s,
            Settings {
                warnings: s.warnings.clone(),
                ..settings(&[])
            }
        );
        assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
        for (w, name) in s.warnings.iter().zip([
            "TEGULA_WGMMA",
            "TEGULA_ATTN_BWD_SPLIT",
            "TEGULA_ATTN_BWD_DQ",
        ]) {
            assert!(w.starts_with(name), "{w}");
        }
    }
}
