//! The errors a tegula call can return. Nothing in the library panics on user input.

use tegula_ir::{DType, TraceError};
use thiserror::Error;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Error)]
pub enum Error {
    /// The kernel body did not trace: a type or shape error at the user's line.
    #[error(transparent)]
    Trace(#[from] TraceError),

    /// The interpreter stopped: an out-of-bounds access, a race, a failed device assertion.
    #[error(transparent)]
    Interp(#[from] tegula_interp::InterpError),

    /// The PTX backend cannot lower the kernel (names the op's source line).
    #[error(transparent)]
    Ptx(#[from] tegula_ptx::PtxError),

    /// The CUDA driver refused: no device, a JIT error, a launch or memory failure.
    #[error(transparent)]
    Cuda(#[from] tegula_cuda::CudaError),

    /// A tuning candidate adds nothing to the others: its compiled plan is another
    /// candidate's kernels (the tuner skips it without timing; see
    /// [`crate::autotune::Autotuner::tune_for`]).
    #[error("pruned: {why}")]
    Pruned { why: String },

    /// A kernel was launched with arguments that do not match its parameters.
    #[error("kernel `{kernel}`: {message}")]
    Arguments { kernel: String, message: String },

    /// A tensor has the wrong shape for the operation.
    #[error("{op}: {message}")]
    Shape { op: String, message: String },

    /// A tensor has the wrong element type.
    #[error("{op}: `{name}` must be {expected}, got {got}")]
    DType {
        op: String,
        name: String,
        expected: String,
        got: DType,
    },

    /// A tensor's strides do not fit what the operation supports.
    #[error("{op}: {message}")]
    Stride { op: String, message: String },

    /// Tensors live on different devices, or a tensor is not on the launch's device. The
    /// message names the arguments and the devices (`cpu#2 (interpreter, 2 threads)`: each
    /// device's name carries its [`crate::Device::id`]).
    #[error("{op}: {message}")]
    Device { op: String, message: String },

    /// A size does not fit: the elements or bytes of a shape, or an index range, overflow
    /// `usize`.
    #[error("{op}: {message}")]
    TooLarge { op: String, message: String },

    /// The device (or the host, for the interpreter and for copies to the host) could not
    /// allocate `bytes`.
    #[error("{op}: out of memory on {device}: {bytes} bytes requested")]
    OutOfMemory {
        op: String,
        device: String,
        /// Saturates at `u64::MAX`.
        bytes: u64,
    },

    /// An output tensor shares memory with an input.
    #[error("{op}: output `{output}` overlaps input `{input}`")]
    Aliasing {
        op: String,
        output: String,
        input: String,
    },

    /// A DLPack tensor tegula cannot take, or cannot give (dtype, device, strides).
    #[error(transparent)]
    Dlpack(#[from] crate::dlpack::DlpackError),

    /// An autotune cache file could not be exported or imported: it does not parse, has
    /// another version or an inconsistent entry, cannot be read or written, or the tuner has
    /// no cache file to export (names the file and what is wrong).
    #[error(transparent)]
    Cache(#[from] crate::autotune::CacheError),

    /// An ahead-of-time bundle could not be read, written or installed: it does not parse, was
    /// made by another compiler or format version, or its file cannot be read or written.
    #[error(transparent)]
    Bundle(#[from] crate::aot::BundleError),

    /// Anything else the caller passed that cannot work, said in words.
    #[error("{op}: {message}")]
    Invalid { op: String, message: String },
}
