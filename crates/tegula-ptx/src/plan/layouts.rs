//! Layouts: which thread and register holds each element of the values that have a place of
//! their own, and the layout every other value is cheapest in.
//!
//! Anchored values take these layouts (see [`crate::analysis::is_anchored`]):
//! - loads and stores: a blocked layout whose per-thread run along the last axis is the widest
//!   vector access axis analysis allows (16 bytes at most), or, for a rank-1 load whose every
//!   use broadcasts it into a tensor-core accumulator, that accumulator's slice (rule
//!   *broadcast load*, [`LayoutPlan::access`]);
//! - atomics: their value's layout when an anchored op computes it, else blocked with the
//!   widest vector `red` where the result is unused;
//! - dots: the mma accumulator layout of their [`super::dots::MmaPlan`], or four contiguous
//!   columns a thread for FMA dots;
//! - reductions: the slice of their operand's layout; scans: chunks along the scanned axis;
//! - loop-carried values: the layout the body yields them in when an anchored op produces it,
//!   else the initial value's (rule *carried layout*); a sum the loop carries as per-thread
//!   partials (rule *partial sum*, [`PartialSum`]) the slice of its operand's layout;
//! - `if` results: the then-branch's yield when it is anchored, else the else-branch's.
//!
//! A free value is cheapest in the layout of its first anchored operand of its own rank (an
//! elementwise op), that operand's layout unsliced (an `expand_dims`), its index's layout (a
//! `gather`), or its shape's canonical blocked layout. The emitter materializes free values in
//! whatever layout their consumer asks for; [`LayoutPlan::natural`] says which one costs
//! nothing.

use super::dots::DotPlans;
use super::Context;
use crate::analysis::is_anchored;
use crate::layout::Layout;
use crate::mma_layout;
use std::cell::RefCell;
use tegula_ir::fast_hash::{HashMap, HashSet};
use tegula_ir::{AtomicOp, BinaryOp, Block, DType, Inst, Op, ReduceOp, Shape, Value, ValueDef};

/// The most loop-carried elements a thread (f32 registers, roughly) with which a loop keeps
/// its row sums as per-thread partials. The partials live across the loop: where the loop
/// carries few registers they save the row sum's shuffles every step and gain a little; in a
/// loop already at 255 registers (128 carried elements: D = 128, 128 x 64 over 4 warps) they
/// spill and lose (docs/performance.md, "Per-thread partial sums of the online softmax").
pub const PARTIAL_SUM_MAX_CARRIED: usize = 96;

/// How a load, store or atomic accesses memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// The layout it runs in.
    pub layout: Layout,
    /// Its vector width (elements per access) as axis analysis allows.
    pub vec: u32,
    /// For an atomic: elements one `red` covers in `layout` (1: a scalar `red`).
    pub red_vec: u32,
    /// `layout` is a tensor-core accumulator's slice (rule *broadcast load*).
    pub broadcast: bool,
}

/// A sum a loop carries as per-thread partials (rule *partial sum*): the loop's carried value
/// is `carried * b + sum(x, axis)` (or `b * carried + ..`, `fma(carried, b, sum(..))`,
/// `carried + sum(..)`) in f32, where `carried`, the product and the sum are used by nothing
/// else and the sum is in the body itself and combines elements of several threads. Each step
/// then needs only each thread's own part of the sum: the partials `q_t` of the threads the
/// sum combines satisfy `sum_t q_t' = (sum_t q_t) * b + sum(x)` because `b` is one value per
/// element of the result. The shuffles and the round across warps run once, on the loop's
/// result. Floats: this reassociates the sum. Left out when the loop already carries more than
/// [`PARTIAL_SUM_MAX_CARRIED`] elements a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialSum {
    /// The `sum` reduction in the body.
    pub reduce: Inst,
    /// The layout of its operand (the loop carries the value in this layout's slice).
    pub operand: Layout,
    /// The carried value's update (what the body yields).
    pub update: Value,
}

impl PartialSum {
    /// The layout the loop carries the value in: the slice of the sum's operand layout.
    pub fn carried_layout(&self, k: &tegula_ir::Kernel) -> Layout {
        let Op::Reduce { axis, .. } = k.insts[self.reduce].op else {
            unreachable!("a reduction")
        };
        self.operand.slice(axis as usize)
    }
}

/// The layout decisions of one kernel.
#[derive(Clone, Debug, Default)]
pub struct LayoutPlan {
    /// Every value's cheapest layout, and whether it comes from an anchored op (strong) rather
    /// than the shape's default (weak).
    natural: HashMap<Value, (Layout, bool)>,
    access: HashMap<Inst, Access>,
    /// Per `for`, `while` and `if`: the layouts of its carried values (and results).
    carried: HashMap<Inst, Vec<Layout>>,
    /// Per `for`: the partial sum of each carried value, where the rule applies.
    loop_partials: HashMap<Inst, Vec<Option<PartialSum>>>,
    /// The sums carried as partials, by their reduction.
    partial_sums: HashMap<Inst, PartialSum>,
}

impl LayoutPlan {
    /// The layout `v` is cheapest in, and whether it comes from an anchored op.
    pub fn natural(&self, v: Value) -> (Layout, bool) {
        self.natural
            .get(&v)
            .cloned()
            .expect("every value of the kernel has a planned layout")
    }

    /// How load, store or atomic `inst` accesses memory.
    pub fn access(&self, inst: Inst) -> &Access {
        self.access
            .get(&inst)
            .expect("every memory access has a planned layout")
    }

    /// The layouts of the values `for`, `while` or `if` instruction `inst` carries (or yields).
    pub fn carried(&self, inst: Inst) -> &[Layout] {
        self.carried.get(&inst).map_or(&[], Vec::as_slice)
    }

    /// Per carried value of `for` instruction `inst`: its partial sum, where the rule applies.
    pub fn loop_partials(&self, inst: Inst) -> &[Option<PartialSum>] {
        self.loop_partials.get(&inst).map_or(&[], Vec::as_slice)
    }

    /// The partial sum `reduce` is, when a loop carries it as per-thread partials.
    pub fn partial_sum(&self, reduce: Inst) -> Option<&PartialSum> {
        self.partial_sums.get(&reduce)
    }
}

/// The vector width of a load, store or atomic (1 for anything else): contiguous, aligned
/// elements (16 bytes at most) under a mask constant over the vector.
pub fn access_vec(cx: &Context<'_>, inst: Inst) -> u32 {
    let k = cx.k;
    let d = &k.insts[inst];
    let ptr = d.args[0];
    let ty = k.ty(ptr);
    let mask = match d.op {
        Op::Load { has_mask: true, .. } => Some(d.args[1]),
        Op::Store { has_mask: true, .. } => Some(d.args[2]),
        Op::Load { .. } | Op::Store { .. } => None,
        _ => return 1,
    };
    if ty.shape.is_scalar() {
        return 1;
    }
    let es = ty.dtype().size_bytes() as u64;
    let info = cx.axis.get(k, ptr);
    let last = *ty.shape.dims().last().unwrap_or(&1) as u64;
    let mut vec = info
        .last_contiguity()
        .min(info.last_divisibility() / es)
        .min(16 / es)
        .min(last)
        .max(1);
    if let Some(m) = mask {
        vec = vec.min(cx.axis.get(k, m).last_constancy()).max(1);
    }
    let mut vec = 1u64 << (63 - vec.leading_zeros());
    if es == 1 && vec < 4 {
        vec = 1;
    }
    vec as u32
}

/// Plans the layouts of `cx`'s kernel, in program order.
pub fn plan(cx: &Context<'_>, dots: &DotPlans) -> LayoutPlan {
    let mut p = Planner {
        cx,
        dots,
        anchors: HashMap::default(),
        assumed: HashMap::default(),
        memo: RefCell::default(),
        broadcast: RefCell::default(),
        broadcast_open: RefCell::default(),
        out: LayoutPlan::default(),
    };
    p.walk(cx.k.body);
    // Every live value's layout against the final anchors (the arena also holds values that
    // passes orphaned).
    p.memo.borrow_mut().clear();
    let k = cx.k;
    let mut live: Vec<Value> = k.params.iter().map(|param| param.value).collect();
    for inst in k.walk() {
        live.extend(k.insts[inst].results.iter().copied());
        for &r in &k.insts[inst].regions {
            live.extend(k.blocks[r].args.iter().copied());
        }
    }
    let natural = live.into_iter().map(|v| (v, p.natural(v))).collect();
    for inst in cx.k.walk() {
        if matches!(
            cx.k.insts[inst].op,
            Op::Load { .. } | Op::Store { .. } | Op::Atomic { .. } | Op::AtomicCas { .. }
        ) {
            let layout = p.access_layout(inst);
            let access = Access {
                vec: access_vec(cx, inst),
                red_vec: p.red_vec(inst, &layout),
                broadcast: p.broadcast_load_layout(inst).is_some(),
                layout,
            };
            p.out.access.insert(inst, access);
        }
    }
    p.out.natural = natural;
    p.out
}

struct Planner<'a, 'k> {
    cx: &'a Context<'k>,
    dots: &'a DotPlans,
    /// The layouts of the anchored values planned so far.
    anchors: HashMap<Value, Layout>,
    /// Layouts assumed for block arguments while choosing loop-carried layouts.
    assumed: HashMap<Value, (Layout, bool)>,
    /// Memo of [`Planner::natural`]; cleared whenever an anchor or an assumption changes.
    memo: RefCell<HashMap<Value, (Layout, bool)>>,
    /// Memo of [`Planner::broadcast_load_layout`], and the loads it is being asked about (a
    /// use chain that leads back to its own load gets no answer instead of recursing).
    broadcast: RefCell<HashMap<Inst, Option<Layout>>>,
    broadcast_open: RefCell<HashSet<Inst>>,
    out: LayoutPlan,
}

impl Planner<'_, '_> {
    fn anchor(&mut self, v: Value, l: Layout) {
        let l = if self.cx.k.ty(v).shape.is_scalar() {
            Layout::scalar()
        } else {
            l
        };
        self.anchors.insert(v, l);
        self.memo.borrow_mut().clear();
    }

    fn terminator_args(&self, block: Block) -> Vec<Value> {
        let k = self.cx.k;
        k.blocks[block]
            .insts
            .last()
            .map(|&t| k.insts[t].args.clone())
            .unwrap_or_default()
    }

    /// The anchored instructions of `block`, in program order.
    fn walk(&mut self, block: Block) {
        let k = self.cx.k;
        for &inst in &k.blocks[block].insts {
            let d = &k.insts[inst];
            if !is_anchored(&d.op) {
                continue;
            }
            match d.op {
                Op::For { .. } => self.plan_for(inst),
                Op::While => self.plan_while(inst),
                Op::If => self.plan_if(inst),
                Op::Load { .. }
                | Op::Atomic { .. }
                | Op::AtomicCas { .. }
                | Op::Reduce { .. }
                | Op::Scan { .. }
                | Op::ReduceWith { .. }
                | Op::ScanWith { .. }
                | Op::Dot { .. }
                | Op::DescLoad => {
                    for &r in &d.results {
                        let (l, _) = self.natural(r);
                        self.anchor(r, l);
                    }
                }
                _ => {}
            }
        }
    }

    fn plan_for(&mut self, inst: Inst) {
        let k = self.cx.k;
        let d = &k.insts[inst];
        let body = d.regions[0];
        let bargs = k.blocks[body].args.clone();
        let inits = &d.args[3..];
        let yields = self.terminator_args(body);
        let mut layouts = self.carried_layouts(&bargs[1..], inits, &yields);
        let partials: Vec<Option<PartialSum>> = (0..inits.len())
            .map(|i| self.loop_partial_sum(body, bargs[1 + i], yields[i]))
            .collect();
        for (i, sum) in partials.iter().enumerate() {
            if let Some(sum) = sum {
                layouts[i] = sum.carried_layout(k);
                self.out.partial_sums.insert(sum.reduce, sum.clone());
            }
        }
        self.anchor(bargs[0], Layout::scalar());
        for (i, l) in layouts.iter().enumerate() {
            self.anchor(bargs[1 + i], l.clone());
        }
        self.walk(body);
        for (i, l) in layouts.iter().enumerate() {
            self.anchor(d.results[i], l.clone());
        }
        self.out.carried.insert(inst, layouts);
        self.out.loop_partials.insert(inst, partials);
    }

    fn plan_while(&mut self, inst: Inst) {
        let k = self.cx.k;
        let d = &k.insts[inst];
        let (before, after) = (d.regions[0], d.regions[1]);
        let yields = self.terminator_args(after);
        let bargs = k.blocks[after].args.clone();
        let layouts = self.carried_layouts(&bargs, &d.args, &yields);
        for (i, l) in layouts.iter().enumerate() {
            self.anchor(k.blocks[before].args[i], l.clone());
        }
        self.walk(before);
        for (i, l) in layouts.iter().enumerate() {
            self.anchor(bargs[i], l.clone());
        }
        self.walk(after);
        for (i, l) in layouts.iter().enumerate() {
            self.anchor(d.results[i], l.clone());
        }
        self.out.carried.insert(inst, layouts);
    }

    fn plan_if(&mut self, inst: Inst) {
        let k = self.cx.k;
        let d = &k.insts[inst];
        let (then_b, else_b) = (d.regions[0], d.regions[1]);
        let then_y = self.terminator_args(then_b);
        let else_y = self.terminator_args(else_b);
        let layouts: Vec<Layout> = then_y
            .iter()
            .zip(&else_y)
            .map(|(&t, &e)| {
                let (lt, st) = self.natural(t);
                if st {
                    lt
                } else {
                    self.natural(e).0
                }
            })
            .collect();
        self.walk(then_b);
        self.walk(else_b);
        for (i, l) in layouts.iter().enumerate() {
            self.anchor(d.results[i], l.clone());
        }
        self.out.carried.insert(inst, layouts);
    }

    /// Layouts of loop-carried values (rule *carried layout*): the layout the body produces
    /// them in when that comes from an anchored op, else the layout of the initial value.
    fn carried_layouts(
        &mut self,
        block_args: &[Value],
        inits: &[Value],
        yields: &[Value],
    ) -> Vec<Layout> {
        let provisional: Vec<(Layout, bool)> = inits.iter().map(|&v| self.natural(v)).collect();
        for (&a, l) in block_args.iter().zip(&provisional) {
            self.assumed.insert(a, l.clone());
        }
        self.memo.borrow_mut().clear();
        let out = yields
            .iter()
            .zip(&provisional)
            .map(|(&y, p)| {
                let (l, strong) = self.natural(y);
                if strong {
                    l
                } else {
                    p.0.clone()
                }
            })
            .collect();
        for a in block_args {
            self.assumed.remove(a);
        }
        self.memo.borrow_mut().clear();
        out
    }

    /// The canonical layout of a shape when nothing asks for another.
    fn canonical(&self, shape: &Shape) -> Layout {
        Layout::blocked(shape, 1, self.cx.num_warps())
    }

    fn natural(&self, v: Value) -> (Layout, bool) {
        if let Some(r) = self.memo.borrow().get(&v) {
            return r.clone();
        }
        let r = self.natural_uncached(v);
        self.memo.borrow_mut().insert(v, r.clone());
        r
    }

    fn natural_uncached(&self, v: Value) -> (Layout, bool) {
        let k = self.cx.k;
        let ty = k.ty(v);
        if ty.shape.is_scalar() {
            return (Layout::scalar(), true);
        }
        if let Some(l) = self.anchors.get(&v) {
            return (l.clone(), true);
        }
        if let Some(a) = self.assumed.get(&v) {
            return a.clone();
        }
        let weak = (self.canonical(&ty.shape), false);
        let (inst, idx) = match k.values[v].def {
            ValueDef::Result(i, idx) => (i, idx),
            _ => return weak,
        };
        let d = &k.insts[inst];
        match &d.op {
            Op::Load { .. } | Op::Atomic { .. } | Op::AtomicCas { .. } => {
                (self.access_layout(inst), true)
            }
            Op::Reduce { axis, .. } => (self.natural(d.args[0]).0.slice(*axis as usize), true),
            Op::Scan { axis, .. } => (
                Layout::chunked(&ty.shape, *axis as usize, self.cx.num_warps()),
                true,
            ),
            // The combine lowering's layout (emit/combine.rs): one contiguous run per thread.
            Op::ReduceWith { axis } => {
                let operand = k.ty(d.args[0]).shape;
                let l = Layout::chunked(&operand, *axis as usize, self.cx.num_warps());
                (l.slice(*axis as usize), true)
            }
            Op::ScanWith { axis, .. } => (
                Layout::chunked(&ty.shape, *axis as usize, self.cx.num_warps()),
                true,
            ),
            Op::Dot { .. } => (self.dot_layout(inst), true),
            // Read from shared memory after its copy: any layout; the shape's default.
            Op::DescLoad => (self.canonical(&ty.shape), true),
            Op::For { .. } => {
                let body = d.regions[0];
                let carried = k.blocks[body].args[1 + idx];
                let yielded = self.terminator_args(body).get(idx).copied();
                match yielded.and_then(|y| self.loop_partial_sum(body, carried, y)) {
                    Some(sum) => (sum.carried_layout(k), true),
                    None => self.carried_natural(body, d.args[3 + idx], idx),
                }
            }
            Op::While => self.carried_natural(d.regions[1], d.args[idx], idx),
            Op::If => {
                let then = k.blocks[d.regions[0]].insts.last().copied();
                match then {
                    Some(y) => self.natural(k.insts[y].args[idx]),
                    None => weak,
                }
            }
            // A gather reads its index in the layout its result is asked for.
            Op::Broadcast
            | Op::MultipleOf { .. }
            | Op::MaxContiguous { .. }
            | Op::MaxConstancy { .. }
            | Op::Gather { .. } => {
                let from = if matches!(d.op, Op::Gather { .. }) {
                    d.args[1]
                } else {
                    d.args[0]
                };
                let (l, s) = self.natural(from);
                if s {
                    (l, true)
                } else {
                    weak
                }
            }
            Op::ExpandDims { axis } => {
                let (l, s) = self.natural(d.args[0]);
                match (s, l.unslice(*axis as usize)) {
                    (true, Some(u)) => (u, true),
                    _ => weak,
                }
            }
            op if op.is_elementwise() => {
                for &a in &d.args {
                    if k.ty(a).shape.rank() == ty.shape.rank() {
                        let (l, s) = self.natural(a);
                        if s {
                            return (l, true);
                        }
                    }
                }
                weak
            }
            _ => weak,
        }
    }

    /// The layout a loop's carried value `idx` will take, asked before the loop is planned
    /// (the rule of `carried_layouts`): a loop nested in another's body is asked this before
    /// it is planned, so that its result, yielded by the outer loop, takes the inner loop's
    /// accumulator layout and crosses no layout at either end of the inner loop.
    fn carried_natural(&self, body: Block, init: Value, idx: usize) -> (Layout, bool) {
        let k = self.cx.k;
        if let Some(&y) = k.blocks[body].insts.last() {
            if let Some(&yielded) = k.insts[y].args.get(idx) {
                let (l, strong) = self.natural(yielded);
                if strong {
                    return (l, true);
                }
            }
        }
        self.natural(init)
    }

    /// The accumulator layout: the mma layout on tensor cores, else a few contiguous columns
    /// per thread.
    fn dot_layout(&self, inst: Inst) -> Layout {
        match self.dots.mma(inst) {
            Some(p) => p.accumulator(),
            None => {
                let shape = self.cx.k.ty(self.cx.k.insts[inst].results[0]).shape;
                Layout::blocked(&shape, 4, self.cx.num_warps())
            }
        }
    }

    /// The layout a load, store or atomic runs in.
    fn access_layout(&self, inst: Inst) -> Layout {
        let k = self.cx.k;
        let shape = k.ty(k.insts[inst].args[0]).shape;
        if matches!(k.insts[inst].op, Op::Atomic { .. }) {
            return self.atomic_layout(inst);
        }
        if let Some(l) = self.broadcast_load_layout(inst) {
            return l;
        }
        Layout::blocked(&shape, access_vec(self.cx, inst), self.cx.num_warps())
    }

    /// An atomic runs in its value's layout when that comes from an anchored op, so a dot's
    /// accumulator adds into memory from the registers that hold it (no conversion through
    /// shared memory); otherwise in a blocked layout, with vector runs where `red` allows them.
    fn atomic_layout(&self, inst: Inst) -> Layout {
        let k = self.cx.k;
        let d = &k.insts[inst];
        let shape = k.ty(d.args[0]).shape;
        if !shape.is_scalar() && k.ty(d.args[1]).shape == shape {
            let (l, strong) = self.natural(d.args[1]);
            if strong && l.sliced.is_empty() {
                return l;
            }
        }
        let blocked = Layout::blocked(&shape, 4, self.cx.num_warps());
        let vec = self.red_vec(inst, &blocked);
        Layout::blocked(&shape, vec, self.cx.num_warps())
    }

    /// Elements one `red.global.add.v{2,4}.f32` covers in layout `l` (1: a scalar `red`): the
    /// thread's contiguous run along the last axis, as far as the pointers are contiguous and
    /// 8/16-byte aligned and the mask is constant over it, for an atomic whose result no live
    /// instruction reads. Vector `red` is sm_90 (PTX 8.1) only.
    fn red_vec(&self, inst: Inst, l: &Layout) -> u32 {
        let k = self.cx.k;
        let d = &k.insts[inst];
        let (shape, dt) = (k.ty(d.args[0]).shape, k.ty(d.args[0]).dtype());
        let add_f32 = matches!(
            d.op,
            Op::Atomic {
                op: AtomicOp::Add,
                sem,
                ..
            } if crate::emit::red_takes(sem)
        ) && dt == DType::F32;
        if !add_f32 || self.cx.target.sm < 90 || shape.is_scalar() || !l.sliced.is_empty() {
            return 1;
        }
        let last = shape.rank() - 1;
        if l.interleaved[last] || self.cx.uses.is_read(d.results[0]) {
            return 1;
        }
        let info = self.cx.axis.get(k, d.args[0]);
        let mut vec = (l.spt[last] as u64)
            .min(shape.dims()[last] as u64)
            .min(info.last_contiguity())
            .min(info.last_divisibility() / 4)
            .min(4);
        if let Op::Atomic { has_mask: true, .. } = d.op {
            vec = vec.min(self.cx.axis.get(k, d.args[2]).last_constancy());
        }
        match vec {
            4.. => 4,
            2 | 3 => 2,
            _ => 1,
        }
    }

    /// Rule *broadcast load*: the layout a rank-1 load runs in when every use broadcasts it
    /// into a tensor-core accumulator: the slice of that accumulator layout. Each thread then
    /// loads the elements its accumulator rows or columns combine with (8 lanes and every warp
    /// along the other axis load the same ones: cache hits) and no conversion follows; a
    /// blocked load would be converted through shared memory with a barrier on each side. The
    /// uses may pass through rank-1 elementwise ops, `expand_dims` and `broadcast` and must end
    /// in rank-2 elementwise ops whose other operand's layout is an mma accumulator, the same
    /// one for all. `None` otherwise (blocked consumers keep the blocked load).
    fn broadcast_load_layout(&self, inst: Inst) -> Option<Layout> {
        if let Some(r) = self.broadcast.borrow().get(&inst) {
            return r.clone();
        }
        let k = self.cx.k;
        let d = &k.insts[inst];
        if !matches!(d.op, Op::Load { .. }) || k.ty(d.results[0]).shape.rank() != 1 {
            return None;
        }
        if !self.broadcast_open.borrow_mut().insert(inst) {
            return None;
        }
        let mut found = None;
        let ok = self.accumulator_uses(d.results[0], None, &mut found);
        self.broadcast_open.borrow_mut().remove(&inst);
        let r = if ok { found } else { None };
        self.broadcast.borrow_mut().insert(inst, r.clone());
        r
    }

    /// Walks the uses of `v` for [`Planner::broadcast_load_layout`]: `axis` is the axis
    /// `expand_dims` inserted (once `v` is rank 2). Records the slice each final use asks for
    /// in `found`; false when a use is of another kind or asks for a different slice.
    fn accumulator_uses(&self, v: Value, axis: Option<usize>, found: &mut Option<Layout>) -> bool {
        let k = self.cx.k;
        let Some(users) = self.cx.uses.users(v) else {
            return true;
        };
        for &(u, _) in users {
            let d = &k.insts[u];
            let ok = match (&d.op, axis) {
                (op, None) if op.is_elementwise() && d.results.len() == 1 => {
                    k.ty(d.results[0]).shape.rank() == 1
                        && self.accumulator_uses(d.results[0], None, found)
                }
                (Op::ExpandDims { axis: a }, None) => {
                    k.ty(d.results[0]).shape.rank() == 2
                        && self.accumulator_uses(d.results[0], Some(*a as usize), found)
                }
                (Op::Broadcast, Some(_)) => self.accumulator_uses(d.results[0], axis, found),
                (op, Some(a)) if op.is_elementwise() => {
                    let other = d.args.iter().copied().find(|&o| {
                        o != v && k.ty(o).shape.rank() == 2 && {
                            let (l, strong) = self.natural(o);
                            strong && l == mma_layout::accumulator(l.wpc[0], l.wpc[1])
                        }
                    });
                    match other {
                        Some(o) => {
                            let slice = self.natural(o).0.slice(a);
                            match found {
                                Some(f) => *f == slice,
                                None => {
                                    *found = Some(slice);
                                    true
                                }
                            }
                        }
                        None => false,
                    }
                }
                _ => false,
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// Rule *partial sum* for `carried` (a block argument of the `for` with body `body`,
    /// yielded as `yielded`); see [`PartialSum`].
    fn loop_partial_sum(&self, body: Block, carried: Value, yielded: Value) -> Option<PartialSum> {
        let k = self.cx.k;
        let threads = self.cx.num_warps() as usize * 32;
        let carried_per_thread: usize = k.blocks[body].args[1..]
            .iter()
            .map(|&a| k.ty(a).shape.numel().div_ceil(threads))
            .sum();
        if carried_per_thread > PARTIAL_SUM_MAX_CARRIED {
            return None;
        }
        let only_user = |v: Value| -> Option<Inst> {
            match self.cx.uses.users(v) {
                Some(&[(u, _)]) => Some(u),
                _ => None,
            }
        };
        let ty = k.ty(carried);
        if ty.dtype() != DType::F32 || ty.shape.is_scalar() {
            return None;
        }
        let update = k.def_inst(yielded)?;
        let terminator = *k.blocks[body].insts.last()?;
        if only_user(yielded)? != terminator {
            return None;
        }
        // The sum and the term that carries `carried` over, in either order.
        let ud = &k.insts[update];
        let (sum, carried_term) = match (&ud.op, ud.args.as_slice()) {
            (Op::Binary(BinaryOp::Add), &[a, b]) => {
                if self.is_sum(a).is_some() {
                    (a, b)
                } else {
                    (b, a)
                }
            }
            // `carried` is one of the factors, once.
            (Op::Fma, &[a, b, c]) if (a == carried) != (b == carried) => (c, carried),
            _ => return None,
        };
        let reduce = self.is_sum(sum)?;
        if only_user(sum)? != update || !k.blocks[body].insts.contains(&reduce) {
            return None;
        }
        // `carried` is read once in the loop: by the update itself (`carried + sum`, the fma)
        // or by a product `carried * b` that only the update reads.
        let carried_user = only_user(carried)?;
        if carried_term != carried {
            let product = k.def_inst(carried_term)?;
            if !matches!(k.insts[product].op, Op::Binary(BinaryOp::Mul))
                || carried_user != product
                || only_user(carried_term)? != update
            {
                return None;
            }
        } else if carried_user != update {
            return None;
        }
        let x = k.insts[reduce].args[0];
        let Op::Reduce { axis, .. } = k.insts[reduce].op else {
            unreachable!("is_sum found a reduction")
        };
        let xty = k.ty(x);
        if xty.dtype() != DType::F32 {
            return None;
        }
        let operand = self.natural(x).0;
        if !crosses_threads(&operand, &xty.shape, axis as usize) {
            return None;
        }
        Some(PartialSum {
            reduce,
            operand,
            update: yielded,
        })
    }

    /// The `sum` reduction that defines `v`, if one does.
    fn is_sum(&self, v: Value) -> Option<Inst> {
        let k = self.cx.k;
        let inst = k.def_inst(v)?;
        matches!(
            k.insts[inst].op,
            Op::Reduce {
                op: ReduceOp::Sum,
                ..
            }
        )
        .then_some(inst)
    }
}

/// Whether a reduction over `axis` of an operand of `shape` in layout `l` combines elements of
/// different threads (lanes or warps).
pub fn crosses_threads(l: &Layout, shape: &Shape, axis: usize) -> bool {
    let p = l.kept()[axis];
    let pp = l.geometry(shape).parent[p];
    // The conditions of the reductions across lanes and across warps (`emit/reduce.rs`).
    let lanes = l.tpw[p] > 1 && l.spt[p] < pp;
    let warps = l.wpc[p].min((pp / (l.tpw[p] * l.spt[p])).max(1)) > 1;
    lanes || warps
}
