//! The crate's error type. Every driver failure names the driver call (or the kernel) it came from.

use cudarc::driver::{result::DriverError, sys};

/// Errors of the CUDA runtime.
#[derive(thiserror::Error, Debug)]
pub enum CudaError {
    /// No CUDA driver library (`libcuda`) could be loaded, or only the toolkit's stub library was found.
    #[error("no CUDA driver: libcuda could not be loaded (is the NVIDIA driver installed?)")]
    NoDriver,
    /// The driver loaded but reports no CUDA device.
    #[error("the CUDA driver reports no device")]
    NoDevice,
    /// A device ordinal past the number of devices.
    #[error("CUDA device {ordinal} does not exist ({count} device(s) present)")]
    InvalidOrdinal { ordinal: usize, count: usize },
    /// A driver call failed.
    #[error("{call} failed: {message} (CUresult {code})")]
    Driver {
        call: &'static str,
        code: i32,
        message: String,
    },
    /// The driver's PTX JIT rejected the module (boxed: the report is large).
    #[error("{0}")]
    Jit(Box<JitError>),
    /// The PTX module has no `.entry` of this name.
    #[error("kernel `{entry}` is not an entry of the PTX module (entries: {available:?})")]
    EntryNotFound {
        entry: String,
        available: Vec<String>,
    },
    /// A launch was rejected, or a kernel failed asynchronously.
    #[error("kernel `{kernel}`: {message}")]
    Launch { kernel: String, message: String },
    /// Launch arguments do not match the kernel's PTX signature.
    #[error("kernel `{kernel}`: {message}")]
    Params { kernel: String, message: String },
    /// More dynamic shared memory than the device allows a block.
    #[error(
        "kernel `{kernel}` asks for {requested} bytes of dynamic shared memory; with {static_bytes} \
         static bytes the device allows at most {limit}"
    )]
    SharedMemory {
        kernel: String,
        requested: u32,
        static_bytes: u32,
        limit: u32,
    },
    /// A host/device copy or fill with sizes that do not fit the buffer.
    #[error("{op}: {message}")]
    Size { op: &'static str, message: String },
    /// A tensor map spec that breaks a limit of `cuTensorMapEncodeTiled` (found before the driver
    /// is asked); `what` names the field, its value and the rule.
    #[error("invalid tensor map: {what}")]
    TensorMap { what: String },
    /// A buffer or cudarc slice that belongs to another CUDA context than this runtime.
    #[error("{what} belongs to a different CUDA context than this runtime")]
    WrongContext { what: &'static str },
}

impl CudaError {
    /// Whether the driver ran out of device memory (`CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            CudaError::Driver { code, .. }
                if *code == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY as i32
        )
    }
}

/// A PTX JIT failure, pointing at the PTX line the log blames and the kernel source line behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitError {
    /// The kernel being loaded.
    pub entry: String,
    /// The driver's error (for example `CUDA_ERROR_INVALID_PTX: a PTX JIT compilation failed`).
    pub summary: String,
    /// The full JIT error log.
    pub log: String,
    /// The first PTX line the log blames (1-based), if it names one.
    pub ptx_line: Option<usize>,
    /// A few PTX lines around `ptx_line`, numbered, the blamed one marked `>`.
    pub context: String,
    /// The kernel's source location for `ptx_line`, from the caller's source map.
    pub source_loc: Option<String>,
}

impl std::fmt::Display for JitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PTX JIT failed for kernel `{}`", self.entry)?;
        if let Some(loc) = &self.source_loc {
            write!(f, " at {loc}")?;
        }
        write!(f, " ({})", self.summary)?;
        let first_error = self
            .log
            .lines()
            .find(|l| crate::jit_log::is_error_line(l))
            .or_else(|| self.log.lines().next());
        if let Some(e) = first_error {
            write!(f, "\n  {}", e.trim())?;
        }
        if let Some(l) = self.ptx_line {
            write!(f, "\nPTX line {l}:\n{}", self.context)?;
        }
        if !self.log.is_empty() {
            write!(f, "\nfull JIT log:\n{}", self.log)?;
        }
        Ok(())
    }
}

impl CudaError {
    /// A failed driver call, with the driver's name and description of the code.
    pub(crate) fn driver(call: &'static str, err: DriverError) -> Self {
        CudaError::Driver {
            call,
            code: err.0 as i32,
            message: describe(err),
        }
    }

    /// True for errors that mean a kernel faulted (the context is then unusable).
    pub fn is_kernel_fault(&self) -> bool {
        matches!(self, CudaError::Driver { code, .. } if is_fault_code(*code))
            || matches!(self, CudaError::Launch { message, .. } if message.contains("asynchronous"))
    }
}

/// `CUDA_ERROR_NAME: description` from the driver, or the number when the driver cannot say.
pub(crate) fn describe(err: DriverError) -> String {
    let name = err.error_name().map(|s| s.to_string_lossy().into_owned());
    let text = err.error_string().map(|s| s.to_string_lossy().into_owned());
    match (name, text) {
        (Ok(n), Ok(t)) => format!("{n}: {t}"),
        (Ok(n), Err(_)) => n,
        _ => format!("{:?}", err.0),
    }
}

/// Codes the driver reports when a kernel faulted on the device (sticky errors).
fn is_fault_code(code: i32) -> bool {
    use sys::CUresult as R;
    [
        R::CUDA_ERROR_ILLEGAL_ADDRESS,
        R::CUDA_ERROR_LAUNCH_FAILED,
        R::CUDA_ERROR_MISALIGNED_ADDRESS,
        R::CUDA_ERROR_ILLEGAL_INSTRUCTION,
        R::CUDA_ERROR_INVALID_ADDRESS_SPACE,
        R::CUDA_ERROR_INVALID_PC,
        R::CUDA_ERROR_HARDWARE_STACK_ERROR,
        R::CUDA_ERROR_ASSERT,
        R::CUDA_ERROR_LAUNCH_TIMEOUT,
    ]
    .iter()
    .any(|r| *r as i32 == code)
}

pub(crate) fn is_fault(err: &DriverError) -> bool {
    is_fault_code(err.0 as i32)
}

/// Shorthand: `sys_call().result().map_err(drv("cuName"))`.
pub(crate) fn drv(call: &'static str) -> impl Fn(DriverError) -> CudaError {
    move |e| CudaError::driver(call, e)
}
