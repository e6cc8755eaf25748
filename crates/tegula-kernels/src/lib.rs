//! tegula's kernel library: each kernel written with `#[tegula::kernel]`, with a host wrapper
//! that checks its input contract and returns typed errors, a check against a float64
//! reference used by tests and by `tegula run`, and a benchmark ([`bench`](mod@bench)).
//!
//! [`library`] gives the library's entries of the registry ([`tegula::registry`]), which the
//! `tegula` command reads beside the tutorials' ports. Each kernel module describes its kernel
//! as a [`LibraryKernel`] (name, dimensions, dtypes, check, trace); [`bench`](mod@bench) adds the
//! benchmark (FLOPs, bytes, peers.py's shapes, the realistic shape, a prepared launch).

pub mod attention;
pub mod bench;
pub mod check;
pub mod gemv;
pub mod matmul;
pub mod norm;
pub mod settings;
pub mod softmax;
pub mod tuned;
pub mod vector_add;

use tegula::ir::{DType, Kernel, TraceError};
pub use tegula::registry::CheckReport;
use tegula::registry::{BenchSpec, Entry, Kind};
use tegula::{Device, Result};

/// A kernel of the library as its module describes it: what [`library`] makes an [`Entry`]
/// of with its benchmark.
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

impl LibraryKernel {
    /// The registry entry of this kernel with its benchmark.
    pub fn with_bench(self, bench: BenchSpec) -> Entry {
        Entry {
            name: self.name,
            about: self.about,
            kind: Kind::Library,
            dims: self.dims,
            default_shape: self.default_shape,
            dtypes: self.dtypes,
            check: self.check,
            trace: Some(self.trace),
            bench,
        }
    }
}

/// Every kernel of the library, as registry entries.
pub fn library() -> Vec<Entry> {
    vec![
        vector_add::entry().with_bench(bench::vector_add()),
        softmax::entry().with_bench(bench::softmax()),
        norm::layer_norm_entry().with_bench(bench::layer_norm()),
        norm::layer_norm_backward_entry().with_bench(bench::layer_norm_backward()),
        norm::rms_norm_entry().with_bench(bench::rms_norm()),
        gemv::entry().with_bench(bench::gemv()),
        matmul::entry().with_bench(bench::matmul()),
        attention::single_head_entry().with_bench(bench::single_head()),
        attention::forward_entry().with_bench(bench::attention()),
        attention::backward_entry().with_bench(bench::attention_backward()),
    ]
}

/// A kernel of the library by name, as its module describes it.
pub fn find(name: &str) -> Option<LibraryKernel> {
    [
        vector_add::entry,
        softmax::entry,
        norm::layer_norm_entry,
        norm::layer_norm_backward_entry,
        norm::rms_norm_entry,
        gemv::entry,
        matmul::entry,
        attention::single_head_entry,
        attention::forward_entry,
        attention::backward_entry,
    ]
    .into_iter()
    .map(|f| f())
    .find(|k| k.name == name)
}

/// The registry entry of a library kernel by name.
pub fn entry(name: &str) -> Option<Entry> {
    library().into_iter().find(|e| e.name == name)
}
