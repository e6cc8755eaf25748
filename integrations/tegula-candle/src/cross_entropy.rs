//! Fused softmax cross-entropy: `loss[r] = logsumexp(logits[r, :]) - logits[r, target[r]]`, one
//! program per row, in one pass over the logits.
//!
//! candle computes the same with its own ops in about eight kernels (max, subtract, exp, sum,
//! log, subtract, gather, negate), writing `[N, V]` intermediates several times; for a
//! language model's vocabulary (V in the tens of thousands) that traffic is most of the time.
//! Here each row is read once with an online maximum and sum kept per lane (the library
//! softmax's statistics), then the lanes are combined and the target's logit read.

use crate::to_candle;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape};
use tegula::ir::Element;
use tegula::prelude::*;

/// The kernel: per-lane online logsumexp over the row, then the target's logit. Targets
/// outside `0..n_cols` give NaN.
#[tegula::kernel]
pub fn cross_entropy_fwd<T: Element, I: Element>(
    logits: Ptr<T>,
    targets: Ptr<I>,
    loss: Ptr<f32>,
    row_stride: i32,
    col_stride: i32,
    target_stride: i32,
    n_cols: i32,
    #[constexpr] block: usize,
) {
    let row = program_id(0);
    let offsets = arange(0, block as i64);
    let base = logits + row * row_stride;
    let mut m = full::<f32>([block], f32::NEG_INFINITY);
    let mut l = zeros::<f32>([block]);
    for start in range(0, n_cols, block) {
        let cols = start + offsets;
        let v = load(base + cols * col_stride, cols.lt(n_cols), f32::NEG_INFINITY).to::<f32>();
        let m_new = maximum(m, v);
        // A lane that has seen only -inf (masked columns) shifts by 0, so exp(-inf - -inf)
        // never makes a NaN; its sum stays 0.
        let shift = select(m_new.eq(f32::NEG_INFINITY), 0.0, m_new);
        l = l * exp(m - shift) + exp(v - shift);
        m = m_new;
    }
    let row_max = max(m, 0);
    let shift = select(row_max.eq(f32::NEG_INFINITY), 0.0, row_max);
    let lse = log(sum(l * exp(m - shift), 0)) + shift;
    let t = load_unmasked(targets + row * target_stride).to::<i32>();
    let valid = t.ge(0) & t.lt(n_cols);
    let picked = load(base + t * col_stride, valid, f32::NAN).to::<f32>();
    store_unmasked(loss + row, lse - picked);
}

/// The block of columns a program reads per step, and its warps.
fn block_and_warps(n_cols: usize) -> (usize, u32) {
    let block = n_cols.next_power_of_two().clamp(128, 4096);
    (block, if block >= 2048 { 8 } else { 4 })
}

/// Launches the kernel on tegula tensors: `logits` [N, V], `targets` [N], `loss` [N].
pub fn launch<T: Element, I: Element>(
    dev: &tegula::Device,
    logits: &tegula::Tensor<T>,
    targets: &tegula::Tensor<I>,
    loss: &tegula::Tensor<f32>,
) -> tegula::Result<()> {
    let (n, v) = (logits.shape()[0], logits.shape()[1]);
    let (block, warps) = block_and_warps(v);
    cross_entropy_fwd::launch_with::<T, I>(
        dev,
        n as u32,
        LaunchConfig::new(warps, 1),
        logits,
        targets,
        loss,
        logits.strides()[0] as i32,
        logits.strides()[1] as i32,
        targets.strides()[0] as i32,
        v as i32,
        block,
    )
}

/// The candle op: `logits` `[N, V]` (f32, f16 or bf16, any strides) and `targets` `[N]` (u32
/// or i64) to the per-row loss `[N]` in f32. Forward only.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrossEntropy;

/// Per-row softmax cross-entropy of `logits` `[N, V]` against class indices `targets` `[N]`,
/// fused in one tegula kernel; `loss.mean_all()` is the usual scalar loss.
pub fn cross_entropy(
    logits: &candle_core::Tensor,
    targets: &candle_core::Tensor,
) -> candle_core::Result<candle_core::Tensor> {
    logits.apply_op2_no_bwd(targets, &CrossEntropy)
}

fn check(l1: &Layout, l2: &Layout) -> candle_core::Result<usize> {
    let (d1, d2) = (l1.dims(), l2.dims());
    if d1.len() != 2 || d2.len() != 1 || d1[0] != d2[0] {
        candle_core::bail!(
            "cross_entropy: logits [N, V] and targets [N] expected, got {d1:?} and {d2:?}"
        );
    }
    let max = |l: &Layout| l.dims().iter().zip(l.stride()).map(|(n, s)| n * s).max();
    if d1[1] == 0
        || max(l1).unwrap_or(0) > i32::MAX as usize
        || max(l2).unwrap_or(0) > i32::MAX as usize
    {
        candle_core::bail!("cross_entropy: {d1:?} needs V > 0 and i32 offsets");
    }
    Ok(d1[0])
}

impl CustomOp2 for CrossEntropy {
    fn name(&self) -> &'static str {
        "tegula-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let n = check(l1, l2)?;
        fn run<T: Element + candle_core::WithDType, I: Element + candle_core::WithDType>(
            s1: &CpuStorage,
            l1: &Layout,
            s2: &CpuStorage,
            l2: &Layout,
            n: usize,
        ) -> candle_core::Result<Vec<f32>> {
            let dev = crate::cpu_device();
            let (logits, targets) = (s1.as_slice::<T>()?, s2.as_slice::<I>()?);
            // SAFETY: both views are dropped at the end of this function, inside the borrows
            // of candle's storage, and the kernel only reads them.
            let (x, t) = unsafe {
                (
                    crate::cpu_view(logits, l1).map_err(to_candle)?,
                    crate::cpu_view(targets, l2).map_err(to_candle)?,
                )
            };
            let loss = dev.empty::<f32>([n]).map_err(to_candle)?;
            launch(dev, &x, &t, &loss).map_err(to_candle)?;
            loss.to_vec().map_err(to_candle)
        }
        let out = match (s1.dtype(), s2.dtype()) {
            (DType::F32, DType::U32) => run::<f32, u32>(s1, l1, s2, l2, n)?,
            (DType::F16, DType::U32) => run::<half::f16, u32>(s1, l1, s2, l2, n)?,
            (DType::BF16, DType::U32) => run::<half::bf16, u32>(s1, l1, s2, l2, n)?,
            (DType::F32, DType::I64) => run::<f32, i64>(s1, l1, s2, l2, n)?,
            (DType::F16, DType::I64) => run::<half::f16, i64>(s1, l1, s2, l2, n)?,
            (DType::BF16, DType::I64) => run::<half::bf16, i64>(s1, l1, s2, l2, n)?,
            (a, b) => candle_core::bail!(
                "cross_entropy: logits f32/f16/bf16 and targets u32/i64, got {a:?} and {b:?}"
            ),
        };
        Ok((CpuStorage::F32(out), Shape::from_dims(&[n])))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::CudaDType;
        let n = check(l1, l2)?;
        fn run<T: Element + CudaDType, I: Element + CudaDType>(
            s1: &candle_core::CudaStorage,
            l1: &Layout,
            s2: &candle_core::CudaStorage,
            l2: &Layout,
            n: usize,
        ) -> candle_core::Result<candle_core::CudaStorage> {
            let cdev = s1.device().clone();
            let tdev = crate::cuda_device(&cdev).map_err(to_candle)?;
            let out = cdev.alloc_zeros::<f32>(n)?;
            let out_layout = Layout::contiguous(Shape::from_dims(&[n]));
            // SAFETY: the views drop at the end of this block, inside the borrows of candle's
            // storage (and of `out`, which candle takes over only after); the kernel writes
            // only `loss`, the op's own output. Launches go on candle's stream.
            unsafe {
                let x = crate::cuda_view(&tdev, s1.as_cuda_slice::<T>()?, l1).map_err(to_candle)?;
                let t = crate::cuda_view(&tdev, s2.as_cuda_slice::<I>()?, l2).map_err(to_candle)?;
                let loss = crate::cuda_view(&tdev, &out, &out_layout).map_err(to_candle)?;
                launch(&tdev, &x, &t, &loss).map_err(to_candle)?;
            }
            Ok(candle_core::CudaStorage::wrap_cuda_slice(out, cdev))
        }
        let out = match (s1.dtype(), s2.dtype()) {
            (DType::F32, DType::U32) => run::<f32, u32>(s1, l1, s2, l2, n)?,
            (DType::F16, DType::U32) => run::<half::f16, u32>(s1, l1, s2, l2, n)?,
            (DType::BF16, DType::U32) => run::<half::bf16, u32>(s1, l1, s2, l2, n)?,
            (DType::F32, DType::I64) => run::<f32, i64>(s1, l1, s2, l2, n)?,
            (DType::F16, DType::I64) => run::<half::f16, i64>(s1, l1, s2, l2, n)?,
            (DType::BF16, DType::I64) => run::<half::bf16, i64>(s1, l1, s2, l2, n)?,
            (a, b) => candle_core::bail!(
                "cross_entropy: logits f32/f16/bf16 and targets u32/i64, got {a:?} and {b:?}"
            ),
        };
        Ok((out, Shape::from_dims(&[n])))
    }
}

/// candle's own composition of the same loss (what [`cross_entropy`] replaces): max, subtract,
/// exp, sum, log, subtract, gather, negate, in f32.
pub fn cross_entropy_reference(
    logits: &candle_core::Tensor,
    targets: &candle_core::Tensor,
) -> candle_core::Result<candle_core::Tensor> {
    let x = logits.to_dtype(DType::F32)?;
    let max = x.max_keepdim(1)?;
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(1)?.log()?;
    let log_probs = shifted.broadcast_sub(&lse)?;
    let picked = log_probs.gather(&targets.unsqueeze(1)?, 1)?;
    picked.squeeze(1)?.neg()
}
