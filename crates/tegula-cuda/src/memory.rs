//! Device memory: buffers owned by tegula, cudarc slices adopted from or handed back to their
//! owners, borrowed views of cudarc slices, and copies/fills on the runtime's stream.
//!
//! Ownership across the cudarc boundary:
//! - `alloc` makes a buffer tegula owns (a `CudaSlice<u8>` inside); it is freed, stream-ordered,
//!   when dropped. `into_cuda_slice::<T>()` hands it to cudarc as a `CudaSlice<T>`.
//! - `adopt(slice)` takes a caller's `CudaSlice<T>` without copying; `into_cuda_slice::<T>()`
//!   gives the same slice back. If the buffer is dropped instead, the slice is freed by cudarc.
//! - `borrow_slice(&slice)` / `borrow_slice_mut(&mut slice)` give a `BorrowedBuffer<'a>` view that
//!   tegula never frees; the borrow checker keeps the slice alive and unmoved meanwhile.
//!
//! - `wrap_foreign(ptr, len, owner)` views memory another library owns (a DLPack tensor of
//!   PyTorch's, say) in place; `owner` is dropped, calling that library's deleter, when the
//!   buffer is. tegula never frees it, and no events are recorded: the caller orders the work.
//!
//! In all cases but the foreign one, cudarc's cross-stream events are honoured: this runtime's stream waits for earlier
//! work on the slice, and the slice records this stream's work when tegula lets go of it.

use crate::error::drv;
use crate::{CudaError, CudaRuntime, KernelParam};
use cudarc::driver::{sys, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// A range of device memory, `len()` bytes at `device_ptr()`. Send + Sync.
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
    /// The CUcontext the memory belongs to, compared before every use.
    ctx: usize,
    storage: Storage,
}

enum Storage {
    /// Zero bytes: no allocation. Keeps the stream to hand back an empty `CudaSlice`.
    Empty(Arc<CudaStream>),
    /// Allocated by tegula on `stream`.
    Owned(CudaSlice<u8>),
    /// A caller's `CudaSlice<T>`, with the stream tegula used it on.
    Adopted(Box<dyn AdoptedSlice>, Arc<CudaStream>),
    /// Memory of a cudarc slice borrowed by a `BorrowedBuffer`; never freed here.
    Borrowed,
    /// Memory another owner lends (`wrap_foreign`), kept alive by the box; never freed here.
    Foreign(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
}

/// A `CudaSlice<T>` of any `T`, type-erased so it can be given back by downcast.
trait AdoptedSlice: Send + Sync {
    /// Makes `stream` wait for earlier uses of the slice, and marks everything enqueued on `stream`
    /// so far as a write, so later users of the slice on other streams wait for tegula's kernels.
    fn sync_with(&mut self, stream: &CudaStream);
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: 'static> AdoptedSlice for CudaSlice<T> {
    fn sync_with(&mut self, stream: &CudaStream) {
        let _record_on_drop = self.device_ptr_mut(stream);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.storage {
            Storage::Empty(_) => "empty",
            Storage::Owned(_) => "owned",
            Storage::Adopted(..) => "adopted",
            Storage::Borrowed => "borrowed",
            Storage::Foreign(_) => "foreign",
        };
        write!(
            f,
            "DeviceBuffer({kind}, {} bytes at {:#x})",
            self.len, self.ptr
        )
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // The slice's own drop waits for its recorded events: make tegula's work one of them.
        if let Storage::Adopted(slice, stream) = &mut self.storage {
            slice.sync_with(stream);
        }
    }
}

impl DeviceBuffer {
    /// The device address, for `KernelParam::Ptr`.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// `KernelParam::Ptr` of the start plus `offset_bytes` (checked against the length).
    pub fn param_at(&self, offset_bytes: usize) -> Option<KernelParam> {
        (offset_bytes <= self.len).then(|| KernelParam::Ptr(self.ptr + offset_bytes as u64))
    }
    pub fn param(&self) -> KernelParam {
        KernelParam::Ptr(self.ptr)
    }

    /// Gives the memory to cudarc as a `CudaSlice<T>` without copying: an adopted slice comes back
    /// as itself (T must be its element type), an owned buffer is re-typed when its length is a
    /// multiple of `size_of::<T>()`. Otherwise the buffer is returned unchanged.
    pub fn into_cuda_slice<T: DeviceRepr + 'static>(
        mut self,
    ) -> Result<CudaSlice<T>, DeviceBuffer> {
        let elem = std::mem::size_of::<T>();
        // Moved out below; a `Borrowed` placeholder keeps Drop from doing anything.
        let storage = std::mem::replace(&mut self.storage, Storage::Borrowed);
        let (ptr, len, ctx) = (self.ptr, self.len, self.ctx);
        let restore = |storage| DeviceBuffer {
            ptr,
            len,
            ctx,
            storage,
        };
        match storage {
            Storage::Empty(stream) => stream
                .null::<T>()
                .map_err(|_| restore(Storage::Empty(stream))),
            Storage::Adopted(mut slice, stream) if slice.as_any().is::<CudaSlice<T>>() => {
                slice.sync_with(&stream);
                match slice.into_any().downcast::<CudaSlice<T>>() {
                    Ok(typed) => Ok(*typed),
                    Err(_) => unreachable!("the type was checked just above"),
                }
            }
            Storage::Owned(mut bytes) if elem > 0 && len % elem == 0 => {
                let stream = bytes.stream().clone();
                // Record tegula's work on the slice's own stream (a no-op outside multi-stream mode).
                drop(bytes.device_ptr_mut(&stream));
                let raw = bytes.leak();
                // SAFETY: `raw` is a live allocation of `len` bytes, released by `leak` and owned by
                // nothing else; cuMemAlloc aligns to at least 256 bytes, enough for any DeviceRepr
                // type; `len / elem` elements of T fit exactly. Any bit pattern is a valid device
                // value here: cudarc never reads elements on the host without copying them out.
                Ok(unsafe { stream.upgrade_device_ptr::<T>(raw, len / elem) })
            }
            other => Err(restore(other)),
        }
    }
}

/// A tegula view of a borrowed cudarc slice. Dereferences to `DeviceBuffer`; dropping it records
/// this runtime's work on the slice (cudarc's read or write event), freeing nothing.
pub struct BorrowedBuffer<'a> {
    buffer: DeviceBuffer,
    _record: SyncOnDrop<'a>,
}

impl std::ops::Deref for BorrowedBuffer<'_> {
    type Target = DeviceBuffer;
    fn deref(&self) -> &DeviceBuffer {
        &self.buffer
    }
}

impl CudaRuntime {
    fn ctx_id(&self) -> usize {
        self.inner.ctx.cu_ctx() as usize
    }

    fn check_ctx(&self, buf: &DeviceBuffer) -> Result<(), CudaError> {
        if buf.ctx != self.ctx_id() {
            return Err(CudaError::WrongContext {
                what: "device buffer",
            });
        }
        Ok(())
    }

    /// `bytes` of device memory, zero-filled (a memset enqueued on the stream).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        self.alloc_with(bytes, true)
    }

    /// `bytes` of device memory with unspecified contents (for outputs that will be poisoned or
    /// fully overwritten).
    pub fn alloc_uninit(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        self.alloc_with(bytes, false)
    }

    fn alloc_with(&self, bytes: usize, zeroed: bool) -> Result<DeviceBuffer, CudaError> {
        let stream = &self.inner.stream;
        if bytes == 0 {
            return Ok(DeviceBuffer {
                ptr: 0,
                len: 0,
                ctx: self.ctx_id(),
                storage: Storage::Empty(stream.clone()),
            });
        }
        let slice = if zeroed {
            stream.alloc_zeros::<u8>(bytes).map_err(drv("cuMemAlloc"))?
        } else {
            // SAFETY: the contents are arbitrary device bytes; they reach the host only through
            // copies into initialised `u8` buffers, where every bit pattern is valid.
            unsafe { stream.alloc::<u8>(bytes) }.map_err(drv("cuMemAlloc"))?
        };
        let (ptr, _) = slice.device_ptr(stream);
        Ok(DeviceBuffer {
            ptr,
            len: bytes,
            ctx: self.ctx_id(),
            storage: Storage::Owned(slice),
        })
    }

    /// Takes a caller's cudarc slice as a tegula buffer, zero-copy. Hand it back with
    /// `DeviceBuffer::into_cuda_slice::<T>()`. Returns the slice unchanged if it belongs to
    /// another CUDA context.
    pub fn adopt<T: DeviceRepr + 'static>(
        &self,
        mut slice: CudaSlice<T>,
    ) -> Result<DeviceBuffer, CudaSlice<T>> {
        if slice.context().cu_ctx() as usize != self.ctx_id() {
            return Err(slice);
        }
        let len = slice.num_bytes();
        let stream = self.inner.stream.clone();
        // Our stream waits for earlier work on the slice; the SyncOnDrop records right away (harmless).
        let (ptr, _record) = slice.device_ptr_mut(&stream);
        drop(_record);
        let storage = Storage::Adopted(Box::new(slice), stream);
        Ok(DeviceBuffer {
            ptr,
            len,
            ctx: self.ctx_id(),
            storage,
        })
    }

    /// A buffer over `len` bytes of device memory at `ptr` that another owner lends (a DLPack
    /// tensor's), used in place; `owner` is dropped when the buffer is, and nothing is freed
    /// here. Fails with [`CudaError::WrongContext`] unless the driver places `ptr` on this
    /// runtime's device. No stream ordering is added: the caller makes the owner's earlier work
    /// on the memory complete (or ordered before this runtime's stream) and lets the owner
    /// reuse it only after tegula's work on it (a `synchronize`).
    ///
    /// # Safety
    /// For `len > 0`, `ptr .. ptr + len` is device memory accessible from this runtime's
    /// context and stays valid for as long as `owner` lives.
    pub unsafe fn wrap_foreign(
        &self,
        ptr: u64,
        len: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, CudaError> {
        if len > 0 {
            self.inner
                .ctx
                .bind_to_thread()
                .map_err(drv("cuCtxSetCurrent"))?;
            let mut ordinal: i32 = -1;
            // SAFETY: the device-ordinal attribute writes one int, which `ordinal` is; the
            // driver answers an error, not a fault, for an address it does not know.
            let known = unsafe {
                sys::cuPointerGetAttribute(
                    (&mut ordinal as *mut i32).cast(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    ptr,
                )
            }
            .result();
            if known.is_err() || ordinal != self.inner.ctx.ordinal() as i32 {
                return Err(CudaError::WrongContext {
                    what: "foreign device memory",
                });
            }
        }
        Ok(DeviceBuffer {
            ptr,
            len,
            ctx: self.ctx_id(),
            storage: Storage::Foreign(owner),
        })
    }

    /// A read-only view of a cudarc slice (or view) for kernels that only read it.
    pub fn borrow_slice<'a, T, S: DevicePtr<T>>(
        &'a self,
        slice: &'a S,
    ) -> Result<BorrowedBuffer<'a>, CudaError> {
        if slice.stream().context().cu_ctx() as usize != self.ctx_id() {
            return Err(CudaError::WrongContext {
                what: "cudarc slice",
            });
        }
        let len = slice.num_bytes();
        let (ptr, record) = slice.device_ptr(&self.inner.stream);
        Ok(BorrowedBuffer {
            buffer: DeviceBuffer {
                ptr,
                len,
                ctx: self.ctx_id(),
                storage: Storage::Borrowed,
            },
            _record: record,
        })
    }

    /// A writable view of a cudarc slice (or mutable view): kernels launched while it lives may write it.
    pub fn borrow_slice_mut<'a, T, S: DevicePtrMut<T>>(
        &'a self,
        slice: &'a mut S,
    ) -> Result<BorrowedBuffer<'a>, CudaError> {
        if slice.stream().context().cu_ctx() as usize != self.ctx_id() {
            return Err(CudaError::WrongContext {
                what: "cudarc slice",
            });
        }
        let len = slice.num_bytes();
        let (ptr, record) = slice.device_ptr_mut(&self.inner.stream);
        Ok(BorrowedBuffer {
            buffer: DeviceBuffer {
                ptr,
                len,
                ctx: self.ctx_id(),
                storage: Storage::Borrowed,
            },
            _record: record,
        })
    }

    /// Copies `src` into the first `src.len()` bytes of `dst`; returns once `src` may be reused.
    pub fn htod(&self, dst: &DeviceBuffer, src: &[u8]) -> Result<(), CudaError> {
        self.check_ctx(dst)?;
        check_fits("htod", src.len(), dst.len)?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(drv("cuCtxSetCurrent"))?;
        // SAFETY: `dst` has at least `src.len()` bytes (checked) in the bound context; `src` is a
        // live host slice of that length. The stream is synchronised before returning, so `src`
        // is not read after this call (pageable copies may be staged asynchronously).
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst.ptr,
                src.as_ptr() as *const _,
                src.len(),
                self.inner.stream.cu_stream(),
            )
        }
        .result()
        .map_err(drv("cuMemcpyHtoDAsync"))?;
        self.synchronize()
    }

    /// Copies the first `dst.len()` bytes of `src` to the host, after all earlier work on the stream.
    pub fn dtoh(&self, src: &DeviceBuffer, dst: &mut [u8]) -> Result<(), CudaError> {
        self.check_ctx(src)?;
        check_fits("dtoh", dst.len(), src.len)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(drv("cuCtxSetCurrent"))?;
        // SAFETY: `src` has at least `dst.len()` bytes (checked); `dst` is a live, exclusively
        // borrowed host slice of that length, and the stream is synchronised before it is released.
        let r = unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                dst.as_mut_ptr() as *mut _,
                src.ptr,
                dst.len(),
                self.inner.stream.cu_stream(),
            )
        }
        .result();
        // Faults of earlier kernels can surface at the copy itself.
        self.after_sync("cuMemcpyDtoHAsync", r)?;
        self.synchronize()
    }

    /// Copies `src.len()` bytes from `src` into the start of `dst`, on the stream.
    pub fn dtod(&self, dst: &DeviceBuffer, src: &DeviceBuffer) -> Result<(), CudaError> {
        self.check_ctx(dst)?;
        self.check_ctx(src)?;
        check_fits("dtod", src.len, dst.len)?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(drv("cuCtxSetCurrent"))?;
        // SAFETY: both ranges are live allocations of this context with the checked sizes.
        unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, src.len, self.inner.stream.cu_stream())
        }
        .result()
        .map_err(drv("cuMemcpyDtoDAsync"))
    }

    /// Sets every byte of `buf` to `value`, on the stream.
    pub fn memset_d8(&self, buf: &DeviceBuffer, value: u8) -> Result<(), CudaError> {
        self.fill(buf, Fill::D8(value))
    }

    /// Sets every 2-byte element of `buf` (e.g. an f16 NaN `0x7e00` as poison); the length must be
    /// a multiple of 2 and the address 2-aligned.
    pub fn fill_u16(&self, buf: &DeviceBuffer, value: u16) -> Result<(), CudaError> {
        self.fill(buf, Fill::D16(value))
    }

    /// Sets every 4-byte element of `buf` (e.g. an f32 NaN `0x7fc00000` as poison).
    pub fn fill_u32(&self, buf: &DeviceBuffer, value: u32) -> Result<(), CudaError> {
        self.fill(buf, Fill::D32(value))
    }

    fn fill(&self, buf: &DeviceBuffer, fill: Fill) -> Result<(), CudaError> {
        self.check_ctx(buf)?;
        let count = fill_count(buf.ptr, buf.len, fill.width())?;
        if count == 0 {
            return Ok(());
        }
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(drv("cuCtxSetCurrent"))?;
        let stream = self.inner.stream.cu_stream();
        // SAFETY: `buf` is a live allocation of this context holding `count` elements of the fill
        // width, suitably aligned (checked by `fill_count`).
        let r = unsafe {
            match fill {
                Fill::D8(v) => sys::cuMemsetD8Async(buf.ptr, v, count, stream),
                Fill::D16(v) => sys::cuMemsetD16Async(buf.ptr, v, count, stream),
                Fill::D32(v) => sys::cuMemsetD32Async(buf.ptr, v, count, stream),
            }
        };
        r.result().map_err(drv("cuMemsetAsync"))
    }
}

#[derive(Clone, Copy)]
enum Fill {
    D8(u8),
    D16(u16),
    D32(u32),
}

impl Fill {
    fn width(self) -> usize {
        match self {
            Fill::D8(_) => 1,
            Fill::D16(_) => 2,
            Fill::D32(_) => 4,
        }
    }
}

fn check_fits(op: &'static str, bytes: usize, capacity: usize) -> Result<(), CudaError> {
    if bytes > capacity {
        return Err(CudaError::Size {
            op,
            message: format!("{bytes} bytes do not fit a {capacity}-byte buffer"),
        });
    }
    Ok(())
}

/// Elements of `width` bytes in a fill of `len` bytes at `ptr`, checking length and alignment.
fn fill_count(ptr: u64, len: usize, width: usize) -> Result<usize, CudaError> {
    if !len.is_multiple_of(width) || !ptr.is_multiple_of(width as u64) {
        return Err(CudaError::Size {
            op: "fill",
            message: format!("a {width}-byte fill needs a length and address that are multiples of {width} (got {len} bytes at {ptr:#x})"),
        });
    }
    Ok(len / width)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn buffers_are_send_and_sync() {
        assert_send_sync::<DeviceBuffer>();
        assert_send_sync::<BorrowedBuffer<'static>>();
        assert_send_sync::<CudaRuntime>();
        assert_send_sync::<crate::LoadedKernel>();
    }

    #[test]
    fn fill_and_copy_sizes_are_checked() {
        assert_eq!(fill_count(0x1000, 12, 4).unwrap(), 3);
        assert_eq!(fill_count(0x1002, 6, 2).unwrap(), 3);
        assert_eq!(fill_count(0x1001, 7, 1).unwrap(), 7);
        let e = fill_count(0x1000, 10, 4).unwrap_err();
        assert!(
            e.to_string()
                .contains("multiples of 4 (got 10 bytes at 0x1000)"),
            "{e}"
        );
        assert!(fill_count(0x1002, 8, 4).is_err());
        assert!(check_fits("htod", 16, 16).is_ok());
        let e = check_fits("dtoh", 17, 16).unwrap_err();
        assert_eq!(e.to_string(), "dtoh: 17 bytes do not fit a 16-byte buffer");
    }
}
