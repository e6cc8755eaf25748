//! The registry of runnable kernels: one [`Entry`] per kernel that the command line can list,
//! run against a float64 reference, benchmark, trace and compile (`tegula list`, `run`,
//! `check`, `bench`, `launch-cost`, `ir`, `ptx`, `plan`).
//!
//! Two crates provide entries: the kernel library (`tegula_kernels::library()`) and the ports
//! of Triton's tutorials (`tegula_tutorials::tutorials()`); the `tegula` command reads both.
//! The types live here, in the crate both already depend on, because the tutorials must not
//! depend on the library's kernels (a port stands for Triton's tutorial and is compared with
//! it, not with the library), and the library has no reason to know the tutorials. An entry
//! names nothing beyond what this crate has: devices, tensors, configs, recorded launches
//! and the Tile IR.
//!
//! An entry has two shapes of its own: the dimensions its check takes (`dims`, with a small
//! `default_shape` that the interpreter runs quickly), and the dimensions of its benchmark
//! ([`BenchSpec::dims`]), whose shapes are the ones its peers measure (peers.py's sweep for a
//! library kernel, the Triton harness's shapes for a tutorial) and the realistic one a user
//! would launch. The benchmark prepares its inputs once and hands back a launch to time
//! ([`Bench`]); the same preparation on a recording device ([`Entry::record`]) gives the
//! launches a call compiles, which `tegula ptx`, `plan` and `launch-cost` show with no GPU.

use crate::autotune::Config;
use crate::{Device, RecordedLaunch, Result};
use tegula_ir::{DType, Kernel, TraceError};

/// The outcome of running a kernel on fresh random inputs against a float64 reference.
#[derive(Clone, Debug)]
pub struct CheckReport {
    pub kernel: String,
    /// The problem size, e.g. `M=37 N=1031`.
    pub shape: String,
    pub dtype: DType,
    pub max_abs_err: f64,
    /// The largest `|got - want| / (atol + rtol * magnitude)`; at most 1 passes.
    pub worst_ratio: f64,
    pub atol: f64,
    pub rtol: f64,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.worst_ratio <= 1.0
    }
}

/// A benchmark shape: the sizes in the order of [`BenchSpec::dims`] and the text its peers
/// print for it (the Triton harness's `4096x4096x4096`, `n=134217728`, `Z4H32N4096D64`), or
/// `""` where the peers name a case by its sizes (peers.py's JSON records).
#[derive(Clone, Copy, Debug)]
pub struct BenchShape {
    pub label: &'static str,
    pub dims: &'static [usize],
}

impl BenchShape {
    /// A shape the peers name by its sizes.
    pub const fn of(dims: &'static [usize]) -> BenchShape {
        BenchShape { label: "", dims }
    }

    /// The label, or the sizes joined by `x`.
    pub fn text(&self) -> String {
        if self.label.is_empty() {
            join_x(self.dims)
        } else {
            self.label.to_string()
        }
    }
}

/// `4096x4096x64`.
pub fn join_x(dims: &[usize]) -> String {
    dims.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// One prepared benchmark case: the work it does and a closure that launches it once on
/// inputs made beforehand (the first call may compile and autotune; time the calls after).
pub struct Bench {
    /// Floating-point operations of one launch (0 for pure data movement).
    pub flops: f64,
    /// The fewest bytes one launch must move: each input read once, each output written once.
    pub bytes: f64,
    /// How many copies of the inputs the launches cycle through (so that a memory-bound
    /// case reads DRAM, not the L2); 1 for one set.
    pub input_copies: usize,
    pub launch: Box<dyn FnMut() -> Result<()>>,
}

impl Bench {
    /// A case on one set of inputs.
    pub fn new(flops: f64, bytes: f64, launch: impl FnMut() -> Result<()> + 'static) -> Bench {
        Bench {
            flops,
            bytes,
            input_copies: 1,
            launch: Box::new(launch),
        }
    }
}

/// Where an entry comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A kernel of the library (`tegula_kernels`).
    Library,
    /// A port of one of Triton's tutorials (`tegula_tutorials`); its benchmark joins the
    /// Triton harness's `TRITON <tutorial> <shape> <ms>` lines.
    Tutorial,
    /// A reference point of the benchmarks (the copy that the ceilings are measured by).
    Baseline,
}

/// Runs an entry on fresh random inputs of a shape (in [`Entry::dims`]) and dtype and compares
/// with a float64 reference.
pub type CheckFn = fn(&Device, &[usize], DType) -> Result<CheckReport>;
/// The traced Tile IR at a shape (in [`Entry::dims`]) and dtype, as the check launches it.
pub type TraceFn = fn(&[usize], DType) -> std::result::Result<Kernel, TraceError>;
/// Prepares a benchmark case at a shape (in [`BenchSpec::dims`]) and dtype.
pub type BenchFn = fn(&Device, &[usize], DType) -> Result<Bench>;
/// The same with the host wrapper's config pinned (`tegula bench --config`).
pub type PinnedBenchFn = fn(&Device, &[usize], DType, &Config) -> Result<Bench>;

/// An entry's benchmark.
#[derive(Clone, Copy)]
pub struct BenchSpec {
    /// The name its peers give the operation: peers.py's `op` (`matmul`, `attention_fwd`) for
    /// a library kernel, the entry's own name (`tutorial-03-matmul`) for a tutorial.
    pub op: &'static str,
    /// Dimension names of its shapes. A last dimension `CAUSAL` (0 or 1) is the attention
    /// mask, which the records carry apart from the shape (`"causal": true`).
    pub dims: &'static [&'static str],
    /// The shapes benchmarked by default: the ones the peers measure.
    pub shapes: &'static [BenchShape],
    /// The dtype benchmarked by default (the peers').
    pub dtype: DType,
    /// The shape and dtype a user would launch (`tegula launch-cost`, `ptx`, `plan`);
    /// `None`: the first of `shapes` in `dtype`.
    pub realistic: Option<(DType, &'static [usize])>,
    /// Memory-bound, streaming its bytes once: also timed back to back, beside a copy.
    pub streaming: bool,
    pub prepare: BenchFn,
    /// `None`: the host wrapper takes no config, or (a tutorial's port) tunes its kernels as
    /// Triton's autotuner does, and a config pins those tunings
    /// ([`crate::autotune::with_pinned`]).
    pub pinned: Option<PinnedBenchFn>,
}

impl BenchSpec {
    /// Whether the last dimension is the attention mask.
    pub fn has_causal(&self) -> bool {
        self.dims.last() == Some(&"CAUSAL")
    }
}

/// One runnable kernel (see the module docs).
#[derive(Clone, Copy)]
pub struct Entry {
    /// `matmul`, or for a tutorial `tutorial-` and the harness's name: `tutorial-03-matmul`.
    pub name: &'static str,
    pub about: &'static str,
    pub kind: Kind,
    /// Dimension names of the check's shapes (`tegula run --shape`).
    pub dims: &'static [&'static str],
    /// A small problem size, for checks on the interpreter.
    pub default_shape: &'static [usize],
    /// Supported dtypes.
    pub dtypes: &'static [DType],
    pub check: CheckFn,
    /// `None`: `tegula ir` shows the launches the benchmark records instead.
    pub trace: Option<TraceFn>,
    pub bench: BenchSpec,
}

impl Entry {
    /// The name the Triton harness prints (`03-matmul` for `tutorial-03-matmul`), for a
    /// tutorial.
    pub fn triton_name(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Tutorial => Some(self.name.strip_prefix("tutorial-").unwrap_or(self.name)),
            _ => None,
        }
    }

    /// Whether `name` names this entry (its name, or a tutorial's harness name).
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.triton_name() == Some(name)
    }

    /// The realistic dtype and shape (in [`BenchSpec::dims`]).
    pub fn realistic(&self) -> (DType, &'static [usize]) {
        self.bench.realistic.unwrap_or((
            self.bench.dtype,
            self.bench
                .shapes
                .first()
                .map_or(self.default_shape, |s| s.dims),
        ))
    }

    /// The benchmark case at `shape` (in [`BenchSpec::dims`]), its config pinned when one is
    /// given (an error for a wrapper that takes none).
    pub fn prepare(
        &self,
        dev: &Device,
        shape: &[usize],
        dtype: DType,
        config: Option<&Config>,
    ) -> Result<Bench> {
        match (config, self.bench.pinned) {
            (None, _) => (self.bench.prepare)(dev, shape, dtype),
            (Some(c), Some(pinned)) => pinned(dev, shape, dtype, c),
            (Some(c), None) if self.kind == Kind::Tutorial => {
                // A port's host function tunes as Triton's autotuner would: pin its tunings.
                let name = self.name;
                let pin = c.clone();
                let (bench, _) =
                    crate::autotune::with_pinned(&pin, || (self.bench.prepare)(dev, shape, dtype));
                let mut bench = bench?;
                let mut inner = bench.launch;
                // The first launch tunes (later ones answer from the port's memo).
                let mut first = true;
                bench.launch = Box::new(move || {
                    let (done, used) = crate::autotune::with_pinned(&pin, &mut inner);
                    done?;
                    let was_first = std::mem::replace(&mut first, false);
                    if used || !was_first {
                        Ok(())
                    } else {
                        Err(crate::Error::Invalid {
                            op: format!("tegula {name}"),
                            message: format!("{name}'s launch tunes no kernel (got {pin})"),
                        })
                    }
                });
                Ok(bench)
            }
            (Some(c), None) => Err(crate::Error::Invalid {
                op: format!("tegula {}", self.name),
                message: format!("{}'s host function takes no config (got {c})", self.name),
            }),
        }
    }

    /// The launches one benchmarked call makes at `shape` (in [`BenchSpec::dims`]), recorded
    /// instead of run, as a GPU of `sm_count` SMs would get them (the untuned configs, or
    /// `config` pinned): their Tile IR, and the PTX [`RecordedLaunch::compile`] makes of it,
    /// with no GPU. The launches that prepare the inputs (a forward before a backward) are
    /// left out.
    pub fn record(
        &self,
        shape: &[usize],
        dtype: DType,
        config: Option<&Config>,
        sm_count: usize,
    ) -> Result<Vec<RecordedLaunch>> {
        self.record_on(&Device::recording(sm_count), shape, dtype, config)
    }

    /// [`Entry::record`] on a recording device of the caller's ([`Device::recording_as`]
    /// stands for one GPU, whose tuned configs the tuned wrappers then launch).
    pub fn record_on(
        &self,
        dev: &Device,
        shape: &[usize],
        dtype: DType,
        config: Option<&Config>,
    ) -> Result<Vec<RecordedLaunch>> {
        let mut bench = self.prepare(dev, shape, dtype, config)?;
        dev.take_recorded();
        (bench.launch)()?;
        Ok(dev.take_recorded())
    }

    /// The shapes `tegula check` runs: the default; for a library kernel also the default with
    /// every dimension made odd (one less, at least 1: the ragged edges the masks must
    /// handle) and, with a `CAUSAL` dimension, the default with the flag flipped. A tutorial's
    /// default shape is already ragged where the tutorial allows it.
    pub fn check_shapes(&self) -> Vec<Vec<usize>> {
        let mut shapes = vec![self.default_shape.to_vec()];
        if self.kind != Kind::Library {
            return shapes;
        }
        let flag = self.dims.iter().position(|&d| d == "CAUSAL");
        let odd: Vec<usize> = self
            .default_shape
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                if Some(i) == flag || d % 2 == 1 {
                    d
                } else {
                    (d - 1).max(1)
                }
            })
            .collect();
        if odd != self.default_shape {
            shapes.push(odd);
        }
        if let Some(i) = flag {
            let mut flipped = self.default_shape.to_vec();
            flipped[i] = 1 - flipped[i].min(1);
            shapes.push(flipped);
        }
        shapes
    }

    /// `M=37 N=1031` for a shape in [`Entry::dims`].
    pub fn describe(&self, shape: &[usize]) -> String {
        describe(self.dims, shape)
    }
}

/// `M=37 N=1031`.
pub fn describe(dims: &[&str], shape: &[usize]) -> String {
    dims.iter()
        .zip(shape)
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The entry of `entries` that `name` names.
pub fn find<'a>(entries: &'a [Entry], name: &str) -> Option<&'a Entry> {
    entries.iter().find(|e| e.is_named(name))
}

/// Whether `dev` records launches instead of running them ([`Device::recording`]): a
/// benchmark's inputs there need no values, and one copy of them does.
pub fn is_recording(dev: &Device) -> bool {
    dev.cuda_runtime().is_none() && dev.sm_count().is_some()
}
