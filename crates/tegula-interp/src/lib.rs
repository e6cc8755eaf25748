//! The CPU interpreter of tegula's Tile IR.
//!
//! [`run`] executes every program of a 1-3 D grid (in parallel with rayon), each op on whole
//! tiles held as flat row-major vectors. It is the reference the GPU backend is tested against:
//!
//! - f16, bf16 and f32 results are rounded to nearest even exactly (values computed in f64 and
//!   rounded once; fma and dot accumulation round to odd first, so they are exact too);
//! - every unmasked load, store and atomic is bounds-checked against the *view* its pointer
//!   argument was given ([`Arg::Ptr`]'s `offset .. offset + len`), not against the whole
//!   buffer, and an out-of-bounds access names the kernel, the op, the user's source line, the
//!   program id, the argument and the index counted from the start of its view;
//! - a tile or buffer the host cannot allocate is an error ([`InterpError::OutOfMemory`],
//!   [`InterpError::TileOutOfMemory`]), not an abort;
//! - with [`Options::check_races`], stores record their program and write-write races between
//!   programs are reported (atomics excepted).
//!
//! ```
//! use std::sync::Arc;
//! use tegula_interp::{run, Arg, Buffer, Options};
//! use tegula_ir::prelude::*;
//!
//! let k = trace("double", |p| {
//!     let (x, n) = (p.ptr("x", DType::F32), p.scalar("n", DType::I32));
//!     let offs = program_id(0) * 4 + arange(0, 4);
//!     let mask = offs.lt(n);
//!     store(x + offs, load(x + offs, mask, 0.0) * 2.0, mask);
//! })
//! .unwrap();
//! let buf = Arc::new(Buffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0]));
//! let args = [Arg::ptr(&buf), Arg::Int(5)];
//! run(&k, [2, 1, 1], &args, &Options::default()).unwrap();
//! assert_eq!(buf.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0, 8.0, 10.0]);
//! ```

mod bits;
mod buffer;
mod directed;
mod error;
mod exec;
mod math;
mod memory;
mod ops;
mod round;
mod value;

pub use buffer::Buffer;
pub use error::InterpError;
pub use exec::{run, Arg, Options};
