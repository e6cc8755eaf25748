//! Facts about a kernel's values that the planning passes and the emitter read: contiguity,
//! divisibility and constancy per axis ([`axis_info`]); affine forms of pointers and masks in a
//! loop's induction variable ([`affine`]); what kind of op an instruction is and where a dot
//! operand comes from (here).

pub mod affine;
pub mod axis_info;

use crate::mma_layout::Role;
use tegula_ir::{Kernel, Op, Value};

/// Whether an op is lowered in program order with a layout of its own (anchored), rather than
/// materialized in each consumer's layout (free).
pub fn is_anchored(op: &Op) -> bool {
    matches!(
        op,
        Op::Load { .. }
            | Op::Store { .. }
            | Op::Atomic { .. }
            | Op::AtomicCas { .. }
            | Op::Reduce { .. }
            | Op::Scan { .. }
            | Op::ReduceWith { .. }
            | Op::ScanWith { .. }
            | Op::Dot { .. }
            | Op::For { .. }
            | Op::If
            | Op::While
            | Op::Print { .. }
            | Op::Assert { .. }
            | Op::Barrier
            | Op::DescLoad
            | Op::DescStore
            | Op::Yield
            | Op::Condition
    )
}

/// Whether a free op may move elements between threads, through shared memory (`reshape`,
/// `permute`, `flip`, `gather`): it is lowered where its consumer asks for it (never hoisted
/// out of the region that uses it, since it writes the scratch buffer between barriers), and
/// the analyses that follow values through free ops stop at it.
pub fn moves_across_threads(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape | Op::Permute { .. } | Op::Flip { .. } | Op::Gather { .. }
    )
}

/// A dot operand's loaded source: `(x, true)` for `x.trans()` (a 2-D permute), else
/// `(operand, false)`.
pub fn untransposed(k: &Kernel, operand: Value) -> (Value, bool) {
    match k.def_inst(operand).map(|i| &k.insts[i]) {
        Some(d) if matches!(&d.op, Op::Permute { perm } if perm[..] == [1, 0]) => (d.args[0], true),
        _ => (operand, false),
    }
}

/// The value staged for operand `v` and whether its row-major order is K-major: `x` of
/// `x.trans()` is staged directly (its row-major order is the operand transposed). Stored
/// K-major means A as `[m][k]`, B as `[n][k]`; a source's own row-major order is K-major for an
/// untransposed A and a transposed B.
pub fn staging_source(k: &Kernel, v: Value, role: Role) -> (Value, bool) {
    let (src, permuted) = match k.def_inst(v).map(|i| &k.insts[i]) {
        Some(di) if matches!(&di.op, Op::Permute { perm } if perm[..] == [1, 0]) => {
            (di.args[0], true)
        }
        _ => (v, false),
    };
    (src, (role == Role::A) != permuted)
}
