//! tegula's kernel library: each kernel written with `#[tegula::kernel]`, with a host wrapper
//! that checks its input contract and returns typed errors, and a check against a float64
//! reference used by tests and by `tegula run`.

pub mod attention;
pub mod check;
pub mod gemv;
pub mod matmul;
pub mod norm;
pub mod softmax;
pub mod tuned;
pub mod vector_add;

use tegula::ir::{DType, Kernel, TraceError};
use tegula::{Device, Result};

/// The outcome of running a library kernel on fresh random inputs against a float64 reference.
#[derive(Clone, Debug)]
pub struct CheckReport {
    pub kernel: String,
    /// The problem size, e.g. `M=37 N=1031`.
    pub shape: String,
    pub dtype: DType,
    pub max_abs_err: f64,
    /// The largest `|got - want| / (atol + rtol * |want|)`; at most 1 passes.
    pub worst_ratio: f64,
    pub atol: f64,
    pub rtol: f64,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.worst_ratio <= 1.0
    }
}

/// One entry of the library, for the CLI and the GPU check.
pub struct LibraryKernel {
    pub name: &'static str,
    pub about: &'static str,
    /// Dimension names, in the order `--shape` takes them (e.g. `["M", "N"]`).
    pub dims: &'static [&'static str],
    /// A small default problem size.
    pub default_shape: &'static [usize],
    pub dtypes: &'static [DType],
    /// Runs on fresh random inputs and compares with a float64 reference.
    pub check: fn(&Device, &[usize], DType) -> Result<CheckReport>,
    /// The traced Tile IR for a problem size and dtype (as `check` would launch it).
    pub trace: fn(&[usize], DType) -> std::result::Result<Kernel, TraceError>,
}

/// Every kernel of the library.
pub fn library() -> Vec<LibraryKernel> {
    vec![
        vector_add::entry(),
        softmax::entry(),
        norm::layer_norm_entry(),
        norm::layer_norm_backward_entry(),
        norm::rms_norm_entry(),
        gemv::entry(),
        matmul::entry(),
        attention::single_head_entry(),
        attention::forward_entry(),
        attention::backward_entry(),
    ]
}

/// Looks a kernel up by name.
pub fn find(name: &str) -> Option<LibraryKernel> {
    library().into_iter().find(|k| k.name == name)
}
