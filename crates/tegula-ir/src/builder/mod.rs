//! The tracing builder: a kernel body runs once with symbolic [`Tile`]s, and every operation on
//! them appends an instruction to the kernel being traced.
//!
//! The kernel under construction lives in a thread-local, so operators (`a + b`) can append
//! without a context argument. Type and shape errors do not panic: the first one is recorded with
//! the user's source line (`#[track_caller]` all the way down) and returned by [`trace`]; the
//! builder keeps going with best-guess types so the body can finish.

mod bits;
mod block_ptr;
mod combine;
mod control;
mod convert;
mod descriptor;
mod fast;
mod indexing;
mod math;
mod ops;
mod random;
mod rounded;
mod tile;

pub use bits::*;
pub use block_ptr::{make_block_ptr, BlockPtr, Padding};
pub use combine::{reduce_with, scan_with};
pub use control::{
    for_range, for_range_with, if_else, if_then, range, scalar, static_range, while_any,
    while_loop, Carry, Condition, InKernelOrFunc, Named, RangeOptions, RustBool, StageCount,
};
pub use convert::*;
pub use descriptor::{make_tensor_descriptor, Indices, TensorDescriptor};
pub use fast::*;
pub use indexing::*;
pub use math::*;
pub use ops::*;
pub use random::*;
pub use rounded::*;
pub use tile::{IntoOperand, Operand, Tile};

use crate::dtype::DType;
use crate::error::TraceError;
use crate::kernel::{Block, Kernel, Loc, Value};
use crate::op::{Constant, Op};
use crate::types::{IntoShape, Shape, TileType};
use std::cell::RefCell;

/// The state of one trace in progress.
struct TraceState {
    kernel: Kernel,
    /// Innermost block last: where new instructions go.
    blocks: Vec<Block>,
    /// Values a hint (`multiple_of`, `max_contiguous`) marked, with the hinted value that
    /// stands for them in what is traced after it, and the depth of the block the hint is in
    /// (it ends with that block).
    hinted: Vec<(usize, Value, Value)>,
    error: Option<TraceError>,
}

thread_local! {
    /// A stack so that a kernel can be traced while another trace is in progress.
    static TRACES: RefCell<Vec<TraceState>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the innermost trace. Tiles exist only inside [`trace`], so reaching here without
/// one is a bug in the caller's program, not bad input.
fn with_state<R>(f: impl FnOnce(&mut TraceState) -> R) -> R {
    TRACES.with(|t| {
        let mut stack = t.borrow_mut();
        let state = stack
            .last_mut()
            .expect("tegula: a tile operation was used outside of a kernel trace");
        f(state)
    })
}

/// Records an error at `loc` unless an earlier one is already recorded.
pub(crate) fn report(loc: Loc, message: impl Into<String>) {
    with_state(|s| {
        if s.error.is_none() {
            s.error = Some(TraceError {
                kernel: s.kernel.name.clone(),
                message: message.into(),
                loc,
            });
        }
    })
}

/// Appends an instruction to the current block and returns its result values.
pub(crate) fn emit(
    op: Op,
    args: Vec<Value>,
    result_types: &[TileType],
    regions: Vec<Block>,
    loc: Loc,
) -> Vec<Value> {
    with_state(|s| {
        let block = *s.blocks.last().expect("trace has a current block");
        let args = args
            .into_iter()
            .map(|a| {
                s.hinted
                    .iter()
                    .rev()
                    .find(|&&(_, from, _)| from == a)
                    .map_or(a, |&(_, _, to)| to)
            })
            .collect();
        let inst = s.kernel.append(block, op, args, result_types, regions, loc);
        s.kernel.insts[inst].results.clone()
    })
}

/// Appends a single-result instruction and returns its result as a tile.
pub(crate) fn emit1(op: Op, args: Vec<Value>, ty: TileType, loc: Loc) -> Tile {
    let v = emit(op, args, &[ty], Vec::new(), loc)[0];
    Tile::from_raw(v, ty)
}

/// A hint's result `hinted` stands for `x` in everything traced after it in the current block
/// and the blocks nested in it: Triton's hints mark the value itself, so
/// `tl.multiple_of(a_ptrs, 16)` with its result unused still hints the loads of `a_ptrs` that
/// follow.
pub(crate) fn mark_hinted(x: Value, hinted: Value) {
    with_state(|s| {
        let depth = s.blocks.len();
        s.hinted.push((depth, x, hinted));
    })
}

/// The op that defines `v`, if any (used to fold constants while building).
pub(crate) fn defining_op(v: Value) -> Option<Op> {
    with_state(|s| s.kernel.def_inst(v).map(|i| s.kernel.insts[i].op.clone()))
}

/// Creates a block for a region and makes it current while `f` runs.
pub(crate) fn in_new_block<R>(arg_types: &[TileType], f: impl FnOnce(&[Tile]) -> R) -> (Block, R) {
    let (block, args) = enter_block(arg_types);
    let r = f(&args);
    leave_block();
    (block, r)
}

/// Creates a block for a region and makes it current until [`leave_block`]; for builders that
/// trace a region themselves (a closure would lose the user's `#[track_caller]` location).
pub(crate) fn enter_block(arg_types: &[TileType]) -> (Block, Vec<Tile>) {
    with_state(|s| {
        let b = s.kernel.add_block(arg_types);
        s.blocks.push(b);
        let args: Vec<Tile> = s.kernel.blocks[b]
            .args
            .iter()
            .map(|&v| Tile::from_raw(v, s.kernel.ty(v)))
            .collect();
        (b, args)
    })
}

/// Makes the block around the current one current again (see [`enter_block`]).
pub(crate) fn leave_block() {
    with_state(|s| {
        s.blocks.pop();
        let depth = s.blocks.len();
        s.hinted.retain(|&(d, _, _)| d <= depth);
    });
}

/// `shape` as a [`Shape`], or a trace error at `loc` (and a scalar shape, so the trace goes
/// on to its end) when it has too many axes or elements.
pub(crate) fn shape_at(shape: impl IntoShape, loc: Loc) -> Shape {
    shape.into_shape().unwrap_or_else(|message| {
        report(loc, message);
        Shape::SCALAR
    })
}

pub(crate) fn constant(c: Constant, dtype: DType, shape: Shape, loc: Loc) -> Tile {
    emit1(Op::Const(c), vec![], TileType::tile(dtype, shape), loc)
}

/// Declares the parameters of a kernel being traced.
pub struct Params {
    _private: (),
}

impl Params {
    /// A pointer parameter to elements of `dtype`.
    pub fn ptr(&mut self, name: &str, dtype: DType) -> Tile {
        self.add(name, TileType::ptr(dtype))
    }

    /// A scalar parameter of `dtype`.
    pub fn scalar(&mut self, name: &str, dtype: DType) -> Tile {
        self.add(name, TileType::scalar(dtype))
    }

    fn add(&mut self, name: &str, ty: TileType) -> Tile {
        let v = with_state(|s| s.kernel.add_param(name, ty));
        Tile::from_raw(v, ty)
    }
}

/// Traces `body` into a verified kernel named `name`.
///
/// The body declares parameters through [`Params`] and then uses the tile operations of this
/// module. The first type or shape error is returned with the source line that caused it.
pub fn trace(name: &str, body: impl FnOnce(&mut Params)) -> Result<Kernel, TraceError> {
    let kernel = Kernel::new(name);
    let top = kernel.body;
    TRACES.with(|t| {
        t.borrow_mut().push(TraceState {
            kernel,
            blocks: vec![top],
            hinted: Vec::new(),
            error: None,
        })
    });
    // Pops the trace if the body panics, so the thread can trace again.
    struct PopOnUnwind;
    impl Drop for PopOnUnwind {
        fn drop(&mut self) {
            TRACES.with(|t| t.borrow_mut().pop());
        }
    }
    let guard = PopOnUnwind;
    body(&mut Params { _private: () });
    std::mem::forget(guard);
    let state = TRACES.with(|t| t.borrow_mut().pop().expect("trace state present"));
    if let Some(e) = state.error {
        return Err(e);
    }
    crate::verify::verify(&state.kernel).map_err(|e| TraceError {
        kernel: state.kernel.name.clone(),
        message: e.message.clone(),
        loc: e.loc,
    })?;
    Ok(state.kernel)
}
