//! Rule *dot accumulate*: `x + dot(a, b)` becomes `dot(a, b, x)`.
//!
//! `accumulator += tl.dot(a, b)` (Triton's tutorials 08 and 09 write it so) traces to a dot
//! whose accumulator is a zero tile and an add after it. Tensor cores accumulate in place
//! (`mma` and `wgmma` take C and write D = A B + C), so the add costs a pass over the
//! accumulator's registers each iteration, and worse, it hides that the loop carries the dot's
//! accumulator: the pipeline then cannot write it in place or keep a `wgmma` in flight.
//! Triton's combine pass folds the add into the dot the same way.
//!
//! Precondition: the add's operands and result have one type (no broadcast), one operand is
//! the result of a `dot` whose accumulator is the constant zero, that result has no other
//! use, and the dot sits in the add's block (it moves to the add's place, where `x` is
//! defined; its own operands were defined before it). The sum is reassociated: `x` enters
//! the dot's sum first instead of last, which is exact for integers and within the dot's own
//! rounding for floats.

use super::{placed, rewrite_args};
use crate::fast_hash::HashMap;
use crate::kernel::{Inst, Kernel, Value};
use crate::op::{BinaryOp, Constant, Op};
use crate::uses::Uses;

/// Applies the rule wherever its precondition holds; true when something changed.
pub fn accumulate_into_dots(k: &mut Kernel) -> bool {
    let uses = Uses::new(k);
    let mut subst: HashMap<Value, Value> = HashMap::default();
    for (block, add) in placed(k) {
        let Some((dot, x)) = foldable(k, &uses, add) else {
            continue;
        };
        if uses.block_of(dot) != Some(block) {
            continue;
        }
        let insts = &mut k.blocks[block].insts;
        insts.retain(|&i| i != dot);
        let at = insts
            .iter()
            .position(|&i| i == add)
            .expect("the add is in its block");
        insts[at] = dot;
        k.insts[dot].args[2] = x;
        subst.insert(k.insts[add].results[0], k.insts[dot].results[0]);
    }
    if subst.is_empty() {
        return false;
    }
    for i in k.insts.keys().collect::<Vec<_>>() {
        rewrite_args(k, i, &subst);
    }
    true
}

/// `(dot, x)` when `add` is `x + dot(a, b, 0)` or `dot(a, b, 0) + x` with the precondition's
/// types and uses.
fn foldable(k: &Kernel, uses: &Uses, add: Inst) -> Option<(Inst, Value)> {
    let d = &k.insts[add];
    if !matches!(d.op, Op::Binary(BinaryOp::Add)) || d.args.len() != 2 {
        return None;
    }
    let ty = k.ty(d.results[0]);
    for (p, x) in [(d.args[1], d.args[0]), (d.args[0], d.args[1])] {
        let Some(dot) = k.def_inst(p) else {
            continue;
        };
        let dd = &k.insts[dot];
        if !matches!(dd.op, Op::Dot { .. }) {
            continue;
        }
        let zero_acc = matches!(
            k.def_inst(dd.args[2]).map(|c| &k.insts[c].op),
            Some(Op::Const(Constant::Float(z))) if *z == 0.0
        ) || matches!(
            k.def_inst(dd.args[2]).map(|c| &k.insts[c].op),
            Some(Op::Const(Constant::Int(0)))
        );
        let only_use = uses.users(p).is_some_and(|u| u.len() == 1);
        if zero_acc && only_use && k.ty(p) == ty && k.ty(x) == ty && x != p {
            return Some((dot, x));
        }
    }
    None
}
