//! [`InterpError`]: everything that stops a kernel run, pointing at the user's source line.

use tegula_ir::{DType, Loc};

/// `(x, y, z)` for messages.
pub(crate) fn fmt_pid(pid: &[u32; 3]) -> String {
    format!("({}, {}, {})", pid[0], pid[1], pid[2])
}

/// An index of `dtype` (`index` holds a u64's bit pattern) for messages.
fn fmt_index(index: i64, dtype: DType) -> String {
    if dtype == DType::U64 {
        (index as u64).to_string()
    } else {
        index.to_string()
    }
}

/// Why a kernel run (or a buffer operation) failed.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum InterpError {
    #[error("kernel `{kernel}` takes {expected} arguments, got {got}")]
    ArgCount {
        kernel: String,
        expected: usize,
        got: usize,
    },
    #[error("kernel `{kernel}`, argument {index} (`{name}`): expected {expected}, got {got}")]
    ArgMismatch {
        kernel: String,
        index: usize,
        name: String,
        expected: String,
        got: String,
    },
    /// An access outside the view a pointer argument was given ([`crate::Arg::Ptr`]).
    #[error(
        "out-of-bounds {op} in kernel `{kernel}` at {loc}, program {}: element {index} of \
         argument `{arg}`, a view of {len} elements",
        fmt_pid(.pid)
    )]
    OutOfBounds {
        kernel: String,
        /// `load`, `store` or `atomic`.
        op: &'static str,
        loc: Loc,
        pid: [u32; 3],
        /// The pointer parameter the access went through.
        arg: String,
        /// The element, counted from the start of the argument's view.
        index: i64,
        /// The elements of the view.
        len: usize,
    },
    #[error(
        "write-write race in kernel `{kernel}` at {loc}: element {index} of argument `{arg}` \
         written by programs {} and {}",
        fmt_pid(.first),
        fmt_pid(.second)
    )]
    Race {
        kernel: String,
        loc: Loc,
        /// The pointer parameter of the second store.
        arg: String,
        /// The element, counted from the start of that argument's view.
        index: usize,
        first: [u32; 3],
        second: [u32; 3],
    },
    #[error(
        "integer division by zero in kernel `{kernel}` at {loc}, program {} (undefined on the GPU)",
        fmt_pid(.pid)
    )]
    DivisionByZero {
        kernel: String,
        loc: Loc,
        pid: [u32; 3],
    },
    /// A `gather` index outside the source's extent along the gathered axis.
    #[error(
        "{op} index out of range in kernel `{kernel}` at {loc}, program {}: index {} at {at:?} \
         of the index tile, along axis {axis} of size {len}",
        fmt_pid(.pid),
        fmt_index(*.index, *.dtype)
    )]
    IndexOutOfRange {
        kernel: String,
        /// The op (`gather`).
        op: &'static str,
        loc: Loc,
        pid: [u32; 3],
        /// The offending index: its value, or for a u64 index its bit pattern.
        index: i64,
        /// The index tile's dtype.
        dtype: DType,
        /// The gathered axis and the source's size along it.
        axis: u8,
        len: usize,
        /// The element of the index tile that holds it.
        at: Box<[usize]>,
    },
    #[error("loop step is zero in kernel `{kernel}` at {loc}, program {}", fmt_pid(.pid))]
    ZeroStep {
        kernel: String,
        loc: Loc,
        pid: [u32; 3],
    },
    #[error(
        "device assertion failed in kernel `{kernel}` at {loc}, program {}: {message}",
        fmt_pid(.pid)
    )]
    Assert {
        kernel: String,
        message: String,
        loc: Loc,
        pid: [u32; 3],
    },
    /// The host could not allocate memory (a buffer, a copy, or the race check's table).
    #[error("out of host memory: {what} needs {bytes} bytes")]
    /// `bytes` saturates at `u64::MAX`.
    OutOfMemory { what: String, bytes: u64 },
    /// A program could not allocate one of its tiles.
    #[error(
        "out of host memory in kernel `{kernel}` at {loc}, program {}: a tile of {ty} needs \
         {bytes} bytes",
        fmt_pid(.pid)
    )]
    TileOutOfMemory {
        kernel: String,
        loc: Loc,
        pid: [u32; 3],
        ty: String,
        bytes: u64,
    },
    #[error("buffer holds {buffer}, {requested} requested")]
    DTypeMismatch { buffer: DType, requested: DType },
    #[error("cannot copy a {src} buffer into a {dst} buffer")]
    CopyMismatch { dst: String, src: String },
    #[error("kernel `{kernel}`: {message}")]
    Grid { kernel: String, message: String },
    #[error("kernel `{kernel}` at {loc}: the interpreter cannot run this IR: {message}")]
    InvalidIr {
        kernel: String,
        loc: Loc,
        message: String,
    },
}
