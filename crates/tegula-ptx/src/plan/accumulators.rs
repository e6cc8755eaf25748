//! Rule *accumulator home*: a dot whose result a loop carries on runs in the carried
//! value's registers.
//!
//! The emitter gives every value fresh registers and moves a loop's yielded values into its
//! carried ones at the end of each iteration. For a dot that is a copy of its accumulator into
//! the dot's registers before it and a copy of the result back after it. `ptxas` removes such
//! copies for scalar code but not around `wgmma`, whose accumulator is one block of
//! registers: in tutorial 06's forward (`acc = dot(p, v, acc * alpha)`) it kept the carried
//! accumulator in other registers and moved all 32 of a thread's values back after every
//! `P V` (346 SASS instructions an iteration and 121 registers at 64 x 64 over 4 warps,
//! against 314 and 106 with the dot in the carried registers).
//!
//! A dot `d = dot(a, b, c)` directly in the body of a `for` loop has the home `x`, the body's
//! carried value at position `i`, when
//! 1. the body yields `d` at position `i`;
//! 2. `x` is dead from the dot on: every instruction that reads `x`, or reads a free value
//!    computed from `x` by free (elementwise) ops, sits in the body before the dot, the dot
//!    reading `c` aside. The emitter materializes a free value where each consumer asks for
//!    it, from its operands' registers then, so a consumer after the dot would read `x`'s
//!    registers after the dot overwrote them; an anchored op (a reduction, say) reads `x`
//!    where it stands;
//! 3. `x` is carried in the layout of the dot's accumulator (the registers are the same ones).
//!
//! The emitter then moves `c` into `x`'s registers at the dot (nothing when `c` is `x`), runs
//! the dot there, and the loop's end moves nothing for it; `ptxas` folds the move into the
//! instruction that computed `c`. A `wgmma` whose accumulator is `x` itself and that nothing
//! else reads may stay in flight into the next iteration (`pipeline.rs`, rule *wgmma slots*).

use super::layouts::LayoutPlan;
use super::Context;
use crate::analysis::is_anchored;
use std::collections::{HashMap, HashSet};
use tegula_ir::{Block, Inst, Op, Value};

/// The dots of a kernel that run in a loop-carried value's registers.
#[derive(Clone, Debug, Default)]
pub struct AccumulatorHomes {
    homes: HashMap<Inst, Value>,
}

impl AccumulatorHomes {
    /// The carried value (a block argument of the loop's body) whose registers `dot` runs in.
    pub fn of(&self, dot: Inst) -> Option<Value> {
        self.homes.get(&dot).copied()
    }
}

/// Finds the home of every dot directly in a `for` loop's body (module doc).
pub fn plan(cx: &Context<'_>, layouts: &LayoutPlan) -> AccumulatorHomes {
    let k = cx.k;
    let mut homes = HashMap::new();
    for inst in k.walk() {
        if !matches!(k.insts[inst].op, Op::For { .. }) {
            continue;
        }
        let body = k.insts[inst].regions[0];
        let carried = &k.blocks[body].args[1..];
        let yields = k.blocks[body]
            .insts
            .last()
            .map(|&t| k.insts[t].args.clone())
            .unwrap_or_default();
        let order: HashMap<Inst, usize> = k.blocks[body]
            .insts
            .iter()
            .enumerate()
            .map(|(i, &x)| (x, i))
            .collect();
        for (&dot, &at) in &order {
            if !matches!(k.insts[dot].op, Op::Dot { .. }) {
                continue;
            }
            let result = k.insts[dot].results[0];
            let Some(pos) = yields.iter().position(|&y| y == result) else {
                continue;
            };
            let x = carried[pos];
            let same_layout = layouts.carried(inst).get(pos) == Some(&layouts.natural(result).0);
            if same_layout && dead_from(cx, body, &order, x, dot, at) {
                homes.insert(dot, x);
            }
        }
    }
    AccumulatorHomes { homes }
}

/// Condition 2: every reader of `x` or of a value computed from it in `body` (not through
/// `dot`) is an instruction of `body` before position `at`, or `dot` reading its accumulator.
fn dead_from(
    cx: &Context<'_>,
    body: Block,
    order: &HashMap<Inst, usize>,
    x: Value,
    dot: Inst,
    at: usize,
) -> bool {
    let k = cx.k;
    let mut seen = HashSet::new();
    let mut work = vec![x];
    while let Some(v) = work.pop() {
        if !seen.insert(v) {
            continue;
        }
        for &(user, pos) in cx.uses.users(v).unwrap_or_default() {
            // The dot reads its accumulator before it writes it; an operand computed from
            // `x` may be read after the move (its registers are gathered at the dot).
            if user == dot {
                if pos == 2 {
                    continue;
                }
                return false;
            }
            // The reader's enclosing instruction in `body` (itself, or the `for`/`if` whose
            // region it is in); none when it is the terminator or outside the body.
            let mut top = user;
            while cx.uses.block_of(top) != Some(body) {
                match cx.uses.block_of(top).and_then(|b| cx.uses.parent_of(b)) {
                    Some(p) => top = p,
                    None => return false,
                }
            }
            match order.get(&top) {
                Some(&i) if i < at && !matches!(k.insts[top].op, Op::Yield) => {}
                _ => return false,
            }
            // A free op's result is materialized where each consumer asks for it, from `x`'s
            // registers then: its consumers count as readers of `x`. An anchored op reads
            // `x` where it stands and keeps its result in registers of its own.
            if !is_anchored(&k.insts[user].op) {
                work.extend(k.insts[user].results.iter().copied());
            }
        }
    }
    true
}
