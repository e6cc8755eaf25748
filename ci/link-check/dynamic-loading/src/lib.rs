//! tegula in a crate that asks cudarc for `dynamic-loading`: this compiles only when the two
//! agree on one cudarc (same version, compatible features), and the types below are the same.

use std::sync::Arc;

/// A tegula device on a stream the caller's cudarc made: cudarc's types and tegula's are one.
pub fn device_on(stream: Arc<cudarc::driver::CudaStream>) -> tegula::Result<tegula::Device> {
    tegula::Device::from_cuda_stream(stream)
}

/// Whether the CUDA driver is there (tegula's probe, which compiles under either feature).
pub fn driver_present() -> bool {
    tegula::cuda::driver_library_present()
}
