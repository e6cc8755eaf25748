//! Reading `TEGULA_*` switches from the environment.
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
    if value.trim().is_empty() {
        return default;
    }
    parse_bool(value).unwrap_or_else(|| {
        eprintln!(
            "tegula: warning: {name}={value:?} is not a boolean (1/0, true/false, on/off, \
             yes/no); using {default}"
        );
        default
    })
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
}
