//! Tensor descriptors (Triton's `tl.make_tensor_descriptor`): a 2-D tensor and the block shape
//! its loads and stores move, addressed by the block's first element.
//!
//! A descriptor is a trace-time value. `desc.load([o0, o1])` and `desc.store([o0, o1], v)` trace
//! to one [`Op::DescLoad`] / [`Op::DescStore`] each, whose region holds the same access as a
//! block pointer would trace it (pointer arithmetic and a mask on both axes, zero padding), so
//! the interpreter and a backend without the tensor memory accelerator run ordinary masked
//! loads and stores, and the GPU backend can move the whole block with one TMA copy where its
//! plan rule allows (`tegula-ptx`, `plan/descriptors.rs`).

use super::block_ptr::{make_block_ptr, BlockPtr, Padding};
use super::tile::materialize;
use super::{arange, atomic_with, emit, enter_block, leave_block, report, IntoOperand, Tile};
use crate::kernel::Loc;
use crate::op::Op;
use crate::op::{AtomicOp, MemScope, MemSem};
use crate::types::{Elem, Shape, TileType};

/// A 2-D tensor (base, shape, strides in elements) and the block shape its loads and stores
/// move (`tl.tensor_descriptor`).
#[derive(Clone, Copy, Debug)]
pub struct TensorDescriptor {
    base: Tile,
    shape: [Tile; 2],
    strides: [Tile; 2],
    block_shape: [usize; 2],
}

fn index_scalar(x: impl IntoOperand, what: &str, loc: Loc) -> Tile {
    super::block_ptr::index_scalar(x, "tensor descriptor", what, loc)
}

/// `tl.make_tensor_descriptor(base, shape=[s0, s1], strides=[t0, t1], block_shape=[b0, b1])`:
/// `base` a scalar pointer, `shape` and `strides` integer scalars (elements), `block_shape`
/// powers of two. On the GPU the descriptor's blocks move on the tensor memory accelerator
/// when `strides[1]` is 1 and the rest is known at launch (see docs/semantics.md, "Tensor
/// descriptors"); elsewhere as masked loads and stores.
#[track_caller]
pub fn make_tensor_descriptor(
    base: Tile,
    shape: (impl IntoOperand, impl IntoOperand),
    strides: (impl IntoOperand, impl IntoOperand),
    block_shape: [usize; 2],
) -> TensorDescriptor {
    let loc = Loc::caller();
    if !base.is_ptr() || !base.shape().is_scalar() {
        report(
            loc,
            format!(
                "make_tensor_descriptor needs a scalar pointer base, got {}",
                base.ty()
            ),
        );
    }
    if let Some(&b) = block_shape.iter().find(|b| !b.is_power_of_two()) {
        report(
            loc,
            format!(
                "make_tensor_descriptor: block_shape {block_shape:?} has {b}, not a power of two"
            ),
        );
    }
    TensorDescriptor {
        base,
        shape: [
            index_scalar(shape.0, "shapes", loc),
            index_scalar(shape.1, "shapes", loc),
        ],
        strides: [
            index_scalar(strides.0, "strides", loc),
            index_scalar(strides.1, "strides", loc),
        ],
        block_shape,
    }
}

impl TensorDescriptor {
    #[track_caller]
    fn block_ptr(&self, offsets: [Tile; 2]) -> BlockPtr {
        make_block_ptr(
            self.base,
            (self.shape[0], self.shape[1]),
            (self.strides[0], self.strides[1]),
            (offsets[0], offsets[1]),
            self.block_shape,
        )
    }

    fn operands(&self, offsets: [Tile; 2]) -> Vec<crate::kernel::Value> {
        let mut v = vec![self.base.value()];
        v.extend(self.shape.iter().map(|t| t.value()));
        v.extend(self.strides.iter().map(|t| t.value()));
        v.extend(offsets.iter().map(|t| t.value()));
        v
    }

    fn block_type(&self, loc: Loc) -> TileType {
        let shape = Shape::check(&self.block_shape).unwrap_or_else(|e| {
            report(loc, format!("tensor descriptor block_shape: {e}"));
            Shape::SCALAR
        });
        TileType::new(Elem::Scalar(self.base.dtype()), shape)
    }

    /// `desc.load([o0, o1])`: the block whose first element is `[o0, o1]`, zero where it lies
    /// outside the tensor.
    #[track_caller]
    pub fn load(&self, offsets: (impl IntoOperand, impl IntoOperand)) -> Tile {
        let loc = Loc::caller();
        let offsets = [
            index_scalar(offsets.0, "offsets", loc),
            index_scalar(offsets.1, "offsets", loc),
        ];
        let ty = self.block_type(loc);
        // Traced without a closure, so the region's ops carry the user's line.
        let (region, _) = enter_block(&[]);
        let v = self.block_ptr(offsets).load(&[0, 1], Padding::Zero);
        emit(Op::Yield, vec![v.value()], &[], vec![], loc);
        leave_block();
        let r = emit(
            Op::DescLoad,
            self.operands(offsets),
            &[ty],
            vec![region],
            loc,
        );
        Tile::from_raw(r[0], ty)
    }

    /// `desc.store([o0, o1], value)`: writes the block whose first element is `[o0, o1]`,
    /// nothing outside the tensor; `value` converts to the tensor's dtype and broadcasts to the
    /// block shape, as a store's does.
    #[track_caller]
    pub fn store(&self, offsets: (impl IntoOperand, impl IntoOperand), value: impl IntoOperand) {
        let loc = Loc::caller();
        let offsets = [
            index_scalar(offsets.0, "offsets", loc),
            index_scalar(offsets.1, "offsets", loc),
        ];
        let ty = self.block_type(loc);
        let v = materialize(value.into_operand(), ty.dtype(), loc);
        let v = match Shape::broadcast(v.shape(), ty.shape) {
            Some(s) if s == ty.shape => v.broadcast_at(s, loc),
            _ => {
                report(
                    loc,
                    format!(
                        "desc.store: the value {} does not fit the block {ty}",
                        v.ty()
                    ),
                );
                return;
            }
        };
        let (region, _) = enter_block(&[]);
        self.block_ptr(offsets).store(v, &[0, 1]);
        emit(Op::Yield, vec![], &[], vec![], loc);
        leave_block();
        let mut args = self.operands(offsets);
        args.push(v.value());
        emit(Op::DescStore, args, &[], vec![region], loc);
    }

    /// `desc.gather(x_offsets, y_offset)`: rows `x_offsets` (a rank-1 integer tile of `m`
    /// elements) of the tensor, each from column `y_offset` on for the block's `n` columns, as
    /// an `[m, n]` tile; elements outside the tensor read as zero. The block shape must be
    /// `[1, n]` (Triton's rule: a gather moves single rows).
    #[track_caller]
    pub fn gather(&self, x_offsets: Tile, y_offset: impl IntoOperand) -> Tile {
        let loc = Loc::caller();
        let (ptrs, mask) = self.rows_at(x_offsets, y_offset, "gather", loc);
        super::load_with(
            ptrs,
            super::LoadOptions {
                mask: Some(mask),
                other: Some(super::Operand::Int(0)),
                ..Default::default()
            },
        )
    }

    /// `desc.scatter(value, x_offsets, y_offset)`: writes row `i` of `value` (`[m, n]`,
    /// converted to the tensor's dtype as a store converts) to row `x_offsets[i]` from column
    /// `y_offset` on; nothing outside the tensor. The block shape must be `[1, n]`. Rows
    /// written twice keep one of the writes, as stores to one address do.
    #[track_caller]
    pub fn scatter(&self, value: impl IntoOperand, x_offsets: Tile, y_offset: impl IntoOperand) {
        let loc = Loc::caller();
        let (ptrs, mask) = self.rows_at(x_offsets, y_offset, "scatter", loc);
        super::store_with(
            ptrs,
            value,
            super::StoreOptions {
                mask: Some(mask),
                ..Default::default()
            },
        );
    }

    /// `desc.atomic_add(offsets, value)`: adds `value` (broadcast to the block) atomically to
    /// the block at `offsets`, element by element; nothing outside the tensor. Returns
    /// nothing, as Triton's does (a TMA reduction has no result). Each element's update is
    /// an `atomic_add` (relaxed: only the update is atomic).
    #[track_caller]
    pub fn atomic_add(
        &self,
        offsets: (impl IntoOperand, impl IntoOperand),
        value: impl IntoOperand,
    ) {
        self.reduce(AtomicOp::Add, offsets, value, Loc::caller());
    }

    /// `desc.atomic_min(offsets, value)`: as [`Self::atomic_add`], keeping the minimum.
    #[track_caller]
    pub fn atomic_min(
        &self,
        offsets: (impl IntoOperand, impl IntoOperand),
        value: impl IntoOperand,
    ) {
        self.reduce(AtomicOp::Min, offsets, value, Loc::caller());
    }

    /// `desc.atomic_max(offsets, value)`: as [`Self::atomic_add`], keeping the maximum.
    #[track_caller]
    pub fn atomic_max(
        &self,
        offsets: (impl IntoOperand, impl IntoOperand),
        value: impl IntoOperand,
    ) {
        self.reduce(AtomicOp::Max, offsets, value, Loc::caller());
    }

    /// `desc.atomic_and(offsets, value)`: as [`Self::atomic_add`], bitwise and (integers).
    #[track_caller]
    pub fn atomic_and(
        &self,
        offsets: (impl IntoOperand, impl IntoOperand),
        value: impl IntoOperand,
    ) {
        self.reduce(AtomicOp::And, offsets, value, Loc::caller());
    }

    /// `desc.atomic_or(offsets, value)`: as [`Self::atomic_add`], bitwise or (integers).
    #[track_caller]
    pub fn atomic_or(
        &self,
        offsets: (impl IntoOperand, impl IntoOperand),
        value: impl IntoOperand,
    ) {
        self.reduce(AtomicOp::Or, offsets, value, Loc::caller());
    }

    /// `desc.atomic_xor(offsets, value)`: as [`Self::atomic_add`], bitwise xor (integers).
    #[track_caller]
    pub fn atomic_xor(
        &self,
        offsets: (impl IntoOperand, impl IntoOperand),
        value: impl IntoOperand,
    ) {
        self.reduce(AtomicOp::Xor, offsets, value, Loc::caller());
    }

    fn reduce(
        &self,
        op: AtomicOp,
        offsets: (impl IntoOperand, impl IntoOperand),
        value: impl IntoOperand,
        loc: Loc,
    ) {
        let offsets = [
            index_scalar(offsets.0, "offsets", loc),
            index_scalar(offsets.1, "offsets", loc),
        ];
        let ty = self.block_type(loc);
        let v = materialize(value.into_operand(), ty.dtype(), loc);
        let v = match Shape::broadcast(v.shape(), ty.shape) {
            Some(s) if s == ty.shape => v.broadcast_at(s, loc),
            _ => {
                report(
                    loc,
                    format!(
                        "desc.atomic_{}: the value {} does not fit the block {ty}",
                        op.name(),
                        v.ty()
                    ),
                );
                return;
            }
        };
        let rows = offsets[0] + arange(0, self.block_shape[0] as i64).col();
        let cols = offsets[1] + arange(0, self.block_shape[1] as i64).row();
        let (ptrs, mask) = self.elements(rows, cols);
        atomic_with(op, ptrs, v, Some(mask), MemSem::Relaxed, MemScope::Gpu);
    }

    /// The pointers of rows `x_offsets` from column `y_offset` on, and where they are inside
    /// the tensor, for a gather or a scatter (`what`), after checking its rules.
    fn rows_at(
        &self,
        x_offsets: Tile,
        y_offset: impl IntoOperand,
        what: &str,
        loc: Loc,
    ) -> (Tile, Tile) {
        if self.block_shape[0] != 1 {
            report(
                loc,
                format!(
                    "desc.{what} moves single rows: the block shape must be [1, n], not {:?}",
                    self.block_shape
                ),
            );
        }
        let x = x_offsets;
        if x.is_ptr() || !x.dtype().is_int() || x.dtype().is_bool() || x.shape().rank() != 1 {
            report(
                loc,
                format!(
                    "desc.{what}'s row offsets must be a rank-1 integer tile, got {}",
                    x.ty()
                ),
            );
        }
        let y = index_scalar(y_offset, "offsets", loc);
        let cols = y + arange(0, self.block_shape[1] as i64).row();
        self.elements(x.col(), cols)
    }

    /// The pointers of elements `[rows, cols]` (broadcast tiles of indices) and where they are
    /// inside the tensor.
    fn elements(&self, rows: Tile, cols: Tile) -> (Tile, Tile) {
        let ptrs = self.base + rows * self.strides[0] + cols * self.strides[1];
        let inside = rows.ge(0) & rows.lt(self.shape[0]) & cols.ge(0) & cols.lt(self.shape[1]);
        (ptrs, inside)
    }

    /// A descriptor of the same tensor moving blocks of another shape (what Triton's
    /// `pre_hook` does to a host descriptor's `block_shape` per config).
    pub fn with_block_shape(self, block_shape: [usize; 2]) -> TensorDescriptor {
        TensorDescriptor {
            block_shape,
            ..self
        }
    }

    /// The block shape its loads and stores move.
    pub fn block_shape(&self) -> [usize; 2] {
        self.block_shape
    }

    /// The element dtype of the tensor.
    pub fn dtype(&self) -> crate::dtype::DType {
        self.base.dtype()
    }
}
