//! The `wgmma` lowering of a pipelined matmul's dot and of FlashAttention's two dots
//! (`MmaChoice::Wgmma`, sm_90a): which tiles take it, the PTX's shape (descriptor constants,
//! A from registers, the proxy fence, the wait before the slot is refilled, one k-tile in
//! flight when 128 elements of K are copied ahead), that with `mma.sync` asked for or on sm_80
//! nothing changes, and that ptxas assembles it without spills or serialization. `mma_sim.rs` runs
//! these kernels against float64 references (its simulator executes `wgmma` from the PTX ISA),
//! `emit/wgmma.rs`'s unit test checks the descriptors against the ISA's canonical layouts,
//! and the GPU check runs them on the H200 (`tegula check matmul`).

mod mma_kernels;

use mma_kernels::{
    flash_attention, flash_attention_two_loops, flash_attention_with_lse, matmul_loop,
    matmul_loop_b_nk, matmul_loop_into, persistent_matmul_into,
};
use tegula_ir::{DType, Kernel};
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

/// `k`'s PTX with tensor-core instructions `mma`.
fn ptx_with(k: &Kernel, sm: u32, warps: u32, stages: u32, mma: MmaChoice) -> String {
    let options = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm }, &options).unwrap().ptx
}

/// `k`'s PTX on `mma.sync` only.
fn ptx(k: &Kernel, sm: u32, warps: u32, stages: u32) -> String {
    ptx_with(k, sm, warps, stages, MmaChoice::Sync)
}

/// `k`'s PTX with `wgmma` asked for.
fn wgmma_ptx(k: &Kernel, sm: u32, warps: u32, stages: u32) -> String {
    ptx_with(k, sm, warps, stages, MmaChoice::Wgmma)
}

/// (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) that run on wgmma, with the descriptors' high
/// words of A and B: stride 8 rows of the row pitch (64 or 128 bytes), swizzle mode 2 or 1.
const TILES: [(usize, usize, usize, u32, u32, u32, u32); 5] = [
    (128, 256, 64, 8, 3, 0x4000_0040, 0x4000_0040),
    (128, 256, 32, 8, 4, 0x8000_0020, 0x4000_0040),
    (256, 128, 64, 8, 4, 0x4000_0040, 0x4000_0040),
    (128, 128, 128, 4, 2, 0x4000_0040, 0x4000_0040),
    (64, 32, 32, 4, 3, 0x8000_0020, 0x8000_0020),
];

#[test]
fn eligible_tiles_run_on_wgmma() {
    for (bm, bn, bk, warps, stages, a_high, b_high) in TILES {
        for dt in [DType::BF16, DType::F16] {
            let what = format!("{dt} {bm}x{bn}x{bk} {warps}w {stages}s");
            let text = wgmma_ptx(&matmul_loop(dt, bm, bn, bk), 90, warps, stages);
            // One instruction per k16 step and per 64-row block of a warpgroup.
            let per_tile = (bk / 16) * (bm / (16 * warps as usize));
            let opcode = format!("wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{dt}.{dt}");
            assert_eq!(text.matches(&opcode).count(), per_tile, "{what}");
            assert!(
                !text.contains("ldmatrix") && !text.contains("mma.sync"),
                "{what}"
            );
            assert!(text.contains(".extern .shared .align 1024"), "{what}");
            for high in [a_high, b_high] {
                assert!(
                    text.lines()
                        .any(|l| l.starts_with("\tmov.b32") && l.ends_with(&format!(", {high};"))),
                    "{what}: descriptor high word {high:#x}"
                );
            }
            // Each k-tile: the copies' wait, the proxy fence, the barrier (prologue and loop).
            // After this k-tile's commit, last iteration's is waited for and, after a second
            // barrier, the slot it read is refilled; S - 1 slots are filled ahead, the
            // accumulators are written in place (no copy in the loop reads them), and the last
            // k-tile is waited for after the loop.
            let start = text.find("\n$L_for").unwrap();
            let end = text.find("\n$L_endfor").unwrap();
            let (before, body) = (&text[..start], &text[start..end]);
            let commit = body.find("wgmma.commit_group").unwrap();
            let refill = body.find("cp.async.cg.shared.global").unwrap();
            let wait = body
                .find("wgmma.wait_group.sync.aligned 1;\n\tbar.sync 0;")
                .unwrap();
            assert!(commit < wait && wait < refill, "{what}");
            assert!(!body.contains("wgmma.wait_group.sync.aligned 0"), "{what}");
            assert!(!body.contains("mov.f32"), "{what}: accumulators copied");
            let after = &text[end..];
            assert!(
                after.find("wgmma.wait_group.sync.aligned 0").unwrap()
                    < after.find("st.global").unwrap(),
                "{what}"
            );
            assert_eq!(
                before.matches("cp.async.commit_group").count(),
                stages as usize - 1,
                "{what}"
            );
            assert!(
                body.contains(&format!("cp.async.wait_group {};", stages - 2)),
                "{what}"
            );
            let fenced = text
                .matches("fence.proxy.async.shared::cta;\n\tbar.sync 0;")
                .count();
            assert_eq!(
                fenced,
                text.matches("cp.async.wait_group").count(),
                "{what}"
            );
        }
    }
}

#[test]
fn persistent_grids_run_on_wgmma() {
    // (BLOCK_K, stages): each keeps a k-tile in flight; the outer loop copies the next tile's
    // first S - 1 stages and waits for the last k-tile before the store.
    for (bk, stages) in [(64, 3), (32, 6)] {
        let k = persistent_matmul_into(DType::BF16, DType::BF16, 128, 256, bk);
        let text = wgmma_ptx(&k, 90, 8, stages);
        assert_eq!(
            text.matches("wgmma.mma_async.sync.aligned.m64n256k16")
                .count(),
            bk / 16
        );
        assert!(text.contains("wgmma.wait_group.sync.aligned 1"));
        // The first stages: before the outer loop, and after the inner loop for the next tile.
        assert_eq!(
            text.matches("cp.async.commit_group").count(),
            2 * (stages as usize - 1) + 1
        );
        let inner_end = text.find("\n$L_endfor_4:").unwrap();
        let after = &text[inner_end..];
        assert!(
            after.find("wgmma.wait_group.sync.aligned 0").unwrap()
                < after.find("bar.sync").unwrap()
        );
    }
}

#[test]
fn without_wgmma_or_hopper_nothing_changes() {
    for (bm, bn, bk, warps, stages, ..) in TILES {
        let plain = matmul_loop(DType::BF16, bm, bn, bk);
        let sm80 = wgmma_ptx(&plain, 80, warps, stages);
        assert_eq!(sm80, ptx(&plain, 80, warps, stages));
        let sm90 = ptx(&plain, 90, warps, stages);
        assert!(!sm90.contains("wgmma") && !sm90.contains("fence.proxy"));
        assert!(sm90.contains(".align 128 "));
    }
    // Tiles wgmma cannot take keep mma.sync with the usual warps even when asked: 2 warps
    // (no warpgroup), M below 16 x warps, N above 256, one stage (no slots).
    for (bm, bn, bk, warps, stages) in [
        (64, 64, 32, 2, 3),
        (64, 128, 32, 8, 3),
        (64, 512, 32, 4, 2),
        (128, 128, 32, 4, 1),
    ] {
        let plain = matmul_loop(DType::BF16, bm, bn, bk);
        let asked = wgmma_ptx(&plain, 90, warps, stages);
        assert_eq!(
            asked,
            ptx(&plain, 90, warps, stages),
            "{bm}x{bn}x{bk} {warps}w"
        );
    }
}

#[test]
fn wgmma_tiles_assemble_without_spills() {
    let ptxas = tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    let dir = std::env::temp_dir().join(format!("tegula-wgmma-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // C stored as bf16 (the library's `bench` and `ptx`): the store's rows leave the
    // accumulator layout directly. An f32 C goes through a generic layout conversion that
    // spills at 128x256 with all warps along M (320 bytes; not addressed yet).
    for (bm, bn, bk, warps, stages, ..) in TILES {
        let k = matmul_loop_into(DType::BF16, DType::BF16, bm, bn, bk);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: MmaChoice::Wgmma,
            fp_fusion: true,
            tma: false,
        };
        let c = compile(&k, &Target { sm: 90 }, &options).unwrap();
        let name = format!("wgmma_{bm}x{bn}x{bk}_w{warps}");
        let a = tegula_ptx::ptxas::assemble(&ptxas, &c.ptx, 90, &dir, &name).unwrap();
        assert_eq!(a.spill_stores, 0, "{name}: {}", a.log);
        // ptxas serializes wgmma (and says so) when registers of one in flight are touched.
        assert!(!a.log.contains("serialized"), "{name}: {}", a.log);
        assert!(a.registers <= 255, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Tutorial 03's fp8 configs (`(BLOCK_M, BLOCK_N, BLOCK_K, stages, warps)`, "Good config for
/// fp8 inputs"), e4m3 in with B K-major (the tutorial passes `b.T`) and f16 out: every one on
/// fp8 wgmma (`QGMMA`), assembled without spills or serialization.
#[test]
fn fp8_wgmma_tiles_assemble_without_spills() {
    let ptxas = tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    let dir = std::env::temp_dir().join(format!("tegula-wgmma-fp8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (bm, bn, bk, stages, warps) in [
        (128, 256, 128, 3, 8),
        (256, 128, 128, 3, 8),
        (256, 64, 128, 4, 4),
        (64, 256, 128, 4, 4),
        (128, 128, 128, 4, 4),
        (128, 64, 64, 4, 4),
        (64, 128, 64, 4, 4),
        (128, 32, 64, 4, 4),
    ] {
        let fp8 = (DType::F8E4M3, DType::F8E4M3);
        let k = matmul_loop_b_nk(fp8, DType::F16, (bm, bn, bk));
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: MmaChoice::Wgmma,
            fp_fusion: true,
            tma: false,
        };
        let c = compile(&k, &Target { sm: 90 }, &options).unwrap();
        let name = format!("wgmma_fp8_{bm}x{bn}x{bk}_w{warps}_s{stages}");
        assert_eq!(
            c.report.wgmma_dots(),
            1,
            "{name}: {:?}",
            c.report.loops[0].why
        );
        let a = tegula_ptx::ptxas::assemble(&ptxas, &c.ptx, 90, &dir, &name).unwrap();
        assert_eq!(a.spill_stores, 0, "{name}: {}", a.log);
        assert!(!a.log.contains("serialized"), "{name}: {}", a.log);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// FlashAttention tiles that run both dots on wgmma: (BLOCK_M, BLOCK_N, D, warps, stages).
const ATTENTION_TILES: [(usize, usize, usize, u32, u32); 4] = [
    (128, 64, 128, 8, 2),
    (64, 64, 128, 4, 2),
    (128, 128, 64, 8, 3),
    (64, 32, 64, 4, 2),
];

/// The forward's Q K^T (Q resident in shared memory, read by descriptor: rule *resident
/// operands* keeps a wgmma's invariant A there whatever its size; K K-major from its slot)
/// and P V (P from registers, the previous dot's accumulator after the softmax; V N-major,
/// `trans-b` 1, on the register-A form), one instruction per k16 step and 64-row block of a
/// warpgroup; no `ldmatrix` or `mma.sync` anywhere. In the loop: the first dot's refill
/// between its commit and its wait, and the second dot's fence after the first's wait (no
/// overlap of the two); only P's words are packed.
#[test]
fn attention_dots_run_on_wgmma() {
    for (bm, bn, d, warps, stages) in ATTENTION_TILES {
        for dt in [DType::BF16, DType::F16] {
            let what = format!("{dt} {bm}x{bn} D={d} {warps}w {stages}s");
            let text = wgmma_ptx(&flash_attention(dt, bm, bn, d), 90, warps, stages);
            let blocks = bm / (16 * warps as usize);
            let issued: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("wgmma.mma_async"))
                .collect();
            let qk = format!("m64n{bn}k16.f32.{dt}.{dt} ");
            let pv = format!("m64n{d}k16.f32.{dt}.{dt} ");
            // Q K^T: the accumulator's vector, then A's descriptor (`trans-a` 0, `trans-b`
            // 0); P V: the accumulator, then A's four words (no `trans-a`), `trans-b` 1.
            let qk_lines = issued
                .iter()
                .filter(|l| l.contains(&qk) && l.contains("}, %rd") && l.ends_with(", 1, 1, 0, 0;"))
                .count();
            let pv_lines = issued
                .iter()
                .filter(|l| l.contains(&pv) && l.contains("}, {%r") && l.ends_with(", 1, 1, 1;"))
                .count();
            assert_eq!(qk_lines + pv_lines, issued.len(), "{what}");
            assert_eq!(qk_lines, blocks * d / 16, "{what}");
            assert_eq!(pv_lines, blocks * bn / 16, "{what}");
            let at = |pat: &str, from: usize| from + text[from..].find(pat).unwrap();
            let fence = at("wgmma.fence", 0);
            assert!(
                !text.contains("ldmatrix") && !text.contains("mma.sync"),
                "{what}"
            );
            let commit = at("wgmma.commit_group", fence);
            let refill = at("cp.async.cg.shared.global", commit);
            let wait = at("wgmma.wait_group.sync.aligned 0", commit);
            let second = at("wgmma.fence", fence + 1);
            assert!(refill < wait && wait < second, "{what}");
            assert_eq!(text.matches("wgmma.fence").count(), 2, "{what}");
            // P's words, in the loop.
            let body = &text[text.find("\n$L_for").unwrap()..text.find("\n$L_endfor").unwrap()];
            let packs = body
                .lines()
                .filter(|l| l.starts_with("\tmov.b32 %r") && l.contains(", {%h"))
                .count();
            assert_eq!(packs, 4 * blocks * bn / 16, "{what}");
        }
    }
    // The unmasked and masked loops: two dots each.
    let text = wgmma_ptx(
        &flash_attention_two_loops(DType::BF16, 128, 64, 128),
        90,
        8,
        2,
    );
    assert_eq!(text.matches("wgmma.fence").count(), 4);
    assert_eq!(text.matches("wgmma.mma_async").count(), 2 * (8 + 4));
}

/// Without `wgmma` asked for, on sm_80, or with tiles wgmma cannot take (2 warps; BLOCK_M below 16 x
/// warps), the forward's PTX is the one on `mma.sync`.
#[test]
fn attention_without_wgmma_or_eligible_tiles_is_unchanged() {
    for (bm, bn, d, warps, stages) in ATTENTION_TILES {
        let plain = flash_attention(DType::BF16, bm, bn, d);
        assert_eq!(
            wgmma_ptx(&plain, 80, warps, stages),
            ptx(&plain, 80, warps, stages)
        );
        assert!(!ptx(&plain, 90, warps, stages).contains("wgmma"));
    }
    for (bm, bn, d, warps, stages) in [(64, 64, 64, 2, 2), (64, 64, 128, 8, 2)] {
        let plain = flash_attention(DType::BF16, bm, bn, d);
        assert_eq!(
            wgmma_ptx(&plain, 90, warps, stages),
            ptx(&plain, 90, warps, stages),
            "{bm}x{bn} D={d} {warps}w"
        );
    }
}

/// ptxas assembles the forward with the library's epilogue on wgmma without spills.
#[test]
fn attention_wgmma_tiles_assemble_without_spills() {
    let ptxas = tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    let dir = std::env::temp_dir().join(format!("tegula-wgattn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (bm, bn, d, warps, stages) in ATTENTION_TILES {
        let k = flash_attention_with_lse(DType::BF16, bm, bn, d);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: MmaChoice::Wgmma,
            fp_fusion: true,
            tma: false,
        };
        let c = compile(&k, &Target { sm: 90 }, &options).unwrap();
        assert!(c.ptx.contains("wgmma.mma_async"));
        let name = format!("wgattn_{bm}x{bn}_d{d}_w{warps}");
        let a = tegula_ptx::ptxas::assemble(&ptxas, &c.ptx, 90, &dir, &name).unwrap();
        assert_eq!(a.spill_stores, 0, "{name}: {}", a.log);
        assert!(!a.log.contains("warning"), "{name}: {}", a.log);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
