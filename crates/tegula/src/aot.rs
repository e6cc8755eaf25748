//! Ahead-of-time bundles: the PTX of a program's specializations, compiled before it runs
//! (in a build script, or by a program run once), so that a GPU launch of a bundled
//! specialization loads its PTX without tracing, planning or emitting.
//!
//! [`Bundle::record`] runs the calls a program makes on a recording device
//! ([`Device::recording`]) and compiles each recorded launch for a target; the bundle is JSON
//! ([`Bundle::to_json`], [`Bundle::write`]). At run time [`Bundle::from_json`] (or
//! [`Bundle::read`]) and [`Device::install_bundle`] put its entries for the GPU's target into
//! the GPU's cache of compiled PTX; a launch finds its entry by its specialization key and
//! anything not bundled is traced and compiled just in time, as without a bundle.
//!
//! An entry is found only by a launch with the same key: the kernel's name and constexpr key,
//! the argument facts (each pointer's and integer's power-of-two divisor up to 16, which
//! integers are 1: [`crate::compiler::fact_bits`]) and the config, on a GPU of the entry's target,
//! with the compiler that made the bundle ([`COMPILER`]). A recording device's tensors count
//! as fresh GPU allocations, which the driver aligns to 256 bytes, so an entry recorded with
//! whole tensors matches launches on whole GPU tensors (and on views whose first element is
//! 16-byte aligned), not a view that starts off that alignment: such a launch compiles its own
//! specialization.
//!
//! A plain recording device ([`Bundle::record`]) runs the interpreter's untuned configs, so an
//! autotuned kernel's bundled entry is the one of its default config. [`Bundle::record_as`]
//! records on a device standing for one GPU ([`crate::StandIn`]): the tuned wrappers launch
//! the configs the tuner's cache holds for that GPU (tuned there, exported with `tegula tune
//! --export` and imported where the bundle is made), and the bundle carries those choices
//! ([`Bundle::tuned`]), so that at run time the tuner answers from them and the launch finds
//! its entry: no trace, no tuning. [`Bundle::assemble`] adds each entry's cubin, made by
//! ptxas, which the GPU loads instead of running the driver's JIT on the PTX.

use crate::autotune::{TunedChoice, COMPILER};
use crate::compiler::{Compiled, Report, Target};
use crate::device::Device;
use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tegula_ir::DType;
use tegula_ptx::plan::descriptors::{LaunchValue, TensorMapAbi};
use tegula_ptx::ParamAbi;
use thiserror::Error;

/// The version of the bundle format [`Bundle::to_json`] writes and [`Bundle::from_json`] reads.
pub const FORMAT: u32 = 1;

/// A bundle that cannot be read, written or installed (names the file or field and what is
/// wrong).
#[derive(Debug, Error)]
pub enum BundleError {
    /// The bundle was made by another compiler build: its PTX and keys may differ from what
    /// this one compiles.
    #[error("the bundle was compiled by tegula compiler `{found}`, this is `{expected}`: rebuild the bundle")]
    Compiler { found: String, expected: String },
    /// The bundle has another format version.
    #[error("the bundle has format version {found}, this tegula reads version {expected}")]
    Format { found: u64, expected: u32 },
    /// The text is not a bundle's JSON.
    #[error("{what} is not a tegula bundle: {message}")]
    Parse { what: String, message: String },
    /// An entry's parameter names a dtype this tegula does not know.
    #[error("bundle entry `{key}`: parameter `{param}` has unknown dtype `{dtype}`")]
    Param {
        key: String,
        param: String,
        dtype: String,
    },
    /// ptxas failed on an entry's PTX ([`Bundle::assemble`]).
    #[error("bundle entry `{key}`: {message}")]
    Assemble { key: String, message: String },
    /// An entry's cubin is not base64.
    #[error("bundle entry `{key}`: its cubin is not base64: {message}")]
    Cubin { key: String, message: String },
    /// The bundle could not be written as JSON.
    #[error("cannot write the bundle as JSON: {0}")]
    Serialize(String),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A set of compiled specializations, each for one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    /// [`FORMAT`] when written.
    pub format: u32,
    /// [`COMPILER`] of the build that compiled the entries.
    pub compiler: String,
    /// One per specialization and target, in the order first recorded.
    pub entries: Vec<Entry>,
    /// The tuned configs the recording launched ([`Bundle::record_as`]), which
    /// [`Device::install_bundle`] makes the tuner's answers on a GPU of their name.
    #[serde(default)]
    pub tuned: Vec<TunedChoice>,
}

/// A cubin ptxas assembled from an entry's PTX ([`Bundle::assemble`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cubin {
    /// ptxas's `--gpu-name`, e.g. `sm_90a`.
    pub arch: String,
    /// The image in base64 (standard alphabet, padded).
    pub base64: String,
    /// ptxas's `-v` output (registers and spills, read as a JIT log is).
    pub log: String,
}

/// What [`Device::install_bundle`] installed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// Entries for this GPU's target put in its cache of compiled PTX (a specialization it
    /// has compiled already keeps its own).
    pub entries: usize,
    /// Of those, the ones with a cubin, which the first launch loads instead of JIT-compiling.
    pub cubins: usize,
    /// Tuned configs of this GPU's name made the tuner's answers.
    pub tuned: usize,
}

/// One compiled specialization: its key, its target and what a launch needs of its
/// compilation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The specialization key a GPU launch computes
    /// ([`crate::RecordedLaunch::specialization_key`]).
    pub key: String,
    /// The target's `sm` ([`Target::sm`]): the entry installs on GPUs of that target only.
    pub sm: u32,
    pub ptx: String,
    /// The `.entry` name in the PTX.
    pub entry: String,
    /// Dynamic shared memory the launch asks for.
    pub shared_bytes: u32,
    /// Threads per block.
    pub num_threads: u32,
    /// The PTX signature, in parameter order.
    pub params: Vec<Param>,
    /// The tensor maps the launch encodes and passes after `params`.
    #[serde(default)]
    pub tensor_maps: Vec<TensorMapEntry>,
    /// The compile report's summary (its per-loop and per-dot parts are not bundled).
    pub report: ReportSummary,
    /// The PTX assembled for the target by ptxas, when the bundle was assembled
    /// ([`Bundle::assemble`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cubin: Option<Cubin>,
}

/// One parameter of a bundled signature.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    /// A pointer to elements of `dtype`, else a scalar of `dtype`.
    pub pointer: bool,
    /// [`DType::name`].
    pub dtype: String,
    /// Bytes of the `.param` (8 for a pointer).
    pub bytes: u32,
}

/// A bundled [`TensorMapAbi`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorMapEntry {
    pub name: String,
    /// [`DType::name`] of the elements.
    pub dtype: String,
    pub base: usize,
    pub dims: [LaunchValueEntry; 2],
    pub row_stride: LaunchValueEntry,
    pub box_dims: [u32; 2],
    /// [`TensorMapAbi::swizzle`]: the span in bytes, 0 for none (bundles without it have none).
    #[serde(default)]
    pub swizzle: u32,
}

/// A bundled [`LaunchValue`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchValueEntry {
    Param(usize),
    Const(i64),
    /// [`LaunchValue::Product`]: the parameters multiplied, and the constant factor.
    Product {
        params: Vec<usize>,
        scale: i64,
    },
}

impl From<LaunchValue> for LaunchValueEntry {
    fn from(v: LaunchValue) -> Self {
        match v {
            LaunchValue::Param(i) => LaunchValueEntry::Param(i),
            LaunchValue::Const(c) => LaunchValueEntry::Const(c),
            LaunchValue::Product {
                params,
                count,
                scale,
            } => LaunchValueEntry::Product {
                params: params[..count].to_vec(),
                scale,
            },
        }
    }
}

impl LaunchValueEntry {
    /// The value it bundles; `None` for a product of more parameters than a
    /// [`LaunchValue::Product`] holds.
    fn launch_value(&self) -> Option<LaunchValue> {
        match self {
            LaunchValueEntry::Param(i) => Some(LaunchValue::Param(*i)),
            LaunchValueEntry::Const(c) => Some(LaunchValue::Const(*c)),
            LaunchValueEntry::Product { params, scale } => params
                .iter()
                .try_fold(LaunchValue::Const(*scale), |acc, &i| {
                    acc.times(LaunchValue::Param(i))
                }),
        }
    }
}

/// What [`Report`] says of the whole kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportSummary {
    pub kernel: String,
    pub num_warps: u32,
    pub stages_asked: u32,
    pub stages_compiled: u32,
    pub stage_cut: Option<String>,
    pub blocks_per_sm: u32,
    pub min_blocks_per_sm: Option<u32>,
    pub registers_estimate: u32,
}

impl Entry {
    /// The entry of a compiled specialization.
    pub fn new(key: String, compiled: &Compiled) -> Entry {
        let r = &compiled.report;
        Entry {
            key,
            sm: r.target.sm,
            ptx: compiled.ptx.clone(),
            entry: compiled.entry.clone(),
            shared_bytes: compiled.shared_bytes,
            num_threads: compiled.num_threads,
            params: compiled
                .params
                .iter()
                .map(|p| match p {
                    ParamAbi::Pointer { name, pointee } => Param {
                        name: name.clone(),
                        pointer: true,
                        dtype: pointee.name().to_string(),
                        bytes: 8,
                    },
                    ParamAbi::Scalar { name, dtype, bytes } => Param {
                        name: name.clone(),
                        pointer: false,
                        dtype: dtype.name().to_string(),
                        bytes: *bytes,
                    },
                })
                .collect(),
            tensor_maps: compiled
                .tensor_maps
                .iter()
                .map(|m| TensorMapEntry {
                    name: m.name.clone(),
                    dtype: m.dtype.name().to_string(),
                    base: m.base,
                    dims: m.dims.map(Into::into),
                    row_stride: m.row_stride.into(),
                    box_dims: m.box_dims,
                    swizzle: m.swizzle,
                })
                .collect(),
            report: ReportSummary {
                kernel: r.kernel.clone(),
                num_warps: r.num_warps,
                stages_asked: r.stages_asked,
                stages_compiled: r.stages_compiled,
                stage_cut: r.stage_cut.clone(),
                blocks_per_sm: r.blocks_per_sm,
                min_blocks_per_sm: r.min_blocks_per_sm,
                registers_estimate: r.registers_estimate,
            },
            cubin: None,
        }
    }

    /// The bytes of the entry's cubin, if it has one.
    pub fn cubin_bytes(&self) -> std::result::Result<Option<Vec<u8>>, BundleError> {
        use base64::Engine;
        let Some(cubin) = &self.cubin else {
            return Ok(None);
        };
        base64::engine::general_purpose::STANDARD
            .decode(&cubin.base64)
            .map(Some)
            .map_err(|e| BundleError::Cubin {
                key: self.key.clone(),
                message: e.to_string(),
            })
    }

    /// The compiled kernel a launch loads: the bundled PTX and signature, and a report of the
    /// bundled summary (no loops or dots).
    pub fn to_compiled(&self) -> std::result::Result<Compiled, BundleError> {
        let params = self
            .params
            .iter()
            .map(|p| {
                let dtype = DType::from_name(&p.dtype).ok_or_else(|| BundleError::Param {
                    key: self.key.clone(),
                    param: p.name.clone(),
                    dtype: p.dtype.clone(),
                })?;
                Ok(if p.pointer {
                    ParamAbi::Pointer {
                        name: p.name.clone(),
                        pointee: dtype,
                    }
                } else {
                    ParamAbi::Scalar {
                        name: p.name.clone(),
                        dtype,
                        bytes: p.bytes,
                    }
                })
            })
            .collect::<std::result::Result<Vec<_>, BundleError>>()?;
        let tensor_maps = self
            .tensor_maps
            .iter()
            .map(|m| {
                let dtype = DType::from_name(&m.dtype).ok_or_else(|| BundleError::Param {
                    key: self.key.clone(),
                    param: m.name.clone(),
                    dtype: m.dtype.clone(),
                })?;
                let value = |v: &LaunchValueEntry| {
                    v.launch_value().ok_or_else(|| BundleError::Parse {
                        what: format!("entry `{}`, tensor map `{}`", self.key, m.name),
                        message: format!("{v:?} multiplies more parameters than a launch does"),
                    })
                };
                Ok(TensorMapAbi {
                    name: m.name.clone(),
                    dtype,
                    base: m.base,
                    dims: [value(&m.dims[0])?, value(&m.dims[1])?],
                    row_stride: value(&m.row_stride)?,
                    box_dims: m.box_dims,
                    swizzle: m.swizzle,
                })
            })
            .collect::<std::result::Result<Vec<_>, BundleError>>()?;
        let s = &self.report;
        Ok(Compiled {
            ptx: self.ptx.clone(),
            entry: self.entry.clone(),
            shared_bytes: self.shared_bytes,
            num_threads: self.num_threads,
            params,
            tensor_maps,
            report: Report {
                kernel: s.kernel.clone(),
                target: Target { sm: self.sm },
                num_warps: s.num_warps,
                stages_asked: s.stages_asked,
                stages_compiled: s.stages_compiled,
                stage_cut: s.stage_cut.clone(),
                loops: Vec::new(),
                dots: Vec::new(),
                shared_bytes: self.shared_bytes,
                blocks_per_sm: s.blocks_per_sm,
                min_blocks_per_sm: s.min_blocks_per_sm,
                registers_estimate: s.registers_estimate,
                tensor_maps: self.tensor_maps.len(),
                descriptors_on_tma: Vec::new(),
                descriptors_expanded: Vec::new(),
            },
        })
    }
}

impl Default for Bundle {
    fn default() -> Self {
        Bundle::new()
    }
}

impl Bundle {
    /// An empty bundle of this compiler.
    pub fn new() -> Bundle {
        Bundle {
            format: FORMAT,
            compiler: COMPILER.to_string(),
            entries: Vec::new(),
            tuned: Vec::new(),
        }
    }

    /// Runs `work` on a recording device for a GPU of 132 SMs (an H100 or H200) and compiles
    /// every launch it makes for `target`: one entry per specialization.
    pub fn record(target: &Target, work: impl FnOnce(&Device) -> Result<()>) -> Result<Bundle> {
        let mut bundle = Bundle::new();
        bundle.add_recorded(&Device::recording(132), target, work)?;
        Ok(bundle)
    }

    /// Runs `work` on a recording device standing for `gpu` ([`Device::recording_as`]) and
    /// compiles every launch it makes for the GPU's target. The tuned wrappers launch the
    /// configs the process's tuner holds for that GPU ([`crate::Autotuner::global`]: its cache
    /// file, or what [`crate::Autotuner::import_json`] gave it), and the bundle keeps those
    /// choices ([`Bundle::tuned`]); where the tuner has none, the default config is recorded.
    pub fn record_as(
        gpu: crate::StandIn,
        work: impl FnOnce(&Device) -> Result<()>,
    ) -> Result<Bundle> {
        let mut bundle = Bundle::new();
        let target = gpu.target;
        bundle.add_recorded(&Device::recording_as(gpu), &target, work)?;
        Ok(bundle)
    }

    /// Runs `work` on `dev` (a recording device: [`Device::recording`]; on another device the
    /// launches run and nothing is recorded) and adds an entry for `target` of every
    /// specialization it launches that the bundle does not hold yet. The entries added.
    pub fn add_recorded(
        &mut self,
        dev: &Device,
        target: &Target,
        work: impl FnOnce(&Device) -> Result<()>,
    ) -> Result<usize> {
        work(dev)?;
        self.add_tuned(crate::Autotuner::global().take_stand_in_hits());
        self.add_launches(&dev.take_recorded(), target)
    }

    /// Adds tuned choices the bundle does not hold yet (a choice for the same request and
    /// GPU replaces the older one).
    pub fn add_tuned(&mut self, choices: impl IntoIterator<Item = TunedChoice>) {
        for choice in choices {
            self.tuned
                .retain(|t| (&t.request, &t.device) != (&choice.request, &choice.device));
            self.tuned.push(choice);
        }
    }

    /// Assembles every entry that has no cubin yet with `ptxas` (`tegula_ptx::ptxas::find`
    /// finds one) for its target; the entries assembled. A ptxas failure names the entry.
    pub fn assemble(&mut self, ptxas: &Path) -> Result<usize> {
        use base64::Engine;
        // One directory per call: ptxas writes fixed file names into it.
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tegula-aot-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| BundleError::Write {
            path: dir.clone(),
            source,
        })?;
        let mut assembled = 0;
        let result = (|| -> std::result::Result<(), BundleError> {
            for entry in self.entries.iter_mut().filter(|e| e.cubin.is_none()) {
                let failed = |message: String| BundleError::Assemble {
                    key: entry.key.clone(),
                    message,
                };
                let done = tegula_ptx::ptxas::assemble(ptxas, &entry.ptx, entry.sm, &dir, "entry")
                    .map_err(failed)?;
                let path = dir.join("entry.cubin");
                let image = std::fs::read(&path)
                    .map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
                entry.cubin = Some(Cubin {
                    arch: tegula_ptx::ptxas::gpu_name(entry.sm),
                    base64: base64::engine::general_purpose::STANDARD.encode(image),
                    log: done.log,
                });
                assembled += 1;
            }
            Ok(())
        })();
        let _ = std::fs::remove_dir_all(&dir);
        result?;
        Ok(assembled)
    }

    /// Adds an entry for `target` of every recorded launch's specialization that the bundle
    /// does not hold yet ([`Device::take_recorded`]). The entries added.
    pub fn add_launches(
        &mut self,
        launches: &[crate::RecordedLaunch],
        target: &Target,
    ) -> Result<usize> {
        let before = self.entries.len();
        for launch in launches {
            let key = launch.specialization_key();
            if self.get(&key, target.sm).is_some() {
                continue;
            }
            let compiled = launch.compile(target)?;
            self.entries.push(Entry::new(key, &compiled));
        }
        Ok(self.entries.len() - before)
    }

    /// The entry of a specialization key for target `sm`.
    pub fn get(&self, key: &str, sm: u32) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key && e.sm == sm)
    }

    /// Refuses a bundle of another format version or compiler.
    pub fn check_version(&self) -> std::result::Result<(), BundleError> {
        check(u64::from(self.format), &self.compiler)
    }

    /// The bundle as JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|e| BundleError::Serialize(e.to_string()).into())
    }

    /// A bundle from [`Bundle::to_json`]'s text. Text of another format version or compiler is
    /// refused naming both, before its entries are read.
    pub fn from_json(text: &str) -> Result<Bundle> {
        Ok(parse(text, "the text")?)
    }

    /// Writes [`Bundle::to_json`] to `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = self.to_json()?;
        std::fs::write(path, text).map_err(|source| BundleError::Write {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(())
    }

    /// The bundle written at `path`.
    pub fn read(path: &Path) -> Result<Bundle> {
        let text = std::fs::read_to_string(path).map_err(|source| BundleError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(parse(&text, &path.display().to_string())?)
    }
}

fn check(format: u64, compiler: &str) -> std::result::Result<(), BundleError> {
    if format != u64::from(FORMAT) {
        return Err(BundleError::Format {
            found: format,
            expected: FORMAT,
        });
    }
    if compiler != COMPILER {
        return Err(BundleError::Compiler {
            found: compiler.to_string(),
            expected: COMPILER.to_string(),
        });
    }
    Ok(())
}

fn parse(text: &str, what: &str) -> std::result::Result<Bundle, BundleError> {
    let parse_error = |message: String| BundleError::Parse {
        what: what.to_string(),
        message,
    };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| parse_error(e.to_string()))?;
    let format = value
        .get("format")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| parse_error("no format version".into()))?;
    let compiler = value
        .get("compiler")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| parse_error("no compiler id".into()))?;
    check(format, compiler)?;
    let bundle: Bundle = serde_json::from_value(value).map_err(|e| parse_error(e.to_string()))?;
    for entry in &bundle.entries {
        entry.to_compiled()?;
        entry.cubin_bytes()?;
    }
    Ok(bundle)
}
