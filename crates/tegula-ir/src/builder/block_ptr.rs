//! Block pointers (Triton's `tl.make_block_ptr` / tensor descriptors): a 2-D window into a
//! strided tensor that loads and stores whole blocks with boundary checks.
//!
//! A block pointer is a trace-time value: loading through it emits the pointer arithmetic and
//! the boundary mask that a kernel author would otherwise write by hand, so the IR needs no
//! extra op and both backends see ordinary masked loads and stores.

use super::tile::to_tile;
use super::{arange, load_with, store_with, LoadOptions, StoreOptions};
use super::{report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;

/// What out-of-bounds elements of a checked block load read as.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Padding {
    #[default]
    Zero,
    Nan,
}

/// A window of `block_shape` at `offsets` into a tensor of `shape` with `strides` (elements).
#[derive(Clone, Copy, Debug)]
pub struct BlockPtr {
    base: Tile,
    shape: [Tile; 2],
    strides: [Tile; 2],
    offsets: [Tile; 2],
    block_shape: [usize; 2],
}

/// `x` as an integer scalar, or a trace error naming `owner`'s `what` (`block pointer`
/// `shapes`, say).
pub(super) fn index_scalar(x: impl IntoOperand, owner: &str, what: &str, loc: Loc) -> Tile {
    let t = to_tile(x.into_operand(), loc);
    if !t.shape().is_scalar() || !t.dtype().is_int() || t.dtype().is_bool() || t.is_ptr() {
        report(
            loc,
            format!("{owner} {what} must be integer scalars, got {}", t.ty()),
        );
    }
    t
}

/// A block pointer over a 2-D tensor at `base` (`tl.make_block_ptr`); `block_shape` must be
/// powers of two.
#[track_caller]
pub fn make_block_ptr(
    base: Tile,
    shape: (impl IntoOperand, impl IntoOperand),
    strides: (impl IntoOperand, impl IntoOperand),
    offsets: (impl IntoOperand, impl IntoOperand),
    block_shape: [usize; 2],
) -> BlockPtr {
    let pair = |(a, b): (Operand, Operand)| [a, b];
    let (shape, strides, offsets) = (
        pair((shape.0.into_operand(), shape.1.into_operand())),
        pair((strides.0.into_operand(), strides.1.into_operand())),
        pair((offsets.0.into_operand(), offsets.1.into_operand())),
    );
    let loc = Loc::caller();
    if !base.is_ptr() || !base.shape().is_scalar() {
        report(
            loc,
            format!(
                "make_block_ptr needs a scalar pointer base, got {}",
                base.ty()
            ),
        );
    }
    BlockPtr {
        base,
        shape: shape.map(|s| index_scalar(s, "block pointer", "shapes", loc)),
        strides: strides.map(|s| index_scalar(s, "block pointer", "strides", loc)),
        offsets: offsets.map(|s| index_scalar(s, "block pointer", "offsets", loc)),
        block_shape,
    }
}

impl BlockPtr {
    /// The same window moved by `delta` along each axis (`tl.advance`).
    #[track_caller]
    pub fn advance(self, delta: (impl IntoOperand, impl IntoOperand)) -> BlockPtr {
        let loc = Loc::caller();
        let mut next = self;
        let delta = [delta.0.into_operand(), delta.1.into_operand()];
        for (axis, d) in delta.into_iter().enumerate() {
            let d = index_scalar(d, "block pointer", "advances", loc);
            next.offsets[axis] = super::tile::binary(
                crate::op::BinaryOp::Add,
                Operand::Tile(self.offsets[axis]),
                Operand::Tile(d),
                loc,
            );
        }
        next
    }

    pub fn offsets(&self) -> [Tile; 2] {
        self.offsets
    }

    /// Pointer tile of the window and, per axis, the in-bounds mask.
    #[track_caller]
    fn pointers(&self) -> (Tile, [Tile; 2]) {
        let rows = self.offsets[0] + arange(0, self.block_shape[0] as i64).col();
        let cols = self.offsets[1] + arange(0, self.block_shape[1] as i64).row();
        let ptrs = self.base + rows * self.strides[0] + cols * self.strides[1];
        let in_rows = rows.ge(0) & rows.lt(self.shape[0]);
        let in_cols = cols.ge(0) & cols.lt(self.shape[1]);
        (ptrs, [in_rows, in_cols])
    }

    fn mask(&self, boundary_check: &[usize], masks: [Tile; 2]) -> Option<Tile> {
        match boundary_check {
            [] => None,
            [a] => Some(masks[(*a).min(1)]),
            _ => Some(masks[0] & masks[1]),
        }
    }

    /// Loads the window, checking the bounds of the axes in `boundary_check`
    /// (`tl.load(block_ptr, boundary_check=..., padding_option=...)`).
    #[track_caller]
    pub fn load(&self, boundary_check: &[usize], padding: Padding) -> Tile {
        let (ptrs, masks) = self.pointers();
        let mask = self.mask(boundary_check, masks);
        let other = match padding {
            Padding::Zero => Operand::Int(0),
            Padding::Nan if self.base.dtype().is_float() => Operand::Float(f64::NAN),
            Padding::Nan => {
                report(Loc::caller(), "NaN padding needs a float tensor");
                Operand::Int(0)
            }
        };
        load_with(
            ptrs,
            LoadOptions {
                mask,
                other: mask.map(|_| other),
                ..Default::default()
            },
        )
    }

    /// Stores `value` into the window, checking the bounds of the axes in `boundary_check`.
    #[track_caller]
    pub fn store(&self, value: impl IntoOperand, boundary_check: &[usize]) {
        let (ptrs, masks) = self.pointers();
        let mask = self.mask(boundary_check, masks);
        store_with(
            ptrs,
            value,
            StoreOptions {
                mask,
                ..Default::default()
            },
        );
    }

    /// The element dtype of the tensor.
    pub fn dtype(&self) -> DType {
        self.base.dtype()
    }
}
