//! Tile-level passes: dead-code elimination, common-subexpression elimination, and
//! [`canonicalize`], which adds simple folds (and the rule *dot accumulate*,
//! `dot_accumulate.rs`) and runs them all to a fixed point; and
//! [`affine_recurrences`] (`recurrences.rs`), which expresses the pointers and offsets a loop
//! advances by a constant as functions of its counter, for the GPU's software pipeline.
//!
//! The passes expect a kernel that verifies (they may panic on one that does not), and every
//! pass keeps a verified kernel verified. Instructions are never deleted from the arena:
//! removing one means dropping it from its block's instruction list (its result values stay in
//! the value arena, unused). Replacing a value rewrites the operands of every instruction that
//! follows it, so later passes and backends see no trace of the removed instruction.

use crate::dtype::DType;
use crate::fast_hash::HashMap;
use crate::kernel::{Block, EntityRef, Inst, Kernel, Value, ValueDef};
use crate::op::{BinaryOp, Constant, Op};
use crate::types::TileType;

mod dot_accumulate;
mod recurrences;
pub use dot_accumulate::accumulate_into_dots;
pub use recurrences::affine_recurrences;

/// Removes instructions whose results nothing needs.
///
/// Kept: every op with side effects (stores, atomics even when their old value is unused,
/// volatile loads, prints, asserts), everything they depend on through operands, every
/// for/if/while that contains a kept op or whose results are used, and the terminators of kept
/// regions together with everything they yield. Loop-carried values of a kept loop are kept even
/// when the loop's result is unused (dropping them would change the loop's signature).
///
/// Removed: pure ops (including non-volatile loads and whole loops and branches) with no path
/// to a kept op.
pub fn dead_code_elimination(k: &mut Kernel) {
    dce(k);
}

/// Merges pure instructions that compute the same thing: same op and attributes, same operands
/// (in either order for commutative integer and float `add`, `mul`, `and`, `or`, `xor`), same
/// result types, where the first one is in scope at the second (earlier in the same block or in
/// an enclosing block). Uses of the second are redirected to the first and the second is
/// dropped.
///
/// Never merged: ops with side effects, loads (memory may change in between), atomics, and ops
/// with regions.
pub fn common_subexpression_elimination(k: &mut Kernel) {
    cse(k);
}

/// Simplifies a kernel: folds trivial ops and runs CSE and DCE until nothing changes.
///
/// Folds:
/// - `broadcast`, `reshape`, `cast` and `bitcast` to the operand's own type, and `permute` by
///   the identity, become their operand;
/// - `splat` of a constant becomes a constant of the splat's shape;
/// - `add`, `sub`, `mul`, `and`, `or`, `xor` of two integer constants (wrapping at the dtype's
///   width) and `add`, `sub`, `mul`, `div` of two float constants (rounded once to the dtype)
///   become a constant; since constants are splats, this covers constant tiles too;
/// - `x + dot(a, b)` becomes `dot(a, b, x)` ([`accumulate_into_dots`], rule *dot accumulate*).
pub fn canonicalize(k: &mut Kernel) {
    // Each round strictly shrinks the kernel or stops; the cap guards against a fold bug.
    for _ in 0..64 {
        let folded = fold(k);
        let accumulated = accumulate_into_dots(k);
        let merged = cse(k);
        let removed = dce(k);
        if !(folded || accumulated || merged || removed) {
            break;
        }
    }
}

/// Every placed instruction in program order (regions before what follows them), with the
/// block it sits in.
fn placed(k: &Kernel) -> Vec<(Block, Inst)> {
    fn go(k: &Kernel, b: Block, out: &mut Vec<(Block, Inst)>) {
        for &i in &k.blocks[b].insts {
            out.push((b, i));
            for &r in &k.insts[i].regions {
                go(k, r, out);
            }
        }
    }
    let mut out = Vec::new();
    go(k, k.body, &mut out);
    out
}

fn dce(k: &mut Kernel) -> bool {
    let order = placed(k);
    let mut live = vec![false; k.insts.len()];
    let mut parent_of_block: HashMap<Block, Inst> = HashMap::default();
    let mut block_of: HashMap<Inst, Block> = HashMap::default();
    for &(b, i) in &order {
        block_of.insert(i, b);
        for &r in &k.insts[i].regions {
            parent_of_block.insert(r, i);
        }
    }
    let mut work: Vec<Inst> = order
        .iter()
        .map(|&(_, i)| i)
        .filter(|&i| {
            let op = &k.insts[i].op;
            op.has_side_effects() && !op.is_terminator()
        })
        .collect();
    while let Some(i) = work.pop() {
        if std::mem::replace(&mut live[i.index()], true) {
            continue;
        }
        let d = &k.insts[i];
        for &a in &d.args {
            if let ValueDef::Result(def, _) = k.values[a].def {
                work.push(def);
            }
        }
        // A kept op inside a region keeps the construct around it.
        if let Some(p) = block_of.get(&i).and_then(|b| parent_of_block.get(b)) {
            work.push(*p);
        }
        // A kept construct keeps its regions' terminators, and through them what they yield.
        for &r in &d.regions {
            if let Some(&last) = k.blocks[r].insts.last() {
                if k.insts[last].op.is_terminator() {
                    work.push(last);
                }
            }
        }
    }
    let mut changed = false;
    let blocks: Vec<Block> = std::iter::once(k.body)
        .chain(order.iter().flat_map(|&(_, i)| k.insts[i].regions.clone()))
        .collect();
    for b in blocks {
        let before = k.blocks[b].insts.len();
        k.blocks[b].insts.retain(|&i| live[i.index()]);
        changed |= k.blocks[b].insts.len() != before;
    }
    changed
}

/// Replaces `v` by what it was redirected to, following chains.
fn resolve(subst: &HashMap<Value, Value>, mut v: Value) -> Value {
    while let Some(&w) = subst.get(&v) {
        v = w;
    }
    v
}

/// What identifies a pure computation. Float constants are keyed by their bits, so `0.0` and
/// `-0.0` stay apart.
#[derive(PartialEq, Eq, Hash)]
struct ExprKey {
    op: String,
    args: Vec<Value>,
    types: Vec<TileType>,
}

fn expr_key(k: &Kernel, i: Inst) -> Option<ExprKey> {
    let d = &k.insts[i];
    let mergeable = !d.op.has_side_effects()
        && d.regions.is_empty()
        && !matches!(
            d.op,
            Op::Load { .. } | Op::Atomic { .. } | Op::AtomicCas { .. }
        );
    if !mergeable {
        return None;
    }
    let op = match &d.op {
        Op::Const(Constant::Float(f)) => format!("Const(FloatBits({:#x}))", f.to_bits()),
        other => format!("{other:?}"),
    };
    let mut args = d.args.clone();
    let commutative = matches!(
        d.op,
        Op::Binary(BinaryOp::Add | BinaryOp::Mul | BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
    );
    if commutative {
        args.sort();
    }
    Some(ExprKey {
        op,
        args,
        types: d.results.iter().map(|&v| k.ty(v)).collect(),
    })
}

fn cse(k: &mut Kernel) -> bool {
    let mut subst = HashMap::default();
    let mut scopes: Vec<HashMap<ExprKey, Inst>> = Vec::new();
    let body = k.body;
    cse_block(k, body, &mut scopes, &mut subst)
}

fn cse_block(
    k: &mut Kernel,
    b: Block,
    scopes: &mut Vec<HashMap<ExprKey, Inst>>,
    subst: &mut HashMap<Value, Value>,
) -> bool {
    scopes.push(HashMap::default());
    let mut changed = false;
    let mut kept = Vec::with_capacity(k.blocks[b].insts.len());
    for i in k.blocks[b].insts.clone() {
        rewrite_args(k, i, subst);
        for r in k.insts[i].regions.clone() {
            changed |= cse_block(k, r, scopes, subst);
        }
        if let Some(key) = expr_key(k, i) {
            if let Some(&first) = scopes.iter().rev().find_map(|s| s.get(&key)) {
                for (a, b) in k.insts[i].results.iter().zip(&k.insts[first].results) {
                    subst.insert(*a, *b);
                }
                changed = true;
                continue;
            }
            scopes.last_mut().expect("pushed above").insert(key, i);
        }
        kept.push(i);
    }
    k.blocks[b].insts = kept;
    scopes.pop();
    changed
}

pub(crate) fn rewrite_args(k: &mut Kernel, i: Inst, subst: &HashMap<Value, Value>) {
    if subst.is_empty() {
        return;
    }
    for a in k.insts[i].args.iter_mut() {
        *a = resolve(subst, *a);
    }
}

/// One round of folds over every block; true when something changed.
fn fold(k: &mut Kernel) -> bool {
    let mut subst = HashMap::default();
    let body = k.body;
    fold_block(k, body, &mut subst)
}

fn fold_block(k: &mut Kernel, b: Block, subst: &mut HashMap<Value, Value>) -> bool {
    let mut changed = false;
    let mut kept = Vec::with_capacity(k.blocks[b].insts.len());
    for i in k.blocks[b].insts.clone() {
        rewrite_args(k, i, subst);
        for r in k.insts[i].regions.clone() {
            changed |= fold_block(k, r, subst);
        }
        if let Some(operand) = forwards_operand(k, i) {
            subst.insert(k.insts[i].results[0], operand);
            changed = true;
            continue;
        }
        if let Some(c) = fold_constant(k, i) {
            let d = &mut k.insts[i];
            d.op = Op::Const(c);
            d.args.clear();
            changed = true;
        }
        kept.push(i);
    }
    k.blocks[b].insts = kept;
    changed
}

/// The operand an op returns unchanged (a conversion or reshaping to the operand's own type,
/// or integer arithmetic with its identity: `x * 1`, `x + 0`, `x - 0`, `ptr + 0`).
fn forwards_operand(k: &Kernel, i: Inst) -> Option<Value> {
    let d = &k.insts[i];
    if let Some(v) = integer_identity(k, i) {
        return Some(v);
    }
    let identity = match &d.op {
        Op::Broadcast | Op::Reshape | Op::Bitcast => true,
        // A cast to its own dtype is the identity whatever the rounding.
        Op::Cast { .. } => true,
        Op::Permute { perm } => perm.iter().enumerate().all(|(j, &p)| p as usize == j),
        _ => false,
    };
    if !identity || d.args.len() != 1 || d.results.len() != 1 {
        return None;
    }
    (k.ty(d.args[0]) == k.ty(d.results[0])).then_some(d.args[0])
}

/// `x * 1`, `1 * x`, `x + 0`, `0 + x`, `x - 0` on integers and `ptr + 0`, when `x` already has
/// the result's type (no broadcast hidden in the op). Floats are left alone: `x + 0.0` is not
/// the identity for `x = -0.0`.
fn integer_identity(k: &Kernel, i: Inst) -> Option<Value> {
    let d = &k.insts[i];
    if d.args.len() != 2 || d.results.len() != 1 {
        return None;
    }
    let result_ty = k.ty(d.results[0]);
    let is = |v: Value, want: i64| {
        matches!(const_of(k, v), Some(Constant::Int(c)) if c == want) && k.ty(v).dtype().is_int()
    };
    let (a, b) = (d.args[0], d.args[1]);
    let candidate = match d.op {
        Op::Binary(BinaryOp::Mul) if result_ty.dtype().is_int() && !result_ty.is_ptr() => {
            if is(b, 1) {
                a
            } else if is(a, 1) {
                b
            } else {
                return None;
            }
        }
        Op::Binary(BinaryOp::Add) if result_ty.dtype().is_int() && !result_ty.is_ptr() => {
            if is(b, 0) {
                a
            } else if is(a, 0) {
                b
            } else {
                return None;
            }
        }
        Op::Binary(BinaryOp::Sub) if result_ty.dtype().is_int() && is(b, 0) => a,
        Op::AddPtr if is(b, 0) => a,
        _ => return None,
    };
    (k.ty(candidate) == result_ty).then_some(candidate)
}

/// Replaces every use of scalar parameter `param` by the constant `value` (Triton specializes
/// integer arguments equal to 1 this way, so a unit stride becomes visible to vectorization).
/// The parameter itself stays, so the calling convention does not change.
pub fn bind_scalar_param(k: &mut Kernel, param: usize, value: Constant) {
    let Some(p) = k.params.get(param) else {
        return;
    };
    if p.ty.is_ptr() {
        return;
    }
    let (old, ty) = (p.value, p.ty);
    let body = k.body;
    let inst = k.append(
        body,
        Op::Const(value),
        vec![],
        &[ty],
        vec![],
        crate::Loc::UNKNOWN,
    );
    let new = k.insts[inst].results[0];
    // `append` put the constant last; it must dominate every use, so move it first.
    let insts = &mut k.blocks[body].insts;
    insts.pop();
    insts.insert(0, inst);
    let subst: HashMap<Value, Value> = [(old, new)].into_iter().collect();
    for i in k.insts.keys().collect::<Vec<_>>() {
        rewrite_args(k, i, &subst);
    }
}

fn const_of(k: &Kernel, v: Value) -> Option<Constant> {
    let i = k.def_inst(v)?;
    match k.insts[i].op {
        Op::Const(c) => Some(c),
        _ => None,
    }
}

/// The constant an op computes when its operands are constants, for the simple cases.
fn fold_constant(k: &Kernel, i: Inst) -> Option<Constant> {
    let d = &k.insts[i];
    match d.op {
        Op::Splat => const_of(k, *d.args.first()?),
        Op::Binary(op) if d.args.len() == 2 && d.results.len() == 1 => {
            let ty = k.ty(d.results[0]);
            if ty.is_ptr() {
                return None;
            }
            let (a, b) = (const_of(k, d.args[0])?, const_of(k, d.args[1])?);
            match (a, b) {
                (Constant::Int(x), Constant::Int(y)) if ty.dtype().is_int() => {
                    fold_int(op, x, y, ty.dtype()).map(Constant::Int)
                }
                (Constant::Float(x), Constant::Float(y)) if ty.dtype().is_float() => {
                    fold_float(op, x, y, ty.dtype()).map(Constant::Float)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// `x op y` wrapped to the width of `d` (the i64 holds the value sign- or zero-extended).
fn fold_int(op: BinaryOp, x: i64, y: i64, d: DType) -> Option<i64> {
    let (x, y) = (wrap_int(x, d), wrap_int(y, d));
    let r = match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::And => x & y,
        BinaryOp::Or => x | y,
        BinaryOp::Xor => x ^ y,
        _ => return None,
    };
    Some(wrap_int(r, d))
}

/// The low `bits(d)` bits of `v`, sign-extended for signed types, zero-extended for unsigned
/// types and i1 (u64 keeps its bit pattern).
fn wrap_int(v: i64, d: DType) -> i64 {
    let bits = d.bits();
    if bits >= 64 {
        return v;
    }
    let mask = (1u64 << bits) - 1;
    let low = (v as u64) & mask;
    if d.is_signed_int() && low >> (bits - 1) == 1 {
        (low | !mask) as i64
    } else {
        low as i64
    }
}

/// `x op y` for floats of dtype `d`, rounded to nearest even. Computing in f64 and rounding
/// once to `d` gives the correctly rounded result for `+ - * /`, since f64 has more than twice
/// the precision of f32, f16 and bf16.
fn fold_float(op: BinaryOp, x: f64, y: f64, d: DType) -> Option<f64> {
    // A constant holds an f64; its value as an operand is that rounded to the dtype.
    let (x, y) = (round_float(x, d)?, round_float(y, d)?);
    let r = match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div | BinaryOp::DivRn => x / y,
        _ => return None,
    };
    round_float(r, d)
}

/// `v` rounded to nearest even in the float dtype `d`.
fn round_float(v: f64, d: DType) -> Option<f64> {
    Some(match d {
        DType::F64 => v,
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => return None,
    })
}
