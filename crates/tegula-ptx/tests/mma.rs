//! Tensor-core dots: the PTX has the instructions it should, and every kernel assembles with
//! `ptxas` for sm_80 and sm_90a without spills (registers are printed with `--nocapture`).

mod mma_kernels;

use mma_kernels::*;
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
    stages: u32,
) -> Result<Report, String> {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    let c = compile(k, &Target { sm }, &opts).map_err(|e| format!("{name}: {e}"))?;
    let stem = format!("{name}_sm{sm}_w{warps}_s{stages}");
    let a = tegula_ptx::ptxas::assemble(ptxas, &c.ptx, sm, dir, &stem)?;
    Ok(Report {
        name: format!("{name} sm_{sm} w{warps} s{stages}"),
        registers: a.registers,
        spill_stores: a.spill_stores,
        shared: c.shared_bytes,
    })
}

fn ptx(k: &Kernel, sm: u32, warps: u32) -> String {
    ptx_staged(k, sm, warps, 1)
}

fn ptx_staged(k: &Kernel, sm: u32, warps: u32, stages: u32) -> String {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm }, &opts).unwrap().ptx
}

#[test]
fn f16_bf16_and_tf32_dots_use_mma_and_ldmatrix() {
    let p = ptx(
        &dot_tile(DType::F16, (64, 64, 32), InputPrecision::Tf32, false, false),
        80,
        4,
    );
    assert!(
        p.contains("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
        "{p}"
    );
    // A [m][k] plain, B [k][n] transposed on the way in.
    assert!(
        p.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
        "{p}"
    );
    assert!(
        p.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
        "{p}"
    );
    assert!(!p.contains("fma.rn.f32"), "{p}");
    // 64x64x32 over 4 warps (2x2): 2 m-tiles x 4 n-tiles x 2 k-steps per warp.
    assert_eq!(p.matches("mma.sync").count(), 16, "{p}");

    let p = ptx(
        &dot_tile(DType::BF16, (32, 32, 32), InputPrecision::Tf32, true, true),
        90,
        4,
    );
    assert!(p.contains(".bf16.bf16.f32"), "{p}");
    // A = x.trans() is read transposed; B = y.trans() is K-major: plain ldmatrix.
    assert!(p.contains(".x4.trans.shared.b16"), "{p}");
    assert!(
        p.contains(".x4.shared.b16") || p.contains(".x2.shared.b16"),
        "{p}"
    );

    let p = ptx(
        &dot_tile(DType::F32, (32, 64, 16), InputPrecision::Tf32, false, false),
        80,
        4,
    );
    assert!(
        p.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
        "{p}"
    );
    assert!(p.contains("cvt.rna.tf32.f32"), "{p}");
    assert!(!p.contains(".trans"), "{p}");
}

#[test]
fn ieee_and_integer_dots_stay_on_fma() {
    let p = ptx(
        &dot_tile(DType::F32, (32, 32, 16), InputPrecision::Ieee, false, false),
        80,
        4,
    );
    assert!(!p.contains("mma.sync"), "{p}");
    assert!(p.contains("fma.rn.f32"), "{p}");
    // (Tf32x3 runs on tensor cores as three tf32 mmas: tests/tf32x3.rs.)
    let p = ptx(
        &dot_tile(DType::I8, (16, 16, 16), InputPrecision::Tf32, false, false),
        80,
        4,
    );
    assert!(!p.contains("mma.sync"), "{p}");
    assert!(p.contains("mad.lo.s32"), "{p}");
}

/// The body of the first `for` loop in the PTX.
fn loop_body(p: &str) -> &str {
    let start = p.find("$L_for_").expect("a loop");
    let end = p.find("bra.uni $L_for_").expect("a back edge");
    &p[start..end]
}

#[test]
fn flash_attention_keeps_q_and_p_in_registers() {
    let p = ptx(&flash_attention(DType::BF16, 128, 64, 64), 90, 8);
    let body = loop_body(&p);
    assert!(body.contains(".bf16.bf16.f32"), "{p}");
    // Q is loaded into fragments once, before the loop: inside, only K (plain) and V
    // (transposed) go through shared memory, each with two barriers; P does not.
    assert_eq!(body.matches("stage dot operands").count(), 2, "{body}");
    assert_eq!(body.matches("bar.sync").count(), 4, "{body}");
    assert!(body.contains(".x4.trans.shared.b16"), "{body}");
    // The row max and sum of the accumulator: shuffles within the quad (lanes 1 and 2 apart).
    assert!(body.contains("shfl.sync.bfly.b32"), "{body}");
    assert!(!body.contains("shfl.sync.bfly.b32 %r1, %r1, 4"), "{body}");
    // 8 warps x 16 rows: 8 n-tiles of S (64 keys) x 4 k-steps (D = 64), and 8 n-tiles of O
    // (D = 64) x 4 k-steps (64 keys).
    assert_eq!(body.matches("mma.sync").count(), 8 * 4 + 8 * 4, "{body}");
    // 16-row blocks on 4 warps put warps along N: P goes through shared memory with V.
    let p = ptx(&flash_attention(DType::F16, 16, 16, 32), 80, 4);
    assert_eq!(
        loop_body(&p).matches("stage dot operands").count(),
        2,
        "{p}"
    );
}

fn compiled(k: &Kernel, warps: u32, stages: u32) -> tegula_ptx::Compiled {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm: 90 }, &opts).unwrap()
}

#[test]
fn pipelined_loops_copy_tiles_ahead_with_cp_async() {
    let c = compiled(&matmul_loop(DType::F16, 64, 64, 32), 4, 3);
    let p = &c.ptx;
    // A and B (4 KB each) in 3 slots at the start of the scratch buffer.
    assert_eq!(c.shared_bytes, 3 * 8192, "{p}");
    assert!(p.contains("cp.async.cg.shared.global"), "{p}");
    let body = loop_body(p);
    assert!(body.contains("cp.async.wait_group 1;"), "{body}");
    assert_eq!(body.matches("cp.async.commit_group").count(), 1, "{body}");
    assert!(!body.contains("stage dot operands"), "{body}");
    assert!(!body.contains("ld.global"), "{body}");
    assert!(p.contains("cp.async.wait_all"), "{p}");
    // num_stages 1: no cp.async.
    let c = compiled(&matmul_loop(DType::F16, 64, 64, 32), 4, 1);
    assert!(!c.ptx.contains("cp.async"), "{}", c.ptx);

    // FlashAttention: K and V are pipelined, Q and P stay in registers.
    let fa = flash_attention(DType::BF16, 128, 64, 64);
    let c3 = compiled(&fa, 8, 3);
    let body = loop_body(&c3.ptx);
    assert!(body.contains("cp.async.wait_group 1;"), "{body}");
    assert!(!body.contains("stage dot operands"), "{body}");
    assert_eq!(c3.shared_bytes, 3 * 16384);
    // Shared memory is dynamic: four stages of 16 KB take 64 KB, past the 48 KB of a static
    // array, and the module declares it `.extern`.
    let c4 = compiled(&fa, 8, 4);
    assert_eq!(c4.shared_bytes, 4 * 16384);
    assert!(c4.ptx.contains(".extern .shared .align 128 .b8 tg_smem[];"));
    // Sixteen stages exceed the 227 KB of sm_90: compilation falls back to fourteen.
    let c16 = compiled(&fa, 8, 16);
    assert_eq!(c16.shared_bytes, 14 * 16384);
    // A tensor-core kernel tells ptxas how many blocks a SM it must fit: those its shared
    // memory allows and a full 255-register budget allows (65536 / (256 x threads)), so ptxas
    // may use every register without costing a block its memory would allow.
    assert!(c16.ptx.contains(".maxntid 256, 1, 1\n.minnctapersm 1\n{"));
    assert!(
        c4.ptx.contains(".minnctapersm 1\n"),
        "8 warps: one block by registers"
    );
    let fa4 = compiled(&fa, 4, 2);
    assert!(fa4.ptx.contains(".maxntid 128, 1, 1\n.minnctapersm 2\n{"));
    // 2 x (128 + 1) KB > 228 KB a SM: one block at 4 warps too.
    assert!(compiled(&fa, 4, 8).ptx.contains(".minnctapersm 1\n"));
    assert!(compiled(&fa, 4, 7).ptx.contains(".minnctapersm 2\n"));
}

#[test]
fn tensor_core_kernels_assemble_without_spills() {
    let ptxas = find_ptxas();
    let mut kernels: Vec<(String, Kernel, Vec<u32>)> = Vec::new();
    for dt in [DType::F16, DType::BF16, DType::F32] {
        for &m in &[16usize, 32, 64, 128] {
            for &n in &[16usize, 32, 64, 128] {
                for &k in &[16usize, 32, 64] {
                    // Keep the grid small but cover each dimension at both ends.
                    if !(m == n || k == 64 || (m, n) == (16, 128) || (m, n) == (128, 16)) {
                        continue;
                    }
                    // Operand staging must fit in 48 KB of shared memory.
                    if (m * k + k * n) * dt.size_bytes() > 48 * 1024 {
                        continue;
                    }
                    let tb = (m + n + k) % 32 == 0;
                    kernels.push((
                        format!("dot_{dt}_{m}x{n}x{k}{}", if tb { "_bt" } else { "" }),
                        dot_tile(dt, (m, n, k), InputPrecision::Tf32, false, tb),
                        vec![4, 8],
                    ));
                }
            }
        }
    }
    for dt in [DType::F16, DType::BF16] {
        kernels.push((
            format!("matmul_{dt}_128x128x32"),
            matmul_loop(dt, 128, 128, 32),
            vec![4, 8],
        ));
        kernels.push((
            format!("matmul_{dt}_64x64x64"),
            matmul_loop(dt, 64, 64, 64),
            vec![4],
        ));
    }
    kernels.push((
        "matmul_tf32_64x64x32".into(),
        matmul_loop(DType::F32, 64, 64, 32),
        vec![4],
    ));
    for d in [64usize, 128] {
        kernels.push((
            format!("flash_attention_bf16_d{d}"),
            flash_attention(DType::BF16, 128, 64, d),
            vec![8],
        ));
        kernels.push((
            format!("flash_attention_f16_d{d}_m64"),
            flash_attention(DType::F16, 64, 64, d),
            vec![4],
        ));
    }
    let mut reports: Vec<Report> = Vec::new();
    let mut errors = Vec::new();
    let dir = std::env::temp_dir().join(format!("tegula-mma-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, k, warps) in &kernels {
        // Loops also with 2 to 4 pipeline stages.
        let stages: &[u32] = if name.starts_with("dot_") {
            &[1]
        } else {
            &[1, 2, 3, 4]
        };
        for &w in warps {
            for sm in [80, 90] {
                for &s in stages {
                    match assemble(&ptxas, &dir, name, k, sm, w, s) {
                        Ok(r) => reports.push(r),
                        Err(e) => errors.push(e),
                    }
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
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        errors.is_empty(),
        "{} failures:\n{}",
        errors.len(),
        errors.join("\n\n")
    );
    // Without pipelining nothing spills. With it, ptxas sometimes trades a few bytes of spill
    // for 128 registers (two CTAs of 8 warps per SM); more than that is a regression.
    let spilled: Vec<&String> = reports
        .iter()
        .filter(|r| r.spill_stores > 0 && (r.name.ends_with("s1") || r.spill_stores > 16))
        .map(|r| &r.name)
        .collect();
    assert!(spilled.is_empty(), "kernels spill: {spilled:?}");
    assert!(reports.iter().all(|r| r.registers > 0));
}
