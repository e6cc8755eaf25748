//! GPU lowering of tegula's Tile IR to PTX. Pure Rust: no CUDA is needed to build or test it;
//! `ptxas` checks its output in CI (`scripts/ptxas.sh`, `tests/ptxas.rs`).
//!
//! The backend decides, then emits:
//!
//! ```text
//! Kernel --analysis--> axis info (contiguity, divisibility), affine forms
//!        --plan-----> dots (FMA | mma.sync | wgmma), layouts of anchored values,
//!                     pipelines (streamed loads, stages, nests, resident operands)
//!        --emit-----> typed PTX instructions (ptx.rs) --print--> PTX text + Report
//! ```
//!
//! - [`analysis`]: facts about values that no decision changes.
//! - [`mod@plan`]: every decision, as data ([`plan::Plan`]), made before any code is written by
//!   passes in a fixed order; [`plan::report`] says them for the kernel's author.
//! - `emit` (private): carries a plan out. Values are lowered on demand in the layout their
//!   consumer asks for (free values are materialized, anchored values converted through shared
//!   memory), loads/stores/atomics, reductions and scans, `dot` on tensor cores or FMAs,
//!   software pipelining with `cp.async`, loops and branches; it reads the plan and decides
//!   nothing.
//! - [`target`](Target): every hardware number and rule; [`CompileOptions`]: what a launch asks.
//! - [`layout`], [`mma_layout`]: which thread and register holds each element; the tensor-core
//!   fragment layouts and swizzled staging.
//! - [`ptx`]: the typed instruction builder and printer.
//!
//! Semantics follow the IR docs (and so the interpreter): integer division truncates, shift
//! amounts past the width clamp, float-to-int casts truncate and saturate with NaN -> 0, float
//! `max`/`min` drop a NaN operand while reductions propagate it, f16/bf16 round once per op.
//! Casts round correctly in every pair: conversions that need two roundings go through f32
//! rounded to odd. The precision of math functions is in `emit/math.rs`.
//!
//! Not lowered yet (each gives [`PtxError::Unsupported`] with the source line):
//! tiles with a dimension that is not a power of two, atomics on 8-bit, 16-bit integers and i1,
//! f64 transcendental functions (only sqrt, rsqrt, abs, neg, floor, ceil), and a `dot` operand,
//! an FMA `dot`, a reshape or a permute needing more shared memory than the target allows a
//! block (`Target::max_shared_bytes`; other conversions go in slabs of 48 KB). `device_assert`
//! lowers to `trap` (the message is not printed on the GPU); `device_print` to `vprintf` calls,
//! one per element a thread owns (`emit/print.rs`).

pub mod analysis;
mod emit;
pub mod layout;
pub mod mma_layout;
mod options;
pub mod plan;
pub mod ptx;
pub mod ptxas;
mod target;

pub use options::{CompileOptions, MmaChoice};
pub use plan::report::{DotKind, DotReport, LoopReport, OperandHome, Report};
pub use target::Target;

use ptx::ParamDecl;
use tegula_ir::{DType, Elem, Kernel, Loc, Op};
use thiserror::Error;

/// How one kernel parameter is passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamAbi {
    /// A 64-bit global address of elements of `pointee`.
    Pointer { name: String, pointee: DType },
    /// A scalar of `dtype`, `bytes` wide (i1 as one byte, f16/bf16 as two).
    Scalar {
        name: String,
        dtype: DType,
        bytes: u32,
    },
}

impl ParamAbi {
    pub fn size_bytes(&self) -> u32 {
        match self {
            ParamAbi::Pointer { .. } => 8,
            ParamAbi::Scalar { bytes, .. } => *bytes,
        }
    }
}

/// A compiled kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    pub ptx: String,
    /// The `.entry` name to look up in the module.
    pub entry: String,
    /// Shared memory the kernel uses. It is declared `.extern` (dynamic), so the launch must
    /// ask for exactly this many bytes; over 48 KB the runtime opts the function in first.
    pub shared_bytes: u32,
    /// Threads per block: `32 * num_warps`.
    pub num_threads: u32,
    pub params: Vec<ParamAbi>,
    /// Tensor maps the launch encodes from the arguments and passes after them, in order
    /// (the descriptor accesses on TMA, `plan/descriptors.rs`).
    pub tensor_maps: Vec<plan::descriptors::TensorMapAbi>,
    /// What the compiler decided, for the kernel's author.
    pub report: plan::report::Report,
}

impl Compiled {
    /// The same kernel declaring `.minnctapersm blocks` (ptxas then budgets registers so
    /// that `blocks` blocks fit an SM); `None` when it already declares one.
    pub fn declaring_min_blocks_per_sm(&self, blocks: u32) -> Option<Compiled> {
        if self.report.min_blocks_per_sm.is_some() {
            return None;
        }
        let maxntid = format!("\n.maxntid {}, 1, 1\n", self.num_threads);
        let at = self.ptx.find(&maxntid)? + maxntid.len();
        let mut c = self.clone();
        c.ptx.insert_str(at, &format!(".minnctapersm {blocks}\n"));
        c.report.min_blocks_per_sm = Some(blocks);
        Some(c)
    }
}

/// Why a kernel could not be lowered; points at the user's source line.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PtxError {
    #[error("kernel `{kernel}`: {what} is not supported by the PTX backend yet\n  --> {loc}")]
    Unsupported {
        kernel: String,
        what: String,
        loc: Loc,
    },
    #[error("kernel `{kernel}`: {message}\n  --> {loc}")]
    Invalid {
        kernel: String,
        message: String,
        loc: Loc,
    },
    #[error("invalid compile options: {0}")]
    Options(String),
}

/// The `.param` name of parameter `i`.
pub(crate) fn param_name(k: &Kernel, i: usize) -> String {
    format!("p{i}_{}", sanitize(&k.params[i].name))
}

/// The `.minnctapersm` a kernel declares, which is what ptxas sizes its register budget by.
///
/// Without it ptxas picks a budget of its own and may cap registers to fit more blocks than
/// shared memory allows (128 registers at 8 warps, as few as 32 at 4 warps, with spills). A
/// kernel whose shared memory allows one block a SM declares 1. A kernel with a `dot` (on
/// tensor cores or, for `ieee`, on FMAs: register tiles either way) declares the blocks that
/// both its shared memory and a full 255-register budget allow (at least 1), so it may take
/// every register and still runs as many blocks as its memory lets. Other kernels with room
/// for more blocks declare nothing: their occupancy is ptxas's choice.
fn min_blocks_per_sm(
    kernel: &Kernel,
    shared_bytes: u32,
    target: &Target,
    threads: u32,
) -> Option<u32> {
    let by_shared =
        target.shared_bytes_per_sm() / (shared_bytes + target::SHARED_RESERVED_PER_BLOCK);
    if by_shared <= 1 {
        return Some(1);
    }
    // Live instructions: the arena keeps those that passes dropped.
    let has_dot = kernel
        .walk()
        .into_iter()
        .any(|i| matches!(kernel.insts[i].op, tegula_ir::Op::Dot { .. }));
    let by_registers = target.blocks_per_sm_by_registers(target::MAX_REGISTERS_PER_THREAD, threads);
    has_dot.then(|| by_shared.min(by_registers).max(1))
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Whether `wgmma` takes an f16/bf16 dot of `m x n x k` in a loop pipelined over `stages`
/// stages with `warps` warps on sm_90a ([`Target::wgmma_takes_shape`], and at least two
/// stages: the operands come from pipeline slots).
pub fn wgmma_takes_shape(m: u32, n: u32, k: u32, warps: u32, stages: u32) -> bool {
    stages >= 2 && Target { sm: 90 }.wgmma_takes_shape(m, n, k, warps)
}

/// [`Target::wgmma_reads_rows_of`] on sm_90a.
pub fn wgmma_reads_rows_of(bytes: u32) -> bool {
    Target { sm: 90 }.wgmma_reads_rows_of(bytes)
}

pub use plan::pipeline::HOISTED_OPERAND_REGS;

/// The decisions the compiler makes for `kernel` on `target` with `options`, before any PTX
/// is written; [`plan::Plan::report`] says them for the kernel's author (without the shared memory
/// that only emission knows: [`compile`]'s report has it).
pub fn plan(
    kernel: &Kernel,
    target: &Target,
    options: &CompileOptions,
) -> Result<Report, PtxError> {
    check_options(kernel, target, options)?;
    let (kernel, descriptors) = rewritten(kernel, target, options);
    let cx = plan::Context::new(&kernel, target, options);
    Ok(plan::Plan::build(&cx, descriptors).report(&cx))
}

/// `kernel` after the plan's rewriting rules ([`plan::descriptors`], which also decides the
/// descriptor accesses on TMA, then [`plan::load_order`]).
fn rewritten(
    kernel: &Kernel,
    target: &Target,
    options: &CompileOptions,
) -> (Kernel, plan::descriptors::Descriptors) {
    let mut k = kernel.clone();
    let descriptors = plan::descriptors::place(&mut k, target, options);
    plan::load_order::transpose_loads(&mut k);
    (k, descriptors)
}

fn check_options(
    kernel: &Kernel,
    target: &Target,
    options: &CompileOptions,
) -> Result<(), PtxError> {
    let w = options.num_warps;
    if !w.is_power_of_two() || w > 32 {
        return Err(PtxError::Options(format!(
            "num_warps must be a power of two from 1 to 32, got {w}"
        )));
    }
    if options.num_stages == 0 {
        return Err(PtxError::Options("num_stages must be at least 1".into()));
    }
    if let Some(l) = kernel.walk().into_iter().find(|&i| {
        matches!(
            kernel.insts[i].op,
            Op::For {
                num_stages: Some(0)
            }
        )
    }) {
        return Err(PtxError::Invalid {
            kernel: kernel.name.clone(),
            message: "num_stages(0): a loop runs with at least 1 stage".into(),
            loc: kernel.insts[l].loc,
        });
    }
    if target.sm < 80 {
        return Err(PtxError::Options(format!(
            "sm_{} is not supported (sm_80 or newer)",
            target.sm
        )));
    }
    check_fp8(kernel, target)?;
    check_shapes(kernel)
}

/// fp8 values convert through PTX's `e4m3x2` / `e5m2x2` instructions, which sm_89 introduced.
fn check_fp8(kernel: &Kernel, target: &Target) -> Result<(), PtxError> {
    if target.sm >= 89 {
        return Ok(());
    }
    let fp8 = |v: &tegula_ir::Value| matches!(kernel.ty(*v).elem, tegula_ir::Elem::Scalar(d) if d.is_fp8());
    match kernel
        .walk()
        .into_iter()
        .find(|&i| kernel.insts[i].results.iter().any(fp8))
    {
        Some(i) => Err(PtxError::Unsupported {
            kernel: kernel.name.clone(),
            what: format!(
                "fp8 tiles on sm_{}: their conversions need sm_89 or newer",
                target.sm
            ),
            loc: kernel.insts[i].loc,
        }),
        None => Ok(()),
    }
}

/// Lowers `kernel` to a PTX module for `target`: plans it ([`plan()`]), then emits the plan.
/// When the kernel's shared memory exceeds the target's, it is compiled again with at most one
/// pipeline stage fewer a loop (pipeline slots sit below the scratch buffer's other uses),
/// whether the loop takes the launch's `num_stages` or has its own, and the report says so.
pub fn compile(
    kernel: &Kernel,
    target: &Target,
    options: &CompileOptions,
) -> Result<Compiled, PtxError> {
    check_options(kernel, target, options)?;
    let (kernel, descriptors) = rewritten(kernel, target, options);
    let kernel = &kernel;
    // The most stages any loop asks for: the launch's, or a loop's own.
    let most = kernel
        .walk()
        .into_iter()
        .filter_map(|i| match kernel.insts[i].op {
            Op::For { num_stages } => num_stages,
            _ => None,
        })
        .fold(options.num_stages, u32::max);
    let mut cap = most;
    // The stages of the last attempt that did not fit.
    let mut failed = most;
    loop {
        match compile_once(kernel, &descriptors, target, options, cap)? {
            Ok(mut compiled) => {
                if cap < most {
                    compiled.report.stage_cut = Some(format!(
                        "with {} stages its shared memory exceeds the {} bytes sm_{} allows a \
                         block",
                        failed,
                        target.max_shared_bytes(),
                        target.sm
                    ));
                }
                return Ok(compiled);
            }
            // One stage fewer than the most a loop got (a cap between changes no loop's
            // plan), or 1 when none is pipelined.
            Err(over) if cap > 1 => {
                if over.stages >= 2 {
                    failed = over.stages.min(cap);
                    cap = failed - 1;
                } else {
                    failed = cap;
                    cap = 1;
                }
            }
            Err(over) => {
                return Err(PtxError::Options(format!(
                    "kernel `{}` needs {} bytes of shared memory; sm_{} allows {} a block",
                    kernel.name,
                    over.needed,
                    target.sm,
                    target.max_shared_bytes()
                )))
            }
        }
    }
}

/// A compile whose shared memory exceeds the target's.
struct SharedOverflow {
    /// The bytes it needs.
    needed: u32,
    /// The most stages any of its loops got (1 when none is pipelined).
    stages: u32,
}

/// One plan and emission with at most `stage_cap` stages a loop; `Err` when the shared memory
/// it needs exceeds the target's.
fn compile_once(
    kernel: &Kernel,
    descriptors: &plan::descriptors::Descriptors,
    target: &Target,
    options: &CompileOptions,
    stage_cap: u32,
) -> Result<Result<Compiled, SharedOverflow>, PtxError> {
    let w = options.num_warps;
    let cx = plan::Context::new(kernel, target, options).with_stage_cap(stage_cap);
    let plan = plan::Plan::build(&cx, descriptors.clone());
    let mut lw = emit::Lower::new(&cx, &plan);
    lw.lower_kernel()?;
    let entry = format!("tg_{}", sanitize(&kernel.name));
    let shared_bytes = lw.shared_bytes();
    if shared_bytes > target.max_shared_bytes() {
        let stages = plan
            .pipelines
            .loops()
            .flat_map(|(_, l)| l.pipeline.iter().chain(l.nest.as_ref().map(|n| &n.pipe)))
            .map(|p| p.stages)
            .fold(1, u32::max);
        return Ok(Err(SharedOverflow {
            needed: shared_bytes,
            stages,
        }));
    }
    let mut params: Vec<ParamDecl> = (0..kernel.params.len())
        .map(|i| ParamDecl {
            name: param_name(kernel, i),
            ty: emit::types::param_ty(kernel.params[i].ty.elem),
            bytes: None,
        })
        .collect();
    params.extend(plan.descriptors.maps.iter().map(|m| ParamDecl {
        name: m.name.clone(),
        ty: ptx::Ty::B8,
        bytes: Some(128),
    }));
    if shared_bytes > 0 {
        // Dynamic (sized by the launch), so a block may use more than the 48 KB that a static
        // array may declare.
        lw.b.declare_in_module(format!(
            ".extern .shared .align {} .b8 {}[]",
            lw.shared_alignment(),
            ptx::SMEM
        ));
    }
    let min_blocks = min_blocks_per_sm(kernel, shared_bytes, target, 32 * w);
    let ptx = lw.b.finish(
        if plan.dots.any_fp8() {
            target.fp8_dot_ptx_version()
        } else {
            target.ptx_version()
        },
        &target.target_name(),
        &entry,
        &params,
        32 * w,
        min_blocks,
    );
    let mut report = plan.report(&cx);
    report.shared_bytes = shared_bytes;
    report.blocks_per_sm = target.blocks_per_sm_by_shared(shared_bytes, 32 * w);
    report.min_blocks_per_sm = min_blocks;
    let abi = kernel
        .params
        .iter()
        .map(|p| match p.ty.elem {
            Elem::Ptr(d) => ParamAbi::Pointer {
                name: p.name.clone(),
                pointee: d,
            },
            Elem::Scalar(d) => ParamAbi::Scalar {
                name: p.name.clone(),
                dtype: d,
                bytes: d.size_bytes() as u32,
            },
        })
        .collect();
    Ok(Ok(Compiled {
        ptx,
        entry,
        shared_bytes,
        num_threads: 32 * w,
        params: abi,
        tensor_maps: plan.descriptors.maps.clone(),
        report,
    }))
}

/// Layouts need power-of-two dimensions.
fn check_shapes(k: &Kernel) -> Result<(), PtxError> {
    for inst in k.walk() {
        let d = &k.insts[inst];
        for &r in &d.results {
            let s = k.ty(r).shape;
            if let Some(&bad) = s.dims().iter().find(|&&x| !x.is_power_of_two()) {
                return Err(PtxError::Unsupported {
                    kernel: k.name.clone(),
                    what: format!(
                        "the tile shape {s} (dimension {bad}; GPU tiles need powers of two)"
                    ),
                    loc: d.loc,
                });
            }
        }
    }
    Ok(())
}
