//! The text printer: `format!("{kernel}")`, or `format!("{kernel:#}")` for a trailing
//! `// file:line` on each op.
//!
//! One op per line, nested regions indented by two spaces:
//!
//! ```text
//! kernel @scale(%x: ptr<f32>, %n: i32) {
//!   %2 = program_id 0 : i32
//!   %3 = load %x : f32
//!   store %x, %3
//! }
//! ```
//!
//! Values print as `%N`, their arena index (the same names the verifier's messages and
//! `Value`'s `Display` use), parameters by their name. Each result is followed by `: type`;
//! attributes follow the operands as `key=value`, and only when they differ from the default
//! (cache modifiers, eviction, rounding, memory semantics), except the few that define the op
//! (axes, `dot` precision, the reduce op in the mnemonic). A `for` loop prints its header as
//! `for %iv = lo to hi step s`, then its own stage count when it has one (`num_stages=3`),
//! then its carried values (`iter(%arg = %init, ..)`).
//!
//! The printer never panics, even on a kernel the verifier rejects: missing entities print as
//! `<missing ...>`, so a broken kernel can still be inspected.

use crate::kernel::{Block, EntityRef, Inst, Kernel, Loc, Value, ValueDef};
use crate::op::{CacheModifier, EvictionPolicy, MemScope, MemSem, Op, Rounding};
use std::fmt::{self, Write};

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer {
            k: self,
            lines: Vec::new(),
            visited: vec![false; self.blocks.len()],
        };
        let params: Vec<String> = self
            .params
            .iter()
            .map(|prm| {
                let facts = match prm.facts.divisibility {
                    1 => String::new(),
                    d => format!(" div{d}"),
                };
                format!("%{}: {}{facts}", prm.name, prm.ty)
            })
            .collect();
        writeln!(f, "kernel @{}({}) {{", self.name, params.join(", "))?;
        if self.blocks.get(self.body).is_some() {
            p.block(self.body, 1);
        }
        // Loc comments line up in one column, so the ops read like a table.
        let width = p.lines.iter().map(|l| l.text.len()).max().unwrap_or(0);
        for line in &p.lines {
            match (f.alternate(), line.loc) {
                (true, Some(loc)) => writeln!(
                    f,
                    "{:width$}  // {}:{}",
                    line.text,
                    loc.file,
                    loc.line,
                    width = width
                )?,
                _ => writeln!(f, "{}", line.text)?,
            }
        }
        f.write_str("}")
    }
}

struct Line {
    text: String,
    loc: Option<Loc>,
}

struct Printer<'a> {
    k: &'a Kernel,
    lines: Vec<Line>,
    /// Guards against region cycles in broken kernels.
    visited: Vec<bool>,
}

impl Printer<'_> {
    fn push(&mut self, depth: usize, text: String, loc: Option<Loc>) {
        self.lines.push(Line {
            text: format!("{}{text}", "  ".repeat(depth)),
            loc,
        });
    }

    fn name(&self, v: Value) -> String {
        match self.k.values.get(v).map(|d| d.def) {
            Some(ValueDef::Param(i)) if i < self.k.params.len() => {
                format!("%{}", self.k.params[i].name)
            }
            _ => v.to_string(),
        }
    }

    fn names(&self, vs: &[Value]) -> String {
        vs.iter()
            .map(|&v| self.name(v))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn ty(&self, v: Value) -> String {
        match self.k.values.get(v) {
            Some(d) => d.ty.to_string(),
            None => "<missing type>".into(),
        }
    }

    fn types(&self, vs: &[Value]) -> String {
        vs.iter()
            .map(|&v| self.ty(v))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn block_args(&self, b: Block) -> Vec<Value> {
        self.k
            .blocks
            .get(b)
            .map(|d| d.args.clone())
            .unwrap_or_default()
    }

    fn block(&mut self, b: Block, depth: usize) {
        if std::mem::replace(&mut self.visited[b.index()], true) {
            self.push(depth, format!("<cycle: {b} printed already>"), None);
            return;
        }
        for &i in &self.k.blocks[b].insts {
            self.inst(i, depth);
        }
    }

    /// A region's body, or a placeholder for a region that does not exist.
    fn region(&mut self, i: Inst, index: usize, depth: usize) {
        match self.k.insts[i].regions.get(index) {
            Some(&b) if self.k.blocks.get(b).is_some() => self.block(b, depth),
            _ => self.push(depth, format!("<missing region {index}>"), None),
        }
    }

    fn inst(&mut self, i: Inst, depth: usize) {
        let Some(d) = self.k.insts.get(i) else {
            self.push(depth, format!("<missing {i}>"), None);
            return;
        };
        let results = if d.results.is_empty() {
            String::new()
        } else {
            format!("{} = ", self.names(&d.results))
        };
        let result_types = format!("({})", self.types(&d.results));
        let arrow = if d.results.is_empty() {
            String::new()
        } else {
            format!(" -> {result_types}")
        };
        let loc = Some(d.loc);
        match &d.op {
            Op::For { num_stages } => {
                let a = &d.args;
                let region_args = d.regions.first().map(|&b| self.block_args(b));
                let region_args = region_args.unwrap_or_default();
                let mut text = results;
                if a.len() >= 3 && !region_args.is_empty() {
                    write!(
                        text,
                        "for {} = {} to {} step {}",
                        self.name(region_args[0]),
                        self.name(a[0]),
                        self.name(a[1]),
                        self.name(a[2])
                    )
                    .unwrap();
                    if let Some(s) = num_stages {
                        write!(text, " num_stages={s}").unwrap();
                    }
                    let carried = self.pairs(&region_args[1..], &a[3..]);
                    if !carried.is_empty() {
                        write!(text, " iter({carried})").unwrap();
                    }
                } else {
                    write!(text, "for <malformed> {}", self.names(a)).unwrap();
                }
                write!(text, "{arrow} {{").unwrap();
                self.push(depth, text, loc);
                self.region(i, 0, depth + 1);
                self.push(depth, "}".into(), None);
            }
            Op::ReduceWith { axis } | Op::ScanWith { axis, .. } => {
                // `%y0, %y1 = reduce_with %x0, %x1 axis=0 -> (..) combine(%l0, %l1, %r0, %r1) {`
                let mut text = format!(
                    "{results}{} {} axis={axis}",
                    d.op.name(),
                    self.names(&d.args)
                );
                if let Op::ScanWith { reverse: true, .. } = d.op {
                    text.push_str(" reverse");
                }
                let args = d.regions.first().map(|&b| self.block_args(b));
                let args = self.names(&args.unwrap_or_default());
                write!(text, "{arrow} combine({args}) {{").unwrap();
                self.push(depth, text, loc);
                self.region(i, 0, depth + 1);
                self.push(depth, "}".into(), None);
            }
            Op::If => {
                let cond = self.names(&d.args);
                self.push(depth, format!("{results}if {cond}{arrow} {{"), loc);
                self.region(i, 0, depth + 1);
                self.push(depth, "} else {".into(), None);
                self.region(i, 1, depth + 1);
                self.push(depth, "}".into(), None);
            }
            Op::While => {
                let before = d.regions.first().map(|&b| self.block_args(b));
                let after = d.regions.get(1).map(|&b| self.block_args(b));
                let carried = self.pairs(&before.unwrap_or_default(), &d.args);
                let iter = if carried.is_empty() {
                    String::new()
                } else {
                    format!(" iter({carried})")
                };
                self.push(depth, format!("{results}while{iter}{arrow} {{"), loc);
                self.region(i, 0, depth + 1);
                let after = self.names(&after.unwrap_or_default());
                let after = if after.is_empty() {
                    String::new()
                } else {
                    format!("({after}) ")
                };
                self.push(depth, format!("}} do {after}{{"), None);
                self.region(i, 1, depth + 1);
                self.push(depth, "}".into(), None);
            }
            op => {
                let mut text = format!("{results}{}", op.name());
                let operands = self.operands(op, &d.args);
                if !operands.is_empty() {
                    write!(text, " {operands}").unwrap();
                }
                if !d.results.is_empty() {
                    write!(text, " : {}", self.types(&d.results)).unwrap();
                }
                let expanded = matches!(op, Op::DescLoad | Op::DescStore);
                if !d.regions.is_empty() && !expanded {
                    write!(text, " <{} unexpected regions>", d.regions.len()).unwrap();
                }
                if expanded && !d.regions.is_empty() {
                    // The region: the same access in ordinary ops.
                    self.push(depth, format!("{text} expanded {{"), loc);
                    self.region(i, 0, depth + 1);
                    self.push(depth, "}".into(), None);
                } else {
                    self.push(depth, text, loc);
                }
            }
        }
    }

    /// `%11 = %5, %12 = %6`: region arguments with the values they start from.
    fn pairs(&self, region_args: &[Value], init: &[Value]) -> String {
        let n = region_args.len().max(init.len());
        (0..n)
            .map(|j| {
                let lhs = region_args.get(j).map(|&v| self.name(v));
                let rhs = init.get(j).map(|&v| self.name(v));
                format!(
                    "{} = {}",
                    lhs.unwrap_or_else(|| "<missing>".into()),
                    rhs.unwrap_or_else(|| "<missing>".into())
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Operands and attributes of a non-region op, comma-separated.
    fn operands(&self, op: &Op, args: &[Value]) -> String {
        let mut parts: Vec<String> = Vec::new();
        let arg = |n: usize| {
            args.get(n)
                .map(|&v| self.name(v))
                .unwrap_or_else(|| "<missing>".into())
        };
        match op {
            Op::ProgramId { axis } | Op::NumPrograms { axis } => parts.push(axis.to_string()),
            Op::Arange { start, end } => {
                parts.push(start.to_string());
                parts.push(end.to_string());
            }
            Op::Const(c) => parts.push(c.to_string()),
            Op::Load {
                has_mask,
                has_other,
                cache,
                evict,
                volatile,
            } => {
                parts.push(arg(0));
                let mut next = 1;
                if *has_mask {
                    parts.push(format!("mask={}", arg(next)));
                    next += 1;
                }
                if *has_other {
                    parts.push(format!("other={}", arg(next)));
                    next += 1;
                }
                parts.extend(args.iter().skip(next).map(|&v| self.name(v)));
                push_memory_hints(&mut parts, *cache, *evict);
                if *volatile {
                    parts.push("volatile".into());
                }
            }
            Op::Store {
                has_mask,
                cache,
                evict,
            } => {
                self.value_and_mask(&mut parts, args, *has_mask);
                push_memory_hints(&mut parts, *cache, *evict);
            }
            Op::Atomic {
                has_mask,
                sem,
                scope,
                ..
            } => {
                self.value_and_mask(&mut parts, args, *has_mask);
                push_sem(&mut parts, *sem, *scope);
            }
            Op::AtomicCas { sem, scope } => {
                parts.push(self.names(args));
                push_sem(&mut parts, *sem, *scope);
            }
            Op::Print { prefix, hex } => {
                let hex = if *hex { "hex " } else { "" };
                parts.push(format!("{hex}{prefix:?}"));
                parts.extend(args.iter().map(|&v| self.name(v)));
            }
            Op::Assert { message } | Op::Assume { message } => {
                parts.extend(args.iter().map(|&v| self.name(v)));
                parts.push(format!("{message:?}"));
            }
            _ => {
                parts.extend(args.iter().map(|&v| self.name(v)));
                match op {
                    Op::ExpandDims { axis }
                    | Op::Reduce { axis, .. }
                    | Op::Flip { axis }
                    | Op::Gather { axis } => parts.push(format!("axis={axis}")),
                    Op::Scan { axis, reverse, .. } => {
                        parts.push(format!("axis={axis}"));
                        if *reverse {
                            parts.push("reverse".into());
                        }
                    }
                    Op::Permute { perm } => parts.push(format!("perm={perm:?}")),
                    Op::Cast { rounding } if *rounding != Rounding::NearestEven => {
                        parts.push(format!("rounding={}", rounding.name()))
                    }
                    Op::Dot { precision } => parts.push(format!("precision={}", precision.name())),
                    Op::MultipleOf { n } | Op::MaxContiguous { n } | Op::MaxConstancy { n } => {
                        let s: Vec<String> = n.iter().map(|v| v.to_string()).collect();
                        parts.push(s.join(", "))
                    }
                    _ => {}
                }
            }
        }
        parts.join(", ")
    }

    /// `ptr, value[, mask=m]` of stores and atomics.
    fn value_and_mask(&self, parts: &mut Vec<String>, args: &[Value], has_mask: bool) {
        let plain = if has_mask {
            args.len().saturating_sub(1)
        } else {
            args.len()
        };
        parts.extend(args[..plain].iter().map(|&v| self.name(v)));
        if has_mask {
            if let Some(&m) = args.last() {
                parts.push(format!("mask={}", self.name(m)));
            }
        }
    }
}

fn push_memory_hints(parts: &mut Vec<String>, cache: CacheModifier, evict: EvictionPolicy) {
    let cache = match cache {
        CacheModifier::None => None,
        CacheModifier::Ca => Some("ca"),
        CacheModifier::Cg => Some("cg"),
        CacheModifier::Cs => Some("cs"),
        CacheModifier::Wb => Some("wb"),
        CacheModifier::Wt => Some("wt"),
    };
    if let Some(c) = cache {
        parts.push(format!("cache={c}"));
    }
    let evict = match evict {
        EvictionPolicy::Normal => None,
        EvictionPolicy::First => Some("first"),
        EvictionPolicy::Last => Some("last"),
    };
    if let Some(e) = evict {
        parts.push(format!("evict={e}"));
    }
}

// The defaults (acq_rel, gpu) print nothing.
fn push_sem(parts: &mut Vec<String>, sem: MemSem, scope: MemScope) {
    if sem != MemSem::default() {
        parts.push(format!("sem={}", sem.name()));
    }
    if scope != MemScope::default() {
        parts.push(format!("scope={}", scope.name()));
    }
}
