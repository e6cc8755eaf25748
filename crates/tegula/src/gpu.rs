//! The CUDA side of a [`crate::Device`]: specialization facts, PTX lowering, module load and
//! launch. Everything here runs only when a driver and a GPU are present.

use crate::compiler::{self, fact_bits};
use crate::error::{Error, Result};
use crate::launch::{KernelArg, LaunchConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tegula_cuda::{
    encode_tensor_map_2d, CudaRuntime, DeviceBuffer, KernelParam, LoadedKernel, TensorMapSpec,
    TmaDtype, TmaSwizzle,
};
use tegula_ir::{DType, Kernel};
use tegula_ptx::plan::descriptors::{LaunchValue, TensorMapAbi};
use tegula_ptx::{Compiled, ParamAbi, Target};

/// A kernel specialization compiled and loaded on one GPU.
pub struct GpuKernel {
    pub compiled: Arc<Compiled>,
    pub loaded: Arc<LoadedKernel>,
}

impl GpuKernel {
    /// The arguments packed as the PTX signature reads them (what a raw driver launch takes).
    pub fn pack(&self, args: &[KernelArg]) -> Result<Vec<KernelParam>> {
        let mut params = self
            .compiled
            .params
            .iter()
            .zip(args)
            .map(|(abi, arg)| kernel_param(abi, arg))
            .collect::<Result<Vec<_>>>()?;
        let maps = self
            .compiled
            .tensor_maps
            .iter()
            .map(|m| tensor_map(m, &params, args))
            .collect::<Result<Vec<_>>>()?;
        params.extend(maps);
        Ok(params)
    }
}

/// The tensor map `m` encoded from the launch's arguments (`params` packed from `args`).
fn tensor_map(m: &TensorMapAbi, params: &[KernelParam], args: &[KernelArg]) -> Result<KernelParam> {
    let invalid = |message: String| Error::Invalid {
        op: "launch".into(),
        message: format!(
            "tensor map {} (a tensor descriptor on TMA): {message}",
            m.name
        ),
    };
    let value = |v: LaunchValue| -> Result<i64> {
        let int = |i: usize| match args.get(i) {
            Some(KernelArg::Int { value, .. }) => Some(*value),
            _ => None,
        };
        v.eval(int).ok_or_else(|| {
            invalid(format!(
                "{v:?}: an argument is not an integer, or their product overflows"
            ))
        })
    };
    let Some(KernelParam::Ptr(base)) = params.get(m.base) else {
        return Err(invalid(format!("argument {} is not a tensor", m.base)));
    };
    // TMA coordinates are signed 32-bit: a larger extent could not be addressed.
    let dim = |v: LaunchValue, axis: usize| -> Result<u64> {
        let d = value(v)?;
        if !(1..=i32::MAX as i64).contains(&d) {
            return Err(invalid(format!(
                "shape[{axis}] is {d}; TMA moves tensors of 1 to 2^31 - 1 elements a side"
            )));
        }
        Ok(d as u64)
    };
    let elem = m.dtype.size_bytes() as u64;
    let stride = value(m.row_stride)?;
    let row_stride_bytes = u64::try_from(stride)
        .ok()
        .and_then(|s| s.checked_mul(elem))
        .ok_or_else(|| invalid(format!("strides[0] is {stride}")))?;
    let dtype = match m.dtype {
        DType::F16 => TmaDtype::F16,
        DType::BF16 => TmaDtype::BF16,
        DType::F32 => TmaDtype::F32,
        DType::F64 => TmaDtype::F64,
        DType::I32 => TmaDtype::I32,
        DType::U32 => TmaDtype::U32,
        DType::I64 => TmaDtype::I64,
        DType::U64 => TmaDtype::U64,
        // TMA moves bytes: fp8 blocks land in the slots the tensor cores read as they are.
        DType::F8E4M3 | DType::F8E5M2 => TmaDtype::U8,
        other => return Err(invalid(format!("{other} elements"))),
    };
    let swizzle = match m.swizzle {
        0 => TmaSwizzle::None,
        32 => TmaSwizzle::B32,
        64 => TmaSwizzle::B64,
        128 => TmaSwizzle::B128,
        other => return Err(invalid(format!("a swizzle of {other} bytes"))),
    };
    let spec = TensorMapSpec {
        dtype,
        base: *base,
        dims: [dim(m.dims[0], 1)?, dim(m.dims[1], 0)?],
        row_stride_bytes,
        box_dims: m.box_dims,
        swizzle,
    };
    let map = encode_tensor_map_2d(&spec).map_err(|e| invalid(e.to_string()))?;
    Ok(KernelParam::TensorMap(map))
}

/// The CUDA runtime of a device and its compiled specializations.
pub struct Gpu {
    pub runtime: CudaRuntime,
    pub target: Target,
    /// Specializations compiled and loaded, by [`specialization_key`].
    loaded: Mutex<HashMap<String, Arc<GpuKernel>>>,
    /// Specializations compiled but not loaded (planned: [`crate::Device::plans`]), by the
    /// same key: a later launch loads them without compiling again.
    compiled: Mutex<HashMap<String, Arc<Compiled>>>,
    /// 256 MB written before each timed sample (see [`Gpu::clear_l2`]).
    l2_scratch: std::sync::OnceLock<DeviceBuffer>,
}

impl Gpu {
    pub fn new(ordinal: usize) -> Result<Gpu> {
        Ok(Gpu::with_runtime(CudaRuntime::new(ordinal)?))
    }

    /// A GPU backend over an existing runtime (one on a lent stream, for example).
    pub fn with_runtime(runtime: CudaRuntime) -> Gpu {
        let settings = crate::env::Settings::global();
        let cubins = settings.cache_dir.as_ref().map(|d| d.cubin_dir.clone());
        runtime.set_disk_cache(cubins.map(tegula_cuda::DiskCache::new));
        runtime.set_launch_blocking(settings.launch_blocking);
        let sm = runtime.device_info().sm();
        // sm_90a unlocks Hopper's instructions; anything newer runs sm_90 code as well.
        let target = Target::for_compute_capability(sm / 10, sm % 10);
        Gpu {
            runtime,
            target,
            loaded: Mutex::new(HashMap::new()),
            compiled: Mutex::new(HashMap::new()),
            l2_scratch: std::sync::OnceLock::new(),
        }
    }

    /// Overwrites a 256 MB buffer, as `triton.testing.do_bench` does before each sample: the
    /// L2 holds none of the next kernel's inputs, and the launches that follow queue behind
    /// this work, so a timed sample holds GPU time only, not the host's launch latency.
    pub fn clear_l2(&self) -> Result<()> {
        let buffer = match self.l2_scratch.get() {
            Some(b) => b,
            None => {
                let b = self.runtime.alloc_uninit(256 << 20)?;
                self.l2_scratch.get_or_init(|| b)
            }
        };
        self.runtime.memset_d8(buffer, 0)?;
        Ok(())
    }

    /// The compiled PTX of a traced specialization, facts and config (its [`Compiled::report`]
    /// is the plan): the loaded kernel's, else one compiled before, else compiled now and kept
    /// for the launch that loads it.
    pub fn compile(
        &self,
        name: &str,
        key: &str,
        traced: &Kernel,
        args: &[KernelArg],
        config: LaunchConfig,
    ) -> Result<Arc<Compiled>> {
        let key = specialization_key(name, key, args, config);
        if let Some(k) = lock(&self.loaded).get(&key) {
            return Ok(k.compiled.clone());
        }
        self.compile_keyed(&key, traced, args, config)
    }

    fn compile_keyed(
        &self,
        key: &str,
        traced: &Kernel,
        args: &[KernelArg],
        config: LaunchConfig,
    ) -> Result<Arc<Compiled>> {
        if let Some(c) = lock(&self.compiled).get(key) {
            return Ok(c.clone());
        }
        // Not under the lock: candidates compile on several threads at once (the autotuner's
        // `prepare`); two threads compiling one key both succeed and keep the same PTX.
        let compiled = Arc::new(compiler::compile_launch(
            traced,
            args,
            config,
            &self.target,
        )?);
        lock(&self.compiled).insert(key.to_string(), compiled.clone());
        Ok(compiled)
    }

    /// The compiled kernel for a traced specialization, facts and config; lowered and loaded on
    /// first use (from any thread: the driver's module load binds the context to it).
    pub fn kernel(
        &self,
        name: &str,
        key: &str,
        traced: &Kernel,
        args: &[KernelArg],
        config: LaunchConfig,
    ) -> Result<Arc<GpuKernel>> {
        let key = specialization_key(name, key, args, config);
        if let Some(k) = lock(&self.loaded).get(&key) {
            return Ok(k.clone());
        }
        let compiled = self.compile_keyed(&key, traced, args, config)?;
        self.load_keyed(key, compiled)
    }

    /// The kernel of a specialization key that needs no trace: one loaded, or one compiled
    /// before (planned, prepared, or installed from a bundle: [`Gpu::install`]), loaded now.
    /// `None` when the specialization has never been compiled on this GPU.
    pub(crate) fn cached(&self, key: &str) -> Result<Option<Arc<GpuKernel>>> {
        if let Some(k) = lock(&self.loaded).get(key) {
            return Ok(Some(k.clone()));
        }
        let Some(compiled) = lock(&self.compiled).get(key).cloned() else {
            return Ok(None);
        };
        self.load_keyed(key.to_string(), compiled).map(Some)
    }

    /// Keeps compiled PTX under a specialization key, for a launch to load without tracing;
    /// a specialization already loaded or compiled keeps what it has. Whether it was new.
    pub(crate) fn install(&self, key: &str, compiled: Arc<Compiled>) -> bool {
        if lock(&self.loaded).contains_key(key) {
            return false;
        }
        let mut cache = lock(&self.compiled);
        if cache.contains_key(key) {
            return false;
        }
        cache.insert(key.to_string(), compiled);
        true
    }

    /// Loads compiled PTX as the kernel of `key`.
    fn load_keyed(&self, key: String, compiled: Arc<Compiled>) -> Result<Arc<GpuKernel>> {
        // Said once per specialization (loaded kernels are cached by this key).
        for warning in compiled.report.stage_warnings() {
            eprintln!("tegula: warning: {warning}");
        }
        let loaded = self.load_module(&compiled)?;
        let (compiled, loaded) = self.occupancy_step(compiled, loaded)?;
        let k = Arc::new(GpuKernel { compiled, loaded });
        lock(&self.compiled).remove(&key);
        let mut cache = lock(&self.loaded);
        // Another thread may have loaded it meanwhile: keep the first, so every caller
        // launches one module.
        Ok(cache.entry(key).or_insert(k).clone())
    }

    fn load_module(&self, compiled: &Compiled) -> Result<Arc<LoadedKernel>> {
        let source_map = |line: usize| source_line_of(&compiled.ptx, line);
        Ok(self
            .runtime
            .load(&compiled.ptx, &compiled.entry, &source_map)?)
    }

    /// Rule *occupancy step* ([`Target::occupancy_step`]), applied where only the driver's
    /// JIT knows a kernel's registers: a kernel without dots that declares no blocks a SM and
    /// whose registers hold its SM under half its threads is loaded again declaring one
    /// block more, and that load is kept when ptxas fitted it without local memory (spills);
    /// else the first. Off with `TEGULA_OCCUPANCY_STEP=0`.
    fn occupancy_step(
        &self,
        compiled: Arc<Compiled>,
        loaded: Arc<LoadedKernel>,
    ) -> Result<(Arc<Compiled>, Arc<LoadedKernel>)> {
        let r = loaded.resources();
        let step = (crate::env::Settings::global().occupancy_step
            && compiled.report.dots.is_empty()
            && r.local_bytes_per_thread == 0)
            .then(|| {
                self.target.occupancy_step(
                    r.registers_per_thread,
                    compiled.num_threads,
                    compiled.shared_bytes,
                )
            })
            .flatten()
            .and_then(|blocks| compiled.declaring_min_blocks_per_sm(blocks));
        let Some(stepped) = step else {
            return Ok((compiled, loaded));
        };
        let stepped_loaded = self.load_module(&stepped)?;
        if stepped_loaded.resources().local_bytes_per_thread == 0 {
            Ok((Arc::new(stepped), stepped_loaded))
        } else {
            Ok((compiled, loaded))
        }
    }

    /// Enqueues a launch on the device's stream.
    pub fn launch(&self, k: &GpuKernel, grid: [u32; 3], args: &[KernelArg]) -> Result<()> {
        let params = k.pack(args)?;
        self.runtime.launch(
            &k.loaded,
            grid,
            [k.compiled.num_threads, 1, 1],
            k.compiled.shared_bytes,
            &params,
        )?;
        Ok(())
    }
}

/// The cache key of a specialization: the launch's `name|key`, the argument facts and the
/// config. Computed from the launch alone, without tracing: a GPU launch looks its kernel up
/// by it first ([`Gpu::cached`]), and an ahead-of-time bundle's entries carry it
/// ([`crate::aot::Entry::key`]).
pub(crate) fn specialization_key(
    name: &str,
    key: &str,
    args: &[KernelArg],
    config: LaunchConfig,
) -> String {
    format!(
        "{name}|{key}|{}|w{}s{}{}{}{}",
        fact_bits(args),
        config.num_warps,
        config.num_stages,
        config.mma,
        if config.fp_fusion { "" } else { "|nofusion" },
        if config.tma { "|tma" } else { "" }
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave its map half-updated.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The user's source line a PTX line came from, from the `// file.rs:line:col` comments the
/// lowering writes before each op's instructions.
fn source_line_of(ptx: &str, line: usize) -> Option<String> {
    let text = ptx.lines().nth(line.checked_sub(1)?)?;
    let comment = text.split("//").nth(1)?.trim();
    comment.contains(".rs:").then(|| comment.to_string())
}

/// Whether `args` fit the compiled signature in number, kind and dtype (what
/// `check_arguments` checks against the traced parameters): a launch that finds its kernel
/// without tracing checks its arguments so.
pub(crate) fn arguments_fit(params: &[ParamAbi], args: &[KernelArg]) -> bool {
    params.len() == args.len()
        && params.iter().zip(args).all(|(abi, arg)| match (abi, arg) {
            (ParamAbi::Pointer { pointee, .. }, KernelArg::Tensor { dtype, .. }) => {
                pointee == dtype
            }
            (ParamAbi::Scalar { dtype: p, .. }, KernelArg::Int { dtype, .. })
            | (ParamAbi::Scalar { dtype: p, .. }, KernelArg::Float { dtype, .. }) => p == dtype,
            _ => false,
        })
}

/// Packs one argument as the PTX signature reads it.
fn kernel_param(abi: &ParamAbi, arg: &KernelArg) -> Result<KernelParam> {
    let mismatch = || Error::Invalid {
        op: "launch".into(),
        message: format!("argument {} does not fit parameter {abi:?}", arg.describe()),
    };
    Ok(match (abi, arg) {
        (
            ParamAbi::Pointer { .. },
            KernelArg::Tensor {
                storage,
                offset,
                dtype,
                ..
            },
        ) => {
            let base = storage.device_address().ok_or_else(mismatch)?;
            KernelParam::Ptr(base + (offset * dtype.size_bytes()) as u64)
        }
        (ParamAbi::Scalar { dtype, .. }, KernelArg::Int { value, .. }) => match dtype {
            DType::I1 | DType::U8 => KernelParam::U8(*value as u8),
            DType::I8 => KernelParam::I8(*value as i8),
            DType::I16 => KernelParam::I16(*value as i16),
            DType::U16 => KernelParam::U16(*value as u16),
            DType::I32 => KernelParam::I32(*value as i32),
            DType::U32 => KernelParam::U32(*value as u32),
            DType::I64 => KernelParam::I64(*value),
            DType::U64 => KernelParam::U64(*value as u64),
            _ => return Err(mismatch()),
        },
        (ParamAbi::Scalar { dtype, .. }, KernelArg::Float { value, .. }) => match dtype {
            DType::F32 => KernelParam::F32(*value as f32),
            DType::F64 => KernelParam::F64(*value),
            DType::F16 => KernelParam::U16(half::f16::from_f64(*value).to_bits()),
            DType::BF16 => KernelParam::U16(half::bf16::from_f64(*value).to_bits()),
            DType::F8E4M3 => KernelParam::U8(tegula_ir::fp8::f8e4m3::from_f64(*value).to_bits()),
            DType::F8E5M2 => KernelParam::U8(tegula_ir::fp8::f8e5m2::from_f64(*value).to_bits()),
            _ => return Err(mismatch()),
        },
        _ => return Err(mismatch()),
    })
}

/// Device memory of one tensor.
pub type GpuBuffer = Arc<DeviceBuffer>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::TensorArg;

    /// `Gpu::kernel`, `Gpu::compile`, the untraced lookup of `Device::launch` and a bundle's
    /// entries all key by [`specialization_key`] of the launch's name, constexpr key, arguments
    /// and config, none of which needs the traced kernel: the key a launch computes before
    /// tracing is the one its compiled kernel is stored under.
    #[test]
    fn the_key_a_launch_computes_without_tracing_is_the_kernels() {
        let dev = crate::Device::recording(132);
        let x = dev.zeros::<f32>([4096]).unwrap();
        let args = vec![
            (&x).kernel_arg(),
            KernelArg::Int {
                dtype: DType::I32,
                value: 4096,
            },
            KernelArg::Int {
                dtype: DType::I32,
                value: 1,
            },
        ];
        let config = LaunchConfig::new(8, 2);
        let key = specialization_key("scale", "block=1024", &args, config);
        assert_eq!(fact_bits(&args), "440|001");
        assert_eq!(
            key,
            format!(
                "scale|block=1024|{}|w8s2{}",
                fact_bits(&args),
                tegula_ptx::MmaChoice::Auto
            )
        );
        // What a recording device keeps of the same launch keys the same.
        let recorded = crate::RecordedLaunch {
            name: "scale",
            key: "block=1024".into(),
            kernel: Arc::new(Kernel::new("scale")),
            args: args.clone(),
            grid: crate::Grid([4, 1, 1]),
            config,
            trace_ms: 0.0,
        };
        assert_eq!(recorded.specialization_key(), key);
    }

    #[test]
    fn arguments_fit_the_compiled_signature_in_number_kind_and_dtype() {
        let dev = crate::Device::recording(132);
        let x = dev.zeros::<f32>([16]).unwrap();
        let params = vec![
            ParamAbi::Pointer {
                name: "p0_x".into(),
                pointee: DType::F32,
            },
            ParamAbi::Scalar {
                name: "p1_n".into(),
                dtype: DType::I32,
                bytes: 4,
            },
        ];
        let int = |dtype| KernelArg::Int { dtype, value: 3 };
        assert!(arguments_fit(
            &params,
            &[(&x).kernel_arg(), int(DType::I32)]
        ));
        assert!(!arguments_fit(&params, &[(&x).kernel_arg()]));
        assert!(!arguments_fit(
            &params,
            &[(&x).kernel_arg(), int(DType::I64)]
        ));
        assert!(!arguments_fit(&params, &[int(DType::I32), int(DType::I32)]));
        let float = KernelArg::Float {
            dtype: DType::F32,
            value: 1.0,
        };
        assert!(!arguments_fit(&params, &[(&x).kernel_arg(), float]));
    }
}
