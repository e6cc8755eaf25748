//! The Tile IR of tegula: dtypes, tile types, the op set, kernels as arenas of typed entities,
//! the tracing builder that produces them, a verifier and a text printer.
//!
//! ```
//! use tegula_ir::prelude::*;
//!
//! let kernel = trace("add", |p| {
//!     let (x, y, out, n) = (p.ptr("x", DType::F32), p.ptr("y", DType::F32),
//!                           p.ptr("out", DType::F32), p.scalar("n", DType::I32));
//!     let offs = program_id(0) * 128 + arange(0, 128);
//!     let mask = offs.lt(n);
//!     store(out + offs, load(x + offs, mask, 0.0) + load(y + offs, mask, 0.0), mask);
//! }).unwrap();
//! assert!(kernel.to_string().contains("addptr"));
//! ```

pub mod builder;
pub mod dtype;
pub mod error;
pub mod fast_hash;
pub mod fp8;
pub mod kernel;
pub mod mathlib;
pub mod op;
pub mod passes;
mod print;
pub mod types;
pub mod uses;
pub mod verify;

pub use dtype::{DType, Element};
pub use error::{TraceError, VerifyError};
pub use kernel::{
    Arena, Block, BlockData, Inst, InstData, Kernel, Loc, Param, ParamFacts, Value, ValueData,
    ValueDef,
};
pub use op::*;
pub use types::{Elem, IntoShape, Shape, TileType, MAX_RANK, MAX_TILE_ELEMENTS};

/// Everything a kernel body needs: `use tegula_ir::prelude::*;`.
pub mod prelude {
    pub use crate::builder::*;
    pub use crate::dtype::{DType, Element};
    pub use crate::fp8::{f8e4m3, f8e5m2};
    pub use crate::op::{
        AtomicOp, CacheModifier, EvictionPolicy, InputPrecision, MemScope, MemSem, ReduceOp,
        Rounding,
    };
    pub use half::{bf16, f16};
}
