//! The compile pipeline, in one place: a traced kernel (already canonicalized by
//! [`crate::Device::specialize`]) is specialized on its launch's arguments (Triton's
//! divisibility facts, unit integers bound and folded), its loops' affine recurrences are
//! expressed in their counters ([`tegula_ir::passes::affine_recurrences`]), and it is
//! verified, planned and emitted as PTX for a target. Every path that compiles a kernel comes here: a GPU launch, the recording
//! device (`tegula ptx`, `tegula launch-cost`), `Device::plan` and the CLI's `plan`.
//!
//! ```text
//! traced Kernel --specialize(args), affine_recurrences, canonicalize--> Kernel
//!                --verify--> tegula_ptx::compile
//!                                                         (plan: dots, layouts, pipelines
//!                                                          -> emit -> Compiled + Report)
//! ```

use crate::error::{Error, Result};
use crate::launch::{KernelArg, LaunchConfig};
use tegula_ir::{Kernel, ParamFacts};
pub use tegula_ptx::{
    ptxas, CompileOptions, Compiled, DotKind, DotReport, LoopReport, MmaChoice, OperandHome,
    Report, Target,
};

/// Integer arguments equal to 1 (unit strides): their parameters become the constant 1, as in
/// Triton, so address arithmetic folds and contiguity shows.
pub fn unit_arguments(args: &[KernelArg]) -> Vec<bool> {
    args.iter()
        .map(|a| matches!(a, KernelArg::Int { value: 1, .. }))
        .collect()
}

/// Each argument's specialization fact: the largest power of two, at most 16, that divides a
/// pointer's address (bytes) or an integer's value ([`tegula_ir::ParamFacts`]; 1 for floats).
/// Triton records only "divisible by 16"; the smaller powers let a bf16 stride of 1000 still
/// vectorize. Part of the cache key ([`fact_bits`]) and fed to vectorization.
pub fn divisibilities(args: &[KernelArg]) -> Vec<ParamFacts> {
    args.iter()
        .map(|a| match a {
            KernelArg::Tensor {
                storage,
                offset,
                dtype,
                ..
            } => {
                // Host storage (a recording device's tensors) stands for a fresh GPU
                // allocation, which the driver aligns to 256 bytes: base 0.
                let base = storage.device_address().unwrap_or(0);
                ParamFacts::of_value(base + (offset * dtype.size_bytes()) as u64)
            }
            KernelArg::Int { value, .. } => ParamFacts::of_value(value.unsigned_abs()),
            KernelArg::Float { .. } => ParamFacts::default(),
        })
        .collect()
}

/// Triton's specialization facts: which pointer arguments are 16-byte aligned and which integer
/// arguments are multiples of 16 (the top of [`divisibilities`]).
pub fn divisibility_facts(args: &[KernelArg]) -> Vec<bool> {
    divisibilities(args)
        .iter()
        .map(|f| f.divisible_by(16))
        .collect()
}

/// The facts of [`specialize`] as a cache-key part: per argument the log2 of its divisibility
/// (`0`-`4`), then `1` per unit argument (`4400|0001`).
pub fn fact_bits(args: &[KernelArg]) -> String {
    let divs: String = divisibilities(args)
        .iter()
        .map(|f| char::from(b'0' + f.divisibility.trailing_zeros() as u8))
        .collect();
    let ones: String = unit_arguments(args)
        .iter()
        .map(|&f| if f { '1' } else { '0' })
        .collect();
    format!("{divs}|{ones}")
}

/// The kernel a launch with `args` compiles: the traced kernel with the divisibility facts of
/// its parameters set and its unit integer parameters bound to 1, folded and verified.
pub fn specialize(traced: &Kernel, args: &[KernelArg]) -> Result<Kernel> {
    let mut kernel = traced.clone();
    for (param, facts) in kernel.params.iter_mut().zip(divisibilities(args)) {
        param.facts = facts;
    }
    let ones = unit_arguments(args);
    for (i, _) in ones.iter().enumerate().filter(|(_, &one)| one) {
        tegula_ir::passes::bind_scalar_param(&mut kernel, i, tegula_ir::Constant::Int(1));
    }
    // Pointers and offsets a loop advances by a constant become functions of its counter, so
    // that the software pipeline can compute them a few iterations ahead.
    let rewrote = tegula_ir::passes::affine_recurrences(&mut kernel);
    if ones.contains(&true) || rewrote {
        tegula_ir::passes::canonicalize(&mut kernel);
        verify(&kernel)?;
    }
    Ok(kernel)
}

/// Checks the IR after a pass in debug builds and tests (a pass that breaks it is a compiler
/// bug, reported with the offending instruction); nothing in release builds.
pub fn verify(kernel: &Kernel) -> Result<()> {
    if cfg!(debug_assertions) {
        tegula_ir::verify::verify(kernel).map_err(|e| Error::Invalid {
            op: format!("compile `{}`", kernel.name),
            message: format!("the IR failed verification after a pass: {e}"),
        })?;
    }
    Ok(())
}

/// The options a launch config compiles with.
pub fn options(config: LaunchConfig) -> CompileOptions {
    CompileOptions {
        num_warps: config.num_warps,
        num_stages: config.num_stages,
        mma: config.mma,
        fp_fusion: config.fp_fusion,
        tma: config.tma,
    }
}

/// Plans and emits a specialized `kernel` for `target`.
pub fn compile(kernel: &Kernel, config: LaunchConfig, target: &Target) -> Result<Compiled> {
    Ok(tegula_ptx::compile(kernel, target, &options(config))?)
}

/// The PTX a launch of `traced` with `args` and `config` compiles for `target`.
pub fn compile_launch(
    traced: &Kernel,
    args: &[KernelArg],
    config: LaunchConfig,
    target: &Target,
) -> Result<Compiled> {
    compile(&specialize(traced, args)?, config, target)
}

/// The target a device without a GPU reports plans for: Hopper (sm_90a), the H100/H200.
pub const DEFAULT_TARGET: Target = Target { sm: 90 };
