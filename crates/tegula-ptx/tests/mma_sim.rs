//! Runs the emitted PTX of tensor-core kernels on a small SIMT simulator (one CTA at a time,
//! all threads in lockstep) and compares the results with float64 references. The simulator
//! implements `ldmatrix`, `mma.sync` and `wgmma` from the PTX ISA's definitions (not from
//! `mma_layout.rs` or `lower/wgmma.rs`), checks that shared-memory accesses of different
//! threads are separated by a barrier, and that branches are uniform. Products on tensor cores
//! are exact; the simulator sums them in f64, so results are compared with a tolerance, not
//! bit for bit.
//!
//! Asynchrony is modeled at its latest: a `cp.async` lands when its thread's
//! `cp.async.wait_group` retires its group (reading the bytes before is an error; so is a
//! wgmma reading them before the copying thread's `fence.proxy.async` after that wait); a
//! `wgmma.mma_async` runs when a `wgmma.wait_group` retires its group, and until then its
//! registers (accumulator, A fragment) may not be touched by other instructions, nor the
//! shared bytes it reads written. Registers other instructions used need a `wgmma.fence`
//! before a wgmma uses them, and the descriptors must agree across the warpgroup.

mod mma_kernels;

use half::{bf16, f16};
use mma_kernels::*;
use std::collections::HashMap;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, Compiled, MmaChoice, Target};

#[derive(Clone, Debug)]
enum Opnd {
    Reg(usize),
    Imm(i64),
    Bits(u64),
    Sym(String),
    Addr(Box<Opnd>, i64),
    Vec(Vec<usize>),
    Label(String),
}

#[derive(Clone, Debug)]
struct Ins {
    guard: Option<(usize, bool)>,
    op: String,
    args: Vec<Opnd>,
    /// Every register the instruction names (guard, operands, address bases): what the
    /// wgmma checks look at.
    regs: Vec<usize>,
}

/// The registers `args` and `guard` name.
fn named_regs(guard: Option<(usize, bool)>, args: &[Opnd]) -> Vec<usize> {
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
            _ => {}
        }
    }
    regs
}

struct Prog {
    code: Vec<Ins>,
    labels: HashMap<String, usize>,
    nregs: usize,
    shared: usize,
    /// Shared arrays: name -> (byte offset, size).
    shared_syms: HashMap<String, (usize, usize)>,
    /// Register index -> its name in the PTX (for messages).
    reg_names: Vec<String>,
    /// Whether the kernel issues `wgmma`: only then are its register checks tracked.
    has_wgmma: bool,
}

fn split_args(s: &str) -> Vec<String> {
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
fn parse(ptx: &str, shared_bytes: usize) -> Prog {
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
    }
}

/// Global memory: buffers at fixed, widely spaced addresses.
struct Gmem {
    bufs: Vec<Vec<u8>>,
}

const GBASE: u64 = 1 << 40;
const GSPAN: u64 = 1 << 32;

impl Gmem {
    fn at(&mut self, addr: u64, n: usize) -> &mut [u8] {
        let b = ((addr - GBASE) / GSPAN) as usize;
        let off = ((addr - GBASE) % GSPAN) as usize;
        let buf = &mut self.bufs[b];
        assert!(
            off + n <= buf.len(),
            "global access out of bounds: buffer {b} offset {off}"
        );
        &mut buf[off..off + n]
    }
}

/// One `cp.async` in flight: bytes to land in shared memory.
#[derive(Clone)]
struct Copy {
    addr: u64,
    data: Vec<u8>,
}

#[derive(Clone, Copy)]
struct Access {
    epoch: u32,
    thread: u32,
}

/// The `thread` of [`Access`] for the reads of warpgroup `g`'s wgmmas (`u32::MAX` stands for
/// several threads).
fn wgmma_reader(g: usize) -> u32 {
    u32::MAX - 1 - g as u32
}

/// Whether `a` is an access in `epoch` by someone other than thread `t` (or, a wgmma's read,
/// other than `t`'s warpgroup: its own wait orders its threads after the read).
fn by_another(a: Option<Access>, epoch: u32, t: usize) -> bool {
    a.is_some_and(|a| a.epoch == epoch && a.thread != t as u32 && a.thread != wgmma_reader(t / 128))
}

struct Machine<'p> {
    prog: &'p Prog,
    threads: usize,
    regs: Vec<Vec<u64>>,
    smem: Vec<u8>,
    /// Per shared byte: the last write and last read (thread u32::MAX: several threads).
    writes: Vec<Option<Access>>,
    reads: Vec<Option<Access>>,
    epoch: u32,
    pc: usize,
    /// Per thread: cp.async copies of the open group, and committed groups not yet waited for.
    open: Vec<Vec<Copy>>,
    committed: Vec<Vec<Vec<Copy>>>,
    params: HashMap<String, u64>,
    ctaid: [u64; 3],
    nctaid: [u64; 3],
    /// Per shared byte: how many issued cp.async copies have not landed there yet.
    copies_in_flight: Vec<u16>,
    /// Per thread: `fence.proxy.async` executed so far; per shared byte: the writer's count
    /// at the last write (the write is visible to wgmma once the writer's count is higher).
    proxy_fences: Vec<u32>,
    write_fences: Vec<u32>,
    /// Per shared byte: how many pending wgmmas read it (writes are errors until they retire).
    wgmma_reads: Vec<u16>,
    /// Per warpgroup (when the kernel uses wgmma).
    warpgroups: Vec<WarpgroupState>,
}

/// One issued `wgmma.mma_async` of a warpgroup: it runs when a `wgmma.wait_group` retires
/// its group, reading its registers and shared memory then (the latest the hardware may).
struct PendingMma {
    pc: usize,
    accumulate: bool,
    /// Shared addresses of A's elements `[m][k]` (64 x 16; empty when A is in registers) and
    /// B's `[k][n]` (16 x N), from the descriptors at issue.
    a_addrs: Vec<u32>,
    b_addrs: Vec<u32>,
}

/// The wgmma state of one warpgroup (4 warps, 128 threads).
struct WarpgroupState {
    uncommitted: Vec<PendingMma>,
    /// Committed groups, oldest first.
    committed: std::collections::VecDeque<Vec<PendingMma>>,
    /// Per register: pending wgmmas using it as accumulator, as A fragment.
    locked_d: Vec<u16>,
    locked_a: Vec<u16>,
    /// Per register: the step of the last access by an instruction other than wgmma; and the
    /// step of the last `wgmma.fence` (which must separate the two).
    touched: Vec<u64>,
    fenced: u64,
}

impl WarpgroupState {
    fn new(nregs: usize) -> Self {
        WarpgroupState {
            uncommitted: Vec::new(),
            committed: Default::default(),
            locked_d: vec![0; nregs],
            locked_a: vec![0; nregs],
            touched: vec![0; nregs],
            fenced: 0,
        }
    }

    fn pending(&self) -> impl Iterator<Item = &PendingMma> {
        self.uncommitted
            .iter()
            .chain(self.committed.iter().flatten())
    }
}

/// The shape and operands of a `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.*`.
struct WgmmaForm<'a> {
    n: usize,
    bf16: bool,
    d: &'a [usize],
    /// A's registers (4 per thread) when A comes from registers, else None (a descriptor).
    a_regs: Option<&'a [usize]>,
    scale_a: f64,
    scale_b: f64,
    trans_a: bool,
    trans_b: bool,
}

impl<'a> WgmmaForm<'a> {
    /// Operands per the PTX ISA: `d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b,
    /// imm-trans-a, imm-trans-b` or, A from registers, `d, {a0..a3}, b-desc, scale-d,
    /// imm-scale-a, imm-scale-b, imm-trans-b`.
    fn of(ins: &'a Ins) -> Self {
        let op = &ins.op;
        let shape = op
            .split('.')
            .find(|p| p.starts_with("m64n"))
            .unwrap_or_else(|| panic!("{op}: no m64nNk16 shape"));
        let (n, k) = shape[4..].split_once('k').unwrap();
        let n: usize = n.parse().unwrap();
        assert!(
            k == "16" && n.is_multiple_of(8) && (8..=256).contains(&n),
            "{op}"
        );
        let bf16 = op.ends_with(".f32.bf16.bf16");
        assert!(bf16 || op.ends_with(".f32.f16.f16"), "unsupported {op}");
        let imm = |i: usize| match ins.args[i] {
            Opnd::Imm(x) => x,
            ref o => panic!("{op}: operand {i} is {o:?}, not an immediate"),
        };
        let Opnd::Vec(d) = &ins.args[0] else {
            panic!("{op}: accumulator not a vector")
        };
        assert_eq!(d.len(), n / 2, "{op}: N/2 accumulator registers");
        let a_regs = match &ins.args[1] {
            Opnd::Vec(a) => {
                assert_eq!(a.len(), 4, "{op}: four A registers");
                Some(a.as_slice())
            }
            _ => None,
        };
        let (trans_a, trans_b) = if a_regs.is_some() {
            assert_eq!(ins.args.len(), 7, "{op}: operands");
            (0, imm(6))
        } else {
            assert_eq!(ins.args.len(), 8, "{op}: operands");
            (imm(6), imm(7))
        };
        for (what, x) in [("imm-trans-a", trans_a), ("imm-trans-b", trans_b)] {
            assert!(x == 0 || x == 1, "{op}: {what} {x}");
        }
        let scale = |i: usize| match imm(i) {
            1 => 1.0,
            -1 => -1.0,
            x => panic!("{op}: imm-scale {x}"),
        };
        WgmmaForm {
            n,
            bf16,
            d,
            a_regs,
            scale_a: scale(4),
            scale_b: scale(5),
            trans_a: trans_a == 1,
            trans_b: trans_b == 1,
        }
    }
}

/// The shared address holding element (`mn`, `k`) of a wgmma operand from its descriptor,
/// per the PTX ISA's matrix descriptor and canonical layouts (the reading of
/// `lower/wgmma.rs`'s `hardware_address`, confirmed on the H200 by `wgmma_probe`): start
/// address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29, stride byte offset >> 4 in
/// 32-45, base offset in 49-51 (0 here), swizzle in 62-63 (1: 128 bytes, 2: 64, 3: 32).
/// K-major (`k_major`): 8 rows of `width` bytes (the swizzle's row) hold 8 rows of M/N, the
/// stride offset moves 8 rows. MN-major: a row of `width` bytes holds `width / 2` elements
/// along M/N, 8 such rows are 8 k, the stride offset moves 8 k and the leading offset the
/// next `width / 2` of M/N. The swizzle XORs address bits 4.. with bits 7.. (3, 2 or 1 bits).
fn descriptor_address(desc: u64, mn: u32, k: u32, k_major: bool) -> u32 {
    let field = |shift: u32| (((desc >> shift) & 0x3fff) << 4) as u32;
    let (start, leading, stride) = (field(0), field(16), field(32));
    let reserved = desc & (0b11 << 14 | 0b11 << 30 | 0x3ff << 46 | 0x3ff << 52);
    assert_eq!(
        reserved, 0,
        "descriptor {desc:#x}: reserved bits or base offset set"
    );
    let width = match desc >> 62 {
        1 => 128,
        2 => 64,
        3 => 32,
        _ => panic!("descriptor {desc:#x}: no swizzle (interleaved layout) is not modeled"),
    };
    let linear = if k_major {
        start + (mn % 8) * width + (mn / 8) * stride + 2 * k
    } else {
        let per_row = width / 2;
        start + 2 * (mn % per_row) + (mn / per_row) * leading + (k % 8) * width + (k / 8) * stride
    };
    linear ^ (((linear >> 7) & (width / 16 - 1)) << 4)
}

fn f32v(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn bits(x: f32) -> u64 {
    x.to_bits() as u64
}

/// cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero.
fn tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    f32::from_bits((x.to_bits() + 0x1000) & !0x1fff)
}

impl<'p> Machine<'p> {
    fn val(&self, t: usize, a: &Opnd) -> u64 {
        match a {
            Opnd::Reg(r) => self.regs[t][*r],
            Opnd::Imm(i) => *i as u64,
            Opnd::Bits(b) => *b,
            Opnd::Sym(s) => match s.as_str() {
                "%tid.x" => t as u64,
                "%ctaid.x" => self.ctaid[0],
                "%ctaid.y" => self.ctaid[1],
                "%ctaid.z" => self.ctaid[2],
                "%nctaid.x" => self.nctaid[0],
                "%nctaid.y" => self.nctaid[1],
                "%nctaid.z" => self.nctaid[2],
                p if self.prog.shared_syms.contains_key(p) => self.prog.shared_syms[p].0 as u64,
                p => *self.params.get(p).unwrap_or_else(|| panic!("symbol {p}")),
            },
            other => panic!("no value for {other:?}"),
        }
    }

    fn addr(&self, t: usize, a: &Opnd) -> u64 {
        match a {
            Opnd::Addr(b, off) => {
                if let Opnd::Sym(s) = &**b {
                    if !self.prog.shared_syms.contains_key(s) {
                        return 0; // parameter space: handled by ld.param
                    }
                }
                self.val(t, b).wrapping_add(*off as u64)
            }
            _ => panic!("not an address"),
        }
    }

    fn set(&mut self, t: usize, a: &Opnd, v: u64) {
        match a {
            Opnd::Reg(r) => self.regs[t][*r] = v,
            other => panic!("cannot write {other:?}"),
        }
    }

    /// Records an access of `n` bytes at `addr` (a write of `data` when given); panics on a
    /// race: a byte another thread wrote since the last barrier (unless a write stores the
    /// same value), or a write over a byte another thread read since the last barrier.
    fn smem_access(&mut self, t: usize, addr: u64, n: usize, data: Option<&[u8]>) {
        let me = Access {
            epoch: self.epoch,
            thread: t as u32,
        };
        for (k, b) in (addr as usize..addr as usize + n).enumerate() {
            assert!(b < self.smem.len(), "shared access out of bounds");
            let other = |x: Option<Access>| by_another(x, self.epoch, t);
            let same_value = data.is_some_and(|d| d[k] == self.smem[b]);
            assert!(
                !other(self.writes[b]) || same_value,
                "shared byte {b} (thread {t}) written by thread {} without a barrier (pc {}: {:?})",
                self.writes[b].unwrap().thread,
                self.pc,
                self.prog.code[self.pc]
            );
            if let Some(d) = data {
                assert!(
                    !other(self.reads[b]) || d[k] == self.smem[b],
                    "shared byte {b} overwritten while another thread reads it (pc {})",
                    self.pc
                );
                assert_eq!(
                    self.wgmma_reads[b], 0,
                    "shared byte {b} written (thread {t}, pc {}) while a pending wgmma reads it",
                    self.pc
                );
                self.writes[b] = Some(me);
                self.write_fences[b] = self.proxy_fences[t];
                self.smem[b] = d[k];
            } else {
                assert!(
                    self.copies_in_flight[b] == 0,
                    "shared byte {b} read before its cp.async was waited for"
                );
                self.reads[b] = match self.reads[b] {
                    Some(a) if a.epoch == self.epoch && a.thread != t as u32 => Some(Access {
                        epoch: self.epoch,
                        thread: u32::MAX,
                    }),
                    _ => Some(me),
                };
            }
        }
    }

    fn run(&mut self, gmem: &mut Gmem) {
        let mut pc = 0;
        let mut steps = 0u64;
        while pc < self.prog.code.len() {
            steps += 1;
            assert!(steps < 5_000_000, "runaway");
            let ins = &self.prog.code[pc];
            self.pc = pc;
            pc += 1;
            let active: Vec<bool> = (0..self.threads)
                .map(|t| match ins.guard {
                    None => true,
                    Some((p, neg)) => (self.regs[t][p] != 0) != neg,
                })
                .collect();
            let op = ins.op.as_str();
            if self.prog.has_wgmma {
                self.wgmma_register_checks(ins, &active, steps);
            }
            if op == "ret" {
                self.assert_no_wgmma_pending();
                return;
            }
            if op.starts_with("wgmma.") {
                self.wgmma(ins, &active, steps);
                continue;
            }
            if op.starts_with("fence.proxy.async") {
                for (t, &on) in active.iter().enumerate() {
                    if on {
                        self.proxy_fences[t] += 1;
                    }
                }
                continue;
            }
            if op.starts_with("bra") {
                let taken = active[0];
                assert!(active.iter().all(|&a| a == taken), "divergent branch");
                if taken {
                    let Opnd::Label(l) = &ins.args[0] else {
                        panic!()
                    };
                    pc = self.prog.labels[l];
                }
                continue;
            }
            if op == "bar.sync" {
                self.epoch += 1;
                continue;
            }
            if op.starts_with("ldmatrix") {
                self.ldmatrix(ins, &active);
                continue;
            }
            if op.starts_with("mma.sync") {
                self.mma(ins, &active);
                continue;
            }
            if op.starts_with("shfl.sync.bfly") {
                let src: Vec<u64> = (0..self.threads)
                    .map(|t| self.val(t, &ins.args[1]))
                    .collect();
                for t in 0..self.threads {
                    if active[t] {
                        let m = self.val(t, &ins.args[2]) as usize;
                        let v = src[(t & !31) | ((t & 31) ^ m)];
                        self.set(t, &ins.args[0], v);
                    }
                }
                continue;
            }
            for (t, &on) in active.iter().enumerate() {
                if on {
                    self.exec(t, ins, gmem);
                }
            }
        }
        self.assert_no_wgmma_pending();
    }

    fn exec(&mut self, t: usize, ins: &Ins, gmem: &mut Gmem) {
        let op = ins.op.as_str();
        let parts: Vec<&str> = op.split('.').collect();
        let ty = *parts.last().unwrap();
        let a = &ins.args;
        let v = |m: &Self, i: usize| m.val(t, &a[i]);
        // Packing and unpacking moves.
        if parts[0] == "mov" {
            match (&a[0], &a[1]) {
                (Opnd::Vec(d), _) => {
                    let x = v(self, 1);
                    let w = if ty == "b64" { 32 } else { 16 };
                    for (k, &r) in d.iter().enumerate() {
                        self.regs[t][r] = (x >> (w * k)) & ((1u64 << w) - 1);
                    }
                }
                (_, Opnd::Vec(s)) => {
                    let w = if ty == "b64" { 32 } else { 16 };
                    let x = s
                        .iter()
                        .enumerate()
                        .fold(0u64, |acc, (k, &r)| acc | (self.regs[t][r] << (w * k)));
                    self.set(t, &a[0], x);
                }
                _ => {
                    let x = v(self, 1);
                    let x = match ty {
                        "b16" => x & 0xffff,
                        "u32" | "b32" | "f32" | "s32" => x & 0xffff_ffff,
                        _ => x,
                    };
                    self.set(t, &a[0], x);
                }
            }
            return;
        }
        let width = |ty: &str| -> usize {
            match ty {
                "b16" | "u16" | "s16" => 2,
                "b64" | "u64" | "s64" | "f64" => 8,
                "u8" | "s8" => 1,
                _ => 4,
            }
        };
        let load = |m: &mut Self, g: &mut Gmem, shared: bool, addr: u64, n: usize| -> u64 {
            let bytes: Vec<u8> = if shared {
                m.smem_access(t, addr, n, None);
                m.smem[addr as usize..addr as usize + n].to_vec()
            } else {
                g.at(addr, n).to_vec()
            };
            bytes
                .iter()
                .enumerate()
                .fold(0u64, |acc, (k, &b)| acc | (b as u64) << (8 * k))
        };
        if parts[0] == "cp" {
            match parts[2] {
                "commit_group" => {
                    let g = std::mem::take(&mut self.open[t]);
                    self.committed[t].push(g);
                }
                "wait_group" | "wait_all" => {
                    let keep = if parts[2] == "wait_all" {
                        0
                    } else {
                        v(self, 0) as usize
                    };
                    let n = self.committed[t].len().saturating_sub(keep);
                    let done: Vec<Vec<Copy>> = self.committed[t].drain(..n).collect();
                    for c in done.into_iter().flatten() {
                        let len = c.data.len();
                        for b in c.addr as usize..c.addr as usize + len {
                            self.copies_in_flight[b] -= 1;
                        }
                        self.smem_access(t, c.addr, len, Some(&c.data));
                    }
                }
                _ => {
                    // cp.async.{ca,cg}.shared.global [dst], [src], size, src_size
                    let dst = self.addr(t, &a[0]);
                    let src = self.addr(t, &a[1]);
                    let (size, src_size) = (v(self, 2) as usize, v(self, 3) as usize);
                    assert!(size == 4 || size == 8 || size == 16);
                    assert_eq!(dst % size as u64, 0, "misaligned cp.async destination");
                    // The copy may land any time from now: no other thread may be reading
                    // these bytes since the last barrier.
                    for b in dst as usize..dst as usize + size {
                        assert!(
                            !by_another(self.reads[b], self.epoch, t),
                            "cp.async overwrites shared byte {b} another thread reads (pc {})",
                            self.pc
                        );
                        assert_eq!(
                            self.wgmma_reads[b], 0,
                            "cp.async (pc {}) into shared byte {b}, which a pending wgmma reads",
                            self.pc
                        );
                        self.copies_in_flight[b] += 1;
                    }
                    let mut data = vec![0u8; size];
                    if src_size > 0 {
                        assert_eq!(src % size as u64, 0, "misaligned cp.async source");
                        data[..src_size].copy_from_slice(gmem.at(src, src_size));
                    }
                    self.open[t].push(Copy { addr: dst, data });
                }
            }
            return;
        }
        match parts[0] {
            "ld" if parts[1] == "param" => {
                let Opnd::Addr(b, _) = &a[1] else { panic!() };
                let Opnd::Sym(name) = &**b else { panic!() };
                let x = self.params[name];
                self.set(t, &a[0], x);
            }
            "ld" => {
                let shared = parts[1] == "shared";
                let vecn = parts
                    .iter()
                    .find_map(|p| p.strip_prefix('v').and_then(|n| n.parse::<usize>().ok()))
                    .unwrap_or(1);
                let w = width(ty);
                let addr = self.addr(t, &a[1]);
                match &a[0] {
                    Opnd::Vec(regs) => {
                        for (k, &r) in regs.iter().enumerate() {
                            self.regs[t][r] = load(self, gmem, shared, addr + (k * w) as u64, w);
                        }
                    }
                    d => {
                        assert_eq!(vecn, 1);
                        let x = load(self, gmem, shared, addr, w);
                        self.set(t, d, x);
                    }
                }
            }
            "st" => {
                let shared = parts[1] == "shared";
                let w = width(ty);
                let addr = self.addr(t, &a[0]);
                let vals: Vec<u64> = match &a[1] {
                    Opnd::Vec(regs) => regs.iter().map(|&r| self.regs[t][r]).collect(),
                    s => vec![self.val(t, s)],
                };
                for (k, x) in vals.into_iter().enumerate() {
                    let at = addr + (k * w) as u64;
                    let bytes = x.to_le_bytes();
                    if shared {
                        self.smem_access(t, at, w, Some(&bytes[..w]));
                    } else {
                        gmem.at(at, w).copy_from_slice(&bytes[..w]);
                    }
                }
            }
            // `red.<sem>.gpu.global.add[.v2|.v4].f32 [addr], value(s)`: one f32 add per element.
            "red" => {
                assert!(parts.contains(&"add") && ty == "f32", "unsupported {op}");
                let addr = self.addr(t, &a[0]);
                let vals: Vec<u64> = match &a[1] {
                    Opnd::Vec(regs) => regs.iter().map(|&r| self.regs[t][r]).collect(),
                    s => vec![self.val(t, s)],
                };
                assert_eq!(addr % (4 * vals.len() as u64), 0, "misaligned {op}");
                for (k, x) in vals.into_iter().enumerate() {
                    let word = gmem.at(addr + 4 * k as u64, 4);
                    let old = f32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                    word.copy_from_slice(&(old + f32v(x)).to_le_bytes());
                }
            }
            "cvta" => {
                let x = v(self, 1);
                self.set(t, &a[0], x);
            }
            "cvt" => {
                let x = v(self, 1);
                let r = match op {
                    "cvt.rn.bf16.f32" => bf16::from_f32(f32v(x)).to_bits() as u64,
                    "cvt.rn.f16.f32" => f16::from_f32(f32v(x)).to_bits() as u64,
                    "cvt.f32.bf16" => bits(bf16::from_bits(x as u16).to_f32()),
                    "cvt.f32.f16" => bits(f16::from_bits(x as u16).to_f32()),
                    "cvt.rna.tf32.f32" => bits(tf32(f32v(x))),
                    "cvt.u32.u64" => x & 0xffff_ffff,
                    "cvt.s64.s32" => x as u32 as i32 as i64 as u64,
                    "cvt.rn.f32.s32" => bits(x as u32 as i32 as f32),
                    other => panic!("unsupported {other}"),
                };
                self.set(t, &a[0], r);
            }
            "setp" => {
                let (x, y) = (v(self, 1), v(self, 2));
                let cmp = parts[1];
                let r = match ty {
                    "s32" => {
                        let (x, y) = (x as u32 as i32, y as u32 as i32);
                        match cmp {
                            "lt" => x < y,
                            "le" => x <= y,
                            "gt" => x > y,
                            "ge" => x >= y,
                            "eq" => x == y,
                            "ne" => x != y,
                            c => panic!("{c}"),
                        }
                    }
                    "u32" => {
                        let (x, y) = (x as u32, y as u32);
                        match cmp {
                            "lt" => x < y,
                            "le" => x <= y,
                            "gt" => x > y,
                            "ge" => x >= y,
                            "eq" => x == y,
                            "ne" => x != y,
                            c => panic!("{c}"),
                        }
                    }
                    "f32" => {
                        let (x, y) = (f32v(x), f32v(y));
                        match cmp {
                            "lt" => x < y,
                            "le" => x <= y,
                            "gt" => x > y,
                            "ge" => x >= y,
                            "eq" => x == y,
                            "ne" => x != y && !x.is_nan() && !y.is_nan(),
                            "neu" => x != y || x.is_nan() || y.is_nan(),
                            "nan" => x.is_nan() || y.is_nan(),
                            c => panic!("{c}"),
                        }
                    }
                    c => panic!("setp {c}"),
                };
                self.set(t, &a[0], r as u64);
            }
            "selp" => {
                let r = if v(self, 3) != 0 {
                    v(self, 1)
                } else {
                    v(self, 2)
                };
                self.set(t, &a[0], r);
            }
            _ if ty == "pred" => {
                let r = match parts[0] {
                    "and" => v(self, 1) & v(self, 2),
                    "or" => v(self, 1) | v(self, 2),
                    "xor" => v(self, 1) ^ v(self, 2),
                    "not" => 1 - v(self, 1),
                    o => panic!("{o}.pred"),
                };
                self.set(t, &a[0], r);
            }
            _ if ty == "f32" => {
                let f = |i: usize| f32v(v(self, i));
                let r = match parts[0] {
                    "add" => f(1) + f(2),
                    "sub" => f(1) - f(2),
                    "mul" => f(1) * f(2),
                    "div" => f(1) / f(2),
                    "fma" => f(1).mul_add(f(2), f(3)),
                    "max" if op.contains("NaN") => {
                        if f(1).is_nan() || f(2).is_nan() {
                            f32::NAN
                        } else {
                            f(1).max(f(2))
                        }
                    }
                    "max" => f(1).max(f(2)),
                    "min" => f(1).min(f(2)),
                    "neg" => -f(1),
                    "abs" => f(1).abs(),
                    "ex2" => f(1).exp2(),
                    "lg2" => f(1).log2(),
                    o => panic!("{o}.f32"),
                };
                self.set(t, &a[0], bits(r));
            }
            _ => {
                // Integer ops on 32 or 64 bits.
                let wide = op.contains("wide");
                let is64 = matches!(ty, "s64" | "u64" | "b64") || wide;
                let mask = if is64 { u64::MAX } else { 0xffff_ffff };
                let sx = |x: u64| -> i64 {
                    if matches!(ty, "s64" | "u64" | "b64") {
                        x as i64
                    } else {
                        x as u32 as i32 as i64
                    }
                };
                let (x, y) = (v(self, 1), if a.len() > 2 { v(self, 2) } else { 0 });
                let r = match parts[0] {
                    "add" => sx(x).wrapping_add(sx(y)) as u64,
                    "sub" => sx(x).wrapping_sub(sx(y)) as u64,
                    "mul" => sx(x).wrapping_mul(sx(y)) as u64,
                    "mad" => sx(x).wrapping_mul(sx(y)).wrapping_add(sx(v(self, 3))) as u64,
                    "and" => x & y,
                    "or" => x | y,
                    "xor" => x ^ y,
                    "shl" => x << y,
                    "shr" if ty.starts_with('s') => (sx(x) >> y) as u64,
                    "shr" => (x & mask) >> y,
                    "min" => sx(x).min(sx(y)) as u64,
                    "max" => sx(x).max(sx(y)) as u64,
                    // Tile indices of persistent kernels (division by zero panics here).
                    "div" if ty.starts_with('u') => (x & mask) / (y & mask),
                    "div" => sx(x).wrapping_div(sx(y)) as u64,
                    "rem" if ty.starts_with('u') => (x & mask) % (y & mask),
                    "rem" => sx(x).wrapping_rem(sx(y)) as u64,
                    o => panic!("unsupported {o} ({op})"),
                };
                self.set(t, &a[0], r & mask);
            }
        }
    }

    /// The warpgroups (of 128 threads) with an active thread.
    fn active_warpgroups(&self, active: &[bool]) -> Vec<usize> {
        (0..self.warpgroups.len())
            .filter(|&g| active.iter().skip(128 * g).take(128).any(|&a| a))
            .collect()
    }

    /// Any instruction other than wgmma: the registers of a pending wgmma (its accumulator,
    /// its A fragment) may not be accessed before the wait (the PTX ISA: undefined), and the
    /// access is remembered so that a wgmma using them needs a `wgmma.fence` after it.
    fn wgmma_register_checks(&mut self, ins: &Ins, active: &[bool], step: u64) {
        if ins.op.starts_with("wgmma.") || ins.regs.is_empty() || self.warpgroups.is_empty() {
            return;
        }
        for g in self.active_warpgroups(active) {
            let wg = &mut self.warpgroups[g];
            for &r in &ins.regs {
                assert!(
                    wg.locked_d[r] == 0 && wg.locked_a[r] == 0,
                    "{} (pc {}: {}) accesses {}, a register of a wgmma not yet waited for",
                    if wg.locked_d[r] > 0 {
                        "accumulator"
                    } else {
                        "A fragment"
                    },
                    self.pc,
                    ins.op,
                    self.prog.reg_names[r]
                );
                wg.touched[r] = step;
            }
        }
    }

    fn assert_no_wgmma_pending(&self) {
        for (g, wg) in self.warpgroups.iter().enumerate() {
            assert!(
                wg.pending().next().is_none(),
                "warpgroup {g} exits with wgmmas not waited for"
            );
        }
    }

    /// `wgmma.fence`, `wgmma.commit_group`, `wgmma.wait_group N` and `wgmma.mma_async`: all
    /// `.sync.aligned`, so every thread of each warpgroup executes them together.
    fn wgmma(&mut self, ins: &Ins, active: &[bool], step: u64) {
        assert!(
            self.threads.is_multiple_of(128),
            "wgmma with {} threads: not whole warpgroups",
            self.threads
        );
        assert!(
            active.iter().all(|&a| a),
            "{} under a guard (pc {})",
            ins.op,
            self.pc
        );
        let op = ins.op.as_str();
        for g in 0..self.threads / 128 {
            match op {
                "wgmma.fence.sync.aligned" => self.warpgroups[g].fenced = step,
                "wgmma.commit_group.sync.aligned" => {
                    let wg = &mut self.warpgroups[g];
                    let group = std::mem::take(&mut wg.uncommitted);
                    wg.committed.push_back(group);
                }
                "wgmma.wait_group.sync.aligned" => {
                    let Opnd::Imm(keep) = ins.args[0] else {
                        panic!("{op}: no immediate")
                    };
                    while self.warpgroups[g].committed.len() > keep as usize {
                        let group = self.warpgroups[g].committed.pop_front().unwrap();
                        for mma in group {
                            self.retire_wgmma(g, mma);
                        }
                    }
                }
                _ if op.starts_with("wgmma.mma_async.sync.aligned.") => self.issue_wgmma(g, ins),
                _ => panic!("unsupported {op}"),
            }
        }
    }

    /// Checks an issued wgmma of warpgroup `g` and queues it: the descriptors agree across the
    /// warpgroup; its registers were fenced (`wgmma.fence`) after other instructions used
    /// them and are not those of another pending wgmma (except the same accumulator of a
    /// chain); the shared bytes it reads were written before a barrier, by threads that ran
    /// `fence.proxy.async` since, with no cp.async into them in flight.
    fn issue_wgmma(&mut self, g: usize, ins: &Ins) {
        let form = WgmmaForm::of(ins);
        let lanes = 128 * g..128 * (g + 1);
        let uniform = |m: &Self, i: usize, what: &str| -> u64 {
            let x = m.val(lanes.start, &ins.args[i]);
            for t in lanes.clone() {
                assert_eq!(
                    m.val(t, &ins.args[i]),
                    x,
                    "{what} differs across warpgroup {g} (thread {t}, pc {})",
                    m.pc
                );
            }
            x
        };
        let b_desc = uniform(self, 2, "B's descriptor");
        let a_desc = form
            .a_regs
            .is_none()
            .then(|| uniform(self, 1, "A's descriptor"));
        let accumulate = uniform(self, 3, "scale-d") != 0;
        let name = |m: &Self, r: usize| m.prog.reg_names[r].clone();
        let wg = &self.warpgroups[g];
        for &r in form.d {
            assert!(
                wg.fenced > wg.touched[r],
                "accumulator {} used by a wgmma (pc {}) without a wgmma.fence after its last access",
                name(self, r),
                self.pc
            );
            assert_eq!(
                wg.locked_a[r],
                0,
                "accumulator {} is a pending A",
                name(self, r)
            );
            if wg.locked_d[r] > 0 {
                // A chain into the same accumulator is ordered by the hardware: same registers.
                let same_chain = wg.pending().all(|p| {
                    let other = WgmmaForm::of(&self.prog.code[p.pc]);
                    !other.d.contains(&r) || other.d == form.d
                });
                assert!(
                    same_chain,
                    "accumulator {} shared with a pending wgmma of other registers",
                    name(self, r)
                );
            }
        }
        for &r in form.a_regs.unwrap_or(&[]) {
            assert!(
                wg.fenced > wg.touched[r],
                "A fragment {} used by a wgmma (pc {}) without a wgmma.fence after its last access",
                name(self, r),
                self.pc
            );
            assert_eq!(
                wg.locked_d[r],
                0,
                "A fragment {} is a pending accumulator",
                name(self, r)
            );
        }
        let n = form.n as u32;
        // A[m][k]: K-major unless imm-trans-a; B[k][n]: K-major unless imm-trans-b.
        let a_addrs: Vec<u32> = match a_desc {
            Some(desc) => (0..64 * 16)
                .map(|i| descriptor_address(desc, i / 16, i % 16, !form.trans_a))
                .collect(),
            None => Vec::new(),
        };
        let b_addrs: Vec<u32> = (0..16 * n)
            .map(|i| descriptor_address(b_desc, i % n, i / n, !form.trans_b))
            .collect();
        for &at in a_addrs.iter().chain(&b_addrs) {
            for b in at as usize..at as usize + 2 {
                assert!(
                    b < self.smem.len(),
                    "wgmma reads shared byte {b}: out of bounds"
                );
                assert_eq!(
                    self.copies_in_flight[b], 0,
                    "wgmma (pc {}) reads shared byte {b} while a cp.async into it is in flight",
                    self.pc
                );
                let w = self.writes[b].unwrap_or_else(|| {
                    panic!(
                        "wgmma (pc {}) reads shared byte {b}, never written",
                        self.pc
                    )
                });
                assert!(
                    w.epoch < self.epoch,
                    "wgmma (pc {}) reads shared byte {b} written by thread {} without a barrier",
                    self.pc,
                    w.thread
                );
                assert!(
                    self.proxy_fences[w.thread as usize] > self.write_fences[b],
                    "wgmma (pc {}) reads shared byte {b}: thread {} wrote it and ran no \
                     fence.proxy.async since",
                    self.pc,
                    w.thread
                );
                self.wgmma_reads[b] += 1;
            }
        }
        let wg = &mut self.warpgroups[g];
        for &r in form.d {
            wg.locked_d[r] += 1;
        }
        for &r in form.a_regs.unwrap_or(&[]) {
            wg.locked_a[r] += 1;
        }
        wg.uncommitted.push(PendingMma {
            pc: self.pc,
            accumulate,
            a_addrs,
            b_addrs,
        });
    }

    /// Runs a retired wgmma of warpgroup `g`: D[64 x N] (+)= A[64 x 16] B[16 x N], exact
    /// products summed in f64. Warp `w` of the group holds rows 16w..16w+15 of D in the
    /// `mma.sync` m16n8 accumulator order per 8 columns (register i of lane (q, p): row
    /// q + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2p + (i & 1)), and, A from registers, rows
    /// 16w.. of A in the `mma.sync` m16n8k16 A order.
    fn retire_wgmma(&mut self, g: usize, mma: PendingMma) {
        let ins = &self.prog.code[mma.pc];
        let form = WgmmaForm::of(ins);
        let n = form.n;
        let elem = |bits: u16| -> f64 {
            if form.bf16 {
                bf16::from_bits(bits).to_f64()
            } else {
                f16::from_bits(bits).to_f64()
            }
        };
        let smem_elem = |m: &Self, at: u32| {
            elem(u16::from_le_bytes([
                m.smem[at as usize],
                m.smem[at as usize + 1],
            ]))
        };
        let mut a = vec![[0f64; 16]; 64];
        match form.a_regs {
            None => {
                for (i, &at) in mma.a_addrs.iter().enumerate() {
                    a[i / 16][i % 16] = smem_elem(self, at);
                }
            }
            Some(regs) => {
                for l in 0..128 {
                    let (w, q, p) = (l / 32, (l % 32) / 4, l % 4);
                    for (j, &r) in regs.iter().enumerate() {
                        let x = self.regs[128 * g + l][r];
                        for h in 0..2 {
                            a[16 * w + q + 8 * (j & 1)][2 * p + h + 8 * (j >> 1)] =
                                elem((x >> (16 * h)) as u16);
                        }
                    }
                }
            }
        }
        let b: Vec<f64> = mma.b_addrs.iter().map(|&at| smem_elem(self, at)).collect();
        for l in 0..128 {
            let t = 128 * g + l;
            let (w, q, p) = (l / 32, (l % 32) / 4, l % 4);
            for (i, &r) in form.d.iter().enumerate() {
                let row = 16 * w + q + 8 * ((i >> 1) & 1);
                let col = 8 * (i >> 2) + 2 * p + (i & 1);
                let s: f64 = (0..16).map(|k| a[row][k] * b[k * n + col]).sum();
                let c = if mma.accumulate {
                    f32v(self.regs[t][r]) as f64
                } else {
                    0.0
                };
                self.regs[t][r] = bits((c + form.scale_a * form.scale_b * s) as f32);
            }
        }
        // The reads are done for this warpgroup; other threads' writes need a barrier first.
        let reader = wgmma_reader(g);
        for &at in mma.a_addrs.iter().chain(&mma.b_addrs) {
            for b in at as usize..at as usize + 2 {
                self.wgmma_reads[b] -= 1;
                let several =
                    self.reads[b].is_some_and(|a| a.epoch == self.epoch && a.thread != reader);
                self.reads[b] = Some(Access {
                    epoch: self.epoch,
                    thread: if several { u32::MAX } else { reader },
                });
            }
        }
        let wg = &mut self.warpgroups[g];
        for &r in form.d {
            wg.locked_d[r] -= 1;
        }
        for &r in form.a_regs.unwrap_or(&[]) {
            wg.locked_a[r] -= 1;
        }
    }

    /// `ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16`: lanes 8i..8i+7 give the row
    /// addresses of matrix i; without .trans register i of lane l holds row l/4, elements
    /// 2(l%4) and 2(l%4)+1 of matrix i; with .trans, elements (2(l%4), l/4) and (2(l%4)+1, l/4).
    fn ldmatrix(&mut self, ins: &Ins, active: &[bool]) {
        assert!(active.iter().all(|&a| a), "ldmatrix under a guard");
        let trans = ins.op.contains(".trans");
        let Opnd::Vec(dst) = &ins.args[0] else {
            panic!()
        };
        for w in 0..self.threads / 32 {
            let rows: Vec<u64> = (0..32)
                .map(|l| self.addr(32 * w + l, &ins.args[1]))
                .collect();
            for (i, &d) in dst.iter().enumerate() {
                for l in 0..32usize {
                    let t = 32 * w + l;
                    let half = |m: &mut Self, row: usize, col: usize| -> u64 {
                        let at = rows[8 * i + row] + 2 * col as u64;
                        assert_eq!(rows[8 * i + row] % 16, 0, "unaligned ldmatrix row");
                        m.smem_access(32 * w + 8 * i + row, at, 2, None);
                        u16::from_le_bytes([m.smem[at as usize], m.smem[at as usize + 1]]) as u64
                    };
                    let (q, p) = (l / 4, l % 4);
                    let (h0, h1) = if trans {
                        (half(self, 2 * p, q), half(self, 2 * p + 1, q))
                    } else {
                        (half(self, q, 2 * p), half(self, q, 2 * p + 1))
                    };
                    self.regs[t][d] = h0 | (h1 << 16);
                }
            }
        }
    }

    /// `mma.sync.aligned.m16n8k16` / `m16n8k8` with the PTX ISA's fragment layouts; exact
    /// products summed in f64.
    fn mma(&mut self, ins: &Ins, active: &[bool]) {
        assert!(active.iter().all(|&a| a), "mma under a guard");
        let op = &ins.op;
        let (k, tf32) = if op.contains("m16n8k8") {
            (8, true)
        } else {
            (16, false)
        };
        let bf = op.contains("bf16");
        let regs = |i: usize| match &ins.args[i] {
            Opnd::Vec(v) => v.clone(),
            _ => panic!(),
        };
        let (d, ar, br, cr) = (regs(0), regs(1), regs(2), regs(3));
        let elem = |x: u64, h: usize| -> f64 {
            if tf32 {
                let v = f32v(x);
                assert_eq!(v.to_bits() & 0x1fff, 0, "tf32 operand not rounded");
                v as f64
            } else {
                let b = (x >> (16 * h)) as u16;
                if bf {
                    bf16::from_bits(b).to_f64()
                } else {
                    f16::from_bits(b).to_f64()
                }
            }
        };
        for w in 0..self.threads / 32 {
            let mut a = [[0f64; 16]; 16];
            let mut b = [[0f64; 8]; 16];
            let mut c = [[0f64; 8]; 16];
            for l in 0..32usize {
                let t = 32 * w + l;
                let (g, q) = (l / 4, l % 4);
                for (j, &r) in ar.iter().enumerate() {
                    let x = self.regs[t][r];
                    if tf32 {
                        a[g + 8 * (j & 1)][q + 4 * (j >> 1)] = elem(x, 0);
                    } else {
                        for h in 0..2 {
                            a[g + 8 * (j & 1)][2 * q + h + 8 * (j >> 1)] = elem(x, h);
                        }
                    }
                }
                for (j, &r) in br.iter().enumerate() {
                    let x = self.regs[t][r];
                    if tf32 {
                        b[q + 4 * j][g] = elem(x, 0);
                    } else {
                        for h in 0..2 {
                            b[2 * q + h + 8 * j][g] = elem(x, h);
                        }
                    }
                }
                for (j, &r) in cr.iter().enumerate() {
                    c[g + 8 * (j >> 1)][2 * q + (j & 1)] = f32v(self.regs[t][r]) as f64;
                }
            }
            for l in 0..32usize {
                let t = 32 * w + l;
                let (g, q) = (l / 4, l % 4);
                for (j, &r) in d.iter().enumerate() {
                    let (row, col) = (g + 8 * (j >> 1), 2 * q + (j & 1));
                    let s: f64 = (0..k).map(|kk| a[row][kk] * b[kk][col]).sum();
                    self.regs[t][r] = bits((c[row][col] + s) as f32);
                }
            }
        }
    }
}

/// A kernel argument.
enum Arg<'a> {
    Buf(&'a [u8]),
    I32(i32),
    F32(f32),
}

/// `k` compiled for target `sm` with `warps` warps and `stages` stages, on `mma.sync`.
fn compiled(k: &Kernel, sm: u32, warps: u32, stages: u32) -> Compiled {
    compiled_with(k, sm, warps, stages, MmaChoice::Sync)
}

/// [`compiled`] with `wgmma` asked for.
fn compiled_wgmma(k: &Kernel, sm: u32, warps: u32, stages: u32) -> Compiled {
    compiled_with(k, sm, warps, stages, MmaChoice::Wgmma)
}

fn compiled_with(k: &Kernel, sm: u32, warps: u32, stages: u32, mma: MmaChoice) -> Compiled {
    let options = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma,
    };
    compile(k, &Target { sm }, &options).unwrap()
}

/// The PTX of [`compiled`].
fn ptx_of(k: &Kernel, sm: u32, warps: u32, stages: u32) -> String {
    compiled(k, sm, warps, stages).ptx
}

/// Runs `k` over `grid` and returns the final contents of each buffer argument.
fn run(k: &Kernel, warps: u32, grid: [u64; 3], args: &[Arg]) -> Vec<Vec<u8>> {
    run_staged(k, warps, 1, grid, args)
}

fn run_staged(k: &Kernel, warps: u32, stages: u32, grid: [u64; 3], args: &[Arg]) -> Vec<Vec<u8>> {
    run_on(80, k, warps, stages, grid, args)
}

/// [`run_staged`] for target `sm`.
fn run_on(
    sm: u32,
    k: &Kernel,
    warps: u32,
    stages: u32,
    grid: [u64; 3],
    args: &[Arg],
) -> Vec<Vec<u8>> {
    let c = compiled(k, sm, warps, stages);
    if let Ok(path) = std::env::var("TEGULA_SIM_DUMP") {
        std::fs::write(path, &c.ptx).unwrap();
    }
    run_ptx(
        &c.ptx,
        c.shared_bytes as usize,
        &param_names(k),
        warps,
        grid,
        args,
    )
}

/// The PTX names of `k`'s parameters, in order.
fn param_names(k: &Kernel) -> Vec<String> {
    k.params
        .iter()
        .enumerate()
        .map(|(i, p)| format!("p{i}_{}", p.name))
        .collect()
}

/// Runs `ptx` (parameters `names`, `shared_bytes` of dynamic shared memory) over `grid` and
/// returns the final contents of each buffer argument.
fn run_ptx(
    ptx: &str,
    shared_bytes: usize,
    names: &[String],
    warps: u32,
    grid: [u64; 3],
    args: &[Arg],
) -> Vec<Vec<u8>> {
    let prog = parse(ptx, shared_bytes);
    let mut gmem = Gmem { bufs: Vec::new() };
    let mut params = HashMap::new();
    for (i, a) in args.iter().enumerate() {
        let name = names[i].clone();
        let v = match a {
            Arg::Buf(b) => {
                gmem.bufs.push(b.to_vec());
                GBASE + GSPAN * (gmem.bufs.len() as u64 - 1)
            }
            Arg::I32(x) => *x as u32 as u64,
            Arg::F32(x) => x.to_bits() as u64,
        };
        params.insert(name, v);
    }
    let threads = 32 * warps as usize;
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let mut m = Machine {
                    prog: &prog,
                    threads,
                    regs: vec![vec![0; prog.nregs]; threads],
                    smem: vec![0xAB; prog.shared.max(16)],
                    writes: vec![None; prog.shared.max(16)],
                    reads: vec![None; prog.shared.max(16)],
                    epoch: 0,
                    pc: 0,
                    open: vec![Vec::new(); threads],
                    committed: vec![Vec::new(); threads],
                    params: params.clone(),
                    ctaid: [x, y, z],
                    nctaid: grid,
                    copies_in_flight: vec![0; prog.shared.max(16)],
                    proxy_fences: vec![0; threads],
                    write_fences: vec![0; prog.shared.max(16)],
                    wgmma_reads: vec![0; prog.shared.max(16)],
                    warpgroups: if prog.has_wgmma {
                        (0..threads.div_ceil(128))
                            .map(|_| WarpgroupState::new(prog.nregs))
                            .collect()
                    } else {
                        Vec::new()
                    },
                };
                m.run(&mut gmem);
            }
        }
    }
    gmem.bufs
}

/// Deterministic values in [-1, 1) with a few bits, so that products are exact everywhere.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) % 1024) as f32 / 512.0 - 1.0
        })
        .collect()
}

fn encode(dt: DType, v: &[f32]) -> Vec<u8> {
    match dt {
        DType::F16 => v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect(),
        _ => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
    }
}

fn decode(dt: DType, b: &[u8]) -> Vec<f32> {
    match dt {
        DType::F16 => b
            .chunks(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => b
            .chunks(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => b
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

/// The operand as the tensor cores see it (rounded to the dtype, and to tf32 for f32).
fn rounded(dt: DType, v: &[f32]) -> Vec<f64> {
    decode(dt, &encode(dt, v))
        .into_iter()
        .map(|x| {
            if dt == DType::F32 {
                tf32(x) as f64
            } else {
                x as f64
            }
        })
        .collect()
}

fn assert_close(got: &[f32], want: &[f64], scale: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, ((&g, &w), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(
            err <= tol * s.max(1e-3),
            "{what}: element {i}: got {g}, want {w} (scale {s})"
        );
    }
}

#[test]
fn single_dots_match_a_float64_reference() {
    let cases = [
        (DType::F16, (32, 32, 32), false, false, 4),
        (DType::BF16, (64, 32, 32), true, false, 4),
        (DType::F16, (32, 64, 16), false, true, 8),
        (DType::BF16, (16, 16, 16), true, true, 8),
        (DType::F32, (32, 16, 16), false, false, 4),
        (DType::F32, (16, 32, 32), true, true, 4),
        (DType::F16, (128, 16, 32), false, false, 2),
        // A 64 KB accumulator: stored through shared memory in two slabs.
        (DType::F16, (128, 128, 16), false, true, 4),
    ];
    for (dt, (m, n, k), ta, tb, warps) in cases {
        let kern = dot_tile(dt, (m, n, k), InputPrecision::Tf32, ta, tb);
        let av = values(m * k, 1 + m as u64);
        let bv = values(k * n, 7 + n as u64);
        let (ar, br) = (rounded(dt, &av), rounded(dt, &bv));
        // a is given as [k][m] when ta, b as [n][k] when tb.
        let a_at = |i: usize, kk: usize| if ta { ar[kk * m + i] } else { ar[i * k + kk] };
        let b_at = |kk: usize, j: usize| if tb { br[j * k + kk] } else { br[kk * n + j] };
        let mut want = vec![0f64; m * n];
        let mut scale = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for kk in 0..k {
                    want[i * n + j] += a_at(i, kk) * b_at(kk, j);
                    scale[i * n + j] += (a_at(i, kk) * b_at(kk, j)).abs();
                }
            }
        }
        let out = vec![0u8; m * n * 4];
        let bufs = run(
            &kern,
            warps,
            [1, 1, 1],
            &[
                Arg::Buf(&encode(dt, &av)),
                Arg::Buf(&encode(dt, &bv)),
                Arg::Buf(&out),
            ],
        );
        let got = decode(DType::F32, &bufs[2]);
        assert_close(
            &got,
            &want,
            &scale,
            1e-6,
            &format!("{dt} {m}x{n}x{k} ta={ta} tb={tb}"),
        );
    }
}

#[test]
fn matmul_loop_with_ragged_edges_matches() {
    for (dt, warps) in [(DType::F16, 4), (DType::BF16, 8), (DType::F32, 4)] {
        check_pipelined_matmul(dt, warps, 1, (32, 32, 16), (48, 40, 56));
    }
}

#[test]
fn flash_attention_matches_the_online_softmax_reference() {
    // (dtype, block_m, block_n, d, warps): 4 warps on 64 rows keep P in registers; 4 warps on
    // 16 rows (the library's default blocks) put 2 warps along N, replicate the other 2, and
    // stage P through shared memory.
    for (dt, bm, bn, d, warps) in [
        (DType::BF16, 64, 32, 32, 4),
        (DType::F16, 32, 64, 16, 2),
        (DType::BF16, 16, 16, 64, 1),
        (DType::F16, 16, 16, 32, 4),
        (DType::BF16, 16, 32, 64, 8),
        // The H200 configuration: 8 warps along M; the 64 KB accumulator leaves through
        // predicated slabs.
        (DType::BF16, 128, 64, 128, 8),
    ] {
        check_attention(dt, bm, bn, d, warps, 1);
    }
}

#[test]
fn attention_with_q_resident_in_shared_memory_matches() {
    // 128 x 128 bf16 Q over 4 warps is 64 registers a thread: above the hoisting limit, it is
    // written to shared memory before the loop and read with ldmatrix at each step.
    for stages in [1, 2, 3] {
        check_attention(DType::BF16, 128, 64, 128, 4, stages);
    }
    // In the loop, each warp reads its 32 rows of Q (2 x 8 ldmatrix.x4 over D = 128) beside
    // K (64 keys: 4 x 8); with 8 warps (16 rows, 32 registers) Q stays in registers.
    let loop_loads = |warps: u32| {
        let kern = flash_attention(DType::BF16, 128, 64, 128);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: 2,
            mma: MmaChoice::Sync,
        };
        let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
        // Lines from the first loop's label to its end label.
        let body = ptx
            .lines()
            .skip_while(|l| !l.starts_with("$L_for_"))
            .take_while(|l| !l.starts_with("$L_endfor_"));
        body.filter(|l| l.contains("ldmatrix.sync.aligned.m8n8.x4.shared"))
            .count()
    };
    assert_eq!(loop_loads(8), 32);
    assert_eq!(loop_loads(4), 32 + 16);
    // Two loops over the keys read the same resident Q (written once, before the first).
    for (dt, bm, bn, d, warps, stages) in [
        (DType::BF16, 128, 64, 128, 4, 3),
        (DType::F16, 64, 32, 128, 2, 2),
        // Q in registers (16 a thread): the same kernel through the hoisting path.
        (DType::BF16, 64, 32, 32, 4, 2),
    ] {
        check_attention_kernel(
            &flash_attention_two_loops(dt, bm, bn, d),
            Some(bn as i32),
            80,
            (dt, bm, bn, d, warps, stages),
        );
    }
}

#[test]
fn resident_q_is_written_after_the_first_key_copies_are_issued() {
    // Q's global load and the first K/V stage are in flight together: the copies come before
    // Q's shared-memory write (which waits for its load), with one barrier between them and
    // the loop's first read (the simulator checks above run the same order for races).
    let kern = flash_attention(DType::BF16, 128, 64, 128);
    let options = CompileOptions {
        num_warps: 4,
        num_stages: 2,
        mma: MmaChoice::Sync,
    };
    let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
    let before_loop: Vec<&str> = ptx
        .lines()
        .take_while(|l| !l.starts_with("$L_for_"))
        .collect();
    let first = |what: &str| before_loop.iter().position(|l| l.contains(what));
    let copy = first("cp.async.cg.shared.global").expect("the first stage's copies");
    let write = first("st.shared").expect("Q's write to shared memory");
    assert!(copy < write, "copy at line {copy}, Q's write at {write}");
    let barriers_after_write = before_loop[write..]
        .iter()
        .filter(|l| l.contains("bar.sync"))
        .count();
    assert_eq!(barriers_after_write, 1);
}

/// Runs the FlashAttention kernel over 3 key blocks and compares with the same online
/// softmax in f64 (P rounded to the input dtype before the PV product).
fn check_attention(dt: DType, bm: usize, bn: usize, d: usize, warps: u32, stages: u32) {
    let kern = flash_attention(dt, bm, bn, d);
    check_attention_kernel(&kern, None, 80, (dt, bm, bn, d, warps, stages));
}

/// [`check_attention`] for `kern` compiled for target `sm`, which takes the key split point
/// after the scale when `split` is given.
fn check_attention_kernel(
    kern: &Kernel,
    split: Option<i32>,
    sm: u32,
    (dt, bm, bn, d, warps, stages): (DType, usize, usize, usize, u32, u32),
) {
    let nk = 3 * bn;
    let (qv, kv, vv) = (values(bm * d, 11), values(nk * d, 13), values(nk * d, 17));
    let scale = 0.7f32;
    let (want, _) = attention_reference(dt, [&qv, &kv, &vv], (bm, bn, d), scale);
    let out = vec![0u8; bm * d * 2];
    let (qb, kb, vb) = (encode(dt, &qv), encode(dt, &kv), encode(dt, &vv));
    let mut args = vec![
        Arg::Buf(&qb),
        Arg::Buf(&kb),
        Arg::Buf(&vb),
        Arg::Buf(&out),
        Arg::I32(nk as i32),
        Arg::F32(scale),
    ];
    args.extend(split.map(Arg::I32));
    let bufs = run_on(sm, kern, warps, stages, [1, 1, 1], &args);
    let got = decode(dt, &bufs[3]);
    // The output is rounded to the input dtype; P to 8 (bf16) or 11 (f16) bits.
    let ones = vec![1f64; bm * d];
    assert_close(
        &got,
        &want,
        &ones,
        2e-2,
        &format!("attention {dt} {bm}x{bn}x{d}, {stages} stages"),
    );
}

/// The online softmax of [`check_attention`] in f64 over the 3 key blocks of `[q, k, v]`
/// (`bm`, `3 * bn` and `3 * bn` rows of `d`): each output element, and each row's base-2
/// log-sum-exp of its scaled scores (`m + log2(l)`).
fn attention_reference(
    dt: DType,
    [qv, kv, vv]: [&[f32]; 3],
    (bm, bn, d): (usize, usize, usize),
    scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let (qr, kr, vr) = (rounded(dt, qv), rounded(dt, kv), rounded(dt, vv));
    let round = |x: f64| rounded(dt, &[x as f32])[0];
    let mut want = vec![0f64; bm * d];
    let mut lse = vec![0f64; bm];
    for i in 0..bm {
        let (mut m_i, mut l_i) = (f64::NEG_INFINITY, 0f64);
        let mut acc = vec![0f64; d];
        for blk in 0..3 {
            let s: Vec<f64> = (0..bn)
                .map(|j| {
                    let r = blk * bn + j;
                    let dotp: f64 = (0..d).map(|c| qr[i * d + c] * kr[r * d + c]).sum();
                    (dotp as f32 * scale) as f64
                })
                .collect();
            let m_ij = s.iter().fold(m_i, |a, &b| a.max(b));
            let p: Vec<f64> = s.iter().map(|&x| (x - m_ij).exp2()).collect();
            let alpha = (m_i - m_ij).exp2();
            l_i = l_i * alpha + p.iter().sum::<f64>();
            for (c, a) in acc.iter_mut().enumerate() {
                *a = *a * alpha
                    + (0..bn)
                        .map(|j| round(p[j]) * vr[(blk * bn + j) * d + c])
                        .sum::<f64>();
            }
            m_i = m_ij;
        }
        for c in 0..d {
            want[i * d + c] = acc[c] / l_i;
        }
        lse[i] = m_i + l_i.log2();
    }
    (want, lse)
}

/// The library forward's epilogue (`acc * (1 / l)`, cast; `m + log2(l)`): the scaling runs in
/// the mma layout, with `1 / l` once for each row a thread holds there, and the output crosses
/// to the store's layout in bf16 through padded rows, once; the row statistic is computed
/// where the reduction left it and crosses once. The simulator checks both results and the
/// shared-memory races.
#[test]
fn attention_output_is_scaled_and_cast_before_its_crossing() {
    // (dtype, block_m, block_n, d, warps, stages, the output's crossing, rows a thread holds)
    for (dt, bm, bn, d, warps, stages, plan, rows) in [
        (
            DType::BF16,
            128,
            64,
            128,
            4,
            2,
            "bf16[128, 128] through shared memory: rows of 272 bytes, 128 rows a round",
            4,
        ),
        (
            DType::F16,
            64,
            32,
            64,
            4,
            1,
            "f16[64, 64] through shared memory: rows of 144 bytes, 64 rows a round",
            2,
        ),
    ] {
        let kern = flash_attention_with_lse(dt, bm, bn, d);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: MmaChoice::Sync,
        };
        let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
        let epilogue: Vec<&str> = ptx
            .lines()
            .skip_while(|l| !l.starts_with("$L_endfor_"))
            .collect();
        let what = format!("{dt} {bm}x{bn}x{d} {warps} warps");
        assert!(
            epilogue.iter().any(|l| l.contains(plan)),
            "{what}: no {plan:?}"
        );
        let conversions = epilogue
            .iter()
            .filter(|l| l.contains("// convert "))
            .count();
        assert_eq!(
            conversions, 1,
            "{what}: only the row statistic's general conversion"
        );
        let divisions = epilogue.iter().filter(|l| l.contains("div.rn.f32")).count();
        assert_eq!(divisions, rows, "{what}: one division a row a thread holds");

        let nk = 3 * bn;
        let (qv, kv, vv) = (values(bm * d, 5), values(nk * d, 7), values(nk * d, 9));
        let scale = 0.45f32;
        let (want, want_lse) = attention_reference(dt, [&qv, &kv, &vv], (bm, bn, d), scale);
        let (out, lse) = (vec![0u8; bm * d * 2], vec![0u8; bm * 4]);
        let (qb, kb, vb) = (encode(dt, &qv), encode(dt, &kv), encode(dt, &vv));
        let args = [
            Arg::Buf(&qb),
            Arg::Buf(&kb),
            Arg::Buf(&vb),
            Arg::Buf(&out),
            Arg::Buf(&lse),
            Arg::I32(nk as i32),
            Arg::F32(scale),
        ];
        let bufs = run_staged(&kern, warps, stages, [1, 1, 1], &args);
        let ones = vec![1f64; bm * d];
        assert_close(&decode(dt, &bufs[3]), &want, &ones, 2e-2, &what);
        let got_lse = decode(DType::F32, &bufs[4]);
        assert_close(
            &got_lse,
            &want_lse,
            &vec![1f64; bm],
            1e-4,
            &format!("{what} lse"),
        );
    }
}

/// `C = A B` in float64 from `a` [m, k] and `b` [k, n] rounded to `dt`, and each element's sum
/// of |products| (the scale its rounding error grows with).
fn matmul_reference(
    dt: DType,
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let (ar, br) = (rounded(dt, a), rounded(dt, b));
    let mut want = vec![0f64; m * n];
    let mut scale = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for kk in 0..k {
                want[i * n + j] += ar[i * k + kk] * br[kk * n + j];
                scale[i * n + j] += (ar[i * k + kk] * br[kk * n + j]).abs();
            }
        }
    }
    (want, scale)
}

/// Runs a matmul kernel of parameters `a, b, c, m, n, k` (A and B encoded as `dt`, C of
/// `out` elements) and returns C's bytes.
#[allow(clippy::too_many_arguments)]
fn run_matmul(
    kern: &Kernel,
    (warps, stages): (u32, u32),
    grid: [u64; 3],
    dt: DType,
    out: DType,
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
) -> Vec<u8> {
    let c = vec![0u8; m * n * out.size_bytes()];
    let mut bufs = run_staged(
        kern,
        warps,
        stages,
        grid,
        &[
            Arg::Buf(&encode(dt, a)),
            Arg::Buf(&encode(dt, b)),
            Arg::Buf(&c),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ],
    );
    bufs.swap_remove(2)
}

/// Runs the matmul loop of `blocks` at `stages` (1: no pipeline) on `m x k` times `k x n`
/// inputs and compares with a float64 reference.
fn check_pipelined_matmul(
    dt: DType,
    warps: u32,
    stages: u32,
    (bm, bn, bk): (usize, usize, usize),
    (m, n, k): (usize, usize, usize),
) {
    let kern = matmul_loop(dt, bm, bn, bk);
    let av = values(m * k, 23);
    let bv = values(k * n, 29);
    let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
    let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
    let c = run_matmul(
        &kern,
        (warps, stages),
        grid,
        dt,
        DType::F32,
        &av,
        &bv,
        (m, n, k),
    );
    let got = decode(DType::F32, &c);
    assert_close(
        &got,
        &want,
        &scale,
        1e-6,
        &format!("matmul {dt} {bm}x{bn}x{bk} {warps} warps {stages} stages"),
    );
}

#[test]
fn pipelined_matmul_and_attention_match() {
    for stages in [2, 3, 4] {
        for (dt, warps) in [(DType::F16, 4), (DType::BF16, 2)] {
            check_pipelined_matmul(dt, warps, stages, (32, 32, 16), (40, 48, 72));
        }
        check_attention(DType::BF16, 64, 32, 32, 4, stages);
        check_attention(DType::F16, 32, 64, 16, 2, stages);
        check_attention(DType::F16, 16, 16, 32, 4, stages);
    }
    // Head dim 128: K and V slots do not both fit; K is pipelined, V staged in the loop.
    check_attention(DType::BF16, 128, 64, 128, 8, 2);
}

/// A matmul whose store casts the accumulator to f16 / bf16: the cast runs in the mma layout
/// and the narrow tile crosses to the store's layout through padded rows of shared memory, in
/// one round or (128 x 256 f16: 67.5 KB of rows against 48 KB of scratch) two; ragged edges
/// exercise the store's masks.
#[test]
fn narrow_outputs_cross_shared_memory_after_the_cast() {
    let cases = [
        // (input, output, warps, stages, tile, problem, rows of the exchange)
        (
            DType::BF16,
            DType::BF16,
            4,
            3,
            (64, 64, 16),
            (72, 80, 40),
            "rows of 144 bytes, 64 rows a round",
        ),
        (
            DType::F16,
            DType::F16,
            8,
            2,
            (128, 256, 16),
            (136, 264, 32),
            "rows of 528 bytes, 64 rows a round",
        ),
        (
            DType::BF16,
            DType::F16,
            2,
            1,
            (32, 64, 32),
            (40, 56, 64),
            "rows of 144 bytes, 32 rows a round",
        ),
    ];
    for (dt, out_dt, warps, stages, (bm, bn, bk), (m, n, k), plan) in cases {
        let kern = matmul_loop_into(dt, out_dt, bm, bn, bk);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: MmaChoice::Sync,
        };
        let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
        assert!(
            ptx.contains(plan),
            "{dt}->{out_dt} {bm}x{bn}: no {plan:?} in the PTX"
        );
        let av = values(m * k, 41 + m as u64);
        let bv = values(k * n, 43 + n as u64);
        let (want, _) = matmul_reference(dt, &av, &bv, (m, n, k));
        let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
        let c = run_matmul(
            &kern,
            (warps, stages),
            grid,
            dt,
            out_dt,
            &av,
            &bv,
            (m, n, k),
        );
        let got = decode(out_dt, &c);
        // One rounding to the output: half an ulp, relative (bf16 8 bits, f16 11).
        let half_ulp = if out_dt == DType::BF16 {
            0.5f64.powi(8)
        } else {
            0.5f64.powi(11)
        };
        let magnitude: Vec<f64> = want.iter().map(|w| w.abs()).collect();
        assert_close(
            &got,
            &want,
            &magnitude,
            half_ulp,
            &format!("{dt}->{out_dt} {bm}x{bn}x{bk}"),
        );
    }
}

/// A persistent matmul (a tile loop around the pipelined k-loop) on fewer programs than
/// tiles, with a narrow output whose store crosses shared memory. With 2 or more stages the
/// nest is pipelined across the tile loop: the next tile's first stages are copied into the
/// slots while this tile's store exchanges rows in the scratch after them, so the simulator's
/// race, bounds and cp.async-wait checks see whether the exchange stays clear of the slots and
/// the barriers separate the last k-step's reads from the next tile's copies. Ragged M, N, K;
/// K shorter than the prologue (fewer k-steps than S - 1); programs that get one tile less.
#[test]
fn persistent_matmul_reuses_the_slots_tile_after_tile() {
    for (dt, out_dt, warps, stages, (bm, bn, bk), (m, n, k), programs) in [
        (
            DType::BF16,
            DType::BF16,
            4,
            3,
            (32, 32, 16),
            (72, 88, 56),
            2,
        ),
        (DType::F16, DType::F32, 2, 2, (32, 64, 32), (40, 200, 72), 3),
        (
            DType::BF16,
            DType::BF16,
            4,
            4,
            (32, 32, 16),
            (72, 88, 24),
            4,
        ),
        (
            DType::F16,
            DType::F16,
            8,
            4,
            (64, 64, 32),
            (136, 200, 104),
            5,
        ),
        (DType::BF16, DType::F32, 4, 1, (32, 32, 16), (72, 72, 40), 4),
    ] {
        let kern = persistent_matmul_into(dt, out_dt, bm, bn, bk);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: MmaChoice::Sync,
        };
        let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
        assert_eq!(
            ptx.contains("loop nest pipelined across the outer loop"),
            stages >= 2,
            "{stages} stages: the nest pipelined across the tile loop when the k-loop is"
        );
        let av = values(m * k, 53 + m as u64);
        let bv = values(k * n, 59 + n as u64);
        let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
        let tiles = m.div_ceil(bm) * n.div_ceil(bn);
        assert!(
            tiles > 2 * programs && tiles % programs != 0,
            "{tiles} tiles: each program takes several, some one more"
        );
        let grid = [programs as u64, 1, 1];
        let c = run_matmul(
            &kern,
            (warps, stages),
            grid,
            dt,
            out_dt,
            &av,
            &bv,
            (m, n, k),
        );
        let got = decode(out_dt, &c);
        let tol = match out_dt {
            DType::BF16 => 0.5f64.powi(8),
            DType::F16 => 0.5f64.powi(11),
            _ => 1e-6,
        };
        assert_close(
            &got,
            &want,
            &scale,
            tol,
            &format!("persistent {dt}->{out_dt} {bm}x{bn}x{bk} {warps} warps {stages} stages"),
        );
    }
}

/// One pipelined load read by four dot operands (every role and orientation, see
/// [`shared_operand_loop`]): the slot written once per iteration must serve all of them, with
/// the last block's rows past `n` zero-filled. Stage 1 (no pipeline: the tile goes through
/// registers and is staged per dot) is checked the same way.
#[test]
fn one_pipelined_load_feeds_four_dot_operands() {
    for (dt, (bm, bn, d, e), n, warps) in [
        (DType::BF16, (32, 32, 32, 16), 72, 4),
        (DType::F16, (16, 64, 64, 32), 40, 8),
    ] {
        let kern = shared_operand_loop(dt, bm, bn, d, e);
        let (xv, kv, wv) = (
            values(n * d, 31 + n as u64),
            values(bn * d, 37),
            values(d * e, 41),
        );
        let (xr, kr, wr) = (rounded(dt, &xv), rounded(dt, &kv), rounded(dt, &wv));
        // Rows past n read as zero (only whole blocks of bm rows are covered).
        let blocks = n.div_ceil(bm);
        let x_at = |r: usize, c: usize| if r < n { xr[r * d + c] } else { 0.0 };
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let (mut a, mut a_scale) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        let (mut g, mut g_scale) = (vec![0f64; d * d], vec![0f64; d * d]);
        let (mut c, mut c_scale) = (vec![0f64; bm * e], vec![0f64; bm * e]);
        for t in 0..blocks {
            let rows: Vec<usize> = (t * bm..(t + 1) * bm).collect();
            for j in 0..bn {
                // s[j][i] = K[j] . X[row i], rounded to dt as the kernel's cast does.
                let s: Vec<f64> = rows
                    .iter()
                    .map(|&r| round((0..d).map(|cc| kr[j * d + cc] * x_at(r, cc)).sum()))
                    .collect();
                for col in 0..d {
                    for (i, &r) in rows.iter().enumerate() {
                        a[j * d + col] += s[i] * x_at(r, col);
                        a_scale[j * d + col] += (s[i] * x_at(r, col)).abs();
                    }
                }
            }
            for p in 0..d {
                for q in 0..d {
                    for &r in &rows {
                        g[p * d + q] += x_at(r, p) * x_at(r, q);
                        g_scale[p * d + q] += (x_at(r, p) * x_at(r, q)).abs();
                    }
                }
            }
            for (i, &r) in rows.iter().enumerate() {
                for col in 0..e {
                    for p in 0..d {
                        c[i * e + col] += x_at(r, p) * wr[p * e + col];
                        c_scale[i * e + col] += (x_at(r, p) * wr[p * e + col]).abs();
                    }
                }
            }
        }
        let (xb, kb, wb) = (encode(dt, &xv), encode(dt, &kv), encode(dt, &wv));
        let (ao, go, co) = (
            vec![0u8; bn * d * 4],
            vec![0u8; d * d * 4],
            vec![0u8; bm * e * 4],
        );
        for stages in [1, 2, 3] {
            let bufs = run_staged(
                &kern,
                warps,
                stages,
                [1, 1, 1],
                &[
                    Arg::Buf(&xb),
                    Arg::Buf(&kb),
                    Arg::Buf(&wb),
                    Arg::Buf(&ao),
                    Arg::Buf(&go),
                    Arg::Buf(&co),
                    Arg::I32(n as i32),
                ],
            );
            let what = |name: &str| format!("{name}: {dt} {bm}x{bn}x{d}x{e}, {stages} stages");
            let tol = 1e-5;
            assert_close(&decode(DType::F32, &bufs[3]), &a, &a_scale, tol, &what("a"));
            assert_close(&decode(DType::F32, &bufs[4]), &g, &g_scale, tol, &what("g"));
            assert_close(&decode(DType::F32, &bufs[5]), &c, &c_scale, tol, &what("c"));
        }
    }
}

/// The backward's nest ([`resident_operand_nest`]): K and V, read by dots of a loop nested in
/// another, stay in shared memory when their fragments would take more than 32 registers a
/// thread together (K as A 16, V as A 16 and K as B 16 at 64 x 64 over 4 warps): one copy of
/// each, written once before the outer loop, K's read both with plain and with `.trans`
/// `ldmatrix`. At 32 x 32 they stay in registers. Both must match float64 for 1 to 3 stages.
/// The accumulator `a`, carried by both loops, keeps the inner dot's mma layout across the
/// outer loop too: it crosses no layout through shared memory at either end of the inner loop.
#[test]
fn operands_of_a_nested_loop_stay_resident() {
    for (dt, (bm, bn, d), warps, resident) in [
        (DType::BF16, (16, 64, 64), 4, true),
        (DType::F16, (32, 64, 64), 8, true),
        (DType::BF16, (16, 32, 32), 4, false),
    ] {
        let (n, groups) = (40, 2);
        let kern = resident_operand_nest(dt, bm, bn, d);
        let (xv, kv, vv) = (
            values(groups * n * d, 43 + bm as u64),
            values(bn * d, 47),
            values(bn * d, 53),
        );
        let (xr, kr, vr) = (rounded(dt, &xv), rounded(dt, &kv), rounded(dt, &vv));
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let (mut a, mut a_scale) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        let (mut y, mut y_scale) = (vec![0f64; groups * n * d], vec![0f64; groups * n * d]);
        for r in 0..groups * n {
            let x_row = &xr[r * d..(r + 1) * d];
            // p[j] = (K[j] . x + V[j] . x) rounded to dt; rows past n are zero and add nothing.
            let p: Vec<f64> = (0..bn)
                .map(|j| {
                    let kx: f64 = (0..d).map(|c| kr[j * d + c] * x_row[c]).sum();
                    let vx: f64 = (0..d).map(|c| vr[j * d + c] * x_row[c]).sum();
                    round(kx + vx)
                })
                .collect();
            for j in 0..bn {
                for c in 0..d {
                    a[j * d + c] += p[j] * x_row[c];
                    a_scale[j * d + c] += (p[j] * x_row[c]).abs();
                    y[r * d + c] += p[j] * kr[j * d + c];
                    y_scale[r * d + c] += (p[j] * kr[j * d + c]).abs();
                }
            }
        }
        let (xb, kb, vb) = (encode(dt, &xv), encode(dt, &kv), encode(dt, &vv));
        let (ao, yo) = (vec![0u8; bn * d * 4], vec![0u8; groups * n * d * 4]);
        for stages in [1, 2, 3] {
            let what = |name: &str| format!("{name}: {dt} {bm}x{bn}x{d} {warps}w {stages}s");
            let options = CompileOptions {
                num_warps: warps,
                num_stages: stages,
                mma: MmaChoice::Sync,
            };
            let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
            let carried = format!("convert f32[{bn}, {d}]");
            assert!(!ptx.contains(&carried), "{}", what("accumulator layout"));
            let comment = "loop-invariant dot operand: resident in shared memory";
            let written = ptx.find(comment);
            assert_eq!(written.is_some(), resident, "{}", what("resident"));
            if let Some(at) = written {
                // Written once, before the outer loop: K and V, one copy each (16-byte stores of
                // `bn x d` 2-byte elements over the block's threads; K's B reads share A's copy).
                assert_eq!(ptx.matches(comment).count(), 1, "{}", what("one write"));
                let outer_loop = ptx.find("$L_for_").unwrap();
                assert!(at < outer_loop, "{}", what("before"));
                let stores = ptx[at..outer_loop].matches("st.shared.v4.b32").count();
                let per_copy = bn * d * 2 / (16 * 32 * warps as usize);
                assert_eq!(stores, 2 * per_copy, "{}", what("copies"));
            }
            let bufs = run_staged(
                &kern,
                warps,
                stages,
                [1, 1, 1],
                &[
                    Arg::Buf(&xb),
                    Arg::Buf(&kb),
                    Arg::Buf(&vb),
                    Arg::Buf(&ao),
                    Arg::Buf(&yo),
                    Arg::I32(n as i32),
                    Arg::I32(groups as i32),
                ],
            );
            let tol = 1e-5;
            assert_close(&decode(DType::F32, &bufs[3]), &a, &a_scale, tol, &what("a"));
            assert_close(&decode(DType::F32, &bufs[4]), &y, &y_scale, tol, &what("y"));
        }
    }
}

/// With two or more k-steps a tile, the matmul loop loads the next tile's first fragments
/// before the last k-step's mmas (`BoundaryFragments` in pipeline.rs): the wait and barrier
/// leave the top of the loop. The simulator checks that no `cp.async` overwrites bytes another
/// thread reads since the last barrier, and that no read precedes its copy's wait; K is ragged
/// (the last tile is part zeros) and the tile counts cover 1 to 4 iterations.
#[test]
fn matmul_with_fragments_across_the_tile_boundary_matches() {
    for (bk, k) in [(32, 72), (64, 200), (32, 24)] {
        for stages in [2, 3, 4] {
            check_pipelined_matmul(DType::BF16, 4, stages, (32, 32, bk), (40, 48, k));
        }
    }
    check_pipelined_matmul(DType::F16, 8, 3, (64, 32, 64), (72, 40, 136));
    let ptx = ptx_of(&matmul_loop(DType::BF16, 32, 32, 64), 80, 4, 3);
    let top = ptx.find("$L_for").expect("a loop");
    let (before, body) = ptx.split_at(top);
    // (the loop label, not the exit branch right after it)
    let body = &body[..body.find("\n$L_endfor").expect("the loop's end")];
    // One wait and barrier before the loop (after the first slots' copies), one in the body,
    // with the next tile's ldmatrix after it and mmas after those.
    assert_eq!(before.matches("cp.async.wait_group 1;").count(), 1);
    assert_eq!(body.matches("cp.async.wait_group 1;").count(), 1);
    let wait = body.find("cp.async.wait_group").unwrap();
    assert!(body[..wait].contains("mma.sync"), "mmas before the wait");
    let after = &body[wait..];
    let ld = after.find("ldmatrix").expect("fragments after the barrier");
    assert!(after[..ld].contains("bar.sync"));
    assert!(
        after[ld..].contains("mma.sync"),
        "the last k-step's mmas follow"
    );
    // Attention (two dots in the loop) keeps the wait at the top of the loop.
    let fa = ptx_of(&flash_attention(DType::BF16, 64, 32, 32), 80, 4, 3);
    let body = &fa[fa.find("$L_for").unwrap()..];
    let first_wait = body.find("cp.async.wait_group").unwrap();
    assert!(!body[..first_wait].contains("mma.sync"));
}

/// Loop invariants are computed in the kernel prologue only when first asked for inside a loop
/// or branch; asked for in straight-line code, they are computed where they are asked for.
/// This kernel mixes the two: `offs` and `mask` are first used before the loop (straight-line
/// code), then by invariants inside the loop and the branch (which the prologue must compute
/// again: the prologue precedes the body), and `offs + n` is first used in the loop and then
/// again after the branch. Blocks past the first and a nonzero `n` make any register read
/// before it is written show in the results.
#[test]
fn invariants_first_used_before_loops_and_branches_match() {
    let block = 64usize;
    let kern = trace("invariants_around_loops", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let iters = p.scalar("iters", DType::I32);
        let offs = program_id(0) * block + arange(0, block as i64);
        let mask = offs.lt(n);
        let first = load(x + offs, mask, 0.0);
        let acc = for_range(0, iters, 1, first, |_, acc| {
            acc + load(x + (offs + n), mask, 0.0)
        });
        if_then(iters.gt(2), || store(out + (offs + n), acc, mask));
        store(out + offs, acc, mask);
        store(out + ((offs + n) + n), acc + acc, mask);
    })
    .unwrap();
    let ptx = ptx_of(&kern, 80, 2, 1);
    // The two straight-line stores after the loop compute their addresses there (the old
    // lowering put every invariant in the prologue); the ones the loop and branch use stay
    // before the loop.
    let (top, end) = (
        ptx.find("$L_for").expect("a loop"),
        ptx.find("$L_endfor").expect("a loop"),
    );
    let offsets = |s: &str| s.matches("mul.wide.s32").count();
    assert_eq!(offsets(&ptx[end..]), 2, "{ptx}");
    assert_eq!(offsets(&ptx[..top]), 3, "{ptx}");
    let n = 150usize;
    let xs = values(2 * n, 31);
    let init = values(3 * n, 37);
    for iters in [3, 1] {
        let bufs = run(
            &kern,
            2,
            [n.div_ceil(block) as u64, 1, 1],
            &[
                Arg::Buf(&encode(DType::F32, &xs)),
                Arg::Buf(&encode(DType::F32, &init)),
                Arg::I32(n as i32),
                Arg::I32(iters),
            ],
        );
        let got = decode(DType::F32, &bufs[1]);
        let mut want: Vec<f64> = init.iter().map(|&v| v as f64).collect();
        for i in 0..n {
            let acc = (0..iters).fold(xs[i], |a, _| a + xs[n + i]) as f64;
            want[i] = acc;
            if iters > 2 {
                want[n + i] = acc;
            }
            want[2 * n + i] = 2.0 * acc;
        }
        assert_close(
            &got,
            &want,
            &vec![1.0; 3 * n],
            0.0,
            &format!("{iters} iterations"),
        );
    }
}

/// Whether the loop of a compiled matmul waits for its next slot after some of its mmas
/// (fragments across the tile boundary) rather than at its top.
fn waits_after_mmas(bm: usize, bn: usize, bk: usize, warps: u32, stages: u32) -> bool {
    let ptx = ptx_of(&matmul_loop(DType::BF16, bm, bn, bk), 90, warps, stages);
    let body = &ptx[ptx.find("$L_for").expect("a loop")..];
    let wait = body
        .find("cp.async.wait_group")
        .expect("a wait in the loop");
    body[..wait].contains("mma.sync")
}

/// The fragments cross the tile boundary when the loop's estimated registers fit (see
/// `BOUNDARY_MAX_REGISTERS` in pipeline.rs): 128 accumulators a thread at 256x128x64 and 8
/// warps (estimated 236), not at 256x64x64 and 4 warps (244; ptxas spills there).
#[test]
fn fragments_cross_the_boundary_when_the_registers_fit() {
    assert!(waits_after_mmas(128, 128, 64, 8, 3));
    assert!(waits_after_mmas(256, 128, 64, 8, 4));
    assert!(waits_after_mmas(128, 128, 32, 4, 4));
    assert!(!waits_after_mmas(256, 64, 64, 4, 3));
}

/// Split-K `C += A B` with the accumulator added by atomics, `bm x bn` tiles over a ragged
/// `m`: with `n` a constant (`const_n`) every `red` of a thread addresses one base register
/// plus an immediate (`address_deltas` in `lower/memory.rs`); with `n` a runtime parameter
/// each element keeps its own address. Both must add every element once, masked rows none.
fn split_k_atomic_matmul(
    bm: usize,
    bn: usize,
    bk: usize,
    k: usize,
    n: usize,
    const_n: bool,
) -> Kernel {
    trace("split_k_atomic", |p| {
        let (a, b, c) = (
            p.ptr("a", DType::BF16),
            p.ptr("b", DType::BF16),
            p.ptr("c", DType::F32),
        );
        let m = p.scalar("m", DType::I32);
        let n_arg = p.scalar("n", DType::I32);
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_n = program_id(1) * bn + arange(0, bn as i64);
        let offs_k = program_id(2) * bk + arange(0, bk as i64);
        let rows = offs_m.col().lt(m);
        let at = load(a + offs_m.col() * k + offs_k.row(), rows, 0.0);
        let bt = load_unmasked(b + offs_k.col() * n + offs_n.row());
        let acc = dot_with(at, bt, None, InputPrecision::Tf32);
        let c_rows = if const_n {
            offs_m.col() * n
        } else {
            offs_m.col() * n_arg
        };
        let _ = atomic_add_relaxed(c + c_rows + offs_n.row(), acc, Some(rows));
    })
    .map(aligned)
    .unwrap()
}

#[test]
fn atomic_adds_of_an_accumulator_address_base_plus_immediates() {
    // m ragged (rows 40..64 of the second row block masked off: C has 40 rows, so a misplaced
    // add is out of bounds), two column blocks, k split over two programs along z that add
    // into the same C.
    let (m, n, bm, bn, bk) = (40usize, 64usize, 32usize, 32usize, 16usize);
    let splits = 2;
    let k = bk * splits;
    for sm in [80, 90] {
        for const_n in [true, false] {
            let kern = split_k_atomic_matmul(bm, bn, bk, k, n, const_n);
            let ptx = ptx_of(&kern, sm, 4, 1);
            let folded = ptx.lines().any(|l| l.contains("red.") && l.contains("+"));
            assert_eq!(folded, const_n, "sm {sm} const_n {const_n}:\n{ptx}");
            // A is [2 bm][k] (rows past m exist but are masked), B [k][n], C [m][n].
            let av = values(2 * bm * k, 3);
            let bv = values(k * n, 5);
            let c0 = values(m * n, 9);
            let (ar, br) = (rounded(DType::BF16, &av), rounded(DType::BF16, &bv));
            let mut want: Vec<f64> = c0.iter().map(|&x| x as f64).collect();
            let mut scale = vec![1f64; m * n];
            for i in 0..m {
                for j in 0..n {
                    for kk in 0..k {
                        let x = ar[i * k + kk] * br[kk * n + j];
                        want[i * n + j] += x;
                        scale[i * n + j] += x.abs();
                    }
                }
            }
            let bufs = run_on(
                sm,
                &kern,
                4,
                1,
                [2, (n / bn) as u64, splits as u64],
                &[
                    Arg::Buf(&encode(DType::BF16, &av)),
                    Arg::Buf(&encode(DType::BF16, &bv)),
                    Arg::Buf(&encode(DType::F32, &c0)),
                    Arg::I32(m as i32),
                    Arg::I32(n as i32),
                ],
            );
            let got = decode(DType::F32, &bufs[2]);
            assert_close(
                &got,
                &want,
                &scale,
                1e-5,
                &format!("sm {sm} const_n {const_n}"),
            );
        }
    }
}

/// `(A B - r[i]) * s[j]` over a ragged `m x n`: the row vector `r` and the column vector `s`
/// are rank-1 loads whose only uses broadcast them into the dot's accumulator, so they load
/// straight into the accumulator's row and column slices (each thread's elements from one base
/// register plus immediates, `lower/mod.rs`); masked rows and columns take the `other` values.
fn dot_minus_row_times_col(bm: usize, bn: usize, k: usize) -> Kernel {
    trace("rank1_into_accumulator", |p| {
        let (a, b) = (p.ptr("a", DType::BF16), p.ptr("b", DType::BF16));
        let (rv, sv, c) = (
            p.ptr("r", DType::F32),
            p.ptr("s", DType::F32),
            p.ptr("c", DType::F32),
        );
        let (m, n) = (p.scalar("m", DType::I32), p.scalar("n", DType::I32));
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_n = program_id(1) * bn + arange(0, bn as i64);
        let ks = arange(0, k as i64);
        let (rows, cols) = (offs_m.lt(m), offs_n.lt(n));
        let at = load(a + offs_m.col() * k + ks.row(), rows.col(), 0.0);
        let bt = load(b + ks.col() * n + offs_n.row(), cols.row(), 0.0);
        let acc = dot_with(at, bt, None, InputPrecision::Tf32);
        let r = load(rv + offs_m, rows, 2.0);
        let s = load(sv + offs_n, cols, 3.0);
        let out = (acc - r.col()) * s.row();
        store(
            c + offs_m.col() * n + offs_n.row(),
            out,
            rows.col() & cols.row(),
        );
    })
    .map(aligned)
    .unwrap()
}

#[test]
fn rank1_loads_broadcast_into_an_accumulator_match() {
    // Two row blocks and two column blocks over m = 45, n = 40: the second ones are ragged.
    let (m, n, k, bm, bn) = (45usize, 40usize, 32usize, 32usize, 32usize);
    let kern = dot_minus_row_times_col(bm, bn, k);
    let (av, bv) = (values(m * k, 11), values(k * n, 13));
    let (rv, sv) = (values(m, 17), values(n, 19));
    let (ar, br) = (rounded(DType::BF16, &av), rounded(DType::BF16, &bv));
    let (mut want, mut scale) = (vec![0f64; m * n], vec![0f64; m * n]);
    for i in 0..m {
        for j in 0..n {
            let (mut d, mut mag) = (0f64, rv[i].abs() as f64);
            for kk in 0..k {
                d += ar[i * k + kk] * br[kk * n + j];
                mag += (ar[i * k + kk] * br[kk * n + j]).abs();
            }
            want[i * n + j] = (d - rv[i] as f64) * sv[j] as f64;
            scale[i * n + j] = mag * (sv[j] as f64).abs();
        }
    }
    for warps in [4, 8] {
        // Poisoned: every in-bounds element must be written.
        let out = encode(DType::F32, &vec![f32::NAN; m * n]);
        let bufs = run(
            &kern,
            warps,
            [2, 2, 1],
            &[
                Arg::Buf(&encode(DType::BF16, &av)),
                Arg::Buf(&encode(DType::BF16, &bv)),
                Arg::Buf(&encode(DType::F32, &rv)),
                Arg::Buf(&encode(DType::F32, &sv)),
                Arg::Buf(&out),
                Arg::I32(m as i32),
                Arg::I32(n as i32),
            ],
        );
        let got = decode(DType::F32, &bufs[4]);
        assert_close(&got, &want, &scale, 1e-5, &format!("{warps} warps"));
    }
}

/// The lines of the first loop's body in `ptx` (from its label to its end label).
fn first_loop_body(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .skip_while(|l| !l.starts_with("$L_for_"))
        .take_while(|l| !l.starts_with("$L_endfor_"))
        .collect()
}

/// Row sums of `x` (`[rows, n]`, f32) folded over its blocks of `cols` columns, from `init`:
/// `acc = acc * b + sum(x[:, j..j + cols], 1)` at each block's first column `j`, where row
/// `r`'s `b` is `1 - (j + r) * decay`,
/// stored to `out`. `t = t + acc` (the `acc` before the update) runs beside it and goes to
/// `t`; with `running`, `acc` is read twice in the loop, else `t` stays zero. `fused` writes
/// the update as one `fma(acc, b, sum)`.
fn decayed_row_sums(rows: usize, cols: usize, running: bool, fused: bool) -> Kernel {
    trace("decayed_row_sums", |p| {
        let (x, init) = (p.ptr("x", DType::F32), p.ptr("init", DType::F32));
        let (out, out_t) = (p.ptr("out", DType::F32), p.ptr("t", DType::F32));
        let n = p.scalar("n", DType::I32);
        let decay = p.scalar("decay", DType::F32);
        let offs_r = arange(0, rows as i64);
        let offs_c = arange(0, cols as i64);
        let start = (load_unmasked(init + offs_r), zeros::<f32>([rows]));
        let (acc, t) = for_range(0, n, cols, start, |j, (acc, t)| {
            let xt = load_unmasked(x + offs_r.col() * n + (j + offs_c).row());
            // One factor a row and step, computed where it is used (no conversion).
            let bt = 1.0 - (j + offs_r).to::<f32>() * decay;
            let t = if running { t + acc } else { t };
            // The fma form where the caller asks for it (the same rule applies).
            let next = if fused {
                fma(acc, bt, sum(xt, 1))
            } else {
                acc * bt + sum(xt, 1)
            };
            (next, t)
        });
        store_unmasked(out + offs_r, acc);
        store_unmasked(out_t + offs_r, t);
    })
    .map(aligned)
    .unwrap()
}

/// A loop-carried `acc * b + sum(x, 1)` keeps per-thread partial sums: no shuffle and no
/// round through shared memory inside the loop, one after it; with `acc` also read elsewhere
/// in the loop it is reduced at every step as before. Both against a float64 reference, from
/// a nonzero initial value, over layouts whose sums cross lanes only and lanes and warps.
#[test]
fn loop_carried_row_sums_reduce_across_threads_after_the_loop() {
    // (rows, cols, warps, whether the sum crosses warps): x's load takes 4 columns a thread;
    // [2, 32] over 4 warps holds each element in 2 lanes of a warp and in every warp.
    for (rows, cols, warps, across_warps) in [
        (16, 64, 4, false),
        (4, 256, 4, true),
        (8, 32, 2, false),
        (2, 32, 4, false),
    ] {
        for running in [false, true] {
            // The fma form on one layout (its rounding differs by one product's).
            let fused = rows == 8;
            let what = format!("{rows}x{cols}, {warps} warps, running {running}, fma {fused}");
            let kern = decayed_row_sums(rows, cols, running, fused);
            let options = CompileOptions {
                num_warps: warps,
                num_stages: 1,
                mma: MmaChoice::Sync,
            };
            let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
            let body = first_loop_body(&ptx);
            let shuffles = body.iter().filter(|l| l.contains("shfl.sync")).count();
            let after: Vec<&str> = ptx
                .lines()
                .skip_while(|l| !l.starts_with("$L_endfor_"))
                .collect();
            let after_loop = after.iter().filter(|l| l.contains("shfl.sync")).count();
            if running {
                assert!(shuffles > 0, "{what}: acc is read twice, reduced each step");
            } else {
                assert_eq!(shuffles, 0, "{what}: no shuffle in the loop");
                assert!(after_loop > 0, "{what}: the shuffles after the loop");
                // The sum's round across warps: barriers before the store's crossing.
                let before_store = after
                    .iter()
                    .take_while(|l| !l.contains("// convert") && !l.contains("st.global"));
                assert_eq!(
                    before_store.filter(|l| l.contains("bar.sync")).count(),
                    if across_warps { 2 } else { 0 },
                    "{what}: the round across warps, after the loop"
                );
                assert!(
                    !body.iter().any(|l| l.contains("bar.sync")),
                    "{what}: no round across warps in the loop"
                );
            }

            let n = 3 * cols;
            let xv = values(rows * n, 21 + rows as u64);
            let decay = 1.0f32 / 1024.0;
            let iv = values(rows, 29);
            let (mut want, mut want_t) = (
                iv.iter().map(|&v| v as f64).collect::<Vec<f64>>(),
                vec![0f64; rows],
            );
            let mut scale = vec![1f64; rows];
            for j in (0..n).step_by(cols) {
                for r in 0..rows {
                    if running {
                        want_t[r] += want[r];
                    }
                    let s: f64 = (0..cols).map(|c| xv[r * n + j + c] as f64).sum();
                    let b = 1.0 - (j + r) as f32 * decay;
                    want[r] = want[r] * b as f64 + s;
                    scale[r] = scale[r].max(want[r].abs());
                }
            }
            let bufs = run_on(
                90,
                &kern,
                warps,
                1,
                [1, 1, 1],
                &[
                    Arg::Buf(&encode(DType::F32, &xv)),
                    Arg::Buf(&encode(DType::F32, &iv)),
                    Arg::Buf(&vec![0u8; rows * 4]),
                    Arg::Buf(&vec![0u8; rows * 4]),
                    Arg::I32(n as i32),
                    Arg::F32(decay),
                ],
            );
            assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 1e-5, &what);
            assert_close(&decode(DType::F32, &bufs[3]), &want_t, &scale, 1e-5, &what);
        }
    }
}

/// The forward's row sum `l * alpha + sum(p, 1)` reduces across the quad's lanes after the
/// loop when the loop carries at most 96 elements a thread: at 128 rows of D=64 over 4 warps
/// (64 accumulators a thread) the loop keeps the row maximum's 2 shuffles a row (4 rows a
/// thread) and the sum's 8 come after it; at D=128 (128 accumulators a thread, where the
/// partials spilled on the H200) the sum stays in the loop. The second loop of the two-loop
/// kernel starts from the first one's reduced sums (in the first lane of each quad, or warp
/// along the keys); 16 rows over 4 warps put 2 warps along the keys and replicate the other 2.
#[test]
fn attention_row_sums_are_partial_inside_the_loop() {
    for (d, in_loop_want, after_want) in [(64, 8, 8), (128, 16, 0)] {
        let kern = flash_attention(DType::BF16, 128, 64, d);
        let options = CompileOptions {
            num_warps: 4,
            num_stages: 2,
            mma: MmaChoice::Sync,
        };
        let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
        let in_loop = first_loop_body(&ptx)
            .iter()
            .filter(|l| l.contains("shfl.sync"))
            .count();
        assert_eq!(in_loop, in_loop_want, "D={d}: shuffles in the loop");
        let after = ptx
            .lines()
            .skip_while(|l| !l.starts_with("$L_endfor_"))
            .filter(|l| l.contains("shfl.sync"))
            .count();
        assert_eq!(
            after, after_want,
            "D={d}: the row sum's shuffles after the loop"
        );
    }
    for (dt, bm, bn, d, warps, stages) in [
        (DType::F16, 16, 16, 32, 4, 1),
        (DType::BF16, 32, 32, 64, 2, 2),
    ] {
        check_attention_kernel(
            &flash_attention_two_loops(dt, bm, bn, d),
            Some(bn as i32),
            80,
            (dt, bm, bn, d, warps, stages),
        );
    }
}

/// bf16 bit patterns of every kind, then pseudo-random ones: signed zeros, subnormals, the
/// extremes, infinities and NaNs with payloads and either sign.
fn bf16_patterns(n: usize, seed: u64) -> Vec<u16> {
    const SPECIAL: [u16; 14] = [
        0x0000, 0x8000, 0x0001, 0x807f, 0x0040, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0,
        0xffc1, 0x7f81, 0x3f80,
    ];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Specials spread over both halves of the packed words and over the threads.
            if i % 5 == 0 {
                SPECIAL[(s >> 20) as usize % SPECIAL.len()]
            } else {
                (s >> 32) as u16
            }
        })
        .collect()
}

/// Loaded bf16 pairs are widened from their packed word (shift / mask, `widen`), not split and
/// converted one by one: the f32 of a cast has the exact bits of the bf16 (NaN payloads too),
/// a bf16 product computed through f32 is the correctly rounded one, and the PTX keeps neither
/// a `cvt.f32.bf16` nor the split of the words.
#[test]
fn bf16_pairs_widen_from_their_packed_word() {
    // Rows of 4 elements, one a thread: the bf16 loads (8 bytes) and the f32 store (16 bytes)
    // take the same layout, so the cast reads the loaded registers (no conversion between).
    let rows = 128usize;
    let kern = trace("bf16_widen", |p| {
        let (x, y) = (p.ptr("x", DType::BF16), p.ptr("y", DType::BF16));
        let (wide, prod) = (p.ptr("wide", DType::F32), p.ptr("prod", DType::BF16));
        let n = p.scalar("n", DType::I32);
        let offs_r = program_id(0) * rows + arange(0, rows as i64);
        let offs = offs_r.col() * 4 + arange(0, 4).row();
        let mask = offs_r.col().lt(n);
        let xv = load(x + offs, mask, 0.0);
        let yv = load(y + offs, mask, 0.0);
        store(wide + offs, xv.to::<f32>(), mask);
        store(prod + offs, xv * yv, mask);
    })
    .map(aligned)
    .unwrap();
    let ptx = ptx_of(&kern, 90, 4, 1);
    assert!(ptx.contains("ld.global.v2.b32"), "{ptx}");
    assert!(!ptx.contains("cvt.f32.bf16"), "{ptx}");
    assert!(!ptx.contains("mov.b32 {"), "the split stays dead: {ptx}");
    assert!(ptx.contains("shl.b32") && ptx.contains("and.b32"), "{ptx}");
    // Not a multiple of the block (the last program is masked).
    let n_rows = 149;
    let n = 4 * n_rows;
    let xs = bf16_patterns(n, 3);
    let ys = bf16_patterns(n, 11);
    let bytes = |v: &[u16]| v.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>();
    let bufs = run_on(
        90,
        &kern,
        4,
        1,
        [n_rows.div_ceil(rows) as u64, 1, 1],
        &[
            Arg::Buf(&bytes(&xs)),
            Arg::Buf(&bytes(&ys)),
            Arg::Buf(&vec![0u8; 4 * n]),
            Arg::Buf(&vec![0u8; 2 * n]),
            Arg::I32(n_rows as i32),
        ],
    );
    for i in 0..n {
        let c = &bufs[2][4 * i..4 * i + 4];
        let wide = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        assert_eq!(wide, (xs[i] as u32) << 16, "element {i}: {:#06x}", xs[i]);
        let got = bf16::from_le_bytes([bufs[3][2 * i], bufs[3][2 * i + 1]]);
        let (a, b) = (bf16::from_bits(xs[i]), bf16::from_bits(ys[i]));
        let want = bf16::from_f64(a.to_f64() * b.to_f64());
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "element {i}: {a} * {b}: got {got}, want {want}"
        );
    }
}

/// A looping row reduction over bf16 (the norms' pattern): masked 16-byte loads at the row's
/// tail, each pair widened from its word inside the loop, the row sums of squares against a
/// float64 reference.
#[test]
fn looping_bf16_row_sums_widen_in_the_loop() {
    let (rows, cols) = (4usize, 256usize);
    let kern = trace("bf16_row_squares", |p| {
        let (x, out) = (p.ptr("x", DType::BF16), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let offs_r = program_id(0) * rows + arange(0, rows as i64);
        let offs_c = arange(0, cols as i64);
        let acc = for_range(0, n, cols, zeros::<f32>([rows]), |j, acc| {
            let c = j + offs_c;
            let xt = load(x + offs_r.col() * n + c.row(), c.row().lt(n), 0.0).to::<f32>();
            acc + sum(xt * xt, 1)
        });
        store_unmasked(out + offs_r, acc);
    })
    .map(aligned)
    .unwrap();
    let options = CompileOptions {
        num_warps: 4,
        num_stages: 1,
        mma: MmaChoice::Sync,
    };
    let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
    let body = first_loop_body(&ptx);
    assert!(body.iter().any(|l| l.contains("ld.global.v4.b32")), "{ptx}");
    assert!(
        !body
            .iter()
            .any(|l| l.contains("cvt.f32.bf16") || l.contains("mov.b32 {")),
        "{ptx}"
    );
    let high_halves = body.iter().filter(|l| l.contains("and.b32 %f")).count();
    // One a pair of the thread's elements (4 warps, no replication).
    assert_eq!(high_halves, rows * cols / (32 * 4) / 2, "{ptx}");
    // Three blocks and a masked tail of 40 columns (a multiple of 8: 16-byte loads).
    let n = 3 * cols + 40;
    let grid = 3;
    let xs = values(grid * rows * n, 5);
    let xr = rounded(DType::BF16, &xs);
    let bufs = run_on(
        90,
        &kern,
        4,
        1,
        [grid as u64, 1, 1],
        &[
            Arg::Buf(&encode(DType::BF16, &xs)),
            Arg::Buf(&vec![0u8; 4 * grid * rows]),
            Arg::I32(n as i32),
        ],
    );
    let want: Vec<f64> = xr
        .chunks(n)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    let got = decode(DType::F32, &bufs[1]);
    assert_close(&got, &want, &want, 1e-6, "row sums of squares");
}

/// The attention backward's step in small: over row blocks of `x` (`n` rows, the last block
/// partial when `ragged`), `s^T = K x^T` (`[bn, bm]`), `p = (s^T - r[rows]) * c[rows]` and
/// `a += p x`. `r` and `c` are rank-1 loads whose uses broadcast into the dot's accumulator, so
/// the pipeliner stages them beside `x` (`RowLoad` in pipeline.rs) unless a masked element
/// must read a nonzero `c_other` (a copy can only zero-fill): then `c` stays a global load.
fn staged_rows_loop(
    dt: DType,
    (bm, bn, d): (usize, usize, usize),
    ragged: bool,
    c_other: f32,
) -> Kernel {
    trace("staged_rows_loop", |p| {
        let (x, kp) = (p.ptr("x", dt), p.ptr("k", dt));
        let (rp, cp, ap) = (
            p.ptr("r", DType::F32),
            p.ptr("c", DType::F32),
            p.ptr("a", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs_n = arange(0, bn as i64);
        let offs_d = arange(0, d as i64);
        let offs_m = arange(0, bm as i64);
        let kv = load_unmasked(kp + offs_n.col() * d + offs_d.row());
        let a = for_range(0, n, bm, zeros::<f32>([bn, d]), |start, a| {
            let rows = start + offs_m;
            let (xt, rv, cv) = if ragged {
                let in_rows = rows.lt(n);
                (
                    load(x + rows.col() * d + offs_d.row(), in_rows.col(), 0.0),
                    load(rp + rows, in_rows, 0.0),
                    load(cp + rows, in_rows, c_other),
                )
            } else {
                (
                    load_unmasked(x + rows.col() * d + offs_d.row()),
                    load_unmasked(rp + rows),
                    load_unmasked(cp + rows),
                )
            };
            let st = dot(kv, xt.trans());
            let pt = ((st - rv.row()) * cv.row()).cast(dt);
            dot_acc(pt, xt, a)
        });
        store_unmasked(ap + offs_n.col() * d + offs_d.row(), a);
    })
    .map(aligned)
    .unwrap()
}

/// Rank-1 loads staged by the pipeliner (`staged_rows_loop`): copied with `cp.async` into the
/// slots beside the tile, read back with `ld.shared.v2` straight into the accumulator's
/// slice, and no global load left in the loop; whole blocks unmasked and a ragged last block
/// (zero-filled copies), 2 and 3 stages, against float64. The simulator checks that no read
/// precedes its copy's wait and that no copy overwrites bytes another thread reads since the
/// last barrier (the slot's reuse).
#[test]
fn rank1_loads_staged_beside_the_tiles_match() {
    let dt = DType::BF16;
    let (bm, bn, d, warps) = (32usize, 64usize, 32usize, 4u32);
    for (n, ragged, c_other, staged) in [
        (96usize, false, 0.0f32, 2usize),
        (72, true, 0.0, 2),
        (72, true, 2.0, 1),
    ] {
        let kern = staged_rows_loop(dt, (bm, bn, d), ragged, c_other);
        let (xv, kv) = (values(n * d, 61 + n as u64), values(bn * d, 67));
        let (rv, cv) = (values(n, 71), values(n, 73));
        let (xr, kr) = (rounded(dt, &xv), rounded(dt, &kv));
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let (mut a, mut a_scale) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        for i in 0..n {
            let x_row = &xr[i * d..(i + 1) * d];
            for j in 0..bn {
                let s: f64 = (0..d).map(|c| kr[j * d + c] * x_row[c]).sum();
                let p = round((s - rv[i] as f64) * cv[i] as f64);
                for c in 0..d {
                    a[j * d + c] += p * x_row[c];
                    a_scale[j * d + c] += (p * x_row[c]).abs();
                }
            }
        }
        for stages in [2, 3] {
            let what = format!("n {n}, ragged {ragged}, c_other {c_other}, {stages} stages");
            let options = CompileOptions {
                num_warps: warps,
                num_stages: stages,
                mma: MmaChoice::Sync,
            };
            let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
            assert!(
                ptx.contains(&format!("and {staged} rank-1 loads, {stages} stages")),
                "{what}"
            );
            let body = first_loop_body(&ptx);
            let count = |what: &str| body.iter().filter(|l| l.contains(what)).count();
            // Each thread reads its `bm / 4` columns of the slice as pairs, per staged vector.
            assert_eq!(count("ld.shared.v2.f32"), staged * bm / 4 / 2, "{what}");
            assert_eq!(count("ld.global"), (2 - staged) * bm / 4 / 2, "{what}");
            let bufs = run_staged(
                &kern,
                warps,
                stages,
                [1, 1, 1],
                &[
                    Arg::Buf(&encode(dt, &xv)),
                    Arg::Buf(&encode(dt, &kv)),
                    Arg::Buf(&encode(DType::F32, &rv)),
                    Arg::Buf(&encode(DType::F32, &cv)),
                    Arg::Buf(&encode(DType::F32, &vec![f32::NAN; bn * d])),
                    Arg::I32(n as i32),
                ],
            );
            assert_close(&decode(DType::F32, &bufs[4]), &a, &a_scale, 1e-5, &what);
        }
    }
}

/// The matmul of `blocks` (compiled with `wgmma` asked for), C stored as `out`.
fn wgmma_matmul(dt: DType, out: DType, (bm, bn, bk): (usize, usize, usize)) -> Kernel {
    matmul_loop_into(dt, out, bm, bn, bk)
}

/// Runs `ptx`, the PTX of [`wgmma_matmul`], on `m x k` times `k x n` inputs and returns C (as
/// f32) with the float64 reference and scale, or the simulator's complaint.
#[allow(clippy::type_complexity)]
fn run_wgmma_matmul_ptx(
    ptx: &str,
    (dt, out): (DType, DType),
    (bm, bn, bk): (usize, usize, usize),
    (warps, stages): (u32, u32),
    (m, n, k): (usize, usize, usize),
) -> (Result<Vec<f32>, String>, Vec<f64>, Vec<f64>) {
    let kern = wgmma_matmul(dt, out, (bm, bn, bk));
    let shared = compiled_wgmma(&kern, 90, warps, stages).shared_bytes as usize;
    let av = values(m * k, 31 + m as u64);
    let bv = values(k * n, 37 + n as u64);
    let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
    let (ab, bb) = (encode(dt, &av), encode(dt, &bv));
    let c = vec![0u8; m * n * out.size_bytes()];
    let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let args = [
            Arg::Buf(&ab),
            Arg::Buf(&bb),
            Arg::Buf(&c),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ];
        decode(
            out,
            &run_ptx(ptx, shared, &param_names(&kern), warps, grid, &args)[2],
        )
    }))
    .map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    (got, want, scale)
}

/// The PTX of [`wgmma_matmul`] at `warps` and `stages`; asserts that the dot is on wgmma.
fn wgmma_matmul_ptx(
    dt: DType,
    out: DType,
    blocks: (usize, usize, usize),
    ws: (u32, u32),
) -> String {
    let kern = wgmma_matmul(dt, out, blocks);
    let c = compiled_wgmma(&kern, 90, ws.0, ws.1);
    assert!(
        c.ptx.contains("wgmma.mma_async"),
        "{blocks:?}: not on wgmma"
    );
    c.ptx
}

/// Runs the wgmma matmul and compares it with the float64 reference.
fn check_wgmma_matmul(
    (dt, out): (DType, DType),
    blocks: (usize, usize, usize),
    (warps, stages): (u32, u32),
    mnk: (usize, usize, usize),
) {
    let what = format!("wgmma {dt}->{out} {blocks:?} {warps}w {stages}s on {mnk:?}");
    let ptx = wgmma_matmul_ptx(dt, out, blocks, (warps, stages));
    let (got, want, scale) = run_wgmma_matmul_ptx(&ptx, (dt, out), blocks, (warps, stages), mnk);
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    // An f32 C is exact up to f32 sums; a narrow C is rounded to 8 (bf16) or 11 bits.
    let tol = if out == DType::F32 { 1e-6 } else { 1e-2 };
    assert_close(&got, &want, &scale, tol, &what);
}

#[test]
fn wgmma_matmul_ragged_small_tiles_match() {
    for dt in [DType::BF16, DType::F16] {
        check_wgmma_matmul((dt, DType::F32), (64, 32, 32), (4, 3), (80, 48, 112));
    }
}

#[test]
fn wgmma_matmul_large_tiles_match() {
    // (blocks, warps, stages, problem): one CTA each, ragged in M, N and K; 8 warps are two
    // warpgroups along M.
    let cases = [
        ((128, 256, 64), (8, 3), (112, 240, 208)),
        ((128, 256, 32), (8, 4), (128, 176, 144)),
        ((256, 128, 64), (8, 3), (240, 128, 80)),
        ((128, 128, 128), (4, 2), (128, 112, 272)),
        // 4 stages of 64: each warpgroup keeps a k-tile's wgmmas in flight into the next
        // iteration.
        ((256, 128, 64), (8, 4), (240, 128, 336)),
        ((128, 256, 64), (8, 4), (112, 240, 336)),
    ];
    for (blocks, ws, mnk) in cases {
        for dt in [DType::BF16, DType::F16] {
            check_wgmma_matmul((dt, DType::F32), blocks, ws, mnk);
        }
    }
    for (blocks, ws, _) in &cases[4..] {
        let ptx = wgmma_matmul_ptx(DType::BF16, DType::F32, *blocks, *ws);
        assert!(
            ptx.contains("\twgmma.wait_group.sync.aligned 1;"),
            "{blocks:?}"
        );
    }
    // C stored as bf16 (the library's configuration): the epilogue reads the accumulator
    // after the last wait, in the loop or after it.
    for ws in [(8, 3), (8, 4)] {
        let (types, blocks) = ((DType::BF16, DType::BF16), (128, 256, 64));
        check_wgmma_matmul(types, blocks, ws, (128, 256, 320));
    }
}

/// The simulator catches mistakes in wgmma code: each edit of a kernel's PTX is either
/// refused (the message says why) or computes a wrong C. Two loops: 64x32x32 at 3 stages
/// waits for its wgmmas in the iteration that issues them; 64x32x64 at 4 stages leaves them
/// in flight into the next (the refill writes the slot read two iterations back).
#[test]
fn wgmma_mistakes_are_caught() {
    let types = (DType::BF16, DType::F32);
    // (blocks, warps and stages, problem, A's descriptor high word, whether in flight)
    let cases = [
        ((64, 32, 32), (4, 3), (80, 48, 112), 0x8000_0020u32, false),
        ((64, 32, 64), (4, 4), (80, 48, 272), 0x4000_0040u32, true),
    ];
    for (blocks, ws, mnk, a_high, in_flight) in cases {
        let ptx = wgmma_matmul_ptx(types.0, types.1, blocks, ws);
        let what = format!("{blocks:?} {ws:?}");
        let edited = |from: &str, to: &str| {
            assert!(ptx.contains(from), "{what}: {from:?} not in the PTX");
            ptx.replacen(from, to, 1)
        };
        let edited_last = |from: &str, to: &str| {
            let at = ptx.rfind(from).unwrap();
            format!("{}{to}{}", &ptx[..at], &ptx[at + from.len()..])
        };
        let run = |text: &str| run_wgmma_matmul_ptx(text, types, blocks, ws, mnk);
        let refused = |text: &str, why: &str| {
            let err = run(text).0.err();
            let err = err.unwrap_or_else(|| panic!("{what}: not refused: {why}"));
            assert!(err.contains(why), "{what}: expected {why:?}, got {err:?}");
        };
        // The first (or last) line starting with `prefix`.
        let line = |prefix: &str, last: bool| -> String {
            let mut lines = ptx.lines().filter(|l| l.starts_with(prefix));
            let l = if last {
                lines.next_back()
            } else {
                lines.next()
            };
            format!("{}\n", l.unwrap_or_else(|| panic!("{what}: no {prefix:?}")))
        };
        // The unedited PTX runs and matches (the other tests compare it in full).
        let (got, want, scale) = run(&ptx);
        assert_close(&got.unwrap(), &want, &scale, 1e-6, &what);

        // The loop: copies' wait, proxy fence, barrier, wgmma.fence, the wgmmas, commit, the
        // refill of a slot no pending wgmma reads, and a wait: for all groups, or (in flight)
        // for all but the newest, then for all after the loop.
        let (loop_wait, final_wait) = (
            line("\twgmma.wait_group", false),
            line("\twgmma.wait_group", true),
        );
        assert_eq!(loop_wait != final_wait, in_flight, "{what}");
        assert_eq!(final_wait, "\twgmma.wait_group.sync.aligned 0;\n", "{what}");
        // No last wait, or one that leaves the newest group pending: the accumulator is read
        // by the epilogue while its wgmma may still write it, or (the loop's only wait, the
        // accumulator written in place) the next iteration's refill overwrites the slot that
        // wgmma reads.
        let unwaited = if in_flight {
            "not yet waited for"
        } else {
            "which a pending wgmma reads"
        };
        refused(&edited_last(&final_wait, ""), unwaited);
        let wait_1 = "\twgmma.wait_group.sync.aligned 1;\n";
        refused(&edited_last(&final_wait, wait_1), unwaited);
        if in_flight {
            // A loop wait that leaves two more groups in flight, or none: the refill overwrites
            // the slot a pending wgmma reads. (One more is fine for one warpgroup: the
            // refill lags two iterations.)
            let wait_3 = "\twgmma.wait_group.sync.aligned 3;\n";
            assert_eq!(loop_wait, wait_1, "{what}");
            refused(&edited(&loop_wait, wait_3), "which a pending wgmma reads");
            refused(&edited(&loop_wait, ""), "which a pending wgmma reads");
        }
        // No wgmma.fence between the accumulator's initialization and the wgmma.
        refused(
            &edited("\twgmma.fence.sync.aligned;\n", ""),
            "without a wgmma.fence",
        );
        // The copies' bytes reach wgmma (the async proxy) only after the proxy fence.
        let fence = "\tfence.proxy.async.shared::cta;\n";
        refused(&edited(fence, ""), "fence.proxy.async");
        // Without the copies' wait the wgmma reads bytes still in flight.
        let copies_wait = line("\tcp.async.wait_group", false);
        refused(&edited(&copies_wait, ""), "in flight");
        // A proxy fence before the copies' wait does not cover the bytes landing at the wait.
        refused(
            &edited(
                &format!("{copies_wait}{fence}"),
                &format!("{fence}{copies_wait}"),
            ),
            "fence.proxy.async",
        );
        // A shared store into the slot the pending wgmma reads (stage 0, at the start of
        // shared memory), between the commit and the wait; the same with a cp.async.
        let commit = "\twgmma.commit_group.sync.aligned;\n";
        let store = format!("{commit}\tst.shared.u32 [tg_smem], %r1;\n");
        refused(&edited(commit, &store), "while a pending wgmma reads it");
        let copy = format!("{commit}\tcp.async.cg.shared.global [tg_smem], [%rd1], 16, 16;\n");
        refused(&edited(commit, &copy), "which a pending wgmma reads");
        // A descriptor that differs between the threads of the warpgroup.
        let a_high_mov = format!(", {a_high};");
        refused(
            &edited(&a_high_mov, ", %tid.x;"),
            "differs across warpgroup",
        );
        // A's descriptor with another swizzle mode: its rows land elsewhere and C is wrong.
        for mode in 1..4u32 {
            let text = format!(", {};", (a_high & 0x3fff_ffff) | mode << 30);
            if text == a_high_mov {
                continue;
            }
            let (got, want, scale) = run(&edited(&a_high_mov, &text));
            let got = got.unwrap();
            let wrong = got
                .iter()
                .zip(&want)
                .zip(&scale)
                .filter(|((&g, &w), &s)| (g as f64 - w).abs() > 1e-6 * s.max(1e-3))
                .count();
            assert!(
                wrong > got.len() / 4,
                "{what}: swizzle mode {mode}: {wrong} wrong elements"
            );
        }
    }
}

/// A hand-written kernel of one warpgroup: `D = A0 B0 - A1 B1` by two chained
/// `wgmma.m64n16k16` with A from registers (`scale-d` false on the first: D's registers are
/// never initialized) and B N-major (`imm-trans-b` 1) in shared memory with 32-byte swizzle.
/// Parameters: A fragments (4 words a thread, A0's then A1's), B's shared image (1024
/// bytes: B0 then B1), D (8 words a thread).
const REGISTER_A_WGMMA: &str = "
.extern .shared .align 1024 .b8 tg_smem[];
.visible .entry tg_register_a(.param .u64 p0_a, .param .u64 p1_b, .param .u64 p2_d)
.maxntid 128, 1, 1
{
	mov.u32 %r1, %tid.x;
	ld.param.u64 %rd1, [p0_a];
	ld.param.u64 %rd2, [p1_b];
	ld.param.u64 %rd3, [p2_d];
	mul.wide.u32 %rd4, %r1, 8;
	add.s64 %rd5, %rd2, %rd4;
	ld.global.u64 %rd6, [%rd5];
	mov.u32 %r2, tg_smem;
	mad.lo.u32 %r3, %r1, 8, %r2;
	st.shared.u64 [%r3], %rd6;
	fence.proxy.async.shared::cta;
	bar.sync 0;
	mul.wide.u32 %rd7, %r1, 16;
	add.s64 %rd8, %rd1, %rd7;
	ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd8];
	ld.global.v4.u32 {%r14, %r15, %r16, %r17}, [%rd8+2048];
	shr.u32 %r20, %r2, 4;
	add.s32 %r21, %r20, 32;
	mov.b32 %r22, 3221225488;
	mov.b64 %rd10, {%r20, %r22};
	mov.b64 %rd11, {%r21, %r22};
	setp.ne.u32 %p1, %r1, %r1;
	setp.eq.u32 %p2, %r1, %r1;
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r10, %r11, %r12, %r13}, %rd10, %p1, 1, 1, 1;
	wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r14, %r15, %r16, %r17}, %rd11, %p2, -1, 1, 1;
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	mul.wide.u32 %rd12, %r1, 32;
	add.s64 %rd13, %rd3, %rd12;
	st.global.v4.f32 [%rd13], {%f1, %f2, %f3, %f4};
	st.global.v4.f32 [%rd13+16], {%f5, %f6, %f7, %f8};
	ret;
}
";

/// Runs [`REGISTER_A_WGMMA`] (or an edit of it) on random bf16 A0, A1 (64 x 16) and B0, B1
/// (16 x 16): D as the test reads it back through the accumulator layout, and the float64
/// reference, or the simulator's complaint.
fn run_register_a_wgmma(ptx: &str) -> (Result<Vec<f32>, String>, Vec<f64>) {
    let dt = DType::BF16;
    let a: Vec<Vec<f64>> = (0..2)
        .map(|i| rounded(dt, &values(64 * 16, 41 + i)))
        .collect();
    let b: Vec<Vec<f64>> = (0..2)
        .map(|i| rounded(dt, &values(16 * 16, 43 + i)))
        .collect();
    let bits16 = |x: f64| bf16::from_f64(x).to_bits();
    // A's fragment (the PTX ISA's wgmma m64nNk16 A layout): register j of thread 32w + 4g + q
    // holds row 16w + g + 8 (j % 2), columns 2q + 8 (j / 2) and the next.
    let mut a_words = Vec::new();
    for am in &a {
        for t in 0..128 {
            let (w, g, q) = (t / 32, (t % 32) / 4, t % 4);
            for j in 0..4 {
                let (row, col) = (16 * w + g + 8 * (j % 2), 2 * q + 8 * (j / 2));
                let lo = bits16(am[row * 16 + col]) as u32;
                let hi = bits16(am[row * 16 + col + 1]) as u32;
                a_words.extend((lo | hi << 16).to_le_bytes());
            }
        }
    }
    // B N-major with 32-byte rows: row k holds B[k][0..16]; the swizzle flips 16-byte
    // halves (8 columns) of rows 4-7 of every 8.
    let mut b_image = vec![0u8; 1024];
    for (i, bm) in b.iter().enumerate() {
        for k in 0..16 {
            for n in 0..16 {
                let at = 512 * i + 32 * k + 2 * (n ^ (8 * ((k / 4) % 2)));
                b_image[at..at + 2].copy_from_slice(&bits16(bm[k * 16 + n]).to_le_bytes());
            }
        }
    }
    let mut want = vec![0f64; 64 * 16];
    for r in 0..64 {
        for c in 0..16 {
            want[r * 16 + c] = (0..16)
                .map(|k| a[0][r * 16 + k] * b[0][k * 16 + c] - a[1][r * 16 + k] * b[1][k * 16 + c])
                .sum();
        }
    }
    let d_words = vec![0u8; 128 * 8 * 4];
    let names = ["p0_a", "p1_b", "p2_d"].map(String::from);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let args = [Arg::Buf(&a_words), Arg::Buf(&b_image), Arg::Buf(&d_words)];
        let bufs = run_ptx(ptx, 1024, &names, 4, [1, 1, 1], &args);
        let words = decode(DType::F32, &bufs[2]);
        // The accumulator layout: register i of thread 32w + 4g + q is row
        // 16w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2q + i % 2.
        let mut d = vec![0f32; 64 * 16];
        for t in 0..128 {
            let (w, g, q) = (t / 32, (t % 32) / 4, t % 4);
            for i in 0..8 {
                let (row, col) = (16 * w + g + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * q + i % 2);
                d[row * 16 + col] = words[8 * t + i];
            }
        }
        d
    }))
    .map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    (got, want)
}

#[test]
fn wgmma_with_a_from_registers_matches() {
    let ptx = format!(".version 8.0\n.target sm_90a\n.address_size 64\n{REGISTER_A_WGMMA}");
    let (got, want) = run_register_a_wgmma(&ptx);
    let ones = vec![1f64; want.len()];
    assert_close(&got.unwrap(), &want, &ones, 1e-6, "register A");
    let refused = |from: &str, to: &str, why: &str| {
        assert!(ptx.contains(from), "{from:?}");
        let (got, _) = run_register_a_wgmma(&ptx.replacen(from, to, 1));
        let err = got.expect_err(why);
        assert!(err.contains(why), "expected {why:?}, got {err:?}");
    };
    let commit = "\twgmma.commit_group.sync.aligned;\n";
    // A's registers belong to the wgmma until its wait: no write, no read.
    for access in ["mov.b32 %r14, 0", "add.s32 %r9, %r11, 1"] {
        let text = format!("{commit}\t{access};\n");
        refused(commit, &text, "A fragment");
    }
    // The loads of A's registers need a wgmma.fence before the wgmma reads them.
    refused("\twgmma.fence.sync.aligned;\n", "", "without a wgmma.fence");
    // Accumulating into a register another pending wgmma of other registers writes.
    refused(
        "{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r14",
        "{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f9}, {%r14",
        "shared with a pending wgmma",
    );
}

#[test]
fn persistent_wgmma_matmul_matches() {
    // 3 programs over 2 x 3 tiles of 64 x 32: the next tile's prologue refills the slots the
    // last tile's wgmmas read (and its epilogue's crossing used). At 3 stages each k-tile is
    // waited for; at 6 stages of 32 one stays in flight (the outer loop copies S - 2 stages
    // ahead, and the last k-tile is waited for before the store).
    for (stages, k, in_flight) in [(3, 48, false), (6, 176, true)] {
        let (dt, out, (bm, bn, bk), (m, n), programs) =
            (DType::BF16, DType::F32, (64, 32, 32), (112, 80), 3);
        let kern = persistent_matmul_into(dt, out, bm, bn, bk);
        let c = compiled_wgmma(&kern, 90, 4, stages);
        assert!(c.ptx.contains("wgmma.mma_async"));
        assert_eq!(c.ptx.contains("wgmma.wait_group.sync.aligned 1"), in_flight);
        let av = values(m * k, 61);
        let bv = values(k * n, 67);
        let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
        let (ab, bb) = (encode(dt, &av), encode(dt, &bv));
        let cb = vec![0u8; m * n * 4];
        let args = [
            Arg::Buf(&ab),
            Arg::Buf(&bb),
            Arg::Buf(&cb),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ];
        let grid = [programs, 1, 1];
        let bufs = run_ptx(
            &c.ptx,
            c.shared_bytes as usize,
            &param_names(&kern),
            4,
            grid,
            &args,
        );
        let got = decode(out, &bufs[2]);
        let what = format!("persistent wgmma matmul, {stages} stages");
        assert_close(&got, &want, &scale, 1e-6, &what);
    }
}

/// A warpgroup's `wgmma.wait_group` orders its own threads after its wgmmas' reads, not the
/// other warpgroup's: a store into A's first row (read by warpgroup 0 only) right after the
/// wait is fine from warpgroup 0 and a race from warpgroup 1 (no barrier between).
#[test]
fn wgmma_reads_are_ordered_only_for_their_own_warpgroup() {
    let (types, blocks, ws, mnk) = (
        (DType::F16, DType::F32),
        (128, 256, 64),
        (8, 3),
        (112, 240, 208),
    );
    let ptx = wgmma_matmul_ptx(types.0, types.1, blocks, ws);
    let wait = "\twgmma.wait_group.sync.aligned 0;\n";
    assert!(ptx.contains(wait));
    let store_by = |thread: u32| {
        let store = format!(
            "{wait}\tsetp.eq.u32 %p_store, %r1, {thread};\n\t@%p_store st.shared.u32 [tg_smem], %r1;\n"
        );
        ptx.replacen(wait, &store, 1)
    };
    let (got, want, scale) = run_wgmma_matmul_ptx(&store_by(0), types, blocks, ws, mnk);
    assert_close(&got.unwrap(), &want, &scale, 1e-6, "store by warpgroup 0");
    let (got, ..) = run_wgmma_matmul_ptx(&store_by(128), types, blocks, ws, mnk);
    let err = got.expect_err("store by warpgroup 1");
    assert!(err.contains("while another thread reads it"), "{err}");
}

/// FlashAttention's forward asked for wgmma on sm_90a, against the online-softmax reference:
/// both dots on wgmma with A from registers (Q, packed once before the loop, and P, the first
/// dot's accumulator after the softmax), two warpgroups or one, two 64-row blocks a
/// warpgroup, K and V slots of 64- to 256-byte rows, 2 and 3 stages; Q resident in shared
/// memory (128 x 128 over 4 warps), read by `Q K^T`'s descriptors;
/// and the two-loop kernel (the library's unmasked and masked loops).
#[test]
fn attention_with_the_wgmma_hint_matches() {
    for (dt, bm, bn, d, warps, stages, split) in [
        (DType::BF16, 64, 64, 64, 4, 2, false),
        (DType::F16, 64, 32, 32, 4, 3, false),
        (DType::BF16, 128, 64, 128, 8, 2, false),
        (DType::BF16, 128, 64, 128, 4, 2, false),
        (DType::F16, 128, 128, 64, 8, 3, false),
        (DType::BF16, 64, 64, 128, 4, 2, true),
        (DType::F16, 128, 32, 64, 8, 2, true),
    ] {
        let kern = if split {
            flash_attention_two_loops(dt, bm, bn, d)
        } else {
            flash_attention(dt, bm, bn, d)
        };
        let c = compiled_wgmma(&kern, 90, warps, stages);
        let what =
            format!("attention, wgmma, {dt} {bm}x{bn}x{d} {warps}w {stages}s, two loops {split}");
        // Each loop: both dots, one wgmma a k16 step and 64-row block of a warpgroup; a Q
        // resident in shared memory (over 32 registers a thread: 128 x 128 over 4 warps)
        // is read there by Q K^T's descriptors (K-major panels).
        let loops = if split { 2 } else { 1 };
        let blocks = bm / (16 * warps as usize);
        let q_resident = bm * d / (64 * warps as usize) > 32;
        let k_steps = (d + bn) / 16;
        assert_eq!(
            c.ptx.matches("wgmma.mma_async").count(),
            loops * blocks * k_steps,
            "{what}"
        );
        assert!(!c.ptx.contains("mma.sync.aligned.m16n8k16"), "{what}");
        assert_eq!(c.ptx.contains("A from shared memory"), q_resident, "{what}");
        // The two loops split the keys after the first block.
        let split_at = split.then_some(bn as i32);
        check_attention_kernel(&kern, split_at, 90, (dt, bm, bn, d, warps, stages));
    }
}

/// The attention backward's dK/dV step (`attn_bwd_dkdv` in tegula-kernels) in small, over row
/// blocks of `q` and `d_o` (`n` rows, a multiple of `bm`) against a key block of `bn` rows,
/// with its five dots: `s^T = K q^T`, `p^T = s^T - r[rows]`, `dv += p^T d_o` (p^T cast),
/// `dp^T = V d_o^T`, `ds^T = (dp^T - c[rows]) * p^T` (cast), `dq[rows] = (ds^T)^T K` (stored),
/// `dk += ds^T q`. K and V are loop-invariant (resident in shared memory when their fragments
/// would not fit), `q` and `d_o` each feed two dots, as is and transposed, `r` and `c` are
/// the rank-1 loads the pipeliner stages beside them (the library's lse and delta).
fn backward_step_loop(dt: DType, (bm, bn, d): (usize, usize, usize)) -> Kernel {
    trace("backward_step_loop", |p| {
        let (qp, dop) = (p.ptr("q", dt), p.ptr("d_o", dt));
        let (kp, vp) = (p.ptr("k", dt), p.ptr("v", dt));
        let (rp, cp) = (p.ptr("r", DType::F32), p.ptr("c", DType::F32));
        let (dqp, dkp, dvp) = (
            p.ptr("dq", DType::F32),
            p.ptr("dk", DType::F32),
            p.ptr("dv", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs_n = arange(0, bn as i64);
        let offs_d = arange(0, d as i64);
        let offs_m = arange(0, bm as i64);
        let kv = load_unmasked(kp + offs_n.col() * d + offs_d.row());
        let vv = load_unmasked(vp + offs_n.col() * d + offs_d.row());
        let zero = zeros::<f32>([bn, d]);
        let (dk, dv) = for_range(0, n, bm, (zero, zero), |start, (dk, dv)| {
            let rows = start + offs_m;
            let q = load_unmasked(qp + rows.col() * d + offs_d.row());
            let d_o = load_unmasked(dop + rows.col() * d + offs_d.row());
            let (r, c) = (load_unmasked(rp + rows), load_unmasked(cp + rows));
            let p_t = dot(kv, q.trans()) - r.row();
            let dv = dot_acc(p_t.cast(dt), d_o, dv);
            let dp_t = dot(vv, d_o.trans());
            let ds_t = ((dp_t - c.row()) * p_t).cast(dt);
            let dq = dot(ds_t.trans(), kv);
            store_unmasked(dqp + rows.col() * d + offs_d.row(), dq);
            (dot_acc(ds_t, q, dk), dv)
        });
        store_unmasked(dkp + offs_n.col() * d + offs_d.row(), dk);
        store_unmasked(dvp + offs_n.col() * d + offs_d.row(), dv);
    })
    .map(aligned)
    .unwrap()
}

/// [`backward_step_loop`] asked for wgmma on sm_90a, against float64: four dots on wgmma,
/// `K q^T` and `V d_o^T` with A from K and V resident in shared memory (K-major panels) and B
/// K-major from the slots of `q` and `d_o`, `dv += p^T d_o` and `dk += ds^T q` with A from
/// registers (the first dots' accumulators, all warps along M) and B N-major from the same
/// slots; `dq = ds K` on mma.sync, reading K's resident panels with `ldmatrix.trans`. The dQ
/// rows of each block, dK and dV all checked. Without the hint, no wgmma.
#[test]
fn attention_backward_step_with_the_wgmma_hint_matches() {
    for (dt, bm, bn, d, warps, stages) in [
        (DType::BF16, 64, 128, 128, 8, 3),
        (DType::F16, 32, 64, 64, 4, 2),
        (DType::BF16, 32, 64, 128, 4, 2),
    ] {
        let n = 2 * bm;
        let kern = backward_step_loop(dt, (bm, bn, d));
        let what = format!("backward step, wgmma, {dt} {bm}x{bn}x{d} {warps}w {stages}s");
        assert!(
            !ptx_of(&kern, 90, warps, stages).contains("wgmma"),
            "{what}"
        );
        let c = compiled_wgmma(&kern, 90, warps, stages);
        // One wgmma a k16 step and 64-row block of a warpgroup: dv's and dk's dots (k = bm),
        // K q^T and V d_o^T (k = d) with K and V resident, read by descriptors.
        let blocks = bn / (16 * warps as usize);
        assert_eq!(
            c.ptx.matches("wgmma.mma_async").count(),
            blocks * (2 * bm + 2 * d) / 16,
            "{what}"
        );
        assert_eq!(c.ptx.matches("A from shared memory)").count(), 2, "{what}");
        // dq's dot, whose A (ds^T transposed) is in no A layout, stays on mma.sync.
        assert_eq!(c.ptx.matches("on tensor cores").count(), 1, "{what}");
        let (qv, dov) = (values(n * d, 81), values(n * d, 83));
        let (kv, vv) = (values(bn * d, 87), values(bn * d, 89));
        let (rv, cv) = (values(n, 91), values(n, 93));
        let (qr, dor, kr, vr) = (
            rounded(dt, &qv),
            rounded(dt, &dov),
            rounded(dt, &kv),
            rounded(dt, &vv),
        );
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let mut dq = vec![0f64; n * d];
        let (mut dk, mut dv) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        let (mut dq_scale, mut dk_scale, mut dv_scale) = (dq.clone(), dk.clone(), dv.clone());
        for i in 0..n {
            let row = |x: &[f64]| x[i * d..(i + 1) * d].to_vec();
            let (q_i, do_i) = (row(&qr), row(&dor));
            for j in 0..bn {
                let s: f64 = (0..d).map(|c| kr[j * d + c] * q_i[c]).sum();
                let dp: f64 = (0..d).map(|c| vr[j * d + c] * do_i[c]).sum();
                let p = s - rv[i] as f64;
                let ds = round((dp - cv[i] as f64) * p);
                for c in 0..d {
                    dv[j * d + c] += round(p) * do_i[c];
                    dv_scale[j * d + c] += (round(p) * do_i[c]).abs();
                    dk[j * d + c] += ds * q_i[c];
                    dk_scale[j * d + c] += (ds * q_i[c]).abs();
                    dq[i * d + c] += ds * kr[j * d + c];
                    dq_scale[i * d + c] += (ds * kr[j * d + c]).abs();
                }
            }
        }
        let nan = |len: usize| encode(DType::F32, &vec![f32::NAN; len]);
        let args = [
            encode(dt, &qv),
            encode(dt, &dov),
            encode(dt, &kv),
            encode(dt, &vv),
            encode(DType::F32, &rv),
            encode(DType::F32, &cv),
            nan(n * d),
            nan(bn * d),
            nan(bn * d),
        ];
        let mut run_args: Vec<Arg> = args.iter().map(|b| Arg::Buf(b)).collect();
        run_args.push(Arg::I32(n as i32));
        let bufs = run_ptx(
            &c.ptx,
            c.shared_bytes as usize,
            &param_names(&kern),
            warps,
            [1, 1, 1],
            &run_args,
        );
        // P^T and dS^T are rounded to the input dtype from f32 sums: a rounding step apart
        // from the float64 ones now and then.
        let tol = 1e-2;
        let out = |i: usize| decode(DType::F32, &bufs[i]);
        assert_close(&out(6), &dq, &dq_scale, tol, &format!("{what}: dq"));
        assert_close(&out(7), &dk, &dk_scale, tol, &format!("{what}: dk"));
        assert_close(&out(8), &dv, &dv_scale, tol, &format!("{what}: dv"));
    }
}
