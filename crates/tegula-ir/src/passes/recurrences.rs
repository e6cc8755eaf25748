//! Affine recurrences as functions of the loop counter.
//!
//! Triton users advance their pointers and offsets inside the loop — `a_ptrs += BLOCK_K *
//! stride_ak`, `offset += BLOCK_N`, `ptr = ptr + step` — where a compiler that pipelines loads
//! a few iterations ahead needs each address as a function of the iteration. This pass turns
//! every such recurrence into one: a value `x` carried by a `for` loop over
//! `lo, lo + step, .. < hi` whose update is `x + s`, `s + x`, `x - s` or `addptr(x, s)` with `s`
//! defined outside the loop and the update directly in the loop's body (not in a branch) is,
//! at iteration `i = (iv - lo) / step`, `x0 + i * s` (`x0` its initial value), exactly:
//! integer arithmetic wraps at the value's width either way, and pointer offsets are
//! multiplied in 64 bits (as repeated 64-bit address additions would accumulate them). Every
//! use of `x` in the body but its update reads the closed form instead; when the loop's
//! result is not used either, the carried value is dropped.
//!
//! The division by the step disappears when the step is 1, or when it is a constant `c` and
//! `s` is `c` times something (`BLOCK_K * stride` over a `range(0, K, BLOCK_K)`): then
//! `i * s = (iv - lo) * (s / c)`.
//!
//! Floats are left alone: repeated float additions round at every step.

use super::{placed, rewrite_args};
use crate::dtype::DType;
use crate::fast_hash::HashMap;
use crate::kernel::{Block, Inst, InstData, Kernel, Value, ValueData, ValueDef};
use crate::op::{BinaryOp, Constant, Op, Rounding};
use crate::types::TileType;
use crate::uses::region_values;

/// How a carried value is updated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Update {
    Add,
    Sub,
    AddPtr,
}

/// One affine recurrence of a loop.
struct Recurrence {
    /// Its position among the loop's carried values.
    index: usize,
    arg: Value,
    update: Inst,
    kind: Update,
    step: Value,
}

/// Rewrites the affine recurrences of every `for` loop (see the module doc); true when
/// something changed.
pub fn affine_recurrences(k: &mut Kernel) -> bool {
    let loops: Vec<Inst> = placed(k)
        .into_iter()
        .map(|(_, i)| i)
        .filter(|&i| matches!(k.insts[i].op, Op::For { .. }))
        .collect();
    let mut changed = false;
    for l in loops {
        changed |= rewrite_loop(k, l);
    }
    changed
}

fn recurrences(k: &Kernel, l: Inst) -> Vec<Recurrence> {
    let d = &k.insts[l];
    let body = d.regions[0];
    let Some(&terminator) = k.blocks[body].insts.last() else {
        return Vec::new();
    };
    let inside = region_values(k, body);
    let yields = &k.insts[terminator].args;
    let mut out = Vec::new();
    for (index, &arg) in k.blocks[body].args[1..].iter().enumerate() {
        let ty = k.ty(arg);
        let integer = !ty.is_ptr() && ty.dtype().is_int() && ty.dtype() != DType::I1;
        if !(ty.is_ptr() || integer) {
            continue;
        }
        let Some(update) = yields.get(index).and_then(|&y| k.def_inst(y)) else {
            continue;
        };
        if !k.blocks[body].insts.contains(&update) {
            continue;
        }
        let u = &k.insts[update];
        let is_arg = |x: Value| unhinted(k, x) == arg;
        let (kind, step) = match (&u.op, u.args.as_slice()) {
            (Op::AddPtr, &[x, s]) if is_arg(x) => (Update::AddPtr, s),
            (Op::Binary(BinaryOp::Add), &[x, s]) if is_arg(x) => (Update::Add, s),
            (Op::Binary(BinaryOp::Add), &[s, x]) if is_arg(x) => (Update::Add, s),
            (Op::Binary(BinaryOp::Sub), &[x, s]) if is_arg(x) => (Update::Sub, s),
            _ => continue,
        };
        if !invariant(k, body, &inside, step) || k.ty(step).shape != ty.shape {
            continue;
        }
        out.push(Recurrence {
            index,
            arg,
            update,
            kind,
            step,
        });
    }
    out
}

/// `v` with the hints (`multiple_of`, `max_contiguous`) around it taken off: a hinted value is
/// the value.
fn unhinted(k: &Kernel, mut v: Value) -> Value {
    while let Some(i) = k.def_inst(v) {
        match k.insts[i].op {
            Op::MultipleOf { .. } | Op::MaxContiguous { .. } | Op::MaxConstancy { .. } => {
                v = k.insts[i].args[0]
            }
            _ => break,
        }
    }
    v
}

/// Whether `v` has the same value in every iteration of the loop with body `body`: defined
/// outside it, or computed directly in the body by cheap pure ops from such values (Triton's
/// `a_ptrs += BLOCK_K * stride_ak` computes its step inside the loop).
fn invariant(k: &Kernel, body: Block, inside: &crate::fast_hash::HashSet<Value>, v: Value) -> bool {
    if !inside.contains(&v) {
        return true;
    }
    let Some(i) = k.def_inst(v) else {
        return false;
    };
    let d = &k.insts[i];
    let cheap = matches!(
        d.op,
        Op::Const(_)
            | Op::Splat
            | Op::Broadcast
            | Op::ExpandDims { .. }
            | Op::Binary(_)
            | Op::Unary(_)
            | Op::Cast { .. }
            | Op::Bitcast
            | Op::AddPtr
            | Op::Compare(_)
            | Op::Select
            | Op::Fma
            | Op::Ternary(_)
            | Op::Rounded { .. }
            | Op::MultipleOf { .. }
            | Op::MaxContiguous { .. }
            | Op::MaxConstancy { .. }
    );
    cheap
        && k.blocks[body].insts.contains(&i)
        && d.args.iter().all(|&a| invariant(k, body, inside, a))
}

/// Moves the instructions of `body` that compute the invariant `v` to the body's start (in
/// their order), so that what is inserted after them may read `v`; returns how many moved.
fn hoist_to_start(k: &mut Kernel, body: Block, values: &[Value]) -> usize {
    let inside = region_values(k, body);
    let mut needed: crate::fast_hash::HashSet<Inst> = Default::default();
    let mut stack: Vec<Value> = values.to_vec();
    while let Some(v) = stack.pop() {
        if !inside.contains(&v) {
            continue;
        }
        if let Some(i) = k.def_inst(v) {
            if needed.insert(i) {
                stack.extend(k.insts[i].args.iter().copied());
            }
        }
    }
    let insts = std::mem::take(&mut k.blocks[body].insts);
    let (mut moved, rest): (Vec<Inst>, Vec<Inst>) =
        insts.into_iter().partition(|i| needed.contains(i));
    let n = moved.len();
    moved.extend(rest);
    k.blocks[body].insts = moved;
    n
}

/// Instructions inserted at the start of a loop body, in order.
struct Prologue<'k> {
    k: &'k mut Kernel,
    body: Block,
    at: usize,
    loc: crate::kernel::Loc,
}

impl Prologue<'_> {
    fn emit(&mut self, op: Op, args: Vec<Value>, ty: TileType) -> Value {
        let inst = self.k.insts.push(InstData {
            op,
            args,
            results: Vec::new(),
            regions: Vec::new(),
            loc: self.loc,
        });
        let v = self.k.values.push(ValueData {
            ty,
            def: ValueDef::Result(inst, 0),
        });
        self.k.insts[inst].results.push(v);
        self.k.blocks[self.body].insts.insert(self.at, inst);
        self.at += 1;
        v
    }

    fn int_const(&mut self, c: i64, ty: TileType) -> Value {
        self.emit(Op::Const(Constant::Int(c)), vec![], ty)
    }

    /// `v` converted to integer dtype `to` (wrapping or extending as casts do).
    fn cast(&mut self, v: Value, to: DType) -> Value {
        let ty = self.k.ty(v);
        if ty.dtype() == to {
            return v;
        }
        self.emit(
            Op::Cast {
                rounding: Rounding::NearestEven,
            },
            vec![v],
            TileType::tile(to, ty.shape),
        )
    }

    /// `v / c` when `v` is provably a multiple of the constant `c`: a constant, a splat or
    /// broadcast of one, or a product with such a factor.
    fn divide_exactly(&mut self, v: Value, c: i64) -> Option<Value> {
        let ty = self.k.ty(v);
        let d = self.k.insts[self.k.def_inst(v)?].clone();
        match d.op {
            Op::Const(Constant::Int(x)) if x % c == 0 => Some(self.int_const(x / c, ty)),
            Op::Splat | Op::Broadcast => {
                let inner = self.divide_exactly(d.args[0], c)?;
                Some(self.emit(d.op.clone(), vec![inner], ty))
            }
            Op::Binary(BinaryOp::Mul) => {
                let (a, b) = (d.args[0], d.args[1]);
                let (a, b) = match self.divide_exactly(a, c) {
                    Some(q) => (q, b),
                    None => (a, self.divide_exactly(b, c)?),
                };
                Some(self.emit(Op::Binary(BinaryOp::Mul), vec![a, b], ty))
            }
            _ => None,
        }
    }

    /// A scalar `t` made a tile of `ty`'s shape (itself for scalars).
    fn splat(&mut self, t: Value, ty: TileType) -> Value {
        if ty.shape.is_scalar() {
            return t;
        }
        let st = self.k.ty(t).with_shape(ty.shape);
        self.emit(Op::Splat, vec![t], st)
    }
}

fn int_constant(k: &Kernel, v: Value) -> Option<i64> {
    match k.insts[k.def_inst(v)?].op {
        Op::Const(Constant::Int(c)) => Some(c),
        _ => None,
    }
}

fn rewrite_loop(k: &mut Kernel, l: Inst) -> bool {
    let found = recurrences(k, l);
    if found.is_empty() {
        return false;
    }
    let d = k.insts[l].clone();
    let body = d.regions[0];
    let (lo, step) = (d.args[0], d.args[2]);
    let iv = k.blocks[body].args[0];
    let iv_ty = k.ty(iv);
    let (lo_c, step_c) = (int_constant(k, lo), int_constant(k, step));
    let steps: Vec<Value> = found.iter().map(|r| r.step).collect();
    let at = hoist_to_start(k, body, &steps);
    let mut p = Prologue {
        k,
        body,
        at,
        loc: d.loc,
    };
    // The iteration's distance from the first, in steps: `iv - lo`, divided by the step
    // unless that is 1 or a recurrence's own step absorbs it.
    let distance = if lo_c == Some(0) {
        iv
    } else {
        p.emit(Op::Binary(BinaryOp::Sub), vec![iv, lo], iv_ty)
    };
    let mut index_of_iteration: Option<Value> = None;
    let mut closed_forms: HashMap<Value, Value> = HashMap::default();
    for r in &found {
        let ty = p.k.ty(r.arg);
        let init = d.args[3 + r.index];
        let (count, per) = match step_c {
            Some(1) => (distance, r.step),
            Some(c) if c != 0 => match p.divide_exactly(r.step, c) {
                Some(q) => (distance, q),
                None => (
                    iteration(&mut p, &mut index_of_iteration, distance, step),
                    r.step,
                ),
            },
            _ => (
                iteration(&mut p, &mut index_of_iteration, distance, step),
                r.step,
            ),
        };
        let offset_dtype = if r.kind == Update::AddPtr {
            DType::I64
        } else {
            ty.dtype()
        };
        let per = p.cast(per, offset_dtype);
        let count = p.cast(count, offset_dtype);
        let count = p.splat(count, p.k.ty(per));
        let per_ty = p.k.ty(per);
        let offset = p.emit(Op::Binary(BinaryOp::Mul), vec![count, per], per_ty);
        let op = match r.kind {
            Update::Add => Op::Binary(BinaryOp::Add),
            Update::Sub => Op::Binary(BinaryOp::Sub),
            Update::AddPtr => Op::AddPtr,
        };
        let closed = p.emit(op, vec![init, offset], ty);
        closed_forms.insert(r.arg, closed);
    }
    let inserted = p.at;
    let k = p.k;
    // Every use in the body but the updates (and what was just inserted) reads the closed form.
    let updates: Vec<Inst> = found.iter().map(|r| r.update).collect();
    let skip: Vec<Inst> = k.blocks[body].insts[at..inserted].to_vec();
    let mut stack = vec![body];
    while let Some(b) = stack.pop() {
        for i in k.blocks[b].insts.clone() {
            if !updates.contains(&i) && !skip.contains(&i) {
                rewrite_args(k, i, &closed_forms);
            }
            stack.extend(k.insts[i].regions.iter().copied());
        }
    }
    // Drop carried values nothing reads any more, last first.
    let mut dead: Vec<usize> = found
        .iter()
        .filter(|r| carried_value_is_dead(k, l, r))
        .map(|r| r.index)
        .collect();
    dead.sort_unstable_by(|a, b| b.cmp(a));
    for j in dead {
        drop_carried(k, l, j);
    }
    true
}

/// The iteration index `(iv - lo) / step`, computed once.
fn iteration(
    p: &mut Prologue<'_>,
    memo: &mut Option<Value>,
    distance: Value,
    step: Value,
) -> Value {
    if let Some(v) = *memo {
        return v;
    }
    let ty = p.k.ty(distance);
    let step = p.cast(step, ty.dtype());
    let v = p.emit(Op::Binary(BinaryOp::Div), vec![distance, step], ty);
    *memo = Some(v);
    v
}

/// Whether carried value `r` is read by nothing but its own update, which only the terminator
/// reads, and the loop's result for it is unused.
fn carried_value_is_dead(k: &Kernel, l: Inst, r: &Recurrence) -> bool {
    let result = k.insts[l].results[r.index];
    let update_value = k.insts[r.update].results[0];
    let mut arg_users = 0;
    let mut update_users = 0;
    let mut result_used = false;
    for (_, i) in placed(k) {
        let args = &k.insts[i].args;
        if i != r.update {
            arg_users += args.iter().filter(|&&a| a == r.arg).count();
        }
        update_users += args.iter().filter(|&&a| a == update_value).count();
        result_used |= args.contains(&result);
    }
    arg_users == 0 && update_users == 1 && !result_used
}

/// Removes carried value `j` from loop `l`: its initial value, block argument, yielded value
/// and result (the values after it move down one place).
fn drop_carried(k: &mut Kernel, l: Inst, j: usize) {
    let body = k.insts[l].regions[0];
    let terminator = *k.blocks[body].insts.last().expect("a terminated body");
    k.insts[l].args.remove(3 + j);
    k.insts[l].results.remove(j);
    k.blocks[body].args.remove(1 + j);
    k.insts[terminator].args.remove(j);
    for (idx, &v) in k.insts[l].results.clone().iter().enumerate() {
        k.values[v].def = ValueDef::Result(l, idx);
    }
    for (idx, &v) in k.blocks[body].args.clone().iter().enumerate() {
        k.values[v].def = ValueDef::BlockArg(body, idx);
    }
}
