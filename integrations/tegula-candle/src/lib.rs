//! tegula kernels as candle ops: a tegula kernel runs on candle tensors through candle's
//! `CustomOp1/2/3`, with no copy of the inputs.
//!
//! - On candle's CPU device the kernel runs on tegula's interpreter, reading candle's buffers in
//!   place (bounds-checked like every interpreter run).
//! - With the `cuda` feature, on candle's CUDA device it runs on the GPU, launched on candle's
//!   own CUDA stream ([`tegula::Device::from_cuda_stream`]), so it is ordered with candle's work
//!   without synchronisation; inputs are read in place and the output is candle's allocation.
//!
//! The bridge ([`cpu_view`], and `cuda_view` with the feature) makes a tegula tensor view of
//! a candle buffer and its [`candle_core::Layout`] (shape, strides, offset) through
//! [`tegula::dlpack::ManagedTensor::from_parts`]. [`cross_entropy`] is the worked example: the
//! fused softmax cross-entropy that candle otherwise computes in about eight kernels.
//!
//! ```
//! use candle_core::{Device, Tensor};
//!
//! # fn main() -> candle_core::Result<()> {
//! let logits = Tensor::new(&[[1.0f32, 2.0, 3.0], [0.5, 0.5, 0.5]], &Device::Cpu)?;
//! let targets = Tensor::new(&[2u32, 0], &Device::Cpu)?;
//! let loss = tegula_candle::cross_entropy(&logits, &targets)?; // [2], f32
//! let l = loss.to_vec1::<f32>()?;
//! assert!((l[0] - 0.4076).abs() < 1e-4 && (l[1] - 3f32.ln()).abs() < 1e-6);
//! # Ok(())
//! # }
//! ```

pub mod cross_entropy;

pub use cross_entropy::{cross_entropy, CrossEntropy};

use std::sync::OnceLock;
use tegula::dlpack::{device_type, DLDevice, ManagedTensor};
use tegula::ir::Element;

/// A tegula error as a candle error.
pub fn to_candle(e: tegula::Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// The interpreter device the CPU path runs on: one per process, so each kernel is traced once.
pub fn cpu_device() -> &'static tegula::Device {
    static DEV: OnceLock<tegula::Device> = OnceLock::new();
    DEV.get_or_init(tegula::Device::cpu)
}

/// Shape and strides of a candle layout in DLPack's terms.
fn dl_shape(layout: &candle_core::Layout) -> (Vec<i64>, Vec<i64>) {
    (
        layout.dims().iter().map(|&n| n as i64).collect(),
        layout.stride().iter().map(|&s| s as i64).collect(),
    )
}

/// A tegula view (on the interpreter) of a candle CPU buffer laid out by `layout`, without a
/// copy. Kernels may only read it.
///
/// # Safety
/// The returned tensor, and every clone or view of it, must be dropped before the borrow of
/// `data` ends (the op's `cpu_fwd` returns), and no kernel may write it.
pub unsafe fn cpu_view<T: Element>(
    data: &[T],
    layout: &candle_core::Layout,
) -> tegula::Result<tegula::Tensor<T>> {
    let (shape, strides) = dl_shape(layout);
    let cpu = DLDevice {
        device_type: device_type::CPU,
        device_id: 0,
    };
    let first = data.as_ptr().wrapping_add(layout.start_offset());
    // SAFETY: candle's layout stays inside `data` (candle checks it), so every element the view
    // reaches is in the borrowed slice, which the caller keeps alive and unwritten for as long
    // as the view lives (this function's contract); nothing is owned, hence the empty owner.
    let managed = unsafe {
        ManagedTensor::from_parts(
            first as *mut std::ffi::c_void,
            cpu,
            T::DTYPE,
            &shape,
            Some(&strides),
            Box::new(()),
        )
    };
    tegula::Tensor::from_dlpack(cpu_device(), managed)
}

#[cfg(feature = "cuda")]
pub use cuda::{cuda_device, cuda_view};

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DevicePtr};
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// The tegula device on a candle CUDA device's stream, made once per stream (it holds the
    /// compiled kernels).
    pub fn cuda_device(dev: &candle_core::CudaDevice) -> tegula::Result<tegula::Device> {
        static DEVICES: OnceLock<Mutex<HashMap<usize, tegula::Device>>> = OnceLock::new();
        let stream = dev.cuda_stream();
        let key = std::sync::Arc::as_ptr(&stream) as usize;
        let mut map = DEVICES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(d) = map.get(&key) {
            return Ok(d.clone());
        }
        let d = tegula::Device::from_cuda_stream(stream)?;
        map.insert(key, d.clone());
        Ok(d)
    }

    /// A tegula view of a candle CUDA slice laid out by `layout`, without a copy, on `tdev`
    /// (the device of [`cuda_device`] for the slice's candle device).
    ///
    /// # Safety
    /// The returned tensor, and every clone or view of it, must be dropped before the borrow
    /// of `slice` ends, and kernels may write it only where candle expects a write (an
    /// output the op allocated).
    pub unsafe fn cuda_view<T: Element + candle_core::cuda_backend::CudaDType>(
        tdev: &tegula::Device,
        slice: &CudaSlice<T>,
        layout: &candle_core::Layout,
    ) -> tegula::Result<tegula::Tensor<T>> {
        let (shape, strides) = dl_shape(layout);
        let runtime = tdev.cuda_runtime().ok_or_else(|| tegula::Error::Invalid {
            op: "cuda_view".into(),
            message: "not a GPU device".into(),
        })?;
        // On candle's own stream: the record cudarc makes when the guard drops orders nothing
        // that the stream does not order already.
        let (ptr, _guard) = slice.device_ptr(runtime.cuda_stream());
        let first = ptr + (layout.start_offset() * std::mem::size_of::<T>()) as u64;
        let device = DLDevice {
            device_type: device_type::CUDA,
            device_id: runtime.cuda_context().ordinal() as i32,
        };
        // SAFETY: the layout stays inside the slice (candle checks it), which the caller keeps
        // alive while the view lives; tegula's launches go on the slice's own stream.
        let managed = unsafe {
            ManagedTensor::from_parts(
                first as usize as *mut std::ffi::c_void,
                device,
                T::DTYPE,
                &shape,
                Some(&strides),
                Box::new(()),
            )
        };
        tegula::Tensor::from_dlpack(tdev, managed)
    }
}
