//! tegula's CUDA runtime: runs PTX text on a GPU through the driver API (cudarc, loaded at run
//! time, so this crate builds and its tests run on machines without CUDA).
//!
//! - [`CudaRuntime`]: one device context and stream. `is_available()` / `new(ordinal)` never panic
//!   when no driver or device is present.
//! - [`CudaRuntime::load`]: PTX -> [`LoadedKernel`], through an in-memory cache (PTX hash, entry),
//!   a disk cache of cubins ([`DiskCache`], `$TEGULA_CACHE_DIR`), and the driver JIT, whose error
//!   log becomes a [`CudaError::Jit`] pointing at the PTX line and the kernel's source line.
//! - [`CudaRuntime::launch`] with [`KernelParam`]s checked against the PTX signature;
//!   [`CudaRuntime::synchronize`] names the kernel behind an asynchronous fault.
//! - [`DeviceBuffer`]: device memory, and zero-copy interop with cudarc `CudaSlice`s (see `memory.rs`).
//! - [`CudaRuntime::time`] / [`EventTimer`]: CUDA-event timing.
//! - [`encode_tensor_map_2d`]: a Hopper TMA [`TensorMap`] from a [`TensorMapSpec`] checked against
//!   the driver's limits ([`TensorMapSpec::validate`], no GPU needed), passed to a kernel as
//!   [`KernelParam::TensorMap`] (128 bytes by value, `.param .align 64 .b8 NAME[128]`).

mod cache;
mod error;
mod jit;
pub mod jit_log;
mod memory;
mod params;
mod runtime;
mod tensor_map;

pub use cache::{CachedCubin, CubinKey, DiskCache};
pub use error::{CudaError, JitError};
pub use memory::{BorrowedBuffer, DeviceBuffer};
pub use params::{entry_names, entry_param_sizes, KernelParam};
pub use runtime::{
    device_count, driver_library_present, CudaRuntime, DeviceInfo, EventTimer, LoadedKernel,
    ModuleSource, Resources,
};
pub use tensor_map::{
    encode_tensor_map_2d, TensorMap, TensorMapSpec, TmaDtype, TmaSwizzle, TENSOR_MAP_BYTES,
};

/// The cudarc version this crate is built against, re-exported so interop callers use the same types.
pub use cudarc;
