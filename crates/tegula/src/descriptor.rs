//! Host tensor descriptors (Triton's `TensorDescriptor.from_tensor`): a 2-D tensor and the
//! block shape a kernel's `desc.load` / `desc.store` move, passed as one kernel argument.
//!
//! A kernel parameter `a_desc: TensorDescriptor<f16>` is a tensor descriptor in the body, made
//! from the tensor's pointer, shape and row stride (run-time parameters, so the GPU's tensor
//! map is encoded at launch from them) and the block shape (a trace-time value, part of the
//! specialization, as a Triton descriptor's `block_shape` is). The launcher takes a
//! `&TensorDescriptor<f16>`; a config's block sizes reach it with [`TensorDescriptor::with_block_shape`]
//! (what Triton's `pre_hook` does to `desc.block_shape`).

use crate::error::{Error, Result};
use crate::launch::{KernelArg, ScalarArg, TensorArg};
use crate::tensor::Tensor;
use std::marker::PhantomData;
use tegula_ir::Element;

/// A 2-D tensor, contiguous along its last axis, and the block shape its descriptor moves.
#[derive(Clone, Debug)]
pub struct TensorDescriptor<T: Element> {
    base: KernelArg,
    shape: [i32; 2],
    row_stride: i32,
    block_shape: [usize; 2],
    _elem: PhantomData<T>,
}

impl<T: Element> TensorDescriptor<T> {
    /// The descriptor of `tensor` moving blocks of `block_shape` (`TensorDescriptor.from_tensor`).
    /// Errors, naming what is wrong: a tensor that is not 2-D, whose last axis is not
    /// contiguous (stride 1, as a tensor map needs), whose sizes or row stride exceed `i32`,
    /// or a block side that is not a power of two.
    pub fn from_tensor(tensor: &Tensor<T>, block_shape: [usize; 2]) -> Result<Self> {
        let invalid = |message: String| Error::Invalid {
            op: "TensorDescriptor::from_tensor".into(),
            message,
        };
        let (shape, strides) = (tensor.shape(), tensor.strides());
        if shape.len() != 2 {
            return Err(invalid(format!(
                "a tensor descriptor is over a 2-D tensor; this one has shape {shape:?}"
            )));
        }
        if strides[1] != 1 && shape[1] > 1 {
            return Err(invalid(format!(
                "the last axis must be contiguous (stride 1); the strides are {strides:?}"
            )));
        }
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| invalid(format!("its {what} {v} exceeds i32")))
        };
        let descriptor = TensorDescriptor {
            base: (&tensor).kernel_arg(),
            shape: [int(shape[0], "size")?, int(shape[1], "size")?],
            row_stride: int(strides[0], "row stride")?,
            block_shape,
            _elem: PhantomData,
        };
        descriptor.checked_block(block_shape)
    }

    /// The same tensor moving blocks of `block_shape`; errors on a side that is not a power of
    /// two.
    pub fn with_block_shape(self, block_shape: [usize; 2]) -> Result<Self> {
        self.checked_block(block_shape)
    }

    fn checked_block(self, block_shape: [usize; 2]) -> Result<Self> {
        if let Some(b) = block_shape.iter().find(|b| !b.is_power_of_two()) {
            return Err(Error::Invalid {
                op: "TensorDescriptor".into(),
                message: format!("block_shape {block_shape:?} has {b}, not a power of two"),
            });
        }
        Ok(TensorDescriptor {
            block_shape,
            ..self
        })
    }

    /// The block its loads and stores move.
    pub fn block_shape(&self) -> [usize; 2] {
        self.block_shape
    }

    /// The tensor's sizes.
    pub fn shape(&self) -> [i32; 2] {
        self.shape
    }

    /// The arguments a kernel's descriptor parameter takes, in order: the tensor's pointer,
    /// its two sizes and its row stride (what `#[tegula::kernel]` launches pass).
    pub fn kernel_args(&self) -> [KernelArg; 4] {
        [
            self.base.clone(),
            self.shape[0].kernel_arg(),
            self.shape[1].kernel_arg(),
            self.row_stride.kernel_arg(),
        ]
    }
}
