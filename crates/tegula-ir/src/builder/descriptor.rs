//! Tensor descriptors (Triton's `tl.make_tensor_descriptor`): a tensor of 1 to [`MAX_RANK`]
//! axes and the block shape its loads and stores move, addressed by the block's first element.
//!
//! A descriptor is a trace-time value. `desc.load((o0, o1))` and `desc.store((o0, o1), v)`
//! trace to one [`Op::DescLoad`] / [`Op::DescStore`] each (operands: the base, the shapes, the
//! strides and the offsets, an axis at a time), whose region holds the same access as a block
//! pointer would trace it (pointer arithmetic and a mask on every axis, zero padding), so
//! the interpreter and a backend without the tensor memory accelerator run ordinary masked
//! loads and stores, and the GPU backend can move the whole block with one TMA copy where its
//! plan rule allows (`tegula-ptx`, `plan/descriptors.rs`).

use super::block_ptr::{make_block_ptr, BlockPtr, Padding};
use super::tile::materialize;
use super::{
    arange, atomic_with, emit, enter_block, leave_block, report, IntoOperand, Operand, Tile,
};
use crate::kernel::Loc;
use crate::op::Op;
use crate::op::{AtomicOp, MemScope, MemSem};
use crate::types::{Elem, Shape, TileType, MAX_RANK};

/// A tensor of `rank` axes (base, shape, strides in elements) and the block shape its loads
/// and stores move (`tl.tensor_descriptor`). Axes past the rank hold copies of the base
/// (unused), so that the descriptor stays `Copy`.
#[derive(Clone, Copy, Debug)]
pub struct TensorDescriptor {
    base: Tile,
    rank: usize,
    shape: [Tile; MAX_RANK],
    strides: [Tile; MAX_RANK],
    block_shape: [usize; MAX_RANK],
}

fn index_scalar(x: impl IntoOperand, what: &str, loc: Loc) -> Tile {
    super::block_ptr::index_scalar(x, "tensor descriptor", what, loc)
}

/// One integer an axis, as a descriptor's shape, strides and offsets take them: a tuple of 1
/// to 4 (`(n,)`, `(m, n)`, ..) or an array (`[o0, o1, o2]`).
pub trait Indices {
    fn operands(self) -> Vec<Operand>;
}

impl<T: IntoOperand, const N: usize> Indices for [T; N] {
    fn operands(self) -> Vec<Operand> {
        self.into_iter().map(IntoOperand::into_operand).collect()
    }
}

macro_rules! tuple_indices {
    ($(($($t:ident $i:tt),+)),*) => {$(
        impl<$($t: IntoOperand),+> Indices for ($($t,)+) {
            fn operands(self) -> Vec<Operand> {
                vec![$(self.$i.into_operand()),+]
            }
        }
    )*};
}
tuple_indices!((A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3));

/// `tl.make_tensor_descriptor(base, shape=[..], strides=[..], block_shape=[..])`: `base` a
/// scalar pointer, `shape` and `strides` integer scalars (elements), one an axis, for 1 to
/// [`MAX_RANK`] axes, `block_shape` as many powers of two. On the GPU the blocks of a 2-D
/// descriptor move on the tensor memory accelerator when `strides[1]` is 1 and the rest is
/// known at launch (see docs/semantics.md, "Tensor descriptors"); elsewhere, and for other
/// ranks, as masked loads and stores.
#[track_caller]
pub fn make_tensor_descriptor(
    base: Tile,
    shape: impl Indices,
    strides: impl Indices,
    block_shape: impl AsRef<[usize]>,
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
    let block = block_shape.as_ref();
    let (shape, strides) = (shape.operands(), strides.operands());
    let rank = block.len();
    if !(1..=MAX_RANK).contains(&rank) || shape.len() != rank || strides.len() != rank {
        report(
            loc,
            format!(
                "make_tensor_descriptor: {} shapes, {} strides and a block of {} axes; a \
                 descriptor has one of each an axis, for 1 to {MAX_RANK} axes",
                shape.len(),
                strides.len(),
                rank
            ),
        );
    }
    if let Some(&b) = block.iter().find(|b| !b.is_power_of_two()) {
        report(
            loc,
            format!("make_tensor_descriptor: block_shape {block:?} has {b}, not a power of two"),
        );
    }
    // After a reported mismatch, the axes all three name (at least one) stand in.
    let rank = rank.min(shape.len()).min(strides.len()).clamp(1, MAX_RANK);
    let mut d = TensorDescriptor {
        base,
        rank,
        shape: [base; MAX_RANK],
        strides: [base; MAX_RANK],
        block_shape: [1; MAX_RANK],
    };
    for axis in 0..rank {
        let at = |v: &[Operand]| v.get(axis).copied().unwrap_or(Operand::Int(1));
        d.shape[axis] = index_scalar(at(&shape), "shapes", loc);
        d.strides[axis] = index_scalar(at(&strides), "strides", loc);
        d.block_shape[axis] = block.get(axis).copied().unwrap_or(1);
    }
    d
}

impl TensorDescriptor {
    /// The offsets as index scalars, one an axis, or a trace error naming the count.
    fn offsets(&self, offsets: impl Indices, loc: Loc) -> Vec<Tile> {
        let offsets = offsets.operands();
        if offsets.len() != self.rank {
            report(
                loc,
                format!(
                    "a {}-D tensor descriptor takes {} offsets, got {}",
                    self.rank,
                    self.rank,
                    offsets.len()
                ),
            );
        }
        (0..self.rank)
            .map(|axis| match offsets.get(axis) {
                Some(&o) => index_scalar(o, "offsets", loc),
                None => index_scalar(0, "offsets", loc),
            })
            .collect()
    }

    #[track_caller]
    fn block_ptr(&self, offsets: &[Tile]) -> BlockPtr {
        make_block_ptr(
            self.base,
            (self.shape[0], self.shape[1]),
            (self.strides[0], self.strides[1]),
            (offsets[0], offsets[1]),
            [self.block_shape[0], self.block_shape[1]],
        )
    }

    /// The block's pointers at `offsets` and where they are inside the tensor, for any rank:
    /// axis `i`'s indices run along axis `i` of the block and broadcast along the others.
    fn block_elements(&self, offsets: &[Tile], loc: Loc) -> (Tile, Tile) {
        let r = self.rank;
        let mut ptrs = self.base;
        let mut inside: Option<Tile> = None;
        for (axis, &o) in offsets.iter().enumerate() {
            let dims: Vec<usize> = (0..r)
                .map(|j| if j == axis { self.block_shape[axis] } else { 1 })
                .collect();
            let idx = o + arange(0, self.block_shape[axis] as i64).reshape(&dims[..]);
            ptrs += idx * self.strides[axis];
            let here = idx.ge(0) & idx.lt(self.shape[axis]);
            inside = Some(match inside {
                Some(m) => m & here,
                None => here,
            });
        }
        let shape = self.block_type(loc).shape;
        let inside = inside.expect("a descriptor has an axis");
        (
            ptrs.broadcast_at(shape, loc),
            inside.broadcast_at(shape, loc),
        )
    }

    fn operands(&self, offsets: &[Tile]) -> Vec<crate::kernel::Value> {
        let r = self.rank;
        let mut v = vec![self.base.value()];
        v.extend(self.shape[..r].iter().map(|t| t.value()));
        v.extend(self.strides[..r].iter().map(|t| t.value()));
        v.extend(offsets.iter().map(|t| t.value()));
        v
    }

    fn block_type(&self, loc: Loc) -> TileType {
        let shape = Shape::check(self.block_shape()).unwrap_or_else(|e| {
            report(loc, format!("tensor descriptor block_shape: {e}"));
            Shape::SCALAR
        });
        TileType::new(Elem::Scalar(self.base.dtype()), shape)
    }

    /// `desc.load([o0, ..])`: the block whose first element is at the offsets (one an axis),
    /// zero where it lies outside the tensor.
    #[track_caller]
    pub fn load(&self, offsets: impl Indices) -> Tile {
        let loc = Loc::caller();
        let offsets = self.offsets(offsets, loc);
        let ty = self.block_type(loc);
        // Traced without a closure, so the region's ops carry the user's line.
        let (region, _) = enter_block(&[]);
        let v = if self.rank == 2 {
            self.block_ptr(&offsets).load(&[0, 1], Padding::Zero)
        } else {
            let (ptrs, inside) = self.block_elements(&offsets, loc);
            super::load_with(
                ptrs,
                super::LoadOptions {
                    mask: Some(inside),
                    other: Some(Operand::Int(0)),
                    ..Default::default()
                },
            )
        };
        emit(Op::Yield, vec![v.value()], &[], vec![], loc);
        leave_block();
        let r = emit(
            Op::DescLoad,
            self.operands(&offsets),
            &[ty],
            vec![region],
            loc,
        );
        Tile::from_raw(r[0], ty)
    }

    /// `desc.store([o0, ..], value)`: writes the block whose first element is at the offsets,
    /// nothing outside the tensor; `value` converts to the tensor's dtype and broadcasts to the
    /// block shape, as a store's does.
    #[track_caller]
    pub fn store(&self, offsets: impl Indices, value: impl IntoOperand) {
        let loc = Loc::caller();
        let offsets = self.offsets(offsets, loc);
        let Some(v) = self.block_value(value, "store", loc) else {
            return;
        };
        let (region, _) = enter_block(&[]);
        if self.rank == 2 {
            self.block_ptr(&offsets).store(v, &[0, 1]);
        } else {
            let (ptrs, inside) = self.block_elements(&offsets, loc);
            super::store_with(
                ptrs,
                v,
                super::StoreOptions {
                    mask: Some(inside),
                    ..Default::default()
                },
            );
        }
        emit(Op::Yield, vec![], &[], vec![], loc);
        leave_block();
        let mut args = self.operands(&offsets);
        args.push(v.value());
        emit(Op::DescStore, args, &[], vec![region], loc);
    }

    /// `value` converted to the tensor's dtype and broadcast to the block, or a trace error
    /// (for `desc.what`) when it does not fit.
    fn block_value(&self, value: impl IntoOperand, what: &str, loc: Loc) -> Option<Tile> {
        let ty = self.block_type(loc);
        let v = materialize(value.into_operand(), ty.dtype(), loc);
        match Shape::broadcast(v.shape(), ty.shape) {
            Some(s) if s == ty.shape => Some(v.broadcast_at(s, loc)),
            _ => {
                report(
                    loc,
                    format!(
                        "desc.{what}: the value {} does not fit the block {ty}",
                        v.ty()
                    ),
                );
                None
            }
        }
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

    fn reduce(&self, op: AtomicOp, offsets: impl Indices, value: impl IntoOperand, loc: Loc) {
        let offsets = self.offsets(offsets, loc);
        let Some(v) = self.block_value(value, &format!("atomic_{}", op.name()), loc) else {
            return;
        };
        let (ptrs, inside) = self.block_elements(&offsets, loc);
        atomic_with(op, ptrs, v, Some(inside), MemSem::Relaxed, MemScope::Gpu);
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
        if self.rank != 2 || self.block_shape[0] != 1 {
            report(
                loc,
                format!(
                    "desc.{what} moves single rows of a 2-D descriptor: the block shape must be \
                     [1, n], not {:?}",
                    self.block_shape()
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
    /// `pre_hook` does to a host descriptor's `block_shape` per config), of as many axes.
    #[track_caller]
    pub fn with_block_shape(self, block_shape: impl AsRef<[usize]>) -> TensorDescriptor {
        let block = block_shape.as_ref();
        if block.len() != self.rank || block.iter().any(|b| !b.is_power_of_two()) {
            report(
                Loc::caller(),
                format!(
                    "with_block_shape({block:?}): a {}-D descriptor's block is {} powers of two",
                    self.rank, self.rank
                ),
            );
            return self;
        }
        let mut next = self;
        next.block_shape[..self.rank].copy_from_slice(block);
        next
    }

    /// The block shape its loads and stores move, one side an axis.
    pub fn block_shape(&self) -> &[usize] {
        &self.block_shape[..self.rank]
    }

    /// Its number of axes.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The element dtype of the tensor.
    pub fn dtype(&self) -> crate::dtype::DType {
        self.base.dtype()
    }
}
