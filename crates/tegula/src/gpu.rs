//! The CUDA side of a [`crate::Device`]: specialization facts, PTX lowering, module load and
//! launch. Everything here runs only when a driver and a GPU are present.

use crate::compiler::{self, fact_bits};
use crate::error::{Error, Result};
use crate::launch::{KernelArg, LaunchConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tegula_cuda::{CudaRuntime, DeviceBuffer, KernelParam, LoadedKernel};
use tegula_ir::{DType, Kernel};
use tegula_ptx::{Compiled, ParamAbi, Target};

/// A kernel specialization compiled and loaded on one GPU.
pub struct GpuKernel {
    pub compiled: Compiled,
    pub loaded: Arc<LoadedKernel>,
}

impl GpuKernel {
    /// The arguments packed as the PTX signature reads them (what a raw driver launch takes).
    pub fn pack(&self, args: &[KernelArg]) -> Result<Vec<KernelParam>> {
        self.compiled
            .params
            .iter()
            .zip(args)
            .map(|(abi, arg)| kernel_param(abi, arg))
            .collect()
    }
}

/// The CUDA runtime of a device and its compiled specializations.
pub struct Gpu {
    pub runtime: CudaRuntime,
    pub target: Target,
    compiled: Mutex<HashMap<String, Arc<GpuKernel>>>,
    /// 256 MB written before each timed sample (see [`Gpu::clear_l2`]).
    l2_scratch: std::sync::OnceLock<DeviceBuffer>,
}

impl Gpu {
    pub fn new(ordinal: usize) -> Result<Gpu> {
        Ok(Gpu::with_runtime(CudaRuntime::new(ordinal)?))
    }

    /// A GPU backend over an existing runtime (one on a lent stream, for example).
    pub fn with_runtime(runtime: CudaRuntime) -> Gpu {
        let sm = runtime.device_info().sm();
        // sm_90a unlocks Hopper's instructions; anything newer runs sm_90 code as well.
        let target = Target::for_compute_capability(sm / 10, sm % 10);
        Gpu {
            runtime,
            target,
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

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<GpuKernel>>> {
        self.compiled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The compiled kernel for a traced specialization, facts and config; lowered and loaded on
    /// first use.
    pub fn kernel(
        &self,
        key: &str,
        traced: &Kernel,
        args: &[KernelArg],
        config: LaunchConfig,
    ) -> Result<Arc<GpuKernel>> {
        let key = format!(
            "{key}|{}|w{}s{}{}",
            fact_bits(args),
            config.num_warps,
            config.num_stages,
            config.mma
        );
        if let Some(k) = self.cache().get(&key) {
            return Ok(k.clone());
        }
        let compiled = compiler::compile_launch(traced, args, config, &self.target)?;
        // Said once per specialization (compiled kernels are cached by this key).
        for warning in compiled.report.stage_warnings() {
            eprintln!("tegula: warning: {warning}");
        }
        let source_map = |line: usize| source_line_of(&compiled.ptx, line);
        let loaded = self
            .runtime
            .load(&compiled.ptx, &compiled.entry, &source_map)?;
        let k = Arc::new(GpuKernel { compiled, loaded });
        self.cache().insert(key, k.clone());
        Ok(k)
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

/// The user's source line a PTX line came from, from the `// file.rs:line:col` comments the
/// lowering writes before each op's instructions.
fn source_line_of(ptx: &str, line: usize) -> Option<String> {
    let text = ptx.lines().nth(line.checked_sub(1)?)?;
    let comment = text.split("//").nth(1)?.trim();
    comment.contains(".rs:").then(|| comment.to_string())
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
            _ => return Err(mismatch()),
        },
        _ => return Err(mismatch()),
    })
}

/// Device memory of one tensor.
pub type GpuBuffer = Arc<DeviceBuffer>;
