//! The PTX the simulator reads: one instruction a line as the lowering writes it (registers by
//! name, immediates, `[addr + off]`, `{vectors}`, labels, guards), into [`Prog`].

use std::collections::HashMap;

#[derive(Clone, Debug)]
pub(crate) enum Opnd {
    Reg(usize),
    Imm(i64),
    Bits(u64),
    Sym(String),
    Addr(Box<Opnd>, i64),
    Vec(Vec<usize>),
    Label(String),
    /// `[tensorMap, {c0, c1, ...}]`: a tensor map's address and the tensor coordinates of a
    /// `cp.async.bulk.tensor` (registers or immediates).
    Tensor(Box<Opnd>, Vec<Opnd>),
}

#[derive(Clone, Debug)]
pub(crate) struct Ins {
    pub(crate) guard: Option<(usize, bool)>,
    pub(crate) op: String,
    pub(crate) args: Vec<Opnd>,
    /// Every register the instruction names (guard, operands, address bases): what the
    /// wgmma checks look at.
    pub(crate) regs: Vec<usize>,
}

/// The registers `args` and `guard` name.
pub(crate) fn named_regs(guard: Option<(usize, bool)>, args: &[Opnd]) -> Vec<usize> {
    let mut regs: Vec<usize> = guard.map(|(p, _)| p).into_iter().collect();
    for a in args {
        match a {
            Opnd::Reg(r) => regs.push(*r),
            Opnd::Vec(v) => regs.extend(v),
            Opnd::Addr(base, _) => {
                if let Opnd::Reg(r) = **base {
                    regs.push(r);
                }
            }
            Opnd::Tensor(base, coords) => {
                for o in std::iter::once(&**base).chain(coords) {
                    if let Opnd::Reg(r) = o {
                        regs.push(*r);
                    }
                }
            }
            _ => {}
        }
    }
    regs
}

pub(crate) struct Prog {
    pub(crate) code: Vec<Ins>,
    pub(crate) labels: HashMap<String, usize>,
    pub(crate) nregs: usize,
    pub(crate) shared: usize,
    /// Shared arrays: name -> (byte offset, size).
    pub(crate) shared_syms: HashMap<String, (usize, usize)>,
    /// Register index -> its name in the PTX (for messages).
    pub(crate) reg_names: Vec<String>,
    /// Whether the kernel issues `wgmma`: only then are its register checks tracked.
    pub(crate) has_wgmma: bool,
    /// The entry's `.param` declarations: name -> whether it is a tensor map
    /// (`.param .align 64 .b8 NAME[128]`).
    pub(crate) params: HashMap<String, bool>,
}

/// The entry's parameters, from `.entry NAME( .param TYPE NAME, ... )`: name -> whether the
/// declaration is that of a tensor map, `.param .align 64 .b8 NAME[128]` (the 128-byte
/// opaque `CUtensorMap`, 64-byte aligned).
fn param_decls(ptx: &str) -> HashMap<String, bool> {
    let mut out = HashMap::new();
    let Some(at) = ptx.find(".entry") else {
        return out;
    };
    let head = &ptx[at..];
    let head = &head[..head.find(".maxntid").unwrap_or(head.len())];
    let (Some(open), Some(close)) = (head.find('('), head.rfind(')')) else {
        return out;
    };
    for decl in head[open + 1..close].split(',') {
        let Some(decl) = decl.trim().strip_prefix(".param") else {
            continue;
        };
        let words: Vec<&str> = decl.split_whitespace().collect();
        let Some((&name, ty)) = words.split_last() else {
            continue;
        };
        let (name, array) = match name.split_once('[') {
            Some((n, len)) => (n, Some(len.trim_end_matches(']'))),
            None => (name, None),
        };
        let tensor_map = ty == [".align", "64", ".b8"] && array == Some("128");
        out.insert(name.to_string(), tensor_map);
    }
    out
}

pub(crate) fn split_args(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for ch in s.chars() {
        match ch {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(ch);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// `shared_bytes`: the dynamic shared memory the launch gives the kernel.
pub(crate) fn parse(ptx: &str, shared_bytes: usize) -> Prog {
    let mut names: HashMap<String, usize> = HashMap::new();
    let reg = |n: &str, names: &mut HashMap<String, usize>| {
        let k = names.len();
        *names.entry(n.to_string()).or_insert(k)
    };
    let mut code = Vec::new();
    let mut labels = HashMap::new();
    let mut shared = 0;
    let mut shared_syms: HashMap<String, (usize, usize)> = HashMap::new();
    for l in ptx.lines() {
        // `.extern .shared .align 128 .b8 NAME[];` at module scope: the launch's dynamic array.
        if let Some(rest) = l.trim().strip_prefix(".extern .shared") {
            let decl = rest.split_whitespace().last().unwrap();
            let name = decl.trim_end_matches("[];");
            shared_syms.insert(name.to_string(), (0, shared_bytes));
            shared = shared_bytes;
        }
    }
    // The body starts after the entry's performance directives (`.maxntid`, `.minnctapersm`).
    let directives = &ptx[ptx.find(".maxntid").unwrap()..];
    let body = &directives[directives.find("\n{\n").unwrap() + 3..];
    for line in body.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with("//") || l == "}" {
            continue;
        }
        if let Some(rest) = l.strip_prefix(".shared") {
            // `.shared .align 128 .b8 NAME[BYTES];`: arrays laid out one after another.
            let decl = rest.split_whitespace().last().unwrap();
            let (name, n) = decl.split_once('[').unwrap();
            let n: usize = n.trim_end_matches("];").parse().unwrap();
            let at = shared_syms
                .values()
                .map(|&(a, b): &(usize, usize)| (a + b).div_ceil(128) * 128)
                .max()
                .unwrap_or(0);
            shared_syms.insert(name.to_string(), (at, n));
            shared = at + n;
            continue;
        }
        if l.starts_with(".reg") {
            continue;
        }
        if let Some(lab) = l.strip_suffix(':') {
            labels.insert(lab.to_string(), code.len());
            continue;
        }
        let l = l.trim_end_matches(';');
        let (guard, l) = if let Some(g) = l.strip_prefix('@') {
            let (p, rest) = g.split_once(' ').unwrap();
            let (neg, p) = match p.strip_prefix('!') {
                Some(p) => (true, p),
                None => (false, p),
            };
            (Some((reg(p, &mut names), neg)), rest.trim())
        } else {
            (None, l)
        };
        let (op, rest) = l.split_once(' ').unwrap_or((l, ""));
        let parse_opnd = |a: &str, names: &mut HashMap<String, usize>| -> Opnd {
            // `[tensorMap, {c0, c1}]`.
            if let Some((map, coords)) = a
                .strip_prefix('[')
                .and_then(|v| v.strip_suffix(']'))
                .and_then(|v| v.split_once(','))
            {
                let map = map.trim();
                let map = if map.starts_with('%') {
                    Opnd::Reg(reg(map, names))
                } else {
                    Opnd::Sym(map.to_string())
                };
                let coords = coords.trim();
                let coords = coords
                    .strip_prefix('{')
                    .and_then(|c| c.strip_suffix('}'))
                    .unwrap_or_else(|| panic!("tensor coordinates {coords:?}: not a {{vector}}"));
                let coords = coords
                    .split(',')
                    .map(|c| {
                        let c = c.trim();
                        if c.starts_with('%') {
                            Opnd::Reg(reg(c, names))
                        } else {
                            Opnd::Imm(c.parse().unwrap_or_else(|_| panic!("coordinate {c:?}")))
                        }
                    })
                    .collect();
                return Opnd::Tensor(Box::new(map), coords);
            }
            if let Some(v) = a.strip_prefix('{') {
                let v = v.trim_end_matches('}');
                return Opnd::Vec(v.split(',').map(|r| reg(r.trim(), names)).collect());
            }
            if let Some(v) = a.strip_prefix('[') {
                let v = v.trim_end_matches(']');
                let (b, off) = match v.split_once('+') {
                    Some((b, o)) => (b, o.parse().unwrap()),
                    None => match v[1..].find('-') {
                        Some(i) => (&v[..i + 1], v[i + 1..].parse::<i64>().map(|x| -x).unwrap()),
                        None => (v, 0),
                    },
                };
                let base = if b.starts_with("%r") || b.starts_with("%rd") {
                    Opnd::Reg(reg(b, names))
                } else {
                    Opnd::Sym(b.to_string())
                };
                return Opnd::Addr(Box::new(base), off);
            }
            if a.starts_with("%tid") || a.starts_with("%ctaid") || a.starts_with("%nctaid") {
                return Opnd::Sym(a.to_string());
            }
            if a.starts_with('%') {
                return Opnd::Reg(reg(a, names));
            }
            if let Some(h) = a.strip_prefix("0f") {
                return Opnd::Bits(u64::from_str_radix(h, 16).unwrap());
            }
            if let Some(h) = a.strip_prefix("0d") {
                return Opnd::Bits(u64::from_str_radix(h, 16).unwrap());
            }
            if a.starts_with('$') {
                return Opnd::Label(a.to_string());
            }
            if let Ok(i) = a.parse::<i64>() {
                return Opnd::Imm(i);
            }
            Opnd::Sym(a.to_string())
        };
        let args: Vec<Opnd> = split_args(rest)
            .iter()
            .map(|a| parse_opnd(a, &mut names))
            .collect();
        code.push(Ins {
            guard,
            op: op.to_string(),
            regs: named_regs(guard, &args),
            args,
        });
    }
    let mut reg_names = vec![String::new(); names.len()];
    for (name, &i) in &names {
        reg_names[i] = name.clone();
    }
    let has_wgmma = code.iter().any(|i| i.op.starts_with("wgmma."));
    Prog {
        code,
        labels,
        nregs: names.len(),
        shared,
        shared_syms,
        reg_names,
        has_wgmma,
        params: param_decls(ptx),
    }
}
