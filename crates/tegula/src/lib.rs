//! tegula: a tile kernel language and compiler for Rust, in the spirit of Triton.
//!
//! A kernel is a block-level program written as a Rust function with `#[tegula::kernel]`; it is
//! traced into the Tile IR once per specialization (constexpr values, dtypes), and run on the
//! GPU or, where there is none, on a CPU interpreter that checks every memory access.
//!
//! ```
//! use tegula::prelude::*;
//!
//! #[tegula::kernel]
//! fn add(x: Ptr<f32>, y: Ptr<f32>, out: Ptr<f32>, n: i32, #[constexpr] block: usize) {
//!     let offs = program_id(0) * block + arange(0, block as i64);
//!     let mask = offs.lt(n);
//!     store(out + offs, load(x + offs, mask, 0.0) + load(y + offs, mask, 0.0), mask);
//! }
//!
//! # fn main() -> tegula::Result<()> {
//! let dev = Device::cpu();
//! let x = dev.from_slice(&[1.0f32, 2.0, 3.0], [3])?;
//! let y = dev.from_slice(&[10.0f32, 20.0, 30.0], [3])?;
//! let out = dev.zeros::<f32>([3])?;
//! add::launch(&dev, 1u32, &x, &y, &out, 3, 128)?;
//! assert_eq!(out.to_vec()?, vec![11.0, 22.0, 33.0]);
//! # Ok(())
//! # }
//! ```

pub mod aot;
pub mod autotune;
pub mod compiler;
mod descriptor;
mod device;
pub mod dlpack;
pub mod env;
mod error;
mod gpu;
mod launch;
pub mod registry;
mod tensor;

pub use autotune::{Autotuner, Config, Tuning};
pub use compiler::{specialize, Report};
pub use descriptor::TensorDescriptor;
pub use device::{Backend, Device, RecordedLaunch, StandIn};
pub use error::{Error, Result};
pub use gpu::GpuKernel;
pub use launch::{Grid, KernelArg, Launch, LaunchConfig, MmaChoice, Ptr, ScalarArg, TensorArg};
/// The CUDA runtime crate, and through it the cudarc tegula is built with
/// (`tegula::cuda::cudarc`), for interop with other cudarc users.
pub use tegula_cuda as cuda;
pub use tegula_ir as ir;
pub use tegula_macros::{func, kernel};
pub use tensor::Tensor;

/// Everything kernels and their callers need: `use tegula::prelude::*;`.
pub mod prelude {
    pub use crate::{
        func, kernel, Device, Grid, LaunchConfig, MmaChoice, Ptr, ScalarArg, Tensor, TensorArg,
    };
    pub use tegula_ir::prelude::*;
}

/// The guide's chapters (`docs/guide`), compiled and run as doc tests: `cargo test -p tegula
/// --doc guide`. Only when collecting doc tests, so the published crate, which does not hold
/// `docs/`, builds without them.
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../../../docs/guide/first-kernel.md")]
    mod first_kernel {}
    #[doc = include_str!("../../../docs/guide/tiles-masks-layouts.md")]
    mod tiles_masks_layouts {}
    #[doc = include_str!("../../../docs/guide/loops-and-pipelining.md")]
    mod loops_and_pipelining {}
    #[doc = include_str!("../../../docs/guide/tuning.md")]
    mod tuning {}
    #[doc = include_str!("../../../docs/guide/debugging.md")]
    mod debugging {}
    #[doc = include_str!("../../../docs/guide/reading-ptx.md")]
    mod reading_ptx {}
    #[doc = include_str!("../../../docs/guide/interop.md")]
    mod interop {}
    #[doc = include_str!("../../../docs/guide/ahead-of-time.md")]
    mod ahead_of_time {}
    #[doc = include_str!("../../../docs/guide/porting-from-triton.md")]
    mod porting_from_triton {}
}
