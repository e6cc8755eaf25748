//! Turning the driver's JIT logs into errors that point at the PTX line and the kernel's source line,
//! and reading the resource figures ptxas prints in its info log.
//!
//! The driver's JIT is ptxas inside libcuda; its error log reads like
//! `ptxas application ptx input, line 42; error   : Unknown symbol 'x'`, followed by
//! `ptxas fatal   : Ptx assembly aborted due to errors`. Only `, line N;` is relied upon.

use crate::{CudaError, JitError};

/// How many PTX lines to show before and after the blamed line.
const CONTEXT_LINES: usize = 3;
/// How far back to look for a source location when the blamed PTX line itself has none
/// (source locations are usually attached to the first PTX line of an op).
const SOURCE_LOOKBACK: usize = 16;

/// The PTX line (1-based) the log blames: the first `line N;` on an error line, else the first at all.
pub fn blamed_ptx_line(log: &str) -> Option<usize> {
    let first_on = |want_error: bool| {
        log.lines()
            .filter(|l| !want_error || is_error_line(l))
            .find_map(line_number_in)
    };
    first_on(true).or_else(|| first_on(false))
}

/// ptxas marks problems `error` or `fatal` (a parse failure is `line N; fatal : ...`).
pub(crate) fn is_error_line(log_line: &str) -> bool {
    log_line.contains("error") || log_line.contains("fatal")
}

/// `N` from `..., line N; ...`.
fn line_number_in(log_line: &str) -> Option<usize> {
    let at = log_line.find(", line ")?;
    let rest = &log_line[at + ", line ".len()..];
    let digits: &str = &rest[..rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len())];
    if digits.is_empty() || !rest[digits.len()..].starts_with(';') {
        return None;
    }
    digits.parse().ok()
}

/// Up to `CONTEXT_LINES` PTX lines either side of `line` (1-based), numbered, the blamed one marked `>`.
pub fn ptx_context(ptx: &str, line: usize) -> String {
    let lines: Vec<&str> = ptx.lines().collect();
    if line == 0 || line > lines.len() {
        return format!(
            "(PTX line {line} is outside the module's {} lines)",
            lines.len()
        );
    }
    let first = line.saturating_sub(CONTEXT_LINES).max(1);
    let last = (line + CONTEXT_LINES).min(lines.len());
    let width = last.to_string().len();
    let mut out = String::new();
    for n in first..=last {
        let mark = if n == line { '>' } else { ' ' };
        out.push_str(&format!("{mark} {n:>width$} | {}\n", lines[n - 1]));
    }
    out
}

/// The source location of PTX `line`: that line's, else the nearest earlier line's that has one.
pub fn source_location(
    line: usize,
    source_map: &dyn Fn(usize) -> Option<String>,
) -> Option<String> {
    (line.saturating_sub(SOURCE_LOOKBACK).max(1)..=line)
        .rev()
        .find_map(source_map)
}

/// Builds the `CudaError::Jit` for a failed module load.
pub fn jit_error(
    ptx: &str,
    entry: &str,
    summary: &str,
    log: &str,
    source_map: &dyn Fn(usize) -> Option<String>,
) -> CudaError {
    let ptx_line = blamed_ptx_line(log);
    CudaError::Jit(Box::new(JitError {
        entry: entry.to_string(),
        summary: summary.to_string(),
        log: log.trim_end().to_string(),
        ptx_line,
        context: ptx_line.map(|l| ptx_context(ptx, l)).unwrap_or_default(),
        source_loc: ptx_line.and_then(|l| source_location(l, source_map)),
    }))
}

/// Spill figures ptxas printed for `entry` in a verbose info log
/// (`N bytes stack frame, N bytes spill stores, N bytes spill loads` under
/// `Function properties for <entry>`): (stack frame, spill stores, spill loads).
pub fn spill_bytes(info_log: &str, entry: &str) -> Option<(u32, u32, u32)> {
    let mut lines = info_log.lines();
    let header = format!("Function properties for {entry}");
    lines.find(|l| l.trim_end().ends_with(&header))?;
    let figures = lines.next()?;
    let field = |name: &str| -> Option<u32> {
        let end = figures.find(name)?;
        figures[..end]
            .trim_end()
            .rsplit(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((
        field("bytes stack frame")?,
        field("bytes spill stores")?,
        field("bytes spill loads")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 50 numbered PTX lines, so line N reads `instr_N`.
    fn numbered_ptx() -> String {
        (1..=50).map(|n| format!("\tinstr_{n};\n")).collect()
    }

    const LOG: &str = "ptxas application ptx input, line 7; warning : Unused variable\n\
        ptxas application ptx input, line 42; error   : Arguments mismatch for instruction 'add'\n\
        ptxas application ptx input, line 45; error   : Unknown symbol '%r99'\n\
        ptxas fatal   : Ptx assembly aborted due to errors\n";

    #[test]
    fn blames_first_error_line_not_warning() {
        assert_eq!(blamed_ptx_line(LOG), Some(42));
        assert_eq!(
            blamed_ptx_line("ptxas x.ptx, line 9; warning : w\n"),
            Some(9)
        );
        assert_eq!(
            blamed_ptx_line("ptxas fatal : Unresolved extern function 'f'\n"),
            None
        );
        assert_eq!(
            blamed_ptx_line("see line 12 of the manual, line 3x; error"),
            None
        );
    }

    #[test]
    fn blames_fatal_parse_errors() {
        // As driver 580 reports a misplaced `.extern .shared`.
        let log = "ptxas application ptx input, line 53; fatal   : Parsing error near '.shared': syntax error\n\
            ptxas fatal   : Ptx assembly aborted due to errors";
        assert_eq!(blamed_ptx_line(log), Some(53));
        let err = jit_error(&numbered_ptx(), "k", "CUDA_ERROR_INVALID_PTX", log, &|_| {
            None
        });
        assert!(
            err.to_string()
                .contains("\n  ptxas application ptx input, line 53; fatal"),
            "{err}"
        );
    }

    #[test]
    fn context_marks_the_blamed_line() {
        let ctx = ptx_context(&numbered_ptx(), 42);
        let lines: Vec<&str> = ctx.lines().collect();
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[0], "  39 | \tinstr_39;");
        assert_eq!(lines[3], "> 42 | \tinstr_42;");
        assert_eq!(lines[6], "  45 | \tinstr_45;");
        // Clipped at the module's ends.
        let head = ptx_context(&numbered_ptx(), 1);
        assert!(head.starts_with("> 1 | \tinstr_1;"));
        assert_eq!(head.lines().count(), 4);
        assert!(ptx_context(&numbered_ptx(), 51).contains("outside"));
    }

    #[test]
    fn jit_error_points_at_ptx_and_source() {
        let ptx = numbered_ptx();
        // Locations on lines 10 and 40 only, as `// loc` comments would give.
        let map = |l: usize| match l {
            10 => Some("kernels/softmax.rs:12:5".to_string()),
            40 => Some("kernels/softmax.rs:31:17".to_string()),
            _ => None,
        };
        let err = jit_error(&ptx, "softmax", "CUDA_ERROR_INVALID_PTX", LOG, &map);
        let CudaError::Jit(jit) = &err else {
            panic!("expected a Jit error, got {err:?}")
        };
        let JitError {
            entry,
            ptx_line,
            context,
            source_loc,
            log,
            ..
        } = &**jit;
        assert_eq!(entry, "softmax");
        assert_eq!(*ptx_line, Some(42));
        assert!(context.contains("> 42 | \tinstr_42;"), "{context}");
        assert_eq!(source_loc.as_deref(), Some("kernels/softmax.rs:31:17"));
        assert!(log.ends_with("aborted due to errors"));
        let text = err.to_string();
        assert!(
            text.contains("`softmax` at kernels/softmax.rs:31:17"),
            "{text}"
        );
        assert!(
            text.contains("Arguments mismatch for instruction 'add'"),
            "{text}"
        );
        assert!(text.contains("> 42 |"), "{text}");
    }

    #[test]
    fn source_lookback_is_bounded() {
        let map = |l: usize| (l == 10).then(|| "a.rs:1:1".to_string());
        assert_eq!(source_location(26, &map).as_deref(), Some("a.rs:1:1"));
        assert_eq!(source_location(27, &map), None);
        assert_eq!(source_location(9, &map), None);
    }

    #[test]
    fn jit_error_without_line_keeps_log() {
        let log = "ptxas fatal   : Unresolved extern function 'vprintf'\n";
        let err = jit_error("x", "k", "CUDA_ERROR_INVALID_PTX", log, &|_| None);
        let CudaError::Jit(jit) = &err else {
            panic!("expected a Jit error, got {err:?}")
        };
        let JitError {
            ptx_line,
            context,
            source_loc,
            ..
        } = &**jit;
        assert_eq!((*ptx_line, context.as_str(), source_loc), (None, "", &None));
        assert!(err
            .to_string()
            .contains("Unresolved extern function 'vprintf'"));
    }

    #[test]
    fn spill_figures_per_entry() {
        let info = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'a' for 'sm_90a'\n\
            ptxas info    : Function properties for a\n\
            \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 12 registers, 380 bytes cmem[0]\n\
            ptxas info    : Compiling entry function 'ab' for 'sm_90a'\n\
            ptxas info    : Function properties for ab\n\
            \x20   48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads\n\
            ptxas info    : Used 255 registers, 380 bytes cmem[0]\n";
        assert_eq!(spill_bytes(info, "a"), Some((0, 0, 0)));
        assert_eq!(spill_bytes(info, "ab"), Some((48, 40, 36)));
        assert_eq!(spill_bytes(info, "b"), None);
        // Driver 580 prefixes the figures line with `ptxas         .`.
        let h200 = "ptxas info    : Function properties for saxpy\n\
            ptxas         .     0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n";
        assert_eq!(spill_bytes(h200, "saxpy"), Some((0, 8, 4)));
        // A hit in the driver's own JIT cache prints a summary without spill figures.
        let cached = "info    : Function properties for 'saxpy':\n\
            info    : used 12 registers, used 0 barriers, 0 stack, 0 bytes smem, 560 bytes cmem[0], 0 bytes lmem\n";
        assert_eq!(spill_bytes(cached, "saxpy"), None);
        assert_eq!(spill_bytes("", "a"), None);
    }
}
