//! Rule *transposed load*: a 2-D load whose elements are contiguous in memory down its first
//! axis only (a K-major operand addressed as `offs_k[:, None] * 1 + offs_n[None, :] * stride`,
//! Triton's `kT_ptrs`, or B of a column-major matrix) is loaded as its transpose and then
//! permuted back: `load(P) -> load(P^T).trans()`.
//!
//! Loads run in layouts whose vectors lie along the last axis, so the untransposed load moves
//! one element per access (and cannot be copied a stage ahead with `cp.async`, which moves 4
//! to 16 bytes); its transpose is contiguous along its last axis, and `.trans()` of a loaded
//! dot operand is what the tensor cores read anyway (`ldmatrix .trans`, or the other K-major
//! order of a pipeline slot). So the rule applies when every use of the load is an operand of
//! a `dot`, as is or through `.trans()` (which then reads the transposed load directly), and
//! when its pointer, mask and `other` can all be written transposed: built from
//! constants, splats, broadcasts, `expand_dims` of rank-1 tiles and elementwise ops, each of
//! which is rewritten in place (the transposed twin is inserted right after the original).
//!
//! The pass rewrites the kernel before any decision is planned; the rest of the plan sees an
//! ordinary transposed load.

use crate::analysis::axis_info::AxisAnalysis;
use tegula_ir::fast_hash::HashMap;
use tegula_ir::uses::Uses;
use tegula_ir::{Inst, InstData, Kernel, Op, Shape, TileType, Value, ValueData, ValueDef};

/// Rewrites every load the rule takes (see the module doc); true when something changed.
pub fn transpose_loads(k: &mut Kernel) -> bool {
    let axis = AxisAnalysis::run(k);
    let uses = Uses::new(k);
    let candidates: Vec<Inst> = k
        .walk()
        .into_iter()
        .filter(|&i| takes(k, &axis, &uses, i))
        .collect();
    let mut changed = false;
    let mut t = Transposer {
        memo: HashMap::default(),
    };
    for load in candidates {
        changed |= t.rewrite(k, &uses, load);
    }
    changed
}

/// The rule's precondition on the load alone.
fn takes(k: &Kernel, axis: &AxisAnalysis, uses: &Uses, li: Inst) -> bool {
    let d = &k.insts[li];
    if !matches!(d.op, Op::Load { .. }) {
        return false;
    }
    let shape = k.ty(d.results[0]).shape;
    if shape.rank() != 2 || shape.dim(0) < 2 || shape.dim(1) < 2 {
        return false;
    }
    let info = axis.get(k, d.args[0]);
    let (down, across) = (info.contiguity[0], info.contiguity[1]);
    let dot_operand =
        |&(u, pos): &(Inst, usize)| matches!(k.insts[u].op, Op::Dot { .. }) && pos < 2;
    // Every use a dot operand, as is or through `.trans()`.
    let only_dots = uses.users(d.results[0]).is_some_and(|users| {
        users.iter().all(|use_| {
            dot_operand(use_)
                || (is_transpose(k, use_.0)
                    && uses
                        .users(k.insts[use_.0].results[0])
                        .is_some_and(|ts| ts.iter().all(dot_operand)))
        })
    });
    across == 1 && down > 1 && only_dots
}

fn is_transpose(k: &Kernel, i: Inst) -> bool {
    matches!(&k.insts[i].op, Op::Permute { perm } if perm[..] == [1, 0])
}

fn transposed_shape(s: Shape) -> Shape {
    Shape::new(&[s.dim(1), s.dim(0)]).expect("rank 2")
}

struct Transposer {
    /// Each rewritten value's transposed twin.
    memo: HashMap<Value, Value>,
}

impl Transposer {
    fn rewrite(&mut self, k: &mut Kernel, uses: &Uses, li: Inst) -> bool {
        let d = k.insts[li].clone();
        let Some(args) = d
            .args
            .iter()
            .map(|&a| self.transpose(k, uses, a))
            .collect::<Option<Vec<Value>>>()
        else {
            return false;
        };
        let ty = k.ty(d.results[0]);
        let tty = ty.with_shape(transposed_shape(ty.shape));
        let block = uses.block_of(li).expect("a live load");
        let at = k.blocks[block]
            .insts
            .iter()
            .position(|&i| i == li)
            .expect("the load is in its block");
        let loaded = insert(k, block, at, d.op.clone(), args, tty, d.loc);
        let back = insert(
            k,
            block,
            at + 1,
            Op::Permute { perm: vec![1, 0] },
            vec![loaded],
            ty,
            d.loc,
        );
        k.blocks[block].insts.retain(|&i| i != li);
        let old = d.results[0];
        for &(u, pos) in uses.users(old).unwrap_or(&[]) {
            if is_transpose(k, u) {
                // `.trans()` of the load is the transposed load itself.
                let t = k.insts[u].results[0];
                for &(w, p) in uses.users(t).unwrap_or(&[]) {
                    k.insts[w].args[p] = loaded;
                }
            } else {
                k.insts[u].args[pos] = back;
            }
        }
        true
    }

    /// `v`'s transpose, built from its definition (scalars are their own), or `None`.
    fn transpose(&mut self, k: &mut Kernel, uses: &Uses, v: Value) -> Option<Value> {
        let ty = k.ty(v);
        if ty.shape.rank() == 0 {
            return Some(v);
        }
        if let Some(&t) = self.memo.get(&v) {
            return Some(t);
        }
        if ty.shape.rank() != 2 {
            return None;
        }
        let ValueDef::Result(inst, 0) = k.values[v].def else {
            return None;
        };
        let d = k.insts[inst].clone();
        let tty = ty.with_shape(transposed_shape(ty.shape));
        let (op, args) = match &d.op {
            Op::Const(_) | Op::Splat => (d.op.clone(), d.args.clone()),
            Op::ExpandDims { axis } if k.ty(d.args[0]).shape.rank() == 1 => {
                (Op::ExpandDims { axis: 1 - *axis }, d.args.clone())
            }
            Op::MultipleOf { n } => (
                Op::MultipleOf {
                    n: n.iter().rev().copied().collect(),
                },
                self.transpose_all(k, uses, &d.args)?,
            ),
            Op::MaxContiguous { n } => (
                Op::MaxContiguous {
                    n: n.iter().rev().copied().collect(),
                },
                self.transpose_all(k, uses, &d.args)?,
            ),
            Op::MaxConstancy { n } => (
                Op::MaxConstancy {
                    n: n.iter().rev().copied().collect(),
                },
                self.transpose_all(k, uses, &d.args)?,
            ),
            Op::Broadcast => (Op::Broadcast, self.transpose_all(k, uses, &d.args)?),
            op if op.is_elementwise() => (d.op.clone(), self.transpose_all(k, uses, &d.args)?),
            _ => return None,
        };
        let block = uses.block_of(inst)?;
        let at = k.blocks[block].insts.iter().position(|&i| i == inst)? + 1;
        let t = insert(k, block, at, op, args, tty, d.loc);
        self.memo.insert(v, t);
        Some(t)
    }

    fn transpose_all(&mut self, k: &mut Kernel, uses: &Uses, vs: &[Value]) -> Option<Vec<Value>> {
        vs.iter().map(|&a| self.transpose(k, uses, a)).collect()
    }
}

/// A new instruction of one result at position `at` of `block`.
fn insert(
    k: &mut Kernel,
    block: tegula_ir::Block,
    at: usize,
    op: Op,
    args: Vec<Value>,
    ty: TileType,
    loc: tegula_ir::Loc,
) -> Value {
    let inst = k.insts.push(InstData {
        op,
        args,
        results: Vec::new(),
        regions: Vec::new(),
        loc,
    });
    let v = k.values.push(ValueData {
        ty,
        def: ValueDef::Result(inst, 0),
    });
    k.insts[inst].results.push(v);
    k.blocks[block].insts.insert(at, inst);
    v
}
