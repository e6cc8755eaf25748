//! Every representative kernel, over dtypes and warp counts, assembles with `ptxas` for sm_80
//! and sm_90a without spilling. ptxas comes from $TEGULA_PTXAS, `.tools/nvcc` (installed by
//! `scripts/ptxas.sh`) or PATH; without one the test fails rather than passing silently.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

/// ptxas (see `tegula_ptx::ptxas::find`); missing is a failure, never a silent pass.
fn find_ptxas() -> PathBuf {
    tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test")
}

struct Report {
    name: String,
    registers: u32,
    spill_stores: u32,
    shared: u32,
}

fn assemble(
    ptxas: &Path,
    dir: &Path,
    name: &str,
    k: &Kernel,
    sm: u32,
    warps: u32,
) -> Result<Report, String> {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    let c = compile(k, &Target { sm }, &opts).map_err(|e| format!("{name}: {e}"))?;
    let a =
        tegula_ptx::ptxas::assemble(ptxas, &c.ptx, sm, dir, &format!("{name}_sm{sm}_w{warps}"))?;
    Ok(Report {
        name: format!("{name} sm_{sm} w{warps}"),
        registers: a.registers,
        spill_stores: a.spill_stores,
        shared: c.shared_bytes,
    })
}

#[test]
fn representative_kernels_assemble_without_spills() {
    let ptxas = find_ptxas();
    let dir = std::env::temp_dir().join(format!("tegula-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut kernels: Vec<(String, Kernel, Vec<u32>)> = Vec::new();
    let mut add = |name: String, k: Kernel, warps: &[u32]| kernels.push((name, k, warps.to_vec()));
    for dt in [DType::F32, DType::F16, DType::BF16] {
        add(
            format!("vector_add_{dt}"),
            aligned(vector_add(dt, 1024)),
            &[4, 8],
        );
        add(
            format!("vector_add_{dt}_unaligned"),
            vector_add(dt, 256),
            &[1, 4],
        );
        add(format!("softmax_{dt}"), softmax(dt, 1024), &[4, 8]);
        add(
            format!("layer_norm_{dt}"),
            aligned(layer_norm(dt, 1024)),
            &[4, 8],
        );
        add(format!("rms_norm_{dt}"), rms_norm(dt, 2048), &[8]);
    }
    add(
        "vector_add_f64".into(),
        aligned(vector_add(DType::F64, 512)),
        &[4],
    );
    add(
        "vector_add_i8".into(),
        aligned(vector_add(DType::I8, 2048)),
        &[4],
    );
    add("gemv_f16".into(), aligned(gemv(DType::F16, 1024)), &[4, 8]);
    add("gemv_bf16".into(), aligned(gemv(DType::BF16, 512)), &[4]);
    add("gemv_f16_unaligned".into(), gemv(DType::F16, 256), &[2]);
    add("atomics".into(), atomics(), &[1, 4]);
    add(
        "cumsum_f32".into(),
        cumsum_kernel(DType::F32, 1024, false),
        &[4],
    );
    add(
        "cumsum_i32_reverse".into(),
        cumsum_kernel(DType::I32, 256, true),
        &[2],
    );
    add(
        "cumsum_f16_small".into(),
        cumsum_kernel(DType::F16, 16, false),
        &[4],
    );
    add("for_carried".into(), aligned(for_carried(512)), &[4]);
    add("if".into(), if_kernel(), &[4]);
    add("while".into(), while_kernel(), &[1, 4]);
    add("dot_f16".into(), dot_kernel(DType::F16, 64, 64, 32), &[4]);
    add(
        "dot_f32_tf32".into(),
        dot_kernel(DType::F32, 32, 32, 16),
        &[4],
    );
    add(
        "dot_bf16_wide".into(),
        dot_kernel(DType::BF16, 16, 128, 64),
        &[8],
    );
    add("shapes".into(), shapes_kernel(), &[4]);
    add("elementwise".into(), elementwise_kernel(), &[4]);
    // fp8 tensor cores (`mma.sync.m16n8k32`) exist from sm_89.
    let mut fp8_kernels: Vec<(String, Kernel, Vec<u32>)> = Vec::new();
    for dt in [DType::F8E4M3, DType::F8E5M2] {
        fp8_kernels.push((format!("dot_{dt}"), dot_kernel(dt, 64, 64, 64), vec![4]));
        fp8_kernels.push((
            format!("dot_{dt}_wide"),
            dot_kernel(dt, 16, 128, 128),
            vec![8],
        ));
    }
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    let targets = kernels
        .iter()
        .map(|k| (k, [80, 90]))
        .chain(fp8_kernels.iter().map(|k| (k, [89, 90])));
    for ((name, k, warps), sms) in targets {
        for &w in warps {
            for sm in sms {
                match assemble(&ptxas, &dir, name, k, sm, w) {
                    Ok(r) => reports.push(r),
                    Err(e) => errors.push(e),
                }
            }
        }
    }
    println!(
        "{:<40} {:>5} {:>7} {:>7}",
        "kernel", "regs", "spills", "shared"
    );
    for r in &reports {
        println!(
            "{:<40} {:>5} {:>7} {:>7}",
            r.name, r.registers, r.spill_stores, r.shared
        );
    }
    assert!(
        errors.is_empty(),
        "{} failures:\n{}",
        errors.len(),
        errors.join("\n\n")
    );
    let spilled: Vec<&Report> = reports.iter().filter(|r| r.spill_stores > 0).collect();
    assert!(
        spilled.is_empty(),
        "kernels spill: {:?}",
        spilled.iter().map(|r| &r.name).collect::<Vec<_>>()
    );
    assert!(
        reports.iter().all(|r| r.registers > 0),
        "ptxas output not parsed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rule *occupancy step* (`Target::occupancy_step`, applied by the GPU loader): a kernel
/// without dots whose registers keep its SM under half full, declared with one block more,
/// gets a register budget from ptxas that fits that many blocks. The kernels are a layer
/// norm holding whole rows of 4096 to 16384 elements in registers (the case the rule is for);
/// at least one of them must take a step, or the test proves nothing.
#[test]
fn a_kernel_declaring_one_block_more_fits_it() {
    let ptxas = find_ptxas();
    let dir = std::env::temp_dir().join(format!("tegula-ptxas-step-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let target = Target { sm: 90 };
    let opts = CompileOptions {
        num_warps: 8,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    let mut stepped = 0;
    for (dt, block) in [(DType::F16, 8192), (DType::F32, 8192), (DType::F16, 16384)] {
        let c = compile(&aligned(layer_norm(dt, block)), &target, &opts).unwrap();
        let name = format!("ln_{dt}_{block}");
        let plain = tegula_ptx::ptxas::assemble(&ptxas, &c.ptx, 90, &dir, &name).unwrap();
        let Some(blocks) = target.occupancy_step(plain.registers, c.num_threads, c.shared_bytes)
        else {
            println!("{name}: {} registers, no step", plain.registers);
            continue;
        };
        let s = c.declaring_min_blocks_per_sm(blocks).unwrap();
        assert!(s.ptx.contains(&format!(".minnctapersm {blocks}\n")));
        assert!(
            s.declaring_min_blocks_per_sm(blocks + 1).is_none(),
            "declares twice"
        );
        let a =
            tegula_ptx::ptxas::assemble(&ptxas, &s.ptx, 90, &dir, &format!("{name}_step")).unwrap();
        println!(
            "{name}: {} registers -> {} declaring {blocks} blocks ({} bytes spilled)",
            plain.registers, a.registers, a.spill_stores
        );
        assert!(
            target.blocks_per_sm_by_registers(a.registers, c.num_threads) >= blocks,
            "{name}: {} registers do not fit {blocks} blocks",
            a.registers
        );
        stepped += 1;
    }
    assert!(stepped > 0, "no kernel took a step");
}
