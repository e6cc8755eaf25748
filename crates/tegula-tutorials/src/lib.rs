//! Triton's tutorials, ported to tegula line by line.
//!
//! Each module is one tutorial of Triton 3.6 (the kernels are in
//! `peers/triton_tutorials/triton_tutorials.py`, verbatim) and reads as a chapter of a porting
//! guide: what the Triton code does, what maps to what, what differs and why. A port keeps the
//! tutorial's structure: the same program order, the same pointer arithmetic (pointer tiles
//! carried through loops and advanced, as Triton writes them), the same loops, the same helper
//! functions and the same autotune candidates and keys. Where tegula lacks a builtin, the port
//! says so in a comment starting `// workaround:` and does the smallest honest thing instead.
//!
//! Each tutorial has host functions shaped like the tutorial's Python ones (allocate, grid,
//! launch), returning typed errors, a float64 reference, and entries of the registry
//! ([`tegula::registry`], [`tutorials`]) beside the library's kernels: the name the Triton
//! harness prints (`tutorial-03-matmul` for its `03-matmul`), the shapes it benchmarks with
//! its shape strings, a check on fresh random inputs against float64, and a benchmark that
//! prepares inputs and hands back one launch to time (`tegula check tutorial`, `tegula bench
//! tutorials`, `tegula plan tutorial-03-matmul`).
//!
//! | module | Triton tutorial |
//! | --- | --- |
//! | [`t01_vector_add`] | 01 vector addition |
//! | [`t02_fused_softmax`] | 02 fused softmax (persistent programs sized by occupancy) |
//! | [`t03_matmul`] | 03 matrix multiplication (grouped order, autotuned, leaky ReLU) |
//! | [`t04_low_memory_dropout`] | 04 low-memory dropout (mask and seeded Philox) |
//! | [`t05_layer_norm`] | 05 layer norm forward and backward (locked partial sums) |
//! | [`t06_fused_attention`] | 06 fused attention forward and backward |
//! | [`t07_extern_functions`] | 07 extern functions (`libdevice.asin`) |
//! | [`t08_grouped_gemm`] | 08 grouped GEMM (and its descriptor variant) |
//! | [`t09_persistent_matmul`] | 09 persistent matmul (naive, persistent, descriptor variants) |
//! | [`t11_programmatic_dependent_launch`] | 11 programmatic dependent launch (without PDL) |
//!
//! The ports use tegula's builtins where Triton uses its own: `tl.rand` (04), `libdevice.asin`
//! (07), `tl.assume` (03), `tl.debug_barrier` (05), int-to-pointer casts (08), `tl.split` and
//! `tl.join` (06, 09), `tl.where` on an integer condition (04), per-axis `tl.multiple_of` (08),
//! `tl.load` without `other` (`load_masked`), and `@triton.jit` helpers with run-time loops
//! (`#[tegula::func]`, 06), tensor descriptors (06, 08, 09), host tensor descriptors
//! (`TensorDescriptor` arguments, 09). The workarounds left, each at a `// workaround:` comment:
//!
//! | Triton | where | what the port does |
//! | --- | --- | --- |
//! | `tl.range(.., warp_specialize=, flatten=)` | 06, 09 | a plain `range` loop; the host accepts the flags |
//! | fp8 inputs (`tl.float8e5`, `tl.float8e4nv`) | 06, 08 | the fp16 path only (03's and 09's fp8 paths are ported) |
//! | PDL (`gdc_wait`, `gdc_launch_dependents`, `launch_pdl`) | 11 | the kernel without PDL; the host refuses `launch_pdl` |
//! | torch arithmetic on the host (`k * (sm_scale * RCP_LN2)`) | 06 | a small kernel |
//! | host addresses as integers on the interpreter | 08 | byte offsets into one buffer per operand, on the interpreter only |

pub mod common;
pub mod t01_vector_add;
pub mod t02_fused_softmax;
pub mod t03_matmul;
pub mod t04_low_memory_dropout;
pub mod t05_layer_norm;
pub mod t06_fused_attention;
pub mod t07_extern_functions;
pub mod t08_grouped_gemm;
pub mod t09_persistent_matmul;
pub mod t11_programmatic_dependent_launch;

use tegula::ir::DType;
pub use tegula::registry::{Bench, BenchShape, CheckReport, Entry};
use tegula::registry::{BenchFn, BenchSpec, CheckFn, Kind};

/// What a port registers: the harness's name, its shapes and dtype, a check and a benchmark;
/// [`Port::entry`] makes the registry's [`Entry`] of it.
pub struct Port {
    /// `tutorial-` and the name the Triton harness prints, e.g. `tutorial-06-attention-fwd`.
    pub name: &'static str,
    pub about: &'static str,
    /// Dimension names, in the order shapes list them (e.g. `["M", "N", "K"]`), for the check
    /// and the benchmark alike.
    pub dims: &'static [&'static str],
    /// A small problem size, for checks on the interpreter.
    pub default_shape: &'static [usize],
    /// The shapes the Triton harness benchmarks, with its shape strings.
    pub bench_shapes: &'static [BenchShape],
    /// Supported dtypes, the harness's first.
    pub dtypes: &'static [DType],
    /// Runs the port on fresh random inputs and compares with a float64 reference.
    pub check: CheckFn,
    /// Prepares inputs of a shape and returns one launch to time.
    pub bench: BenchFn,
}

impl Port {
    /// The registry entry: benchmarked as `op` = its name, at the harness's shapes in its
    /// first dtype; the realistic shape is the first of them.
    pub fn entry(self) -> Entry {
        Entry {
            name: self.name,
            about: self.about,
            kind: Kind::Tutorial,
            dims: self.dims,
            default_shape: self.default_shape,
            dtypes: self.dtypes,
            check: self.check,
            trace: None,
            bench: BenchSpec {
                op: self.name,
                dims: self.dims,
                shapes: self.bench_shapes,
                dtype: self.dtypes[0],
                realistic: None,
                streaming: false,
                prepare: self.bench,
                pinned: None,
            },
        }
    }
}

/// Every ported tutorial benchmark, in the tutorials' order.
pub fn tutorials() -> Vec<Entry> {
    let mut all = Vec::new();
    all.extend(t01_vector_add::tutorials());
    all.extend(t02_fused_softmax::tutorials());
    all.extend(t03_matmul::tutorials());
    all.extend(t04_low_memory_dropout::tutorials());
    all.extend(t05_layer_norm::tutorials());
    all.extend(t06_fused_attention::tutorials());
    all.extend(t07_extern_functions::tutorials());
    all.extend(t08_grouped_gemm::tutorials());
    all.extend(t09_persistent_matmul::tutorials());
    all.extend(t11_programmatic_dependent_launch::tutorials());
    all.into_iter().map(Port::entry).collect()
}

/// Looks a tutorial up by name (`tutorial-03-matmul`, or the harness's `03-matmul`).
pub fn find(name: &str) -> Option<Entry> {
    tutorials().into_iter().find(|t| t.is_named(name))
}
