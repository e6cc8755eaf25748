//! f32 dots with `InputPrecision::Tf32x3` on tensor cores: each k-step is three m16n8k8 tf32
//! mmas on the split operands (small x big, big x small, big x big), the operands reach shared
//! memory unrounded, and the kernels assemble with ptxas for sm_80 and sm_90a without spills.

mod mma_kernels;

use mma_kernels::dot_tile;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

const MMA_TF32: &str = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";

fn ptx(k: &Kernel, sm: u32, warps: u32) -> String {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm }, &opts).unwrap().ptx
}

/// A one-block attention step in f32 with `precision` on both dots: `S = Q K^T`, `P = exp2(S -
/// rowmax)`, `O = P V` (the single-head f32 attention's loop body without the loop).
fn attention_block(precision: InputPrecision, bm: usize, bn: usize, d: usize) -> Kernel {
    trace("attention_block", |p| {
        let (q, kp, vp, o) = (
            p.ptr("q", DType::F32),
            p.ptr("k", DType::F32),
            p.ptr("v", DType::F32),
            p.ptr("o", DType::F32),
        );
        let rm = arange(0, bm as i64);
        let rn = arange(0, bn as i64);
        let rd = arange(0, d as i64);
        let qv = load_unmasked(q + rm.col() * d as i64 + rd.row());
        let kv = load_unmasked(kp + rn.col() * d as i64 + rd.row());
        let vv = load_unmasked(vp + rn.col() * d as i64 + rd.row());
        let s = dot_with(qv, kv.trans(), None, precision);
        let pr = exp2(s - max(s, 1).col());
        let out = dot_with(pr, vv, None, precision);
        store_unmasked(o + rm.col() * d as i64 + rd.row(), out);
    })
    .expect("traces")
}

#[test]
fn three_mmas_per_tf32_step() {
    let (m, n, k) = (32, 32, 16);
    let x1 = ptx(
        &dot_tile(DType::F32, (m, n, k), InputPrecision::Tf32, false, false),
        80,
        4,
    );
    let x3 = ptx(
        &dot_tile(DType::F32, (m, n, k), InputPrecision::Tf32x3, false, false),
        80,
        4,
    );
    let (c1, c3) = (x1.matches(MMA_TF32).count(), x3.matches(MMA_TF32).count());
    assert!(c1 > 0, "{x1}");
    assert_eq!(c3, 3 * c1, "{x3}");
    // The residual: x - rna(x), rounded again.
    assert!(x3.contains("sub.f32"), "{x3}");
    assert!(!x3.contains("fma.rn.f32"), "{x3}");
    // Operands are staged unrounded: the only roundings are the splits (two per operand
    // register), none before the shared-memory stores.
    let before_first_mma = &x3[..x3.find(MMA_TF32).unwrap()];
    let staged = &before_first_mma[..before_first_mma.rfind("ldmatrix").unwrap()];
    assert!(!staged.contains("cvt.rna.tf32.f32"), "{x3}");
    assert!(
        x1[..x1.find("ldmatrix").unwrap()].contains("cvt.rna.tf32.f32"),
        "{x1}"
    );
}

/// The `a` and `b` register lists of an mma line (`mma... {d}, {a0..a3}, {b0, b1}, {c};`).
fn mma_operands(line: &str) -> (Vec<String>, Vec<String>) {
    let lists: Vec<Vec<String>> = line
        .split('{')
        .skip(1)
        .map(|g| {
            g.split('}')
                .next()
                .unwrap()
                .split(',')
                .map(|r| r.trim().to_string())
                .collect()
        })
        .collect();
    (lists[1].clone(), lists[2].clone())
}

/// Whether `reg` is a residual part: `cvt.rna.tf32.f32 reg, x` with `x` from `sub.f32`.
fn is_small(p: &str, reg: &str) -> bool {
    let def = p
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("cvt.rna.tf32.f32 {reg},")))
        .unwrap_or_else(|| panic!("no rounding defines {reg}"));
    let src = def.rsplit(',').next().unwrap().trim().trim_end_matches(';');
    p.lines()
        .map(str::trim)
        .any(|l| l.starts_with(&format!("sub.f32 {src},")))
}

#[test]
fn small_products_are_accumulated_before_the_big_one() {
    let p = ptx(
        &dot_tile(
            DType::F32,
            (16, 16, 16),
            InputPrecision::Tf32x3,
            false,
            false,
        ),
        80,
        1,
    );
    // One warp, 16x16x16: two n-tiles and two k-steps, three mmas each.
    let mmas: Vec<&str> = p.lines().filter(|l| l.contains(MMA_TF32)).collect();
    assert_eq!(mmas.len(), 12, "{p}");
    for triple in mmas.chunks(3) {
        let ops: Vec<_> = triple.iter().map(|l| mma_operands(l)).collect();
        let small = |regs: &[String]| regs.iter().all(|r| is_small(&p, r));
        let big = |regs: &[String]| regs.iter().all(|r| !is_small(&p, r));
        // a_small b_big, then a_big b_small, then a_big b_big.
        assert!(small(&ops[0].0) && big(&ops[0].1), "{}", triple[0]);
        assert!(big(&ops[1].0) && small(&ops[1].1), "{}", triple[1]);
        assert!(big(&ops[2].0) && big(&ops[2].1), "{}", triple[2]);
        assert_eq!(ops[2].0, ops[1].0);
        assert_eq!(ops[2].1, ops[0].1);
    }
}

#[test]
fn tf32x3_attention_blocks_assemble_without_spills() {
    let Some(ptxas) = tegula_ptx::ptxas::find() else {
        panic!("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    };
    let dir = std::env::temp_dir().join(format!("tegula-tf32x3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (sm, bm, bn, d, warps) in [
        (90, 64, 64, 64, 4),
        (90, 64, 32, 128, 4),
        (80, 64, 64, 64, 8),
    ] {
        let k = attention_block(InputPrecision::Tf32x3, bm, bn, d);
        let opts = CompileOptions {
            num_warps: warps,
            num_stages: 1,
            mma: MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        };
        let c = compile(&k, &Target { sm }, &opts).unwrap();
        assert_eq!(
            c.ptx.matches(MMA_TF32).count() % 3,
            0,
            "every tf32 mma comes in threes"
        );
        let name = format!("attn_x3_sm{sm}_{bm}x{bn}x{d}_w{warps}");
        let a = tegula_ptx::ptxas::assemble(&ptxas, &c.ptx, sm, &dir, &name).unwrap();
        println!(
            "{name}: {} registers, {} bytes spilled",
            a.registers, a.spill_stores
        );
        assert_eq!(a.spill_stores, 0, "{name}: {}", a.log);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
