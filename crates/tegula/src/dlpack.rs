//! DLPack: zero-copy exchange of tensors with PyTorch, JAX, CuPy, NumPy and any other DLPack
//! user, on the GPU (`kDLCUDA`) and on the host (`kDLCPU`, the interpreter's memory).
//!
//! - [`Tensor::to_dlpack`] lends a tensor's memory as a [`ManagedTensor`] (a
//!   `DLManagedTensor*`): shape, strides and dtype of the view, the data pointer at its first
//!   element, and a deleter that keeps tegula's storage alive until the consumer calls it.
//! - [`Tensor::from_dlpack`] takes a [`ManagedTensor`] and wraps its memory, in place, as a
//!   tensor view that keeps the producer's tensor alive (its deleter runs when the last tegula
//!   view of it drops).
//!
//! The C structs are written out here ([`DLManagedTensor`] and what it holds, DLPack's legacy
//! ABI, which every framework reads and `torch.utils.dlpack.to_dlpack` writes). Handing a
//! pointer across a C boundary is the one unsafe step: [`ManagedTensor::from_raw`] and
//! [`ManagedTensor::into_raw`]. Everything else is checked, with [`DlpackError`]s for what tegula
//! does not take: dtypes it has no type for (complex, fp8, vector lanes), devices other than the
//! CPU (for the interpreter) and the tegula device's own GPU, negative strides.
//!
//! Ordering: `to_dlpack` synchronizes a GPU device, so the consumer sees the data complete on
//! any stream. For an import, the producer's work on the memory must be complete (or ordered
//! before the tegula device's stream) before tegula launches on it, and the producer must not
//! reuse the memory before tegula's work is done: `torch.cuda.synchronize()` before handing a
//! tensor over and [`Device::synchronize`] before handing one back is the simple rule.
//!
//! Not yet: DLPack 1.0's versioned struct (`DLManagedTensorVersioned`, the `"dltensor_versioned"`
//! capsule; producers still hand out the legacy one when asked), and aliasing checks across
//! imports: two imports of one producer's memory are two buffers to tegula, so a library
//! wrapper's output-overlaps-input check does not see that they share memory.
//!
//! ```
//! use tegula::prelude::*;
//!
//! # fn main() -> tegula::Result<()> {
//! let dev = Device::cpu();
//! let x = dev.from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
//! let managed = x.transpose(0, 1)?.to_dlpack()?; // a [3, 2] view with strides [1, 3]
//! assert_eq!(managed.shape(), &[3, 2]);
//! assert_eq!(managed.strides(), Some(&[1i64, 3][..]));
//! let back = Tensor::<f32>::from_dlpack(&dev, managed)?; // the same memory, no copy
//! assert_eq!(back.to_vec()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
//! # Ok(())
//! # }
//! ```

use crate::device::{Backend, Device, Storage};
use crate::error::Result;
use crate::tensor::{contiguous_strides, Tensor};
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tegula_ir::{DType, Element};
use thiserror::Error;

/// `DLDeviceType` values (`dlpack.h`).
pub mod device_type {
    pub const CPU: i32 = 1;
    pub const CUDA: i32 = 2;
    /// Pinned host memory.
    pub const CUDA_HOST: i32 = 3;
    pub const CUDA_MANAGED: i32 = 13;
}

/// `DLDataTypeCode` values (`dlpack.h`).
pub mod type_code {
    pub const INT: u8 = 0;
    pub const UINT: u8 = 1;
    pub const FLOAT: u8 = 2;
    pub const OPAQUE_HANDLE: u8 = 3;
    pub const BFLOAT: u8 = 4;
    pub const COMPLEX: u8 = 5;
    pub const BOOL: u8 = 6;
    /// DLPack 1.1's OCP E4M3FN (torch's `float8_e4m3fn`).
    pub const FLOAT8_E4M3FN: u8 = 10;
    /// DLPack 1.1's E5M2 (torch's `float8_e5m2`).
    pub const FLOAT8_E5M2: u8 = 12;
}

/// `DLDevice`: where the memory is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    /// A [`device_type`] value (a C enum, an `int`).
    pub device_type: i32,
    pub device_id: i32,
}

/// `DLDataType`: the element type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    /// A [`type_code`] value.
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// `DLTensor`: a strided view of memory.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or null for a compact row-major tensor.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: a [`DLTensor`] with the producer's context and the deleter the consumer
/// calls, once, when it is done with the memory.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What tegula cannot take from, or give to, DLPack.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DlpackError {
    /// An element type tegula has no dtype for (complex, fp8, several lanes, ...).
    #[error("DLPack dtype (code {code}, {bits} bits, {lanes} lanes) has no tegula dtype")]
    UnsupportedDType { code: u8, bits: u8, lanes: u16 },
    /// The tensor's dtype is not the one asked for.
    #[error("DLPack tensor of {got} imported as {expected}")]
    DTypeMismatch { expected: DType, got: DType },
    /// Memory tegula cannot reach: a device type other than the CPU, CUDA or CUDA managed memory.
    #[error("DLPack device type {device_type} (id {device_id}) is not one tegula runs on")]
    UnsupportedDevice { device_type: i32, device_id: i32 },
    /// The memory is not on the device the tensor is imported to.
    #[error("a DLPack tensor on {tensor} cannot be imported to {device}")]
    DeviceMismatch { tensor: String, device: String },
    /// tegula's strides are unsigned: a reversed view must be copied first.
    #[error("DLPack stride {stride} of axis {axis}: tegula takes no negative strides (copy the tensor first)")]
    NegativeStride { axis: usize, stride: i64 },
    /// A negative extent or rank, or a tensor whose extent overflows the address space.
    #[error("DLPack tensor with an invalid shape: {message}")]
    InvalidShape { message: String },
    /// The first element's address is not a multiple of the element size.
    #[error("DLPack data at {address:#x} is not aligned to its {align}-byte elements")]
    Misaligned { address: u64, align: usize },
    /// A non-empty tensor with a null data pointer.
    #[error("DLPack tensor of {numel} elements has a null data pointer")]
    NullData { numel: usize },
}

fn err(e: DlpackError) -> crate::Error {
    crate::Error::Dlpack(e)
}

/// The DLPack type of a tegula dtype (i1 is DLPack's 8-bit bool, as tegula stores it).
pub fn dl_dtype(dtype: DType) -> DLDataType {
    use type_code::*;
    let (code, bits) = match dtype {
        DType::I1 => (BOOL, 8),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => (INT, dtype.size_bytes() * 8),
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => (UINT, dtype.size_bytes() * 8),
        DType::F16 | DType::F32 | DType::F64 => (FLOAT, dtype.size_bytes() * 8),
        DType::BF16 => (BFLOAT, 16),
        DType::F8E4M3 => (FLOAT8_E4M3FN, 8),
        DType::F8E5M2 => (FLOAT8_E5M2, 8),
    };
    DLDataType {
        code,
        bits: bits as u8,
        lanes: 1,
    }
}

/// The tegula dtype of a DLPack type.
pub fn dtype_of(dl: DLDataType) -> std::result::Result<DType, DlpackError> {
    use type_code::*;
    let dtype = match (dl.code, dl.bits, dl.lanes) {
        (BOOL, 8, 1) => DType::I1,
        (INT, 8, 1) => DType::I8,
        (INT, 16, 1) => DType::I16,
        (INT, 32, 1) => DType::I32,
        (INT, 64, 1) => DType::I64,
        (UINT, 8, 1) => DType::U8,
        (UINT, 16, 1) => DType::U16,
        (UINT, 32, 1) => DType::U32,
        (UINT, 64, 1) => DType::U64,
        (FLOAT, 16, 1) => DType::F16,
        (FLOAT, 32, 1) => DType::F32,
        (FLOAT, 64, 1) => DType::F64,
        (BFLOAT, 16, 1) => DType::BF16,
        (FLOAT8_E4M3FN, 8, 1) => DType::F8E4M3,
        (FLOAT8_E5M2, 8, 1) => DType::F8E5M2,
        (code, bits, lanes) => return Err(DlpackError::UnsupportedDType { code, bits, lanes }),
    };
    Ok(dtype)
}

/// An owned `DLManagedTensor*`: dropping it calls the producer's deleter (once), unless it was
/// handed on with [`ManagedTensor::into_raw`] or to [`Tensor::from_dlpack`].
pub struct ManagedTensor {
    ptr: NonNull<DLManagedTensor>,
}

// SAFETY: a ManagedTensor only reads its struct (immutable while owned) and calls the deleter
// once, from whichever thread drops it. DLPack producers' deleters may run on any thread
// (PyTorch's frees C++ objects, NumPy's and CuPy's take the GIL themselves); tegula's own
// drops `Send + Sync` storage.
unsafe impl Send for ManagedTensor {}
unsafe impl Sync for ManagedTensor {}

impl std::fmt::Debug for ManagedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.dl_tensor();
        write!(
            f,
            "ManagedTensor(shape={:?}, strides={:?}, {:?}, {:?}, data={:p}+{})",
            self.shape(),
            self.strides(),
            t.dtype,
            t.device,
            t.data,
            t.byte_offset
        )
    }
}

impl ManagedTensor {
    /// Takes ownership of a `DLManagedTensor*` (from a `"dltensor"` capsule, say); `None` when
    /// it is null.
    ///
    /// # Safety
    /// `ptr` points to a valid `DLManagedTensor` whose ownership passes to the caller: its
    /// `shape` (and `strides`, unless null) hold `ndim` values, its memory is valid for every
    /// element the view reaches until the deleter is called, and nobody else calls that
    /// deleter. While tegula uses the memory, nobody else writes it, or reads what tegula
    /// writes, without ordering with tegula's work (see the [module](self) on ordering).
    pub unsafe fn from_raw(ptr: *mut DLManagedTensor) -> Option<ManagedTensor> {
        NonNull::new(ptr).map(|ptr| ManagedTensor { ptr })
    }

    /// A managed tensor over memory that `owner` keeps alive (or that the caller keeps alive
    /// some other way, with `owner` a `Box::new(())`): the DLPack form of any library's
    /// buffer, for [`Tensor::from_dlpack`]. The deleter drops `owner` and the struct; `shape`
    /// and `strides` (in elements; `None` for row-major) are copied.
    ///
    /// # Safety
    /// As for [`ManagedTensor::from_raw`]: `data` (on `device`) is valid for every element the
    /// view reaches until `owner` is dropped, which the tensor made from it does when its last
    /// view drops; nobody else writes the memory meanwhile without ordering with tegula.
    pub unsafe fn from_parts(
        data: *mut c_void,
        device: DLDevice,
        dtype: DType,
        shape: &[i64],
        strides: Option<&[i64]>,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> ManagedTensor {
        let mut ctx = Box::new(PartsContext {
            shape: shape.to_vec(),
            strides: strides.map(<[i64]>::to_vec),
            _owner: owner,
        });
        let managed = Box::new(DLManagedTensor {
            dl_tensor: DLTensor {
                data,
                device,
                ndim: shape.len() as i32,
                dtype: dl_dtype(dtype),
                shape: ctx.shape.as_mut_ptr(),
                strides: ctx
                    .strides
                    .as_mut()
                    .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
                byte_offset: 0,
            },
            manager_ctx: Box::into_raw(ctx).cast(),
            deleter: Some(delete_parts),
        });
        ManagedTensor {
            ptr: NonNull::from(Box::leak(managed)),
        }
    }

    /// Gives up ownership: whoever takes the pointer must call its deleter once (a consumer such
    /// as `torch.utils.dlpack.from_dlpack` does).
    pub fn into_raw(self) -> *mut DLManagedTensor {
        let ptr = self.ptr.as_ptr();
        std::mem::forget(self);
        ptr
    }

    pub fn dl_tensor(&self) -> &DLTensor {
        // SAFETY: `from_raw`'s contract (or tegula's own export) makes the pointer valid while
        // `self` owns it.
        unsafe { &self.ptr.as_ref().dl_tensor }
    }

    pub fn ndim(&self) -> usize {
        self.dl_tensor().ndim.max(0) as usize
    }

    /// The extents (DLPack's `int64_t`s).
    pub fn shape(&self) -> &[i64] {
        let t = self.dl_tensor();
        if self.ndim() == 0 || t.shape.is_null() {
            return &[];
        }
        // SAFETY: `shape` holds `ndim` values that live as long as the managed tensor.
        unsafe { std::slice::from_raw_parts(t.shape, self.ndim()) }
    }

    /// The strides in elements; `None` for a compact row-major tensor.
    pub fn strides(&self) -> Option<&[i64]> {
        let t = self.dl_tensor();
        if t.strides.is_null() {
            return None;
        }
        if self.ndim() == 0 {
            return Some(&[]);
        }
        // SAFETY: non-null `strides` hold `ndim` values that live as long as the managed tensor.
        Some(unsafe { std::slice::from_raw_parts(t.strides, self.ndim()) })
    }

    pub fn device(&self) -> DLDevice {
        self.dl_tensor().device
    }

    /// The tegula dtype of the elements.
    pub fn dtype(&self) -> std::result::Result<DType, DlpackError> {
        dtype_of(self.dl_tensor().dtype)
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        // SAFETY: the pointer is valid and owned (see `from_raw`); the deleter is called once,
        // here, and the pointer is not used after.
        unsafe {
            if let Some(deleter) = self.ptr.as_ref().deleter {
                deleter(self.ptr.as_ptr());
            }
        }
    }
}

/// What a [`ManagedTensor::from_parts`] owns.
struct PartsContext {
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    _owner: Box<dyn std::any::Any + Send + Sync>,
}

/// The deleter of [`ManagedTensor::from_parts`].
///
/// # Safety
/// `managed` is null or a pointer made by `from_parts`, not deleted before.
unsafe extern "C" fn delete_parts(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `from_parts` made both boxes; the deleter runs once.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx.cast::<PartsContext>()));
    }
}

/// What an exported `DLManagedTensor` owns: the shape and strides its pointers point into, and
/// a handle on the storage that keeps the memory alive.
struct ExportContext {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _storage: Storage,
}

static LIVE_EXPORTS: AtomicUsize = AtomicUsize::new(0);

/// How many tensors tegula has exported whose deleter has not run yet (for leak checks).
pub fn live_exports() -> usize {
    LIVE_EXPORTS.load(Ordering::SeqCst)
}

/// The deleter of tegula's exports.
///
/// # Safety
/// `managed` is null or a pointer made by [`Tensor::to_dlpack`], not deleted before.
unsafe extern "C" fn delete_export(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `to_dlpack` made `managed` with `Box::into_raw` and its `manager_ctx` from a
    // `Box<ExportContext>`; the deleter runs once, so both are reclaimed exactly once.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx.cast::<ExportContext>()));
    }
    LIVE_EXPORTS.fetch_sub(1, Ordering::SeqCst);
}

fn dl_device(dev: &Device) -> DLDevice {
    match dev.backend() {
        Backend::Interpreter => DLDevice {
            device_type: device_type::CPU,
            device_id: 0,
        },
        Backend::Cuda(ordinal) => DLDevice {
            device_type: device_type::CUDA,
            device_id: ordinal as i32,
        },
    }
}

fn describe(d: DLDevice) -> String {
    match d.device_type {
        device_type::CPU => "cpu".into(),
        device_type::CUDA => format!("cuda:{}", d.device_id),
        device_type::CUDA_MANAGED => format!("cuda:{} (managed memory)", d.device_id),
        t => format!("DLPack device type {t}:{}", d.device_id),
    }
}

impl<T: Element> Tensor<T> {
    /// Lends this view's memory through DLPack, without a copy: the data pointer is the first
    /// element's (`byte_offset` 0, as PyTorch and CuPy write it), the strides are the view's,
    /// and the storage stays alive until the consumer calls the deleter. On a GPU the device is
    /// synchronized first, so the data is complete on any stream the consumer reads it from.
    pub fn to_dlpack(&self) -> Result<ManagedTensor> {
        self.device.synchronize()?;
        let elem = T::DTYPE.size_bytes();
        let first = (self.offset() * elem) as u64;
        let data = match &self.storage {
            Storage::Host(buffer) => buffer.as_ptr().wrapping_add(first as usize) as u64,
            Storage::Cuda { buffer, .. } => buffer.device_ptr() + first,
        };
        let mut ctx = Box::new(ExportContext {
            shape: self.shape().iter().map(|&n| n as i64).collect(),
            strides: self.strides().iter().map(|&s| s as i64).collect(),
            _storage: self.storage.clone(),
        });
        let managed = Box::new(DLManagedTensor {
            dl_tensor: DLTensor {
                data: data as *mut c_void,
                device: dl_device(&self.device),
                ndim: self.rank() as i32,
                dtype: dl_dtype(T::DTYPE),
                // The vectors' heap buffers do not move when the box does.
                shape: ctx.shape.as_mut_ptr(),
                strides: ctx.strides.as_mut_ptr(),
                byte_offset: 0,
            },
            manager_ctx: Box::into_raw(ctx).cast(),
            deleter: Some(delete_export),
        });
        LIVE_EXPORTS.fetch_add(1, Ordering::SeqCst);
        let ptr = Box::into_raw(managed);
        // SAFETY: a valid, owned DLManagedTensor made just above, with tegula's deleter.
        Ok(unsafe { ManagedTensor::from_raw(ptr) }.expect("Box::into_raw is never null"))
    }

    /// Wraps a DLPack tensor's memory, in place, as a tensor on `device`: host memory on the
    /// interpreter, memory of the device's GPU on a GPU device. The view keeps `managed` alive;
    /// its deleter runs when the last tensor sharing the memory drops. Fails with a
    /// [`DlpackError`] when the dtype is not `T`, the memory is on another device, or a stride
    /// is negative (strides of size-1 axes do not matter and are taken as 0).
    pub fn from_dlpack(device: &Device, managed: ManagedTensor) -> Result<Tensor<T>> {
        let dtype = managed.dtype().map_err(err)?;
        if dtype != T::DTYPE {
            return Err(err(DlpackError::DTypeMismatch {
                expected: T::DTYPE,
                got: dtype,
            }));
        }
        let t = managed.dl_tensor();
        if t.ndim < 0 {
            return Err(err(DlpackError::InvalidShape {
                message: format!("rank {}", t.ndim),
            }));
        }
        let shape: Vec<usize> = managed
            .shape()
            .iter()
            .map(|&n| usize::try_from(n))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                err(DlpackError::InvalidShape {
                    message: format!("extents {:?}", managed.shape()),
                })
            })?;
        let strides: Vec<usize> = match managed.strides() {
            None => contiguous_strides(&shape),
            Some(s) => s
                .iter()
                .zip(&shape)
                .enumerate()
                .map(|(axis, (&stride, &n))| match usize::try_from(stride) {
                    Ok(s) => Ok(s),
                    Err(_) if n <= 1 => Ok(0),
                    Err(_) => Err(err(DlpackError::NegativeStride { axis, stride })),
                })
                .collect::<Result<_>>()?,
        };
        let numel: usize = shape.iter().product();
        let dl_dev = t.device;
        let on_cpu = dl_dev.device_type == device_type::CPU;
        let on_gpu = matches!(
            dl_dev.device_type,
            device_type::CUDA | device_type::CUDA_MANAGED
        );
        if !on_cpu && !on_gpu {
            return Err(err(DlpackError::UnsupportedDevice {
                device_type: dl_dev.device_type,
                device_id: dl_dev.device_id,
            }));
        }
        let matches = match device.backend() {
            Backend::Interpreter => on_cpu,
            Backend::Cuda(ordinal) => on_gpu && dl_dev.device_id == ordinal as i32,
        };
        if !matches {
            return Err(err(DlpackError::DeviceMismatch {
                tensor: describe(dl_dev),
                device: device.name(),
            }));
        }
        if numel == 0 {
            // Nothing to share: an empty tensor of the shape, and the producer's is let go.
            return device.zeros(shape);
        }
        // Elements the view can reach: 1 + the largest offset.
        let span = shape
            .iter()
            .zip(&strides)
            .try_fold(1usize, |acc, (&n, &s)| {
                (n - 1).checked_mul(s).and_then(|o| acc.checked_add(o))
            })
            .filter(|&span| span.checked_mul(dtype.size_bytes()).is_some())
            .ok_or_else(|| {
                err(DlpackError::InvalidShape {
                    message: format!("shape {shape:?} with strides {strides:?} overflows"),
                })
            })?;
        if t.data.is_null() {
            return Err(err(DlpackError::NullData { numel }));
        }
        let address = (t.data as u64).wrapping_add(t.byte_offset);
        let align = dtype.size_bytes();
        if !address.is_multiple_of(align as u64) {
            return Err(err(DlpackError::Misaligned { address, align }));
        }
        let storage = match device.cuda_runtime() {
            None => {
                // SAFETY: `from_raw`'s contract: the memory is valid for every element the view
                // reaches (`span` of them from the first, aligned as checked) while `managed`,
                // which the buffer owns, lives; nobody else writes it meanwhile.
                let buffer = unsafe {
                    tegula_interp::Buffer::from_foreign(
                        dtype,
                        address as usize as *mut u8,
                        span,
                        Box::new(managed),
                    )
                };
                Storage::Host(Arc::new(buffer))
            }
            Some(runtime) => {
                // SAFETY: as above, on this device (checked by the driver in `wrap_foreign`).
                let buffer = unsafe {
                    runtime.wrap_foreign(address, span * dtype.size_bytes(), Box::new(managed))
                }?;
                Storage::Cuda {
                    buffer: Arc::new(buffer),
                    runtime: runtime.clone(),
                }
            }
        };
        Ok(Tensor::from_parts(
            device.clone(),
            storage,
            shape,
            strides,
            0,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_map_both_ways() {
        for d in DType::ALL {
            assert_eq!(dtype_of(dl_dtype(d)), Ok(d), "{d}");
        }
        let complex = DLDataType {
            code: type_code::COMPLEX,
            bits: 64,
            lanes: 1,
        };
        assert!(matches!(
            dtype_of(complex),
            Err(DlpackError::UnsupportedDType { code: 5, .. })
        ));
        let vector = DLDataType {
            lanes: 4,
            ..dl_dtype(DType::F32)
        };
        assert!(dtype_of(vector).is_err());
    }

    #[test]
    fn struct_layouts_are_dlpacks() {
        // dlpack.h on a 64-bit target: DLDevice 8 bytes, DLDataType 4, DLTensor 48,
        // DLManagedTensor 64.
        assert_eq!(std::mem::size_of::<DLDevice>(), 8);
        assert_eq!(std::mem::size_of::<DLDataType>(), 4);
        assert_eq!(std::mem::offset_of!(DLTensor, ndim), 16);
        assert_eq!(std::mem::offset_of!(DLTensor, dtype), 20);
        assert_eq!(std::mem::offset_of!(DLTensor, shape), 24);
        assert_eq!(std::mem::offset_of!(DLTensor, byte_offset), 40);
        assert_eq!(std::mem::size_of::<DLTensor>(), 48);
        assert_eq!(std::mem::size_of::<DLManagedTensor>(), 64);
    }
}
