//! The SIMT machine: one CTA at a time, every thread in lockstep, shared memory with the
//! barrier and race checks, `cp.async` and `wgmma` asynchrony modeled at their latest (the
//! TMA's and the mbarriers' in `tma`).

use crate::parse::{Ins, Opnd, Prog};
use half::{bf16, f16};
use std::collections::HashMap;

mod tma;

pub(crate) use tma::TensorMap;

/// Global memory: buffers at fixed, widely spaced addresses.
pub(crate) struct Gmem {
    pub(crate) bufs: Vec<Vec<u8>>,
}

pub(crate) const GBASE: u64 = 1 << 40;
pub(crate) const GSPAN: u64 = 1 << 32;

impl Gmem {
    fn at(&mut self, addr: u64, n: usize) -> &mut [u8] {
        assert!(
            !tma::is_tensor_map_address(addr),
            "global access at {addr:#x}: a tensor map's address (an opaque object, for \
             cp.async.bulk.tensor and prefetch.tensormap only)"
        );
        assert!(
            addr >= GBASE && ((addr - GBASE) / GSPAN) < self.bufs.len() as u64,
            "global access at {addr:#x}: not in a buffer"
        );
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
pub(crate) struct Copy {
    addr: u64,
    data: Vec<u8>,
}

#[derive(Clone, Copy)]
pub(crate) struct Access {
    epoch: u32,
    thread: u32,
}

/// The `thread` of [`Access`] for the reads of warpgroup `g`'s wgmmas (`u32::MAX` stands for
/// several threads).
pub(crate) fn wgmma_reader(g: usize) -> u32 {
    u32::MAX - 1 - g as u32
}

/// Whether `a` is an access in `epoch` by someone other than thread `t` (or, a wgmma's read,
/// other than `t`'s warpgroup: its own wait orders its threads after the read).
pub(crate) fn by_another(a: Option<Access>, epoch: u32, t: usize) -> bool {
    a.is_some_and(|a| a.epoch == epoch && a.thread != t as u32 && a.thread != wgmma_reader(t / 128))
}

pub(crate) struct Machine<'p> {
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
    /// The tensor map arguments, and the TMA and mbarrier state.
    tmaps: &'p [TensorMap],
    tma: tma::TmaState,
}

/// One issued `wgmma.mma_async` of a warpgroup: it runs when a `wgmma.wait_group` retires
/// its group, reading its registers and shared memory then (the latest the hardware may).
pub(crate) struct PendingMma {
    pc: usize,
    accumulate: bool,
    /// Shared addresses of A's elements `[m][k]` (64 x 16; empty when A is in registers) and
    /// B's `[k][n]` (16 x N), from the descriptors at issue.
    a_addrs: Vec<u32>,
    b_addrs: Vec<u32>,
}

/// The wgmma state of one warpgroup (4 warps, 128 threads).
pub(crate) struct WarpgroupState {
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

/// An element type a `wgmma` multiplies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WgmmaType {
    F16,
    BF16,
    E4M3,
    E5M2,
}

impl WgmmaType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "f16" => WgmmaType::F16,
            "bf16" => WgmmaType::BF16,
            "e4m3" => WgmmaType::E4M3,
            "e5m2" => WgmmaType::E5M2,
            _ => return None,
        })
    }

    fn bytes(self) -> u32 {
        match self {
            WgmmaType::F16 | WgmmaType::BF16 => 2,
            _ => 1,
        }
    }

    /// The value of an element whose bytes are the low bits of `x`.
    fn value(self, x: u64) -> f64 {
        match self {
            WgmmaType::F16 => f16::from_bits(x as u16).to_f64(),
            WgmmaType::BF16 => bf16::from_bits(x as u16).to_f64(),
            WgmmaType::E4M3 => fp8_decode(false, x as u8),
            WgmmaType::E5M2 => fp8_decode(true, x as u8),
        }
    }
}

/// The shape and operands of a `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.*` or
/// `m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2}`.
pub(crate) struct WgmmaForm<'a> {
    n: usize,
    /// K of the instruction: 32 bytes of K a row.
    k: usize,
    a_ty: WgmmaType,
    b_ty: WgmmaType,
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
    /// imm-scale-a, imm-scale-b, imm-trans-b`. fp8 has no transposes (both operands K-major)
    /// and no trans immediates.
    fn of(ins: &'a Ins) -> Self {
        let op = &ins.op;
        let shape = op
            .split('.')
            .find(|p| p.starts_with("m64n"))
            .unwrap_or_else(|| panic!("{op}: no m64nNk16 shape"));
        let (n, k) = shape[4..].split_once('k').unwrap();
        let n: usize = n.parse().unwrap();
        let k: usize = k.parse().unwrap();
        let parts: Vec<&str> = op.split('.').collect();
        let ty = |i: usize| {
            WgmmaType::parse(parts[parts.len() - 2 + i])
                .unwrap_or_else(|| panic!("unsupported {op}"))
        };
        let (a_ty, b_ty) = (ty(0), ty(1));
        assert_eq!(parts[parts.len() - 3], "f32", "{op}: f32 accumulators only");
        let fp8 = a_ty.bytes() == 1;
        assert!(
            (b_ty.bytes() == 1) == fp8 && (fp8 || a_ty == b_ty),
            "{op}: operand types"
        );
        assert!(
            k == 32 / a_ty.bytes() as usize && n.is_multiple_of(8) && (8..=256).contains(&n),
            "{op}"
        );
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
        let (trans_a, trans_b) = if fp8 {
            assert_eq!(ins.args.len(), 6, "{op}: operands");
            (0, 0)
        } else if a_regs.is_some() {
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
            k,
            a_ty,
            b_ty,
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
/// `emit/wgmma.rs`'s `hardware_address`, confirmed on the H200 by tegula-ptx's
/// `tests/gpu_wgmma_probe.rs`): start address >> 4 in bits 0-13, leading byte offset >> 4 in
/// 16-29, stride byte offset >> 4 in 32-45, base offset in 49-51 (0 here), swizzle in 62-63
/// (1: 128 bytes, 2: 64, 3: 32).
/// K-major (`k_major`): 8 rows of `width` bytes (the swizzle's row) hold 8 rows of M/N, the
/// stride offset moves 8 rows, K runs along the row in elements of `es` bytes. MN-major
/// (16-bit elements only): a row of `width` bytes holds `width / 2` elements along M/N, 8
/// such rows are 8 k, the stride offset moves 8 k and the leading offset the next `width / 2`
/// of M/N. The swizzle XORs address bits 4.. with bits 7.. (3, 2 or 1 bits).
pub(crate) fn descriptor_address(desc: u64, mn: u32, k: u32, k_major: bool, es: u32) -> u32 {
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
        start + (mn % 8) * width + (mn / 8) * stride + es * k
    } else {
        assert_eq!(es, 2, "an MN-major wgmma operand of {es}-byte elements");
        let per_row = width / 2;
        start + 2 * (mn % per_row) + (mn / per_row) * leading + (k % 8) * width + (k / 8) * stride
    };
    linear ^ (((linear >> 7) & (width / 16 - 1)) << 4)
}

/// PTX `max.f32`: the non-NaN operand when one is NaN, and +0 of two zeros in either order
/// (as the H200 does; Rust's `f32::max` may return either zero, by operand order).
pub(crate) fn max_f32(a: f32, b: f32) -> f32 {
    if a == 0.0 && b == 0.0 {
        f32::from_bits(a.to_bits() & b.to_bits())
    } else {
        a.max(b)
    }
}

/// PTX `min.f32`: the non-NaN operand when one is NaN, and -0 of two zeros in either order.
pub(crate) fn min_f32(a: f32, b: f32) -> f32 {
    if a == 0.0 && b == 0.0 {
        f32::from_bits(a.to_bits() | b.to_bits())
    } else {
        a.min(b)
    }
}

pub(crate) fn f32v(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
pub(crate) fn bits(x: f32) -> u64 {
    x.to_bits() as u64
}

/// cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero.
pub fn tf32(x: f32) -> f32 {
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
            match self.tma_access(t, b, data.is_some()) {
                // A bulk tensor load landed the byte: its waiters are ordered after it.
                Some(ordered) => assert!(
                    ordered || same_value,
                    "shared byte {b} (thread {t}, pc {}) landed by a bulk tensor load that \
                     thread {t} did not wait for (try_wait on its mbarrier), with no barrier \
                     since",
                    self.pc
                ),
                None => assert!(
                    !other(self.writes[b]) || same_value,
                    "shared byte {b} (thread {t}) written by thread {} without a barrier (pc {}: {:?})",
                    self.writes[b].unwrap().thread,
                    self.pc,
                    self.prog.code[self.pc]
                ),
            }
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
                self.tma.landed[b] = None;
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
                self.tma_exit(gmem);
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
                        self.tma.fence_epochs[t].push(self.epoch);
                    }
                }
                continue;
            }
            if op.starts_with("mbarrier.")
                || op.starts_with("cp.async.bulk.")
                || op.starts_with("fence.mbarrier_init")
                || (op.starts_with("prefetch.") && op.ends_with(".tensormap"))
            {
                self.tma_op(ins, &active, gmem);
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
            // `bar.red.{or,and}.pred d, 0, p`: a barrier that gives every thread the or (the
            // and) of `p` over the CTA's threads.
            if op.starts_with("bar.red.") {
                let ps: Vec<bool> = (0..self.threads)
                    .filter(|&t| active[t])
                    .map(|t| self.val(t, &ins.args[2]) != 0)
                    .collect();
                let r = match op {
                    "bar.red.or.pred" => ps.iter().any(|&p| p),
                    "bar.red.and.pred" => ps.iter().all(|&p| p),
                    o => panic!("{o}"),
                };
                for (t, &on) in active.iter().enumerate() {
                    if on {
                        self.set(t, &ins.args[0], r as u64);
                    }
                }
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
            // `shfl.sync.idx.b32 d, a, b, 31, mask`: every lane reads lane b (one segment, the
            // whole warp).
            if op.starts_with("shfl.sync.idx") {
                let src: Vec<u64> = (0..self.threads)
                    .map(|t| self.val(t, &ins.args[1]))
                    .collect();
                for t in 0..self.threads {
                    if active[t] {
                        assert_eq!(self.val(t, &ins.args[3]), 31, "unsupported {op} segments");
                        let from = self.val(t, &ins.args[2]) as usize & 31;
                        self.set(t, &ins.args[0], src[(t & !31) | from]);
                    }
                }
                continue;
            }
            // `shfl.sync.up.b32 d, a, b, 0, mask`: lane i reads lane i - b, its own value where
            // that is below lane 0 (a `c` of 0: no segments).
            if op.starts_with("shfl.sync.up") {
                let src: Vec<u64> = (0..self.threads)
                    .map(|t| self.val(t, &ins.args[1]))
                    .collect();
                for t in 0..self.threads {
                    if active[t] {
                        assert_eq!(self.val(t, &ins.args[3]), 0, "unsupported {op} segments");
                        let b = self.val(t, &ins.args[2]) as usize;
                        let lane = t & 31;
                        let from = if lane >= b { lane - b } else { lane };
                        let v = src[(t & !31) | from];
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
        self.tma_exit(gmem);
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
                assert!(
                    self.prog.params.get(name) != Some(&true),
                    "{op} (pc {}) of {name}, a tensor map: an opaque object (take its address \
                     with mov and cvta.param instead)",
                    self.pc
                );
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
                        // `.s8` and `.s16` loads sign-extend into the 32-bit register.
                        let x = match ty {
                            "s8" => x as u8 as i8 as i32 as u32 as u64,
                            "s16" => x as u16 as i16 as i32 as u32 as u64,
                            _ => x,
                        };
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
            // `red.<sem>.<scope>.global.<op>[.v2|.v4].<ty> [addr], value(s)` and
            // `atom.<sem>.<scope>.global.<op>.<ty> d, [addr], value` (`.cas`: `cmp, value`):
            // the threads run one at a time, so each update is atomic as it is written.
            "red" | "atom" => {
                assert!(
                    !parts.contains(&"shared"),
                    "unsupported {op} (global memory only)"
                );
                let returns = parts[0] == "atom";
                let (addr_at, first_value) = if returns { (1, 2) } else { (0, 1) };
                let w = width(ty);
                let addr = self.addr(t, &a[addr_at]);
                let kind = parts
                    .iter()
                    .copied()
                    .find(|p| {
                        matches!(
                            *p,
                            "add" | "min" | "max" | "and" | "or" | "xor" | "exch" | "cas"
                        )
                    })
                    .unwrap_or_else(|| panic!("unsupported {op}"));
                let vals: Vec<u64> = match &a[first_value] {
                    Opnd::Vec(regs) => regs.iter().map(|&r| self.regs[t][r]).collect(),
                    s => vec![self.val(t, s)],
                };
                assert_eq!(addr % (w * vals.len()) as u64, 0, "misaligned {op}");
                let cas_new = (kind == "cas").then(|| self.val(t, &a[first_value + 1]));
                let mut olds = Vec::new();
                for (k, x) in vals.into_iter().enumerate() {
                    let at = addr + (k * w) as u64;
                    let cell = gmem.at(at, w);
                    let mut bytes = [0u8; 8];
                    bytes[..w].copy_from_slice(cell);
                    let old = u64::from_le_bytes(bytes);
                    let new = match cas_new {
                        Some(v) => {
                            let m = if w == 8 {
                                u64::MAX
                            } else {
                                (1u64 << (8 * w)) - 1
                            };
                            if old & m == x & m {
                                v
                            } else {
                                old
                            }
                        }
                        None => atomic_update(kind, ty, old, x),
                    };
                    cell.copy_from_slice(&new.to_le_bytes()[..w]);
                    olds.push(old);
                }
                if returns {
                    assert_eq!(olds.len(), 1, "unsupported {op}");
                    self.set(t, &a[0], olds[0]);
                }
            }
            "cvta" => {
                let x = v(self, 1);
                let x = if parts[1] == "param" {
                    self.cvta_param(x)
                } else {
                    x
                };
                self.set(t, &a[0], x);
            }
            "cvt" => {
                let x = v(self, 1);
                let r = match op {
                    // The pair conversions: the first source in the high byte or half.
                    "cvt.rn.satfinite.e4m3x2.f32" | "cvt.rn.satfinite.e5m2x2.f32" => {
                        let e5m2 = op.contains("e5m2");
                        let (hi, lo) = (f32v(x), f32v(v(self, 2)));
                        ((fp8_encode(e5m2, hi) as u64) << 8) | fp8_encode(e5m2, lo) as u64
                    }
                    "cvt.rn.f16x2.e4m3x2" | "cvt.rn.f16x2.e5m2x2" => {
                        let e5m2 = op.contains("e5m2");
                        let h = |b: u64| f16::from_f64(fp8_decode(e5m2, b as u8)).to_bits() as u64;
                        h(x >> 8 & 0xff) << 16 | h(x & 0xff)
                    }
                    "cvt.rn.bf16.f32" => bf16::from_f32(f32v(x)).to_bits() as u64,
                    "cvt.rn.f16.f32" => f16::from_f32(f32v(x)).to_bits() as u64,
                    "cvt.f32.bf16" => bits(bf16::from_bits(x as u16).to_f32()),
                    "cvt.f32.f16" => bits(f16::from_bits(x as u16).to_f32()),
                    "cvt.rna.tf32.f32" => bits(tf32(f32v(x))),
                    "cvt.u32.u64" | "cvt.u64.u32" => x & 0xffff_ffff,
                    "cvt.u32.u16" | "cvt.u16.u32" => x & 0xffff,
                    "cvt.s64.s32" => x as u32 as i32 as i64 as u64,
                    "cvt.rn.f32.s32" => bits(x as u32 as i32 as f32),
                    "cvt.f64.f32" => (f32v(x) as f64).to_bits(),
                    "cvt.rn.f32.f64" => bits(f64::from_bits(x) as f32),
                    "cvt.rni.f64.f64" => f64::from_bits(x).round_ties_even().to_bits(),
                    "cvt.rzi.f64.f64" => f64::from_bits(x).trunc().to_bits(),
                    "cvt.rni.f32.f32" => bits(f32v(x).round_ties_even()),
                    "cvt.rzi.f32.f32" => bits(f32v(x).trunc()),
                    "cvt.rmi.f32.f32" => bits(f32v(x).floor()),
                    "cvt.rpi.f32.f32" => bits(f32v(x).ceil()),
                    // Clamped as with .sat (PTX's default for float to integer); NaN as below.
                    "cvt.rni.s64.f64" => {
                        let v = f64::from_bits(x).round_ties_even();
                        if v.is_nan() {
                            1 << 63
                        } else {
                            v as i64 as u64
                        }
                    }
                    // Float to integer, saturating; NaN as the H100 converts it (measured): 0
                    // from f32 into 32 bits, the smallest signed integer's pattern otherwise
                    // (0x80000000, 1 << 63), unsigned destinations too. 32-bit results
                    // zero-extended.
                    op if op.starts_with("cvt.r")
                        && op.contains("i.sat.")
                        && (op.ends_with(".f32") || op.ends_with(".f64")) =>
                    {
                        let wide_src = op.ends_with(".f64");
                        let v = if wide_src {
                            f64::from_bits(x)
                        } else {
                            f32v(x) as f64
                        };
                        let v = match parts[1] {
                            "rni" => v.round_ties_even(),
                            "rzi" => v.trunc(),
                            "rmi" => v.floor(),
                            "rpi" => v.ceil(),
                            o => panic!("cvt.{o}"),
                        };
                        let dst = parts[3];
                        let bits64 = dst.ends_with("64");
                        if v.is_nan() {
                            match (wide_src, bits64) {
                                (false, false) => 0,
                                (_, true) => 1 << 63,
                                (true, false) => 0x8000_0000,
                            }
                        } else {
                            match dst {
                                "s32" => v as i32 as u32 as u64,
                                "u32" => v as u32 as u64,
                                "s64" => v as i64 as u64,
                                "u64" => v as u64,
                                o => panic!("cvt to {o}"),
                            }
                        }
                    }
                    other => panic!("unsupported {other}"),
                };
                self.set(t, &a[0], r);
            }
            "setp" => {
                let (x, y) = (v(self, 1), v(self, 2));
                let cmp = parts[1];
                fn ints<T: Ord>(cmp: &str, x: T, y: T) -> bool {
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
                let r = match ty {
                    "s64" => ints(cmp, x as i64, y as i64),
                    "u64" => ints(cmp, x, y),
                    "f64" => {
                        let (x, y) = (f64::from_bits(x), f64::from_bits(y));
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
            "testp" => {
                let r = match op {
                    "testp.notanumber.f64" => f64::from_bits(v(self, 1)).is_nan(),
                    "testp.notanumber.f32" => f32v(v(self, 1)).is_nan(),
                    _ => panic!("unsupported {op}"),
                };
                self.set(t, &a[0], r as u64);
            }
            // Directed roundings are not simulated (the GPU check runs them).
            _ if (ty == "f64" || ty == "f32")
                && parts.iter().any(|q| matches!(*q, "rz" | "rm" | "rp")) =>
            {
                panic!("unsupported {op}: the simulator rounds floats to nearest only")
            }
            _ if ty == "f64" => {
                let f = |i: usize| f64::from_bits(v(self, i));
                let r = match parts[0] {
                    "add" => f(1) + f(2),
                    "sub" => f(1) - f(2),
                    "mul" => f(1) * f(2),
                    "div" => f(1) / f(2),
                    "fma" => f(1).mul_add(f(2), f(3)),
                    "sqrt" => f(1).sqrt(),
                    "neg" => -f(1),
                    "abs" => f(1).abs(),
                    o => panic!("{o}.f64"),
                };
                self.set(t, &a[0], r.to_bits());
            }
            _ if ty == "f32" => {
                let f = |i: usize| f32v(v(self, i));
                let r = match parts[0] {
                    "add" => f(1) + f(2),
                    "sub" => f(1) - f(2),
                    "mul" => f(1) * f(2),
                    "div" => f(1) / f(2),
                    "fma" => f(1).mul_add(f(2), f(3)),
                    "max" | "min" if op.contains("NaN") && (f(1).is_nan() || f(2).is_nan()) => {
                        f32::NAN
                    }
                    "max" => max_f32(f(1), f(2)),
                    "min" => min_f32(f(1), f(2)),
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
                // 32-bit operands extend by their type's signedness (what `.wide` multiplies).
                let sx = |x: u64| -> i64 {
                    if matches!(ty, "s64" | "u64" | "b64") {
                        x as i64
                    } else if ty.starts_with('u') {
                        x as u32 as i64
                    } else {
                        x as u32 as i32 as i64
                    }
                };
                let (x, y) = (v(self, 1), if a.len() > 2 { v(self, 2) } else { 0 });
                let r = match parts[0] {
                    "add" => sx(x).wrapping_add(sx(y)) as u64,
                    "sub" => sx(x).wrapping_sub(sx(y)) as u64,
                    // The high half of the full product.
                    "mul" if parts.contains(&"hi") => match ty {
                        "u64" => ((x as u128 * y as u128) >> 64) as u64,
                        "s64" => ((x as i64 as i128 * y as i64 as i128) >> 64) as u64,
                        _ => ((sx(x) as i128 * sx(y) as i128) >> 32) as u64,
                    },
                    "mul" => sx(x).wrapping_mul(sx(y)) as u64,
                    // The low 32 bits of the 48-bit product of the low 24 bits, read as signed
                    // (bit 23 the sign) for .s32.
                    "mul24" => {
                        assert!(parts.contains(&"lo"), "unsupported {op}");
                        let f = |x: u64| -> i64 {
                            let l = (x & 0xff_ffff) as i64;
                            if ty == "s32" && l & 0x80_0000 != 0 {
                                l - (1 << 24)
                            } else {
                                l
                            }
                        };
                        (f(x) * f(y)) as u64
                    }
                    // `sad d, a, b, c`: c + |a - b|, the comparison by the type's signedness.
                    "sad" => {
                        let c = v(self, 3);
                        let lt = if ty.starts_with('u') {
                            (x & mask) < (y & mask)
                        } else {
                            sx(x) < sx(y)
                        };
                        let d = if lt {
                            y.wrapping_sub(x)
                        } else {
                            x.wrapping_sub(y)
                        };
                        d.wrapping_add(c)
                    }
                    "clz" if is64 => x.leading_zeros() as u64,
                    "clz" => (x as u32).leading_zeros() as u64,
                    "popc" => (x & mask).count_ones() as u64,
                    "brev" if is64 => x.reverse_bits(),
                    "brev" => (x as u32).reverse_bits() as u64,
                    // The default mode of `prmt.b32 d, a, b, c`: byte n of d is byte c[4n+2:4n]
                    // of b:a, or that byte's top bit in all eight where c[4n+3] is set.
                    "prmt" => {
                        assert_eq!(op, "prmt.b32", "unsupported {op}");
                        let c = v(self, 3);
                        let src = (y & 0xffff_ffff) << 32 | (x & 0xffff_ffff);
                        (0..4).fold(0u64, |acc, n| {
                            let nib = (c >> (4 * n)) & 0xf;
                            let byte = (src >> (8 * (nib & 7))) & 0xff;
                            let byte = match (nib & 8 != 0, byte & 0x80 != 0) {
                                (true, true) => 0xff,
                                (true, false) => 0,
                                (false, _) => byte,
                            };
                            acc | byte << (8 * n)
                        })
                    }
                    "mad" => sx(x).wrapping_mul(sx(y)).wrapping_add(sx(v(self, 3))) as u64,
                    "and" => x & y,
                    "or" => x | y,
                    "xor" => x ^ y,
                    "shl" => x << y,
                    "shr" if ty.starts_with('s') => (sx(x) >> y) as u64,
                    "shr" => (x & mask) >> y,
                    "min" if ty.starts_with('u') => (x & mask).min(y & mask),
                    "max" if ty.starts_with('u') => (x & mask).max(y & mask),
                    "min" => sx(x).min(sx(y)) as u64,
                    "max" => sx(x).max(sx(y)) as u64,
                    // Tile indices of persistent kernels (division by zero panics here).
                    "div" if ty.starts_with('u') => (x & mask) / (y & mask),
                    "div" => sx(x).wrapping_div(sx(y)) as u64,
                    "rem" if ty.starts_with('u') => (x & mask) % (y & mask),
                    "rem" => sx(x).wrapping_rem(sx(y)) as u64,
                    // `bfe d, x, pos, len`: bits pos.. of x, sign-extended for .s32.
                    "bfe" => {
                        let len = v(self, 3) as u32;
                        let field = (x >> y) & ((1u64 << len) - 1);
                        if ty == "s32" && len > 0 && field >> (len - 1) & 1 == 1 {
                            field | !((1u64 << len) - 1)
                        } else {
                            field
                        }
                    }
                    // `bfi d, x, y, pos, len`: y with bits pos..pos+len replaced by x's low bits.
                    "bfi" => {
                        let (pos, len) = (v(self, 3), v(self, 4));
                        let field = ((1u64 << len) - 1) << pos;
                        (y & !field) | ((x << pos) & field)
                    }
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
        let (n, kk) = (form.n as u32, form.k as u32);
        let (ea, eb) = (form.a_ty.bytes(), form.b_ty.bytes());
        // A[m][k]: K-major unless imm-trans-a; B[k][n]: K-major unless imm-trans-b.
        let a_addrs: Vec<u32> = match a_desc {
            Some(desc) => (0..64 * kk)
                .map(|i| descriptor_address(desc, i / kk, i % kk, !form.trans_a, ea))
                .collect(),
            None => Vec::new(),
        };
        let b_addrs: Vec<u32> = (0..kk * n)
            .map(|i| descriptor_address(b_desc, i % n, i / n, !form.trans_b, eb))
            .collect();
        let spans = a_addrs
            .iter()
            .map(|&at| (at, ea))
            .chain(b_addrs.iter().map(|&at| (at, eb)));
        for (at, es) in spans {
            for b in at as usize..(at + es) as usize {
                assert!(
                    b < self.smem.len(),
                    "wgmma reads shared byte {b}: out of bounds"
                );
                assert_eq!(
                    self.copies_in_flight[b], 0,
                    "wgmma (pc {}) reads shared byte {b} while a cp.async into it is in flight",
                    self.pc
                );
                // Bytes a bulk tensor load landed (the async proxy, as the wgmma): ordered
                // for the warpgroup's threads that waited for the landing (or by a barrier).
                if let Some(ordered) = self.tma_access(lanes.start, b, false) {
                    let missed = lanes
                        .clone()
                        .find(|&t| !self.after_landing(t, self.tma.landed[b].unwrap()));
                    assert!(
                        ordered && missed.is_none(),
                        "wgmma (pc {}) reads shared byte {b}, landed by a bulk tensor load that \
                         thread {} of warpgroup {g} did not wait for, with no barrier since",
                        self.pc,
                        missed.unwrap_or(lanes.start)
                    );
                    self.wgmma_reads[b] += 1;
                    continue;
                }
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

    /// Runs a retired wgmma of warpgroup `g`: D[64 x N] (+)= A[64 x K] B[K x N], exact
    /// products summed in f64. Warp `w` of the group holds rows 16w..16w+15 of D in the
    /// `mma.sync` m16n8 accumulator order per 8 columns (register i of lane (q, p): row
    /// q + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2p + (i & 1)), and, A from registers, rows
    /// 16w.. of A in the `mma.sync` m16n8k16 (m16n8k32 for fp8) A order.
    fn retire_wgmma(&mut self, g: usize, mma: PendingMma) {
        let ins = &self.prog.code[mma.pc];
        let form = WgmmaForm::of(ins);
        let (n, kk) = (form.n, form.k);
        let smem_elem = |m: &Self, at: u32, ty: WgmmaType| {
            let at = at as usize;
            let x = if ty.bytes() == 2 {
                u16::from_le_bytes([m.smem[at], m.smem[at + 1]]) as u64
            } else {
                m.smem[at] as u64
            };
            ty.value(x)
        };
        let mut a = vec![vec![0f64; kk]; 64];
        match form.a_regs {
            None => {
                for (i, &at) in mma.a_addrs.iter().enumerate() {
                    a[i / kk][i % kk] = smem_elem(self, at, form.a_ty);
                }
            }
            Some(regs) => {
                // `per` elements a register, lowest K in the low bits.
                let per = 4 / form.a_ty.bytes() as usize;
                let bits = 32 / per;
                for l in 0..128 {
                    let (w, q, p) = (l / 32, (l % 32) / 4, l % 4);
                    for (j, &r) in regs.iter().enumerate() {
                        let x = self.regs[128 * g + l][r];
                        for h in 0..per {
                            a[16 * w + q + 8 * (j & 1)][per * p + h + kk / 2 * (j >> 1)] =
                                form.a_ty.value(x >> (bits * h));
                        }
                    }
                }
            }
        }
        let b: Vec<f64> = mma
            .b_addrs
            .iter()
            .map(|&at| smem_elem(self, at, form.b_ty))
            .collect();
        for l in 0..128 {
            let t = 128 * g + l;
            let (w, q, p) = (l / 32, (l % 32) / 4, l % 4);
            for (i, &r) in form.d.iter().enumerate() {
                let row = 16 * w + q + 8 * ((i >> 1) & 1);
                let col = 8 * (i >> 2) + 2 * p + (i & 1);
                let s: f64 = (0..kk).map(|k| a[row][k] * b[k * n + col]).sum();
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
        let (ea, eb) = (form.a_ty.bytes(), form.b_ty.bytes());
        let spans = mma
            .a_addrs
            .iter()
            .map(|&at| (at, ea))
            .chain(mma.b_addrs.iter().map(|&at| (at, eb)));
        for (at, es) in spans {
            for b in at as usize..(at + es) as usize {
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

    /// `mma.sync.aligned.m16n8k16` / `m16n8k8` / `m16n8k32` (fp8) with the PTX ISA's fragment
    /// layouts; exact products summed in f64. A register holds `per` consecutive K elements
    /// (lowest K in the low bits): A's register `j` rows `g + 8 (j & 1)`, columns
    /// `per t + k/2 (j >> 1)`; B's register `j` rows `per t + k/2 j`, column `g`.
    fn mma(&mut self, ins: &Ins, active: &[bool]) {
        assert!(active.iter().all(|&a| a), "mma under a guard");
        let op = &ins.op;
        let (k, per) = if op.contains("m16n8k8") {
            (8, 1)
        } else if op.contains("m16n8k32") {
            (32, 4)
        } else {
            (16, 2)
        };
        let tf32 = per == 1;
        let bf = op.contains("bf16");
        // `.f32.<atype>.<btype>.f32`: the operand types of an fp8 mma.
        let types: Vec<&str> = op.split('.').collect();
        let fp8 = |i: usize| types[types.len() - 3 + i] == "e5m2";
        let regs = |i: usize| match &ins.args[i] {
            Opnd::Vec(v) => v.clone(),
            _ => panic!(),
        };
        let (d, ar, br, cr) = (regs(0), regs(1), regs(2), regs(3));
        let elem = |x: u64, h: usize, operand: usize| -> f64 {
            if tf32 {
                let v = f32v(x);
                assert_eq!(v.to_bits() & 0x1fff, 0, "tf32 operand not rounded");
                v as f64
            } else if per == 4 {
                fp8_decode(fp8(operand), (x >> (8 * h)) as u8)
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
            let mut a = [[0f64; 32]; 16];
            let mut b = [[0f64; 8]; 32];
            let mut c = [[0f64; 8]; 16];
            for l in 0..32usize {
                let t = 32 * w + l;
                let (g, q) = (l / 4, l % 4);
                for (j, &r) in ar.iter().enumerate() {
                    let x = self.regs[t][r];
                    for h in 0..per {
                        a[g + 8 * (j & 1)][per * q + h + k / 2 * (j >> 1)] = elem(x, h, 0);
                    }
                }
                for (j, &r) in br.iter().enumerate() {
                    let x = self.regs[t][r];
                    for h in 0..per {
                        b[per * q + h + k / 2 * j][g] = elem(x, h, 1);
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

/// Runs one CTA (`ctaid` of `grid`) of `prog` with `threads` threads to its end.
pub(crate) fn run_cta(
    prog: &Prog,
    gmem: &mut Gmem,
    params: &HashMap<String, u64>,
    tmaps: &[TensorMap],
    threads: usize,
    ctaid: [u64; 3],
    grid: [u64; 3],
) {
    let mut m = Machine {
        prog,
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
        ctaid,
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
        tmaps,
        tma: tma::TmaState::new(threads, prog.shared.max(16)),
    };
    m.run(gmem);
}

/// What an atomic `kind` (`add`, `min`, `max`, `and`, `or`, `xor`, `exch`) of type `ty` writes
/// over `old` with operand `x` (bit patterns of the type's width).
fn atomic_update(kind: &str, ty: &str, old: u64, x: u64) -> u64 {
    let f32_of = |b: u64| f32::from_bits(b as u32);
    let f64_of = f64::from_bits;
    match (kind, ty) {
        ("exch", _) => x,
        ("and", _) => old & x,
        ("or", _) => old | x,
        ("xor", _) => old ^ x,
        ("add", "f32") => (f32_of(old) + f32_of(x)).to_bits() as u64,
        ("add", "f64") => (f64_of(old) + f64_of(x)).to_bits(),
        ("add", "u64" | "s64" | "b64") => old.wrapping_add(x),
        ("add", _) => (old as u32).wrapping_add(x as u32) as u64,
        ("min", "s32") => (old as i32).min(x as i32) as u32 as u64,
        ("max", "s32") => (old as i32).max(x as i32) as u32 as u64,
        ("min", "u32") => (old as u32).min(x as u32) as u64,
        ("max", "u32") => (old as u32).max(x as u32) as u64,
        ("min", "s64") => (old as i64).min(x as i64) as u64,
        ("max", "s64") => (old as i64).max(x as i64) as u64,
        ("min", "u64") => old.min(x),
        ("max", "u64") => old.max(x),
        _ => panic!("unsupported atomic {kind}.{ty}"),
    }
}

/// The value of an fp8 pattern (PTX's `e4m3`: bias 7, no infinities, NaN at S.1111.111;
/// `e5m2`: bias 15, IEEE 754's infinities and NaNs).
fn fp8_decode(e5m2: bool, b: u8) -> f64 {
    let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (mbits, bias, top) = if e5m2 { (2, 15, 31) } else { (3, 7, 15) };
    let e = ((b & 0x7f) >> mbits) as i32;
    let m = (b & ((1 << mbits) - 1)) as i32;
    if e5m2 && e == top {
        return if m == 0 { s * f64::INFINITY } else { f64::NAN };
    }
    if !e5m2 && e == top && m == 7 {
        return f64::NAN;
    }
    let frac = if e == 0 {
        m as f64
    } else {
        ((1 << mbits) + m) as f64
    };
    s * frac * 2f64.powi(e.max(1) - bias - mbits)
}

/// `x` rounded to the nearest finite fp8 value (ties to the even pattern), saturating, NaN to
/// the canonical `0x7f`: `cvt.rn.satfinite`, by search over the 127 magnitudes.
fn fp8_encode(e5m2: bool, x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = (x as f64).abs();
    // The largest finite magnitude's pattern: 0x7b (57344) or 0x7e (448).
    let max = if e5m2 { 0x7b } else { 0x7e };
    if a >= fp8_decode(e5m2, max) {
        return sign | max;
    }
    let mut best = (f64::INFINITY, 0u8);
    for b in 0..max + 1 {
        let d = (fp8_decode(e5m2, b) - a).abs();
        if d < best.0 || (d == best.0 && b & 1 == 0) {
            best = (d, b);
        }
    }
    sign | best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `max.f32`/`min.f32` of two zeros give on the H200 (sm_90, checked with
    /// hand-written PTX): +0 and -0, whatever the order.
    #[test]
    fn max_and_min_of_signed_zeros_do_not_depend_on_the_order() {
        for (a, b) in [(0.0f32, -0.0f32), (-0.0, 0.0)] {
            assert_eq!(max_f32(a, b).to_bits(), 0);
            assert_eq!(min_f32(a, b).to_bits(), 0x8000_0000);
        }
        assert_eq!(max_f32(f32::NAN, 1.0), 1.0);
        assert_eq!(min_f32(-1.0, f32::NAN), -1.0);
        assert_eq!(max_f32(-0.0, -0.0).to_bits(), 0x8000_0000);
    }
}
