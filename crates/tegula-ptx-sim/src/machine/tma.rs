//! Hopper's Tensor Memory Accelerator and mbarriers: tensor maps, `cp.async.bulk.tensor.2d`
//! loads (completing on an mbarrier) and stores (in bulk groups), `mbarrier.*`, and the fences
//! between the generic and the async proxy. Asynchrony at its latest, as for `cp.async`: a load
//! lands when a thread waits for its barrier's phase and nothing else is missing; a store reads
//! shared memory when a `cp.async.bulk.wait_group` retires its group (or at the exit).

use super::{by_another, Access, Gmem, Machine, GBASE, GSPAN};
use crate::parse::{Ins, Opnd};
use crate::{Arg, TensorMapArg, TmaSwizzle};
use std::collections::{HashMap, VecDeque};

/// Tensor map `i`'s address in the parameter space (what `mov.u64 %rd, NAME` gives) and in the
/// generic space (what `cvta.param` makes of it): opaque handles, 128 bytes apart, far from
/// the buffers (`GBASE + GSPAN * i`) and from shared memory.
const TMAP_PARAM: u64 = 1 << 50;
const TMAP_GENERIC: u64 = 1 << 52;
const TMAP_BYTES: u64 = 128;

/// The writer recorded for the shared bytes a bulk tensor copy landed: the async proxy.
const ASYNC_PROXY: u32 = u32::MAX - (1 << 20);

/// The largest tx-count an mbarrier holds (PTX ISA: 2^20 - 1), and the largest arrival count.
const MAX_TX: i64 = (1 << 20) - 1;
const MAX_COUNT: u64 = (1 << 20) - 1;

impl TmaSwizzle {
    /// The span whose 16-byte chunks the swizzle permutes (0: none).
    fn span(self) -> u64 {
        match self {
            TmaSwizzle::None => 0,
            TmaSwizzle::B32 => 32,
            TmaSwizzle::B64 => 64,
            TmaSwizzle::B128 => 128,
        }
    }

    /// The alignment the box's shared address needs: 128 bytes, or the swizzle pattern's
    /// repeat (8 lines of 128 bytes for 128B, 4 for 64B, 2 for 32B).
    fn alignment(self) -> u64 {
        match self {
            TmaSwizzle::None => 128,
            s => 8 * s.span(),
        }
    }
}

/// The shared address where the TMA puts (or takes) the byte of the box at linear shared
/// address `at` (the box row after row from its destination). The PTX ISA's "Swizzling
/// Modes" (5.5.7) give the patterns as tables of 16-byte chunks over 128-byte lines: with
/// 128-byte swizzle, chunk `c` (0-7) of line `l` holds chunk `c ^ (l % 8)`, repeating every
/// 1024 bytes; with 64-byte, `c ^ (l % 4)` (512 bytes); with 32-byte, `c ^ (l % 2)` (256
/// bytes); and the pattern's phase is that of the shared address itself (the "swizzle base
/// offset" is `(dstMem / 128) % 8` etc. off those boundaries). In address bits: bits 4-6 of
/// the address XOR bits 7-9 (128B), bits 4-5 XOR 7-8 (64B), bit 4 XOR bit 7 (32B): CuTe's
/// `Swizzle<3,4,3>`, `<2,4,3>`, `<1,4,3>`, which CUTLASS maps to `CU_TENSOR_MAP_SWIZZLE_128B`,
/// `_64B`, `_32B` (`cute/atom/copy_traits_sm90_tma_swizzle.hpp`). The same rule as the wgmma
/// descriptors' swizzles.
fn swizzle(at: u64, s: TmaSwizzle) -> u64 {
    match s.span() {
        0 => at,
        span => at ^ (((at >> 7) & (span / 16 - 1)) << 4),
    }
}

/// A tensor map argument, checked as `cuTensorMapEncodeTiled` would check it.
pub(crate) struct TensorMap {
    name: String,
    /// The global address of element (0, 0).
    base: u64,
    elem: u64,
    dims: [u64; 2],
    stride: u64,
    box_dims: [u64; 2],
    swizzle: TmaSwizzle,
}

impl TensorMap {
    /// Argument `i` (parameter `name`), its buffer from `args` (`bufs`: argument -> buffer
    /// index in global memory). Refuses (panics) what the driver refuses, per the
    /// `cuTensorMapEncodeTiled` documentation: an element size other than 1, 2, 4, 8; a
    /// dimension of 0 or over 2^32; a global address not 16-byte aligned; a row stride not a
    /// multiple of 16 (or, here, shorter than a row); a box dimension of 0 or over 256; an
    /// inner box row not a multiple of 16 bytes, or (swizzled) longer than the swizzle span.
    /// And a tensor that does not fit in its buffer.
    pub(crate) fn new(
        i: usize,
        name: &str,
        m: &TensorMapArg,
        args: &[Arg],
        bufs: &[Option<usize>],
    ) -> Self {
        let what = format!("tensor map argument {i} ({name})");
        let len = match args.get(m.buf) {
            Some(Arg::Buf(b)) => b.len() as u64,
            _ => panic!("{what}: argument {} is not a buffer", m.buf),
        };
        let elem = m.elem_bytes as u64;
        assert!(
            [1, 2, 4, 8].contains(&elem),
            "{what}: element size {elem} (1, 2, 4 or 8)"
        );
        for (d, &n) in m.dims.iter().enumerate() {
            assert!(
                (1..=1 << 32).contains(&n),
                "{what}: dimension {d} of size {n}"
            );
        }
        for (d, &n) in m.box_dims.iter().enumerate() {
            assert!(
                (1..=256).contains(&n),
                "{what}: box dimension {d} of size {n} (1 to 256)"
            );
        }
        assert_eq!(
            m.byte_offset % 16,
            0,
            "{what}: the tensor's address is not 16-byte aligned"
        );
        let row = m.dims[0] * elem;
        assert!(
            m.row_stride_bytes.is_multiple_of(16) && m.row_stride_bytes < 1 << 40,
            "{what}: row stride {} is not a multiple of 16 bytes",
            m.row_stride_bytes
        );
        assert!(
            m.row_stride_bytes >= row,
            "{what}: row stride {} is shorter than a row ({row} bytes)",
            m.row_stride_bytes
        );
        let inner = m.box_dims[0] as u64 * elem;
        assert!(
            inner.is_multiple_of(16),
            "{what}: the box's inner row is {inner} bytes, not a multiple of 16"
        );
        let span = m.swizzle.span();
        assert!(
            span == 0 || inner <= span,
            "{what}: the box's inner row is {inner} bytes, more than the {span}-byte swizzle span"
        );
        let end = m.byte_offset + (m.dims[1] - 1) * m.row_stride_bytes + row;
        assert!(
            end <= len,
            "{what}: the tensor ends at byte {end} of its buffer of {len}"
        );
        let b = bufs[m.buf].unwrap() as u64;
        TensorMap {
            name: name.to_string(),
            base: GBASE + GSPAN * b + m.byte_offset,
            elem,
            dims: m.dims,
            stride: m.row_stride_bytes,
            box_dims: [m.box_dims[0] as u64, m.box_dims[1] as u64],
            swizzle: m.swizzle,
        }
    }

    /// Tensor map `i`'s parameter-space address (the value of its parameter's name).
    pub(crate) fn param_address(i: usize) -> u64 {
        TMAP_PARAM + TMAP_BYTES * i as u64
    }

    fn box_bytes(&self) -> u64 {
        self.box_dims[0] * self.box_dims[1] * self.elem
    }

    /// The elements of the box at `coords`: (linear offset in the box, global address when
    /// inside the tensor).
    fn elements(&self, coords: [i64; 2]) -> impl Iterator<Item = (u64, Option<u64>)> + '_ {
        let [b0, b1] = self.box_dims;
        (0..b1).flat_map(move |i1| {
            (0..b0).map(move |i0| {
                let (g0, g1) = (coords[0] + i0 as i64, coords[1] + i1 as i64);
                let inside = (0..self.dims[0] as i64).contains(&g0)
                    && (0..self.dims[1] as i64).contains(&g1);
                let at =
                    inside.then(|| self.base + g1 as u64 * self.stride + g0 as u64 * self.elem);
                ((i1 * b0 + i0) * self.elem, at)
            })
        })
    }
}

/// Which tensor map `addr` is the `base` address of, if any.
fn tensor_map_at(addr: u64, base: u64, n: usize) -> Option<usize> {
    let i = addr.checked_sub(base)? / TMAP_BYTES;
    (addr.is_multiple_of(TMAP_BYTES) && (i as usize) < n).then_some(i as usize)
}

/// Whether `addr` lies where tensor maps' handles are (for messages of other accesses).
pub(crate) fn is_tensor_map_address(addr: u64) -> bool {
    (TMAP_PARAM..TMAP_PARAM + (1 << 40)).contains(&addr)
        || (TMAP_GENERIC..TMAP_GENERIC + (1 << 40)).contains(&addr)
}

/// One `cp.async.bulk.tensor` load, waiting to land.
struct TmaLoad {
    map: usize,
    coords: [i64; 2],
    dst: u64,
    pc: usize,
}

/// An mbarrier object (8 bytes of shared memory).
struct Mbarrier {
    count: u32,
    /// Arrivals the current phase still waits for.
    pending: u32,
    /// The current phase (0 at init); `phase` phases have completed.
    phase: u64,
    /// The current phase's tx-count (expect_tx adds, landed bytes subtract), and the bytes
    /// expect_tx announced in it.
    tx: i64,
    expected: i64,
    /// Loads that complete their bytes on this barrier, not landed yet.
    copies: Vec<TmaLoad>,
    init_thread: usize,
    init_epoch: u32,
    init_pc: usize,
    /// The initializing thread's `fence.proxy.async` and `fence.mbarrier_init` counts at the
    /// init (the TMA sees the init once either has grown).
    init_fences: (u32, u32),
}

/// Where a landed shared byte came from: barrier `bar`'s phase `phase` completed, in `epoch`.
#[derive(Clone, Copy)]
pub(crate) struct Landing {
    bar: u64,
    phase: u64,
    epoch: u32,
}

/// One `cp.async.bulk.tensor` store: the shared bytes of the elements inside the tensor and
/// where they go; `data` once read.
struct BulkStore {
    elems: Vec<(u64, u64)>,
    elem: u64,
    data: Option<Vec<u8>>,
}

/// The TMA and mbarrier state of a CTA.
pub(crate) struct TmaState {
    mbars: HashMap<u64, Mbarrier>,
    /// Per shared byte: part of an mbarrier; bulk tensor loads into it not landed yet; the
    /// load that landed it (until a thread writes it); bulk tensor stores not yet reading it.
    is_mbar: Vec<bool>,
    pending: Vec<u16>,
    pub(crate) landed: Vec<Option<Landing>>,
    bulk_reads: Vec<u16>,
    /// Per thread: barrier -> phases it has seen completed (by a successful try_wait).
    seen: Vec<HashMap<u64, u64>>,
    /// Per thread: `fence.mbarrier_init`s executed; the epoch of each `fence.proxy.async`.
    init_fences: Vec<u32>,
    pub(crate) fence_epochs: Vec<Vec<u32>>,
    /// Per thread: bulk stores not committed, and committed bulk groups, oldest first.
    bulk_open: Vec<Vec<BulkStore>>,
    bulk_groups: Vec<VecDeque<Vec<BulkStore>>>,
}

impl TmaState {
    pub(crate) fn new(threads: usize, shared: usize) -> Self {
        TmaState {
            mbars: HashMap::new(),
            is_mbar: vec![false; shared],
            pending: vec![0; shared],
            landed: vec![None; shared],
            bulk_reads: vec![0; shared],
            seen: vec![HashMap::new(); threads],
            init_fences: vec![0; threads],
            fence_epochs: vec![Vec::new(); threads],
            bulk_open: (0..threads).map(|_| Vec::new()).collect(),
            bulk_groups: (0..threads).map(|_| VecDeque::new()).collect(),
        }
    }
}

impl Machine<'_> {
    /// Whether thread `t` is ordered after the landing `l`: it saw the phase complete, or a
    /// barrier came since.
    pub(crate) fn after_landing(&self, t: usize, l: Landing) -> bool {
        l.epoch < self.epoch || self.tma.seen[t].get(&l.bar).is_some_and(|&s| s > l.phase)
    }

    /// The checks of a generic access (`ld`/`st.shared`, `ldmatrix`, a cp.async landing) of
    /// shared byte `b` by thread `t`, for the TMA: not an mbarrier, not waiting for a bulk
    /// tensor load, not read by a pending bulk tensor store (a write); and, when a bulk tensor
    /// load landed the byte, `t` ordered after the landing (Some(ordered)).
    pub(crate) fn tma_access(&self, t: usize, b: usize, write: bool) -> Option<bool> {
        let (how, pc) = (if write { "written" } else { "read" }, self.pc);
        assert!(
            !self.tma.is_mbar[b],
            "shared byte {b} {how} by thread {t} (pc {pc}): it is part of an mbarrier"
        );
        if self.tma.pending[b] > 0 {
            panic!(
                "shared byte {b} {how} before completion of the bulk tensor copy into it (thread \
                 {t}, pc {pc}){}",
                self.pending_copy_of(b)
            );
        }
        assert!(
            !write || self.tma.bulk_reads[b] == 0,
            "shared byte {b} written by thread {t} (pc {pc}) while a bulk tensor store reads \
             it: before cp.async.bulk.wait_group.read retires the store"
        );
        self.tma.landed[b].map(|l| self.after_landing(t, l))
    }

    /// " (mbarrier at shared X, issued at pc N)" of the pending load into byte `b`.
    fn pending_copy_of(&self, b: usize) -> String {
        for (bar, mb) in &self.tma.mbars {
            for c in &mb.copies {
                let map = &self.tmaps[c.map];
                let hit =
                    (0..map.box_bytes()).any(|at| swizzle(c.dst + at, map.swizzle) == b as u64);
                if hit {
                    return format!(
                        ": the copy issued at pc {} completes on the mbarrier at shared {bar:#x}",
                        c.pc
                    );
                }
            }
        }
        String::new()
    }

    /// `mbarrier.*`, `fence.mbarrier_init`, `prefetch.tensormap` and `cp.async.bulk.*`, for
    /// each active thread.
    pub(crate) fn tma_op(&mut self, ins: &Ins, active: &[bool], gmem: &mut Gmem) {
        let op = ins.op.as_str();
        for (t, &on) in active.iter().enumerate() {
            if !on {
                continue;
            }
            if op.starts_with("mbarrier.") {
                self.mbarrier(t, ins, gmem);
            } else if op == "fence.mbarrier_init.release.cluster" {
                self.tma.init_fences[t] += 1;
            } else if op.starts_with("prefetch.") && op.ends_with(".tensormap") {
                self.prefetch_tensormap(t, ins);
            } else {
                self.bulk(t, ins, gmem);
            }
        }
    }

    /// `prefetch.tensormap [a]` (a generic address) or `prefetch.param.tensormap [a]`: no
    /// effect, but `a` must be a tensor map's.
    fn prefetch_tensormap(&self, t: usize, ins: &Ins) {
        let n = self.tmaps.len();
        let a = self.map_address(t, &ins.args[0]);
        let (ok, other) = match ins.op.as_str() {
            "prefetch.tensormap" => (TMAP_GENERIC, TMAP_PARAM),
            "prefetch.param.tensormap" => (TMAP_PARAM, TMAP_GENERIC),
            op => panic!("unsupported {op}"),
        };
        if tensor_map_at(a, ok, n).is_none() {
            let why = match tensor_map_at(a, other, n) {
                Some(_) if ok == TMAP_GENERIC => {
                    "a tensor map's .param address, not its generic address (cvta.param it)"
                }
                Some(_) => "a tensor map's generic address, not its .param address",
                None => "not the address of a tensor map",
            };
            panic!("{} (thread {t}, pc {}): {a:#x} is {why}", ins.op, self.pc);
        }
    }

    /// The value of an address operand naming a tensor map: `[reg]`, or `[NAME]` of a tensor
    /// map parameter (its parameter-space address).
    fn map_address(&self, t: usize, a: &Opnd) -> u64 {
        match a {
            Opnd::Addr(b, off) => match &**b {
                Opnd::Sym(s) if self.prog.params.get(s) == Some(&true) => {
                    self.params[s].wrapping_add(*off as u64)
                }
                b => self.val(t, b).wrapping_add(*off as u64),
            },
            o => panic!("pc {}: {o:?} is not an address", self.pc),
        }
    }

    /// `cvta.param`: a tensor map's parameter-space address to its generic address (the only
    /// parameter addresses the simulator has).
    pub(crate) fn cvta_param(&self, x: u64) -> u64 {
        let i = tensor_map_at(x, TMAP_PARAM, self.tmaps.len()).unwrap_or_else(|| {
            panic!(
                "cvta.param (pc {}) of {x:#x}: not the parameter-space address of a tensor map",
                self.pc
            )
        });
        TMAP_GENERIC + TMAP_BYTES * i as u64
    }

    /// The tensor map and the coordinates of a `[tensorMap, {c0, c1}]` operand: the map by its
    /// generic address; the coordinates signed 32-bit.
    fn tensor_operand(&self, t: usize, a: &Opnd) -> (usize, [i64; 2]) {
        let Opnd::Tensor(map, coords) = a else {
            panic!(
                "pc {}: {a:?} is not a [tensorMap, {{coordinates}}] operand",
                self.pc
            )
        };
        let addr = self.val(t, map);
        let n = self.tmaps.len();
        let m = tensor_map_at(addr, TMAP_GENERIC, n).unwrap_or_else(|| {
            let why = if tensor_map_at(addr, TMAP_PARAM, n).is_some() {
                "a tensor map's .param address, not its generic address (cvta.param it)"
            } else {
                "not the generic address of a tensor map"
            };
            panic!(
                "pc {} (thread {t}): tensor map operand {addr:#x}: {why}",
                self.pc
            )
        });
        assert_eq!(
            coords.len(),
            2,
            "pc {}: a 2d tensor copy with {} coordinates",
            self.pc,
            coords.len()
        );
        let c = |i: usize| self.val(t, &coords[i]) as u32 as i32 as i64;
        let coords = [c(0), c(1)];
        // The H200 faults (illegal instruction) on a box whose rows do not start 16-byte
        // aligned: the innermost coordinate times the element size is a multiple of 16.
        let eb = self.tmaps[m].elem as i64;
        assert!(
            (coords[0] * eb).rem_euclid(16) == 0,
            "pc {} (thread {t}): a bulk tensor copy at innermost coordinate {} of {eb}-byte \
             elements: its rows would not start 16-byte aligned (the GPU faults)",
            self.pc,
            coords[0]
        );
        (m, coords)
    }

    /// The shared address of an mbarrier operand, checked: in shared memory, 8-byte aligned.
    fn mbar_address(&self, t: usize, a: &Opnd) -> u64 {
        let bar = self.addr(t, a);
        assert!(
            bar.is_multiple_of(8) && bar + 8 <= self.smem.len() as u64,
            "pc {} (thread {t}): mbarrier address {bar:#x} is not an 8-byte aligned shared address",
            self.pc
        );
        bar
    }

    /// The initialized mbarrier at `bar`, for thread `t`: initialized, and, by another
    /// thread, before a `bar.sync`.
    fn mbar_for(&self, t: usize, bar: u64) -> &Mbarrier {
        let mb = self.tma.mbars.get(&bar).unwrap_or_else(|| {
            panic!(
                "{} (thread {t}, pc {}): no mbarrier initialized at shared {bar:#x}",
                self.prog.code[self.pc].op, self.pc
            )
        });
        assert!(
            mb.init_thread == t || mb.init_epoch < self.epoch,
            "{} (thread {t}, pc {}) uses the mbarrier at shared {bar:#x}, which thread {} \
             initialized (pc {}) with no bar.sync since",
            self.prog.code[self.pc].op,
            self.pc,
            mb.init_thread,
            mb.init_pc
        );
        mb
    }

    fn mbarrier(&mut self, t: usize, ins: &Ins, gmem: &mut Gmem) {
        let op = ins.op.as_str();
        let words: Vec<&str> = op.split('.').collect();
        let allowed: &[&str] = match words[1] {
            "init" | "inval" => &["shared", "shared::cta", "b64"],
            "arrive" => &[
                "expect_tx",
                "release",
                "relaxed",
                "cta",
                "cluster",
                "shared",
                "shared::cta",
                "b64",
            ],
            "expect_tx" => &["relaxed", "cta", "cluster", "shared", "shared::cta", "b64"],
            "try_wait" => &[
                "parity",
                "acquire",
                "relaxed",
                "cta",
                "cluster",
                "shared",
                "shared::cta",
                "b64",
            ],
            _ => &[],
        };
        assert!(
            words.last() == Some(&"b64") && words[2..].iter().all(|w| allowed.contains(w)),
            "unsupported {op}"
        );
        let a = &ins.args;
        let pc = self.pc;
        match words[1] {
            "init" => {
                let bar = self.mbar_address(t, &a[0]);
                let count = self.val(t, &a[1]);
                assert!(
                    (1..=MAX_COUNT).contains(&count),
                    "mbarrier.init (thread {t}, pc {pc}) at shared {bar:#x}: count {count}"
                );
                if let Some(mb) = self.tma.mbars.get(&bar) {
                    panic!(
                        "mbarrier.init (thread {t}, pc {pc}) at shared {bar:#x}: already \
                         initialized (by thread {} at pc {}): initialize it from one thread, once",
                        mb.init_thread, mb.init_pc
                    );
                }
                for b in bar as usize..bar as usize + 8 {
                    assert!(
                        self.tma.pending[b] == 0 && self.tma.bulk_reads[b] == 0,
                        "mbarrier.init (pc {pc}) at shared {bar:#x}: a bulk tensor copy uses \
                         these bytes"
                    );
                    self.tma.is_mbar[b] = true;
                }
                let fences = (self.proxy_fences[t], self.tma.init_fences[t]);
                self.tma.mbars.insert(
                    bar,
                    Mbarrier {
                        count: count as u32,
                        pending: count as u32,
                        phase: 0,
                        tx: 0,
                        expected: 0,
                        copies: Vec::new(),
                        init_thread: t,
                        init_epoch: self.epoch,
                        init_pc: pc,
                        init_fences: fences,
                    },
                );
            }
            "inval" => {
                // The object ends: no phase may be under way (arrivals or bytes announced, or
                // copies not landed), and its bytes are plain shared memory again.
                let bar = self.mbar_address(t, &a[0]);
                let mb = self.mbar_for(t, bar);
                assert!(
                    mb.pending == mb.count && mb.tx == 0 && mb.copies.is_empty(),
                    "mbarrier.inval (thread {t}, pc {pc}) at shared {bar:#x}: its phase {} is \
                     under way ({} of {} arrivals missing, tx-count {}, {} copies in flight)",
                    mb.phase,
                    mb.pending,
                    mb.count,
                    mb.tx,
                    mb.copies.len()
                );
                self.tma.mbars.remove(&bar);
                for b in bar as usize..bar as usize + 8 {
                    self.tma.is_mbar[b] = false;
                }
                // A barrier initialized here again counts its phases from 0.
                for seen in &mut self.tma.seen {
                    seen.remove(&bar);
                }
            }
            "expect_tx" => {
                let bar = self.mbar_address(t, &a[0]);
                let tx = self.val(t, &a[1]) as u32 as i64;
                self.mbar_for(t, bar);
                self.expect_tx(t, bar, tx);
            }
            "arrive" => {
                let bar = self.mbar_address(t, &a[1]);
                self.mbar_for(t, bar);
                let n = if words.contains(&"expect_tx") {
                    let tx = self.val(t, &a[2]) as u32 as i64;
                    self.expect_tx(t, bar, tx);
                    1
                } else if a.len() > 2 {
                    self.val(t, &a[2]) as u32
                } else {
                    1
                };
                let mb = self.tma.mbars.get_mut(&bar).unwrap();
                assert!(
                    n >= 1 && mb.pending >= n,
                    "{op} (thread {t}, pc {pc}): more arrivals on the mbarrier at shared \
                     {bar:#x} than its count ({}) in phase {} (if the phase's bulk copies \
                     complete it, wait for the phase first)",
                    mb.count,
                    mb.phase
                );
                let state = mb.phase;
                mb.pending -= n;
                if mb.pending == 0 && mb.tx == 0 && mb.copies.is_empty() {
                    complete(mb);
                }
                match &a[0] {
                    Opnd::Sym(s) if s == "_" => {}
                    d => self.set(t, d, state),
                }
            }
            "try_wait" => {
                assert!(words.contains(&"parity"), "unsupported {op}");
                let bar = self.mbar_address(t, &a[1]);
                let parity = self.val(t, &a[2]);
                assert!(parity <= 1, "{op} (thread {t}, pc {pc}): parity {parity}");
                self.mbar_for(t, bar);
                if self.tma.mbars[&bar].phase % 2 == parity {
                    self.complete_by_wait(t, bar, parity, gmem);
                }
                let phase = self.tma.mbars[&bar].phase;
                let seen = self.tma.seen[t].entry(bar).or_insert(0);
                *seen = (*seen).max(phase);
                self.set(t, &a[0], 1);
            }
            _ => panic!("unsupported {op}"),
        }
    }

    fn expect_tx(&mut self, t: usize, bar: u64, tx: i64) {
        let mb = self.tma.mbars.get_mut(&bar).unwrap();
        mb.tx += tx;
        mb.expected += tx;
        assert!(
            tx <= MAX_TX && mb.tx <= MAX_TX,
            "{} (thread {t}, pc {}): the mbarrier at shared {bar:#x}'s tx-count would be {} \
             (at most 2^20 - 1)",
            self.prog.code[self.pc].op,
            self.pc,
            mb.tx
        );
    }

    /// A `try_wait.parity` by thread `t` for the current phase of the barrier at `bar`: the
    /// latest moment its loads may land. They do if every arrival is in, and must bring the
    /// tx-count to exactly 0; then the phase completes. Otherwise the wait would never return
    /// (every thread runs in lockstep, so no one can arrive meanwhile): refused.
    fn complete_by_wait(&mut self, t: usize, bar: u64, parity: u64, gmem: &mut Gmem) {
        let pc = self.pc;
        let mb = &self.tma.mbars[&bar];
        let head = format!(
            "mbarrier at shared {bar:#x}: try_wait.parity {parity} (thread {t}, pc {pc}) waits \
             for phase {}, which can never complete",
            mb.phase
        );
        assert!(
            mb.pending == 0,
            "{head}: {} of its {} arrivals missing (expect_tx announced {} bytes, {} bulk \
             tensor copies on it)",
            mb.pending,
            mb.count,
            mb.expected,
            mb.copies.len()
        );
        let brought: i64 = mb
            .copies
            .iter()
            .map(|c| self.tmaps[c.map].box_bytes() as i64)
            .sum();
        let left = mb.tx - brought;
        assert!(
            left <= 0,
            "{head}: its tx-count would end at {left}, not 0: expect_tx announced {} bytes, its \
             {} bulk tensor copies bring {brought}",
            mb.expected,
            mb.copies.len()
        );
        assert!(
            left == 0,
            "mbarrier at shared {bar:#x}, phase {}: its tx-count would end at {left}, not 0: \
             expect_tx announced {} bytes, its {} bulk tensor copies bring {brought} (the phase \
             would complete before all of them land)",
            mb.phase,
            mb.expected,
            mb.copies.len()
        );
        let mb = self.tma.mbars.get_mut(&bar).unwrap();
        let phase = mb.phase;
        let copies = std::mem::take(&mut mb.copies);
        complete(mb);
        for c in copies {
            self.land(c, bar, phase, gmem);
        }
    }

    /// A bulk tensor load lands: the box's elements (zeros outside the tensor) written to
    /// shared memory by the async proxy, as completed by phase `phase` of barrier `bar`.
    fn land(&mut self, c: TmaLoad, bar: u64, phase: u64, gmem: &mut Gmem) {
        let map = &self.tmaps[c.map];
        let elem = map.elem as usize;
        let landing = Some(Landing {
            bar,
            phase,
            epoch: self.epoch,
        });
        let writer = Some(Access {
            epoch: self.epoch,
            thread: ASYNC_PROXY,
        });
        for (lin, src) in map.elements(c.coords) {
            let mut data = [0u8; 8];
            if let Some(g) = src {
                data[..elem].copy_from_slice(gmem.at(g, elem));
            }
            // 16-byte chunks stay whole, so an element's bytes stay together.
            let at = swizzle(c.dst + lin, map.swizzle) as usize;
            for (k, &x) in data[..elem].iter().enumerate() {
                let b = at + k;
                self.tma.pending[b] -= 1;
                self.smem[b] = x;
                self.writes[b] = writer;
                self.tma.landed[b] = landing;
            }
        }
    }

    fn bulk(&mut self, t: usize, ins: &Ins, gmem: &mut Gmem) {
        let op = ins.op.as_str();
        let pc = self.pc;
        let canonical = op.replace(".tile.", ".");
        match canonical.as_str() {
            "cp.async.bulk.commit_group" => {
                let group = std::mem::take(&mut self.tma.bulk_open[t]);
                self.tma.bulk_groups[t].push_back(group);
            }
            "cp.async.bulk.wait_group" | "cp.async.bulk.wait_group.read" => {
                let Opnd::Imm(keep) = ins.args[0] else {
                    panic!("{op} (pc {pc}): the group count is not an immediate")
                };
                let n = self.tma.bulk_groups[t].len().saturating_sub(keep as usize);
                if canonical.ends_with(".read") {
                    for g in 0..n {
                        for s in 0..self.tma.bulk_groups[t][g].len() {
                            self.read_store(t, g, s);
                        }
                    }
                } else {
                    for _ in 0..n {
                        self.retire_group(t, 0, gmem);
                    }
                }
            }
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
            | "cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes" => {
                self.issue_load(t, ins)
            }
            "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" => self.issue_store(t, ins),
            _ => panic!("unsupported {op}"),
        }
    }

    /// A load's issue: the destination and the barrier checked, the destination bytes
    /// reserved until it lands (no access, no other copy into them).
    fn issue_load(&mut self, t: usize, ins: &Ins) {
        let pc = self.pc;
        let dst = self.addr(t, &ins.args[0]);
        let (m, coords) = self.tensor_operand(t, &ins.args[1]);
        let bar = self.mbar_address(t, &ins.args[2]);
        let map = &self.tmaps[m];
        let what = format!(
            "bulk tensor load (thread {t}, pc {pc}) of tensor map {}",
            map.name
        );
        let align = map.swizzle.alignment();
        assert!(
            dst.is_multiple_of(align),
            "{what}: shared destination {dst:#x} is not {align}-byte aligned"
        );
        let bytes = map.box_bytes();
        assert!(
            dst + bytes <= self.smem.len() as u64,
            "{what}: the box of {bytes} bytes at shared {dst:#x} is out of bounds"
        );
        let mb = self.mbar_for(t, bar);
        let u = mb.init_thread;
        assert!(
            self.proxy_fences[u] > mb.init_fences.0 || self.tma.init_fences[u] > mb.init_fences.1,
            "{what} completes on the mbarrier at shared {bar:#x}, but thread {u}, which \
             initialized it, ran no fence.mbarrier_init (nor fence.proxy.async) since: the \
             init is not visible to the async proxy"
        );
        for lin in 0..bytes {
            let b = swizzle(dst + lin, map.swizzle) as usize;
            assert!(
                !self.tma.is_mbar[b],
                "{what} overwrites shared byte {b}, part of an mbarrier"
            );
            assert!(
                self.tma.pending[b] == 0,
                "{what} into shared byte {b}, which another bulk tensor load in flight writes"
            );
            assert!(
                self.copies_in_flight[b] == 0,
                "{what} into shared byte {b}, which a cp.async in flight writes"
            );
            assert!(
                self.wgmma_reads[b] == 0,
                "{what} into shared byte {b}, which a pending wgmma reads"
            );
            assert!(
                self.tma.bulk_reads[b] == 0,
                "{what} into shared byte {b}, which a pending bulk tensor store reads"
            );
            assert!(
                !by_another(self.reads[b], self.epoch, t),
                "{what} overwrites shared byte {b}, which another thread read with no barrier since"
            );
            let ordered = match self.tma.landed[b] {
                Some(l) => self.after_landing(t, l),
                None => !by_another(self.writes[b], self.epoch, t),
            };
            assert!(
                ordered,
                "{what} overwrites shared byte {b}, which another thread (or load) wrote with no \
                 barrier since"
            );
            self.tma.pending[b] += 1;
        }
        self.tma.mbars.get_mut(&bar).unwrap().copies.push(TmaLoad {
            map: m,
            coords,
            dst,
            pc,
        });
    }

    /// A store's issue: the shared bytes of the elements inside the tensor checked (written,
    /// ordered before, visible to the async proxy) and reserved until the store reads them.
    fn issue_store(&mut self, t: usize, ins: &Ins) {
        let pc = self.pc;
        let (m, coords) = self.tensor_operand(t, &ins.args[0]);
        // Measured on the H200: a bulk tensor store at a negative coordinate faults (illegal
        // instruction), where a load zero-fills.
        assert!(
            coords[0] >= 0 && coords[1] >= 0,
            "pc {pc} (thread {t}): a bulk tensor store at coordinates {coords:?}: a store \
             cannot start at a negative coordinate (the GPU faults)"
        );
        let src = self.addr(t, &ins.args[1]);
        let map = &self.tmaps[m];
        let what = format!(
            "bulk tensor store (thread {t}, pc {pc}) to tensor map {}",
            map.name
        );
        let align = map.swizzle.alignment();
        assert!(
            src.is_multiple_of(align),
            "{what}: shared source {src:#x} is not {align}-byte aligned"
        );
        let bytes = map.box_bytes();
        assert!(
            src + bytes <= self.smem.len() as u64,
            "{what}: the box of {bytes} bytes at shared {src:#x} is out of bounds"
        );
        let mut elems = Vec::new();
        for (lin, g) in map.elements(coords) {
            let Some(g) = g else { continue };
            let at = swizzle(src + lin, map.swizzle);
            elems.push((at, g));
            for b in at as usize..(at + map.elem) as usize {
                assert!(
                    !self.tma.is_mbar[b],
                    "{what} reads shared byte {b}, part of an mbarrier"
                );
                if self.tma.pending[b] > 0 {
                    panic!(
                        "{what} reads shared byte {b} before completion of the bulk tensor copy \
                         into it{}",
                        self.pending_copy_of(b)
                    );
                }
                assert!(
                    self.copies_in_flight[b] == 0,
                    "{what} reads shared byte {b} while a cp.async into it is in flight"
                );
                if let Some(l) = self.tma.landed[b] {
                    assert!(
                        self.after_landing(t, l),
                        "{what} reads shared byte {b}, landed by a bulk tensor load that thread \
                         {t} did not wait for (mbarrier at shared {:#x}), with no barrier since",
                        l.bar
                    );
                } else {
                    let w = self.writes[b]
                        .unwrap_or_else(|| panic!("{what} reads shared byte {b}, never written"));
                    let u = w.thread as usize;
                    assert!(
                        u == t || w.epoch < self.epoch,
                        "{what} reads shared byte {b}, written by thread {u} with no barrier since"
                    );
                    // The writer's first fence.proxy.async after the write, before the
                    // barrier that orders the write before this store (another thread's).
                    let fence = self.tma.fence_epochs[u].get(self.write_fences[b] as usize);
                    assert!(
                        fence.is_some(),
                        "{what} reads shared byte {b}: thread {u} wrote it (st.shared) and ran no \
                         fence.proxy.async since"
                    );
                    assert!(
                        u == t || *fence.unwrap() < self.epoch,
                        "{what} reads shared byte {b}: thread {u} wrote it and ran \
                         fence.proxy.async only after the last barrier (the fence must come \
                         before the bar.sync)"
                    );
                }
                self.tma.bulk_reads[b] += 1;
            }
        }
        let elem = map.elem;
        self.tma.bulk_open[t].push(BulkStore {
            elems,
            elem,
            data: None,
        });
    }

    /// Store `s` of thread `t`'s committed group `g` reads its shared bytes (once).
    fn read_store(&mut self, t: usize, g: usize, s: usize) {
        if self.tma.bulk_groups[t][g][s].data.is_some() {
            return;
        }
        let store = &self.tma.bulk_groups[t][g][s];
        let (elems, n) = (store.elems.clone(), store.elem as usize);
        let data = self.read_elems(t, &elems, n);
        self.tma.bulk_groups[t][g][s].data = Some(data);
    }

    /// The shared bytes of `elems` (`n` bytes each), read for thread `t`'s store: released
    /// from the store, and recorded as read by `t` (others' writes need a barrier first).
    fn read_elems(&mut self, t: usize, elems: &[(u64, u64)], n: usize) -> Vec<u8> {
        let mut data = Vec::with_capacity(elems.len() * n);
        for &(at, _) in elems {
            for b in at as usize..at as usize + n {
                data.push(self.smem[b]);
                self.tma.bulk_reads[b] -= 1;
                let several =
                    self.reads[b].is_some_and(|a| a.epoch == self.epoch && a.thread != t as u32);
                self.reads[b] = Some(Access {
                    epoch: self.epoch,
                    thread: if several { u32::MAX } else { t as u32 },
                });
            }
        }
        data
    }

    /// Thread `t`'s committed group `g` retires: its stores read shared memory (if not yet)
    /// and write global memory.
    fn retire_group(&mut self, t: usize, g: usize, gmem: &mut Gmem) {
        for s in 0..self.tma.bulk_groups[t][g].len() {
            self.read_store(t, g, s);
        }
        let group = self.tma.bulk_groups[t].remove(g).unwrap();
        for store in group {
            write_store(&store, store.data.as_ref().unwrap(), gmem);
        }
    }

    /// The CTA's exit: bulk stores not waited for (committed or not) still land.
    pub(crate) fn tma_exit(&mut self, gmem: &mut Gmem) {
        for t in 0..self.threads {
            while !self.tma.bulk_groups[t].is_empty() {
                self.retire_group(t, 0, gmem);
            }
            for store in std::mem::take(&mut self.tma.bulk_open[t]) {
                let data = self.read_elems(t, &store.elems, store.elem as usize);
                write_store(&store, &data, gmem);
            }
        }
    }
}

fn write_store(store: &BulkStore, data: &[u8], gmem: &mut Gmem) {
    let n = store.elem as usize;
    for (k, &(_, g)) in store.elems.iter().enumerate() {
        gmem.at(g, n).copy_from_slice(&data[k * n..(k + 1) * n]);
    }
}

/// The current phase of `mb` completes: the next begins with all arrivals pending.
fn complete(mb: &mut Mbarrier) {
    mb.phase += 1;
    mb.pending = mb.count;
    mb.tx = 0;
    mb.expected = 0;
}
