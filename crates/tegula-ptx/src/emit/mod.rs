//! Lowering of a Tile IR kernel to PTX.
//!
//! Values are lowered on demand, in the layout their consumer asks for:
//! - *anchored* ops (loads, reductions, scans, dots, atomics, control-flow results and block
//!   arguments) are lowered once, in program order, in a layout of their own;
//! - *free* ops (constants, aranges, splats, broadcasts, elementwise arithmetic, pointer
//!   arithmetic) are materialized in whatever layout a consumer requests, so an `arange` feeding a
//!   2-D address computation is built directly in the load's layout. Free values that depend on
//!   no anchored value (loop invariants) are lowered once: in the kernel prologue when first
//!   asked for inside a loop or branch, else where they are first asked for (so the epilogue's
//!   store addresses are not live across the loops before it).
//!
//! An anchored value asked for in another layout goes through shared memory (`convert.rs`).
//! Results are cached per (value, layout) in scopes that follow the region nesting, so a
//! register set created inside a loop body or branch is never used outside it. A free value
//! asked for inside a body whose operands all come from an enclosing scope (a tile index
//! computed from an outer loop's counter, asked for in the inner loop) is emitted before the
//! body, at its hoist point, and cached in that enclosing scope: computed once, not every
//! iteration.
//!
//! The modules:
//! - `elementwise.rs`, `math.rs`: free ops, per register; `types.rs`: register classes;
//! - `memory.rs`: global loads, stores and atomics (vector accesses of 32/64-bit words);
//! - `reduce.rs`: reductions and scans; `print.rs`: `device_print`;
//! - `convert.rs`, `convert_pieces.rs`: layout conversions through shared memory (in slabs
//!   when the tile exceeds the scratch buffer), which also carry out `reshape`, `permute` and
//!   `flip`; `gather.rs`: `gather`, through shared memory;
//! - `store_rows.rs`: a store of a value computed in an mma layout (a cast of the tile, a
//!   scaling by its row statistics) crosses to the store's layout after the cast, in padded
//!   rows of shared memory with vector accesses;
//! - `dot.rs`: `dot`, by FMA where tensor cores do not apply; `mma.rs`: on tensor cores
//!   (`ldmatrix`, `mma.sync`; operands staged, hoisted or resident in shared memory);
//! - `pipeline.rs`: `cp.async` multi-stage pipelining of the loads a loop's dots read.

mod combine;
mod convert;
mod convert_pieces;
mod descriptor;
mod dot;
mod elementwise;
mod gather;
mod libm;
mod math;
mod memory;
mod mma;
mod pipeline;
mod print;
mod reduce;
mod store_rows;
pub mod types;
mod wgmma;

pub(crate) use crate::analysis::is_anchored;
use crate::analysis::moves_across_threads;
use crate::layout::Layout;
use crate::plan::{Context, Plan};
use crate::ptx::{Arg, Builder, HoistPoint, Reg, RegClass, SMEM};
use crate::PtxError;
pub(crate) use memory::red_takes;
use tegula_ir::fast_hash::{HashMap, HashSet};
use tegula_ir::{Block, Inst, Kernel, Loc, Op, Shape, TileType, Value, ValueDef};
use types::class_of;

pub(crate) type R<T> = Result<T, PtxError>;

/// Registers of one value in one layout, in the layout's register order.
pub(crate) type Vals = Vec<Reg>;

/// The values lowered in one region body, or while an induction variable is bound to another
/// iteration (a scope opened in straight-line code, without a hoist point).
#[derive(Default)]
struct Scope {
    vals: HashMap<(Value, Layout), Vals>,
    /// Values `define`d here: anchored results, block arguments, a rebound induction variable.
    defined: HashSet<Value>,
    /// For a loop or branch body: the place before its code, where the values of enclosing
    /// scopes it asks for are computed.
    hoist_point: Option<HoistPoint>,
}

impl Scope {
    fn body(hoist_point: HoistPoint) -> Scope {
        Scope {
            hoist_point: Some(hoist_point),
            ..Scope::default()
        }
    }
}

/// Scratch a layout conversion may take at once; larger tiles convert in slabs, so that a
/// conversion never costs a kernel more occupancy than 48 KB of shared memory would.
pub const CONVERT_SCRATCH: u32 = 48 * 1024;

/// The emitter: the kernel, its plan, the PTX being built, and what emission has produced so
/// far (registers of values, addresses, scratch), grouped by what each serves.
pub(crate) struct Lower<'k> {
    pub k: &'k Kernel,
    /// The kernel's analyses, target and options.
    pub cx: &'k Context<'k>,
    /// What the planning passes decided; read only.
    pub plan: &'k Plan,
    pub b: Builder,
    /// The instruction being lowered, for error locations.
    pub loc: Loc,
    /// The thread's index, lane and warp (computed in the prologue).
    pub thread: ThreadIds,
    /// The registers of the values lowered so far, by scope.
    vals: ValueCache,
    /// Address registers shared by the accesses of one layout.
    addr: AddressCache,
    /// Shared memory: its base register, the bytes used, the pipeline's reservation.
    pub shared: SharedScratch,
    /// Tensor-core lowering state (`mma.rs`).
    mma: mma::MmaState,
    pipe: pipeline::PipeState,
    /// The 16-bit registers `unpack` split out of a 32-bit word: the word, and whether the
    /// register is its high half (`widen` reads a bf16 straight from the word).
    packed_halves: HashMap<Reg, (Reg, bool)>,
}

/// `%tid.x` and the lane and warp it splits into.
pub(crate) struct ThreadIds {
    pub tid: Reg,
    pub lane: Reg,
    pub warp: Reg,
}

/// The registers of lowered values: anchored values' layouts, loop invariants, and the
/// scopes of the regions being emitted.
#[derive(Default)]
struct ValueCache {
    /// The layouts of the anchored values defined so far (the layout their registers are in).
    anchors: HashMap<Value, Layout>,
    invariant: HashMap<Value, bool>,
    /// Loop invariants lowered in the kernel prologue: usable everywhere.
    global: HashMap<(Value, Layout), Vals>,
    /// Loop invariants lowered in straight-line code outside every loop and branch: usable by
    /// everything emitted after them in the body, but not by the prologue.
    straight_line: HashMap<(Value, Layout), Vals>,
    /// How many loop or branch bodies enclose the code being emitted (0: straight-line code
    /// of the kernel's top level, which dominates everything emitted after it).
    regions_open: u32,
    scopes: Vec<Scope>,
    /// While a value is emitted at a hoist point: the scope it belongs to (lookups see only
    /// it and the scopes enclosing it). `None`: the innermost scope.
    hoisting_into: Option<usize>,
}

/// Per-thread base addresses, offsets and owner predicates of a layout's accesses, and the
/// cache-policy registers, computed once and reused.
#[derive(Default)]
struct AddressCache {
    bases: HashMap<(Layout, Vec<u32>), Vec<Option<Reg>>>,
    offsets: HashMap<(Layout, Vec<u32>, Vec<i64>), Option<Reg>>,
    owners: HashMap<(Layout, Vec<u32>), Option<Reg>>,
    policies: HashMap<u8, Reg>,
    /// `%tid.x == 0` (created once): the thread that issues TMA copies.
    first_thread: Option<Reg>,
    /// Each tensor map's generic address (created, and prefetched, once).
    tensor_maps: HashMap<usize, Reg>,
}

/// The kernel's shared memory as emission uses it.
#[derive(Default)]
pub(crate) struct SharedScratch {
    smem_base: Option<Reg>,
    /// Bytes the kernel declares (the largest extent any use reached).
    pub smem_bytes: u32,
    /// Scratch base and offset while pipeline buffers occupy the start of the buffer.
    smem_shift: Vec<(Reg, u32)>,
    /// The `mbarrier`s declared so far (one a TMA load).
    pub mbarriers: u32,
}

impl<'k> Lower<'k> {
    pub fn new(cx: &'k Context<'k>, plan: &'k Plan) -> Lower<'k> {
        let k = cx.k;
        let mut b = Builder::new();
        let (tid, lane, warp) = b.in_prologue(|b| {
            let tid = b.op("mov.u32", RegClass::B32, vec![Arg::Sym("%tid.x".into())]);
            let lane = b.op("and.b32", RegClass::B32, vec![tid.into(), Arg::Imm(31)]);
            let warp = b.op("shr.u32", RegClass::B32, vec![tid.into(), Arg::Imm(5)]);
            (tid, lane, warp)
        });
        Lower {
            k,
            cx,
            plan,
            b,
            loc: Loc::UNKNOWN,
            thread: ThreadIds { tid, lane, warp },
            vals: ValueCache {
                scopes: vec![Scope::default()],
                ..ValueCache::default()
            },
            addr: AddressCache::default(),
            shared: SharedScratch::default(),
            mma: mma::MmaState::default(),
            pipe: Default::default(),
            packed_halves: HashMap::default(),
        }
    }

    /// Warps per program.
    pub fn num_warps(&self) -> u32 {
        self.cx.options.num_warps
    }

    /// The target's SM version (90 for sm_90a).
    pub fn sm(&self) -> u32 {
        self.cx.target.sm
    }

    /// Shared memory one block may use on this target (the opt-in limit; the launch asks for
    /// it as dynamic shared memory).
    pub fn max_shared(&self) -> u32 {
        self.cx.target.max_shared_bytes()
    }

    // --- errors --------------------------------------------------------------------------

    pub fn unsupported(&self, what: impl Into<String>) -> PtxError {
        PtxError::Unsupported {
            kernel: self.k.name.clone(),
            what: what.into(),
            loc: self.loc,
        }
    }

    pub fn invalid(&self, message: impl Into<String>) -> PtxError {
        PtxError::Invalid {
            kernel: self.k.name.clone(),
            message: message.into(),
            loc: self.loc,
        }
    }

    // --- the value cache -----------------------------------------------------------------

    fn lookup(&self, v: Value, l: &Layout) -> Option<Vals> {
        let key = (v, l.clone());
        if let Some(r) = self.vals.global.get(&key) {
            return Some(r.clone());
        }
        // Prologue code precedes the body, so it cannot use a value the body computes.
        if self.b.is_in_prologue() {
            return None;
        }
        if let Some(r) = self.vals.straight_line.get(&key) {
            return Some(r.clone());
        }
        self.vals.scopes[..=self.current_scope()]
            .iter()
            .rev()
            .find_map(|s| s.vals.get(&key).cloned())
    }

    /// The scope code is emitted for: the innermost, or the one a hoisted value belongs to.
    fn current_scope(&self) -> usize {
        self.vals
            .hoisting_into
            .unwrap_or(self.vals.scopes.len() - 1)
    }

    fn remember(&mut self, v: Value, l: &Layout, regs: Vals) {
        let s = self.current_scope();
        self.vals.scopes[s].vals.insert((v, l.clone()), regs);
    }

    /// The innermost scope defining an operand of free value `v` (through free operands; 0 for
    /// none): where `v` can be computed. An operand found in no scope, or an op that moves
    /// elements across threads ([`moves_across_threads`]), keeps `v` in the current scope.
    fn home_scope(&self, v: Value, memo: &mut HashMap<Value, usize>) -> usize {
        if let Some(&h) = memo.get(&v) {
            return h;
        }
        let here = self.current_scope();
        let defined_in = || {
            (0..=here)
                .rev()
                .find(|&s| self.vals.scopes[s].defined.contains(&v))
                .unwrap_or(here)
        };
        let h = match self.k.values[v].def {
            ValueDef::Param(_) => 0,
            ValueDef::BlockArg(..) => defined_in(),
            ValueDef::Result(inst, _) => {
                let d = &self.k.insts[inst];
                if is_anchored(&d.op) {
                    defined_in()
                } else if moves_across_threads(&d.op) {
                    here
                } else {
                    d.args
                        .iter()
                        .map(|&a| self.home_scope(a, memo))
                        .max()
                        .unwrap_or(0)
                }
            }
        };
        memo.insert(v, h);
        h
    }

    /// Lowers free value `v` in the scope `home` encloses the current one with: at the hoist
    /// point of the first body opened inside `home` (in place when only rebinding scopes lie
    /// between), cached in `home`.
    fn lower_hoisted(&mut self, v: Value, l: &Layout, home: usize) -> R<Vals> {
        let here = self.current_scope();
        let point = self.vals.scopes[home + 1..=here]
            .iter()
            .find_map(|s| s.hoist_point);
        let saved_target = match point {
            Some(p) => Some(self.b.set_hoist_target(Some(p))),
            None => None,
        };
        let saved_scope = self.vals.hoisting_into.replace(home);
        let saved_loc = self.loc;
        let r = self.lower_free(v, l);
        self.loc = saved_loc;
        self.vals.hoisting_into = saved_scope;
        if let Some(t) = saved_target {
            self.b.set_hoist_target(t);
        }
        let r = r?;
        self.remember(v, l, r.clone());
        Ok(r)
    }

    /// Records the registers of an anchored value in its own layout.
    pub fn define(&mut self, v: Value, l: &Layout, regs: Vals) {
        let l = if self.k.ty(v).shape.is_scalar() {
            Layout::scalar()
        } else {
            l.clone()
        };
        debug_assert!(
            l.is_scalar() || self.natural(v) == (l.clone(), true),
            "{v} defined in {l:?}, planned in {:?}",
            self.natural(v)
        );
        self.vals.anchors.insert(v, l.clone());
        let s = self.current_scope();
        self.vals.scopes[s].defined.insert(v);
        self.remember(v, &l, regs);
    }

    fn is_invariant(&mut self, v: Value) -> bool {
        if let Some(&b) = self.vals.invariant.get(&v) {
            return b;
        }
        let r = match self.k.values[v].def {
            ValueDef::Param(_) => true,
            ValueDef::BlockArg(..) => false,
            ValueDef::Result(inst, _) => {
                let d = &self.k.insts[inst];
                !is_anchored(&d.op)
                    && !moves_across_threads(&d.op)
                    && d.args.clone().iter().all(|&a| self.is_invariant(a))
            }
        };
        self.vals.invariant.insert(v, r);
        r
    }

    /// The registers of `v` in layout `l` (any layout for scalars).
    pub fn get(&mut self, v: Value, l: &Layout) -> R<Vals> {
        let ty = self.k.ty(v);
        let l = if ty.shape.is_scalar() {
            Layout::scalar()
        } else {
            l.clone()
        };
        if let Some(r) = self.lookup(v, &l) {
            return Ok(r);
        }
        // A rank-1 load staged by a running pipeline is read from its slot where first needed.
        let staged = self.staged_row(v)?;
        if let Some(al) = staged.or_else(|| self.vals.anchors.get(&v).cloned()) {
            let src = self.lookup(v, &al).ok_or_else(|| {
                self.invalid(format!("{v} is used outside the region that defines it"))
            })?;
            let out = self.convert(&src, ty, &al, &l, None)?;
            self.remember(v, &l, out.clone());
            return Ok(out);
        }
        // A loop invariant asked for inside a loop or branch goes to the prologue, computed
        // once; asked for in straight-line code (the epilogue's store addresses, say) it is
        // computed there, so its registers are not held across the loops before it.
        let inv = self.is_invariant(v);
        if !inv && !self.b.is_in_prologue() {
            let home = self.home_scope(v, &mut HashMap::default());
            if home < self.current_scope() {
                return self.lower_hoisted(v, &l, home);
            }
        }
        let was_in_prologue = if inv && self.vals.regions_open > 0 {
            self.b.set_prologue(true)
        } else {
            self.b.is_in_prologue()
        };
        let in_prologue = self.b.is_in_prologue();
        let saved_loc = self.loc;
        let r = self.lower_free(v, &l);
        self.loc = saved_loc;
        self.b.set_prologue(was_in_prologue);
        let r = r?;
        if inv && in_prologue {
            self.vals.global.insert((v, l), r.clone());
        } else if inv && self.vals.regions_open == 0 {
            self.vals.straight_line.insert((v, l), r.clone());
        } else {
            self.remember(v, &l, r.clone());
        }
        Ok(r)
    }

    /// Empties the scopes from `from` on (their hoist points stay), returning what they held.
    fn set_aside_values(&mut self, from: usize) -> Vec<Scope> {
        self.vals.scopes[from..]
            .iter_mut()
            .map(|s| Scope {
                vals: std::mem::take(&mut s.vals),
                defined: std::mem::take(&mut s.defined),
                hoist_point: s.hoist_point,
            })
            .collect()
    }

    /// Puts back what [`Self::set_aside_values`] took (dropping what was cached meanwhile).
    fn restore_values(&mut self, from: usize, set_aside: Vec<Scope>) {
        self.vals.scopes.truncate(from);
        self.vals.scopes.extend(set_aside);
    }

    /// The single register of a scalar value.
    pub fn scalar(&mut self, v: Value) -> R<Reg> {
        Ok(self.get(v, &Layout::scalar())?[0])
    }

    // --- layouts -------------------------------------------------------------------------

    /// The layout `v` is cheapest in, and whether it comes from an anchored op (strong) rather
    /// than the shape's default (weak): the plan's ([`crate::plan::layouts`]).
    pub fn natural(&self, v: Value) -> (Layout, bool) {
        self.plan.layouts.natural(v)
    }

    /// How many consecutive registers of a rank-1 value in `l` hold consecutive elements (the
    /// widest vector access the layout allows).
    pub(crate) fn contiguous_run(l: &Layout, shape: &Shape) -> u32 {
        let Some(&p) = l.kept().last() else {
            return 1;
        };
        let g = l.geometry(shape);
        if l.interleaved[p] || g.mult[p] != 1 {
            return 1;
        }
        l.spt[p].min(g.parent[p]).max(1)
    }

    // --- thread geometry -----------------------------------------------------------------

    /// The index of the thread's first element along parent axis `d` before wrapping at the
    /// axis size (`(lane_d + tpw_d * warp_d) * spt_d`, or `lane_d + spt_d * tpw_d * warp_d` on an
    /// interleaved axis), or `None` when it is always zero.
    fn position(&mut self, l: &Layout, d: usize) -> Option<Reg> {
        let (tpw, wpc, spt) = (l.tpw[d], l.wpc[d], l.spt[d]);
        if tpw == 1 && wpc == 1 {
            return None;
        }
        let (ls, ws) = (l.lane_strides()[d], l.warp_strides()[d]);
        let lane_shift = if l.interleaved[d] {
            0
        } else {
            spt.trailing_zeros()
        };
        let warp_shift = (tpw * spt).trailing_zeros();
        let (lane, warp) = (self.thread.lane, self.thread.warp);
        Some(self.b.in_prologue(|b| {
            let part = |b: &mut Builder, src: Reg, stride: u32, count: u32, shift: u32| {
                if count == 1 {
                    return None;
                }
                let s = b.op(
                    "shr.u32",
                    RegClass::B32,
                    vec![src.into(), Arg::Imm(stride.trailing_zeros() as i64)],
                );
                let m = b.op(
                    "and.b32",
                    RegClass::B32,
                    vec![s.into(), Arg::Imm(count as i64 - 1)],
                );
                Some(if shift == 0 {
                    m
                } else {
                    b.op(
                        "shl.b32",
                        RegClass::B32,
                        vec![m.into(), Arg::Imm(shift as i64)],
                    )
                })
            };
            let lp = part(b, lane, ls, tpw, lane_shift);
            let wp = part(b, warp, ws, wpc, warp_shift);
            match (lp, wp) {
                (Some(x), None) | (None, Some(x)) => x,
                (Some(x), Some(w)) => b.op("or.b32", RegClass::B32, vec![x.into(), w.into()]),
                (None, None) => unreachable!("tpw or wpc exceeds one"),
            }
        }))
    }

    /// Per parent axis, the thread's base element index (`None` when zero).
    pub fn bases(&mut self, l: &Layout, shape: &Shape) -> Vec<Option<Reg>> {
        let parent = l.parent_shape(shape);
        let key = (l.clone(), parent.clone());
        if let Some(b) = self.addr.bases.get(&key) {
            return b.clone();
        }
        let mut out = Vec::new();
        for (d, &p) in parent.iter().enumerate() {
            let base = if p == 1 {
                None
            } else {
                self.position(l, d).map(|pos| {
                    self.b.in_prologue(|b| {
                        b.op(
                            "and.b32",
                            RegClass::B32,
                            vec![pos.into(), Arg::Imm(p as i64 - 1)],
                        )
                    })
                })
            };
            out.push(base);
        }
        self.addr.bases.insert(key, out.clone());
        out
    }

    /// `sum_d base_d * strides[d]` over parent axes (strides in any unit), as s32.
    pub fn thread_offset(&mut self, l: &Layout, shape: &Shape, strides: &[i64]) -> Option<Reg> {
        let parent = l.parent_shape(shape);
        let key = (l.clone(), parent, strides.to_vec());
        if let Some(r) = self.addr.offsets.get(&key) {
            return *r;
        }
        let bases = self.bases(l, shape);
        let mut acc: Option<Reg> = None;
        self.b.in_prologue(|b| {
            for (d, base) in bases.iter().enumerate() {
                let (Some(base), s) = (base, strides[d]) else {
                    continue;
                };
                if s == 0 {
                    continue;
                }
                acc = Some(match acc {
                    None => b.op(
                        "mul.lo.s32",
                        RegClass::B32,
                        vec![(*base).into(), Arg::Imm(s)],
                    ),
                    Some(a) => b.op(
                        "mad.lo.s32",
                        RegClass::B32,
                        vec![(*base).into(), Arg::Imm(s), a.into()],
                    ),
                });
            }
        });
        self.addr.offsets.insert(key, acc);
        acc
    }

    /// The constant part of register `i`'s offset for the same strides.
    pub fn reg_offset(geom: &crate::layout::RegGeometry, i: usize, strides: &[i64]) -> i64 {
        let c = geom.coords(i);
        (0..c.len())
            .map(|d| geom.const_index(d, c[d]) as i64 * strides[d])
            .sum()
    }

    /// Row-major strides of `shape` mapped onto the parent axes of `l` (sliced axes: 0).
    pub fn parent_strides(l: &Layout, shape: &Shape, scale: i64) -> Vec<i64> {
        let st = shape.strides();
        let mut out = vec![0i64; l.parent_rank()];
        for (k, d) in l.kept().into_iter().enumerate() {
            out[d] = st[k] as i64 * scale;
        }
        out
    }

    /// A predicate true on the one thread that owns each element of a replicated layout;
    /// `None` when every thread owns its elements.
    pub fn owner(&mut self, l: &Layout, shape: &Shape) -> Option<Reg> {
        let parent = l.parent_shape(shape);
        let key = (l.clone(), parent.clone());
        if let Some(o) = self.addr.owners.get(&key) {
            return *o;
        }
        let tid = self.thread.tid;
        let o = if l.is_scalar() {
            Some(self.b.in_prologue(|b| {
                b.op("setp.eq.u32", RegClass::Pred, vec![tid.into(), Arg::Imm(0)])
            }))
        } else {
            let mut acc: Option<Reg> = None;
            for (d, &p) in parent.iter().enumerate() {
                if l.spt[d] * l.tpw[d] * l.wpc[d] <= p {
                    continue;
                }
                let Some(pos) = self.position(l, d) else {
                    continue;
                };
                acc = Some(self.b.in_prologue(|b| {
                    let ok = b.op(
                        "setp.lt.u32",
                        RegClass::Pred,
                        vec![pos.into(), Arg::Imm(p as i64)],
                    );
                    match acc {
                        None => ok,
                        Some(a) => b.op("and.pred", RegClass::Pred, vec![a.into(), ok.into()]),
                    }
                }));
            }
            acc
        };
        self.addr.owners.insert(key, o);
        o
    }

    /// The 32-bit shared address of the scratch buffer; `bytes` more of it are needed.
    /// Inside a pipelined loop the scratch starts after the pipeline's buffers.
    pub fn smem(&mut self, bytes: u32) -> Reg {
        if let Some(&(base, shift)) = self.shared.smem_shift.last() {
            self.shared.smem_bytes = self.shared.smem_bytes.max(shift + bytes);
            return base;
        }
        self.shared.smem_bytes = self.shared.smem_bytes.max(bytes);
        if let Some(r) = self.shared.smem_base {
            return r;
        }
        let prefix = self.mbarrier_bytes() as i64;
        let r = self.b.in_prologue(|b| {
            let r = b.op("mov.u32", RegClass::B32, vec![Arg::Sym(SMEM.into())]);
            if prefix == 0 {
                r
            } else {
                b.op("add.s32", RegClass::B32, vec![r.into(), Arg::Imm(prefix)])
            }
        });
        self.shared.smem_base = Some(r);
        r
    }

    /// Bytes at the start of the shared array that hold the TMA loads' `mbarrier`s, before
    /// the scratch buffer: a multiple of [`Self::shared_alignment`], so the scratch stays as
    /// aligned as the array (a static `.shared` barrier would move the dynamic array to an
    /// address only 16-byte aligned, and TMA copies need 128).
    pub fn mbarrier_bytes(&self) -> u32 {
        let loads = self.plan.descriptors.tma_loads(self.k) as u32;
        let slots = self.plan.pipelines.tma_barriers;
        (8 * (loads + slots)).div_ceil(self.shared_alignment()) * self.shared_alignment()
    }

    /// The shared memory the kernel declares: the barriers and the scratch buffer.
    pub fn shared_bytes(&self) -> u32 {
        (self.shared.smem_bytes + self.mbarrier_bytes()).div_ceil(16) * 16
    }

    /// The alignment the scratch buffer is declared with: 1024 bytes when `wgmma` reads
    /// pipeline slots or TMA fills them (their swizzle patterns repeat every 1024 bytes of
    /// address), else 128.
    pub fn shared_alignment(&self) -> u32 {
        if !self.plan.pipelines.any_wgmma() && self.plan.pipelines.tma_barriers == 0 {
            128
        } else {
            1024
        }
    }

    /// Every thread waits for the others. In a kernel with TMA stores, the thread that
    /// issues them first waits until they have read their shared memory: every reuse of the
    /// scratch buffer comes after a barrier, so a store's buffer is free again then, and the
    /// store itself does not wait (its copy overlaps what follows it, as far as the next
    /// barrier).
    pub fn barrier(&mut self) {
        if self.plan.descriptors.tma_stores(self.k) > 0 {
            let first = self.first_thread();
            self.b.emit_guarded(
                first,
                false,
                "cp.async.bulk.wait_group.read",
                vec![Arg::Imm(0)],
            );
        }
        self.b.emit("bar.sync", vec![Arg::Imm(0)]);
    }

    /// An L2 cache policy register for an eviction hint (created once).
    pub fn policy(&mut self, last: bool) -> Reg {
        let key = last as u8;
        if let Some(r) = self.addr.policies.get(&key) {
            return *r;
        }
        let op = if last {
            "createpolicy.fractional.L2::evict_last.b64"
        } else {
            "createpolicy.fractional.L2::evict_first.b64"
        };
        let r = self
            .b
            .in_prologue(|b| b.op(op, RegClass::B64, vec![Arg::F32(1.0)]));
        self.addr.policies.insert(key, r);
        r
    }

    // --- program order -------------------------------------------------------------------

    pub fn lower_kernel(&mut self) -> R<()> {
        self.lower_block(self.k.body)?;
        if self.plan.descriptors.tma_stores(self.k) > 0 {
            // The program's shared memory ends with it: its stores have read it first.
            let first = self.first_thread();
            self.b
                .emit_guarded(first, false, "cp.async.bulk.wait_group", vec![Arg::Imm(0)]);
        }
        Ok(())
    }

    fn lower_block(&mut self, block: Block) -> R<()> {
        for &inst in &self.k.blocks[block].insts {
            if !is_anchored(&self.k.insts[inst].op) {
                continue;
            }
            self.loc = self.k.insts[inst].loc;
            self.lower_anchored(inst)?;
        }
        Ok(())
    }

    fn lower_anchored(&mut self, inst: Inst) -> R<()> {
        let d = &self.k.insts[inst];
        match &d.op {
            Op::Load { .. } if self.is_pipelined(inst) => Ok(()),
            Op::Load { .. } => self.lower_load(inst),
            Op::Store { .. } => self.lower_store(inst),
            Op::Atomic { .. } | Op::AtomicCas { .. } => self.lower_atomic(inst),
            Op::Reduce { .. } => self.lower_reduce(inst),
            Op::Scan { .. } => self.lower_scan(inst),
            Op::ReduceWith { .. } => self.lower_reduce_with(inst),
            Op::ScanWith { .. } => self.lower_scan_with(inst),
            Op::Dot { .. } => self.lower_dot(inst),
            Op::For { .. } => self.lower_for(inst),
            Op::If => self.lower_if(inst),
            Op::While => self.lower_while(inst),
            Op::Assert { .. } => self.lower_assert(inst),
            Op::Print { .. } => self.lower_print(inst),
            Op::DescLoad => self.lower_desc_load(inst),
            Op::DescStore => self.lower_desc_store(inst),
            Op::Barrier => {
                self.b.emit("bar.sync", vec![Arg::Imm(0)]);
                Ok(())
            }
            Op::Yield | Op::Condition => Ok(()),
            other => Err(self.invalid(format!("`{}` is not anchored", other.name()))),
        }
    }

    /// The values a region's terminator passes on.
    fn terminator_args(&self, block: Block) -> Vec<Value> {
        self.k.blocks[block]
            .insts
            .last()
            .map(|&t| self.k.insts[t].args.clone())
            .unwrap_or_default()
    }

    /// Fresh registers holding a copy of `vals`.
    fn copy_regs(&mut self, vals: &[Reg]) -> Vals {
        vals.iter()
            .map(|&r| {
                let d = self.b.reg(r.class);
                self.b.mov(d, r);
                d
            })
            .collect()
    }

    /// Moves `src` into `dst` as a parallel copy: every source reads its value from before
    /// the copy. Only a source that is also a destination (a loop swapping two carried values)
    /// could be overwritten before it is read; those go through a temporary first, the rest
    /// move directly, and a register moved onto itself not at all.
    fn assign(&mut self, dst: &[Vals], src: &[Vals]) {
        let written: HashSet<Reg> = dst.iter().flatten().copied().collect();
        let pairs: Vec<(Reg, Reg)> = dst
            .iter()
            .zip(src)
            .flat_map(|(d, s)| d.iter().copied().zip(s.iter().copied()))
            .filter(|(d, s)| d != s)
            .collect();
        let sources: Vec<Reg> = pairs
            .iter()
            .map(|&(_, s)| {
                if written.contains(&s) {
                    self.copy_regs(&[s])[0]
                } else {
                    s
                }
            })
            .collect();
        for (&(d, _), s) in pairs.iter().zip(sources) {
            self.b.mov(d, s);
        }
    }

    fn lower_for(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let body = d.regions[0];
        let bargs = self.k.blocks[body].args.clone();
        let inits = &d.args[3..];
        let yields = self.terminator_args(body);
        let layouts = self.plan.layouts.carried(inst).to_vec();
        // Row sums folded into a carried value (the online softmax's `l * alpha + sum(p)`)
        // reduce across threads once, after the loop (rule *partial sum*).
        let partial = self.plan.layouts.loop_partials(inst).to_vec();
        let (lo, hi, step) = (
            self.scalar(d.args[0])?,
            self.scalar(d.args[1])?,
            self.scalar(d.args[2])?,
        );
        let iv_dtype = self.k.ty(bargs[0]).dtype();
        let mut carried = Vec::new();
        for (i, (&init, l)) in inits.iter().zip(&layouts).enumerate() {
            let mut v = self.get(init, l)?;
            if let Some(sum) = &partial[i] {
                v = self.partial_sum_init(sum, init, &v);
            }
            carried.push(self.copy_regs(&v));
        }
        let iv = self.copy_regs(&[lo])[0];
        self.hoist_dot_operands(inst)?;
        let piped = self.pipeline_prologue(inst, iv, hi, step)?;
        // Without a pipeline the resident operands are written here.
        self.write_resident_operands(false);
        // A loop whose body's own loop is pipelined may pipeline that loop across its
        // iterations (pipeline.rs, `Nest`).
        let nest = !piped && self.nest_prologue(inst, iv, hi, step)?;
        let (top, end) = (self.b.new_label("for"), self.b.new_label("endfor"));
        let hoist_point = self.b.hoist_point();
        self.b.place_label(&top);
        self.vals.regions_open += 1;
        let cmp = if iv_dtype.is_signed_int() { "s" } else { "u" };
        let bits = iv_dtype.bits().max(32);
        let p = self.b.op(
            format!("setp.lt.{cmp}{bits}"),
            RegClass::Pred,
            vec![iv.into(), hi.into()],
        );
        self.b.bra_if(p, true, &end);
        self.vals.scopes.push(Scope::body(hoist_point));
        self.define(bargs[0], &Layout::scalar(), vec![iv]);
        for (i, l) in layouts.iter().enumerate() {
            self.define(bargs[1 + i], l, carried[i].clone());
        }
        if piped {
            self.pipeline_iteration_start(iv, hi, step)?;
        }
        self.lower_block(body)?;
        self.loc = d.loc;
        let mut next = Vec::new();
        for (&y, l) in yields.iter().zip(&layouts) {
            next.push(self.get(y, l)?);
        }
        self.assign(&carried, &next);
        self.vals.scopes.pop();
        if piped {
            self.pipeline_iteration_end()?;
        }
        let ty = if iv_dtype.bits() == 64 { "s64" } else { "s32" };
        self.b
            .emit(format!("add.{ty}"), vec![iv.into(), iv.into(), step.into()]);
        self.b.bra(&top);
        self.vals.regions_open -= 1;
        self.b.place_label(&end);
        if piped {
            self.pipeline_epilogue()?;
        }
        if nest {
            self.nest_epilogue();
        }
        for (i, l) in layouts.iter().enumerate() {
            let result = match &partial[i] {
                Some(sum) => self.finish_partial_sum(sum, &carried[i])?,
                None => carried[i].clone(),
            };
            self.define(d.results[i], l, result);
        }
        Ok(())
    }

    fn lower_while(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let (before, after) = (d.regions[0], d.regions[1]);
        let yields = self.terminator_args(after);
        let bargs = self.k.blocks[after].args.clone();
        let layouts = self.plan.layouts.carried(inst).to_vec();
        let mut carried = Vec::new();
        for (&init, l) in d.args.iter().zip(&layouts) {
            let v = self.get(init, l)?;
            carried.push(self.copy_regs(&v));
        }
        let (top, end) = (self.b.new_label("while"), self.b.new_label("endwhile"));
        let hoist_point = self.b.hoist_point();
        self.b.place_label(&top);
        self.vals.regions_open += 1;
        self.vals.scopes.push(Scope::body(hoist_point));
        let bb = self.k.blocks[before].args.clone();
        for (i, l) in layouts.iter().enumerate() {
            self.define(bb[i], l, carried[i].clone());
        }
        self.lower_block(before)?;
        self.loc = d.loc;
        let cond = self.terminator_args(before)[0];
        let p = self.scalar(cond)?;
        self.vals.scopes.pop();
        self.b.bra_if(p, true, &end);
        self.vals.scopes.push(Scope::body(hoist_point));
        for (i, l) in layouts.iter().enumerate() {
            self.define(bargs[i], l, carried[i].clone());
        }
        self.lower_block(after)?;
        self.loc = d.loc;
        let mut next = Vec::new();
        for (&y, l) in yields.iter().zip(&layouts) {
            next.push(self.get(y, l)?);
        }
        self.assign(&carried, &next);
        self.vals.scopes.pop();
        self.b.bra(&top);
        self.vals.regions_open -= 1;
        self.b.place_label(&end);
        for (i, l) in layouts.iter().enumerate() {
            self.define(d.results[i], l, carried[i].clone());
        }
        Ok(())
    }

    fn lower_if(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let (then_b, else_b) = (d.regions[0], d.regions[1]);
        let then_y = self.terminator_args(then_b);
        let else_y = self.terminator_args(else_b);
        let layouts = self.plan.layouts.carried(inst).to_vec();
        let results: Vec<Vals> = d
            .results
            .iter()
            .zip(&layouts)
            .map(|(&r, l)| {
                let ty = self.k.ty(r);
                let n = l.geometry(&ty.shape).count;
                (0..n).map(|_| self.b.reg(class_of(ty.elem))).collect()
            })
            .collect();
        let c = self.scalar(d.args[0])?;
        let (else_l, end) = (self.b.new_label("else"), self.b.new_label("endif"));
        let hoist_point = self.b.hoist_point();
        self.b.bra_if(c, true, &else_l);
        self.vals.regions_open += 1;
        for (block, ys) in [(then_b, &then_y), (else_b, &else_y)] {
            self.vals.scopes.push(Scope::body(hoist_point));
            self.lower_block(block)?;
            self.loc = d.loc;
            let mut vals = Vec::new();
            for (&y, l) in ys.iter().zip(&layouts) {
                vals.push(self.get(y, l)?);
            }
            self.assign(&results, &vals);
            self.vals.scopes.pop();
            if block == then_b {
                self.b.bra(&end);
                self.b.place_label(&else_l);
            }
        }
        self.vals.regions_open -= 1;
        self.b.place_label(&end);
        for (i, l) in layouts.iter().enumerate() {
            self.define(d.results[i], l, results[i].clone());
        }
        Ok(())
    }

    /// `device_assert`: a thread whose element is false stops the kernel with `trap` (the
    /// message is not printed on the GPU; the launch fails with an illegal-instruction error).
    fn lower_assert(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let v = d.args[0];
        let (l, _) = self.natural(v);
        let regs = self.get(v, &l)?;
        for r in regs {
            self.b.emit_guarded(r, true, "trap", vec![]);
        }
        Ok(())
    }

    /// Converts a value between layouts through shared memory (see `convert.rs`).
    pub fn convert(
        &mut self,
        src: &[Reg],
        ty: TileType,
        from: &Layout,
        to: &Layout,
        remap: Option<&convert::Remap>,
    ) -> R<Vals> {
        if from == to && remap.is_none() {
            return Ok(src.to_vec());
        }
        if remap.is_none() {
            if let Some(v) = self.convert_in_registers(src, &ty.shape, from, to) {
                return Ok(v);
            }
        }
        let bytes = ty.shape.numel() as u32 * src.first().map_or(4, |r| r.class.bytes());
        if remap.is_none() && bytes > CONVERT_SCRATCH {
            if let Some(r) = self.convert_in_pieces(src, ty, from, to) {
                return r;
            }
        }
        self.convert_smem(src, ty, from, to, remap)
    }

    /// A fresh register holding an immediate.
    pub fn imm(&mut self, class: RegClass, v: Arg) -> Reg {
        let r = self.b.reg(class);
        self.b.mov(r, v);
        r
    }
}
