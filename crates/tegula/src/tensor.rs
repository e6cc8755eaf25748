//! `Tensor<T>`: a typed view (shape, strides in elements, offset) of device memory.

use crate::device::{checked_numel, host_vec, Device, Storage};
use crate::error::{Error, Result};
use std::marker::PhantomData;
use tegula_ir::{DType, Element};

/// A typed, strided view of memory on a [`Device`]. Cloning shares the memory (like a
/// `torch.Tensor` handle); views (`transpose`, `narrow`, `reshape`) share it too.
#[derive(Clone)]
pub struct Tensor<T: Element> {
    pub(crate) storage: Storage,
    pub(crate) device: Device,
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
    _elem: PhantomData<T>,
}

/// Row-major strides of a contiguous tensor of `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

impl<T: Element> Tensor<T> {
    pub(crate) fn from_storage(device: Device, storage: Storage, shape: Vec<usize>) -> Tensor<T> {
        let strides = contiguous_strides(&shape);
        Tensor {
            storage,
            device,
            shape,
            strides,
            offset: 0,
            _elem: PhantomData,
        }
    }

    /// A view of `storage` with any shape, strides and offset (in elements); the caller makes
    /// sure every element it reaches lies inside the storage (DLPack import does).
    pub(crate) fn from_parts(
        device: Device,
        storage: Storage,
        shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
    ) -> Tensor<T> {
        Tensor {
            storage,
            device,
            shape,
            strides,
            offset,
            _elem: PhantomData,
        }
    }

    fn view(&self, shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Tensor<T> {
        Tensor {
            storage: self.storage.clone(),
            device: self.device.clone(),
            shape,
            strides,
            offset,
            _elem: PhantomData,
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Strides in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The offset of element `[0, .., 0]` in the underlying buffer, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The number of elements. (Every constructor checks that it fits in `usize`.)
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device address of element `[0, .., 0]` on a GPU (`torch.Tensor.data_ptr()`), for
    /// tables of addresses a kernel turns into pointers with `int_to_ptr`; `None` for host
    /// memory (the interpreter and the recording device), whose addresses a launch assigns
    /// itself (docs/semantics.md, "Pointers as integers").
    pub fn data_ptr(&self) -> Option<u64> {
        self.storage
            .device_address()
            .map(|base| base + (self.offset * T::DTYPE.size_bytes()) as u64)
    }

    /// Row-major with no gaps (size-1 axes may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let expected = contiguous_strides(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&expected))
            .all(|(&n, (&s, &e))| n == 1 || s == e)
    }

    /// The range of buffer elements this view can touch, `None` when it is empty.
    pub(crate) fn span(&self) -> Option<(usize, usize)> {
        if self.numel() == 0 {
            return None;
        }
        let last: usize = self
            .shape
            .iter()
            .zip(&self.strides)
            .map(|(&n, &s)| (n - 1) * s)
            .sum();
        Some((self.offset, self.offset + last))
    }

    /// The view's extent: how many buffer elements from [`Tensor::offset`] its elements
    /// span, `1 + sum((shape[i] - 1) * strides[i])`, or 0 when it is empty. A kernel given
    /// this tensor may reach exactly these elements (the interpreter checks every access
    /// against them). For a contiguous view it is [`Tensor::numel`]; for a strided view it
    /// includes the gaps between its rows (`narrow(1, 0, 10)` of a `[100, 100]` tensor spans
    /// 9 * 100 + 10 elements), which the check does not tell apart from the view's own.
    pub fn extent(&self) -> usize {
        self.span().map_or(0, |(first, last)| last - first + 1)
    }

    /// True when the two views may touch a common element (same buffer, overlapping spans).
    pub fn overlaps<U: Element>(&self, other: &Tensor<U>) -> bool {
        if !self.storage.same_buffer(&other.storage) {
            return false;
        }
        match (self.span(), other.span()) {
            (Some((a0, a1)), Some((b0, b1))) => a0 <= b1 && b0 <= a1,
            _ => false,
        }
    }

    /// Buffer index of every logical element, row-major.
    fn element_indices(&self) -> Result<Vec<usize>> {
        let mut out = host_vec(self.numel(), "element indices")?;
        let mut idx = vec![0usize; self.rank()];
        for _ in 0..self.numel() {
            let at: usize = self.offset
                + idx
                    .iter()
                    .zip(&self.strides)
                    .map(|(&i, &s)| i * s)
                    .sum::<usize>();
            out.push(at);
            for ax in (0..self.rank()).rev() {
                idx[ax] += 1;
                if idx[ax] < self.shape[ax] {
                    break;
                }
                idx[ax] = 0;
            }
        }
        Ok(out)
    }

    /// Copies the logical elements to the host, row-major. Host memory is allocated
    /// fallibly: a copy the host cannot hold is [`Error::OutOfMemory`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let indices = self.element_indices()?;
        let mut out = host_vec(indices.len(), "to_vec")?;
        match &self.storage {
            Storage::Host(b) => {
                out.extend(indices.into_iter().map(|i| T::from_bits(b.read_bits(i))))
            }
            Storage::Cuda { .. } => {
                let all: Vec<T> = self.storage.read_all()?;
                out.extend(indices.into_iter().map(|i| all[i]));
            }
        }
        Ok(out)
    }

    /// The logical elements as f64, row-major (for comparing with float64 references).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(self.to_vec()?.into_iter().map(Element::to_f64).collect())
    }

    /// Overwrites the logical elements from host data in row-major order.
    pub fn copy_from_slice(&self, data: &[T]) -> Result<()> {
        if data.len() != self.numel() {
            return Err(Error::Shape {
                op: "copy_from_slice".into(),
                message: format!(
                    "{} values for a tensor of shape {:?} ({} elements)",
                    data.len(),
                    self.shape,
                    self.numel()
                ),
            });
        }
        let indices = self.element_indices()?;
        if let Storage::Host(b) = &self.storage {
            for (i, &v) in indices.into_iter().zip(data) {
                b.write_bits(i, v.to_bits());
            }
            return Ok(());
        }
        let mut all: Vec<T> = self.storage.read_all()?;
        for (i, &v) in indices.into_iter().zip(data) {
            all[i] = v;
        }
        self.storage.write_all(&all)
    }

    /// A view with axes `a` and `b` swapped.
    pub fn transpose(&self, a: usize, b: usize) -> Result<Tensor<T>> {
        if a >= self.rank() || b >= self.rank() {
            return Err(Error::Shape {
                op: "transpose".into(),
                message: format!("axes {a} and {b} for a tensor of rank {}", self.rank()),
            });
        }
        let (mut shape, mut strides) = (self.shape.clone(), self.strides.clone());
        shape.swap(a, b);
        strides.swap(a, b);
        Ok(self.view(shape, strides, self.offset))
    }

    /// A view of `len` elements of axis `axis` starting at `start`.
    pub fn narrow(&self, axis: usize, start: usize, len: usize) -> Result<Tensor<T>> {
        let end = start.checked_add(len);
        if axis >= self.rank() || end.is_none_or(|end| end > self.shape[axis]) {
            let end = end.map_or_else(|| format!("{start} + {len}"), |e| e.to_string());
            return Err(Error::Shape {
                op: "narrow".into(),
                message: format!(
                    "axis {axis}, elements {start}..{end} of shape {:?}",
                    self.shape
                ),
            });
        }
        let mut shape = self.shape.clone();
        shape[axis] = len;
        let offset = self.offset + start * self.strides[axis];
        Ok(self.view(shape, self.strides.clone(), offset))
    }

    /// The same elements in another shape; the tensor must be contiguous.
    pub fn reshape(&self, shape: impl Into<Vec<usize>>) -> Result<Tensor<T>> {
        let shape = shape.into();
        if checked_numel("reshape", &shape)? != self.numel() {
            return Err(Error::Shape {
                op: "reshape".into(),
                message: format!("cannot reshape {:?} to {shape:?}", self.shape),
            });
        }
        if !self.is_contiguous() {
            return Err(Error::Stride {
                op: "reshape".into(),
                message: "the tensor is not contiguous; call `contiguous()` first".into(),
            });
        }
        let strides = contiguous_strides(&shape);
        Ok(self.view(shape, strides, self.offset))
    }

    /// A contiguous copy (or a clone of the handle when already contiguous).
    pub fn contiguous(&self) -> Result<Tensor<T>> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.device.from_slice(&self.to_vec()?, self.shape.clone())
    }
}

impl<T: Element> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor<{}>(shape={:?}, strides={:?}, offset={}, device={})",
            T::DTYPE,
            self.shape,
            self.strides,
            self.offset,
            self.device.name()
        )
    }
}
