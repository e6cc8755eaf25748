//! A stand-in for Triton's tensor descriptors (`tl.make_tensor_descriptor` in a kernel,
//! `triton.tools.tensor_descriptor.TensorDescriptor` on the host), which tegula does not have.
//!
//! A descriptor names a 2-D tensor (base, shape, strides) and a block shape; `desc.load([i, j])`
//! reads the block whose top-left element is `[i, j]`, with elements outside the shape read as
//! zero, and `desc.store([i, j], v)` writes it, dropping elements outside. On Hopper Triton
//! lowers both to TMA copies. tegula's block pointers ([`make_block_ptr`]) compute the same
//! thing with ordinary masked loads and stores: a block pointer at the load's offsets, both
//! axes bounds-checked, zero padding. A host descriptor becomes its parts passed as kernel
//! arguments (the base pointer, the shape and the strides), from which the kernel builds the
//! same value.

use tegula::prelude::*;

// workaround: tl.make_tensor_descriptor / TensorDescriptor (TMA descriptors) are missing; a
// descriptor is a block pointer made at each load's and store's offsets, with both axes
// bounds-checked and zero padding, which is what a descriptor load and store compute.
/// `tl.tensor_descriptor`: a 2-D tensor and the block shape its loads and stores move.
#[derive(Clone, Copy, Debug)]
pub struct TensorDescriptor {
    base: Tile,
    shape: [Tile; 2],
    strides: [Tile; 2],
    block_shape: [usize; 2],
}

/// `tl.make_tensor_descriptor(base, shape=[s0, s1], strides=[t0, t1], block_shape=[b0, b1])`.
#[track_caller]
pub fn make_tensor_descriptor(
    base: Tile,
    shape: (impl IntoOperand, impl IntoOperand),
    strides: (impl IntoOperand, impl IntoOperand),
    block_shape: [usize; 2],
) -> TensorDescriptor {
    TensorDescriptor {
        base,
        shape: [scalar(shape.0), scalar(shape.1)],
        strides: [scalar(strides.0), scalar(strides.1)],
        block_shape,
    }
}

impl TensorDescriptor {
    #[track_caller]
    fn block(&self, offsets: (impl IntoOperand, impl IntoOperand)) -> BlockPtr {
        make_block_ptr(
            self.base,
            (self.shape[0], self.shape[1]),
            (self.strides[0], self.strides[1]),
            (scalar(offsets.0), scalar(offsets.1)),
            self.block_shape,
        )
    }

    /// `desc.load([o0, o1])`: the block at `[o0, o1]`, zero outside the tensor.
    #[track_caller]
    pub fn load(&self, offsets: (impl IntoOperand, impl IntoOperand)) -> Tile {
        self.block(offsets).load(&[0, 1], Padding::Zero)
    }

    /// `desc.store([o0, o1], value)`: writes the block at `[o0, o1]`, nothing outside the
    /// tensor.
    #[track_caller]
    pub fn store(&self, offsets: (impl IntoOperand, impl IntoOperand), value: Tile) {
        self.block(offsets).store(value, &[0, 1]);
    }

    /// A descriptor of the same tensor moving blocks of another shape (what Triton's
    /// `pre_hook` does to a host descriptor's `block_shape` per config).
    pub fn with_block_shape(self, block_shape: [usize; 2]) -> TensorDescriptor {
        TensorDescriptor {
            block_shape,
            ..self
        }
    }
}
