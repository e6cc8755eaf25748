//! A pipelined load that several dots read is copied once a stage: one `cp.async` slot, read
//! by each dot's own `ldmatrix` (plain where K is the stored column, `.trans` where it is the
//! stored row), never staged through registers. The results are checked on the PTX simulator
//! in `mma_sim.rs` (`one_pipelined_load_feeds_four_dot_operands`); here the PTX's shape, and
//! ptxas where installed.

mod mma_kernels;

use mma_kernels::shared_operand_loop;
use tegula_ir::prelude::*;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

fn ptx(dt: DType, (bm, bn, d, e): (usize, usize, usize, usize), warps: u32, stages: u32) -> String {
    let k = shared_operand_loop(dt, bm, bn, d, e);
    let options = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(&k, &Target { sm: 90 }, &options).unwrap().ptx
}

#[test]
fn one_slot_serves_every_dot_that_reads_the_load() {
    for (dt, (bm, bn, d, e), warps) in [
        (DType::BF16, (32, 32, 32, 16), 4),
        (DType::F16, (64, 64, 64, 32), 8),
    ] {
        for stages in [2, 3] {
            let text = ptx(dt, (bm, bn, d, e), warps, stages);
            let what = format!("{dt} {bm}x{bn}x{d}x{e}, {warps} warps, {stages} stages");
            // One load in the slot, of the tile's bytes (not one slot per dot operand).
            let slot = bm * d * 2;
            assert_eq!(
                text.matches(&format!(
                    "// pipeline: 1 loads, {stages} stages of {slot} bytes"
                ))
                .count(),
                1,
                "{what}"
            );
            // 16-byte copies, each thread its share, in the prologue's S - 1 fills and the
            // loop's refill.
            let per_thread = slot / 16 / (32 * warps as usize);
            assert_eq!(
                text.matches("cp.async.cg.shared.global").count(),
                per_thread * stages as usize,
                "{what}"
            );
            // X reaches all four operands from its slot: the loop loads nothing into
            // registers, and at most the scores S (a dot's result, the A operand of the next
            // dot, when the two layouts differ) go through a staging round.
            let body = &text[text.find("$L_for_").unwrap()..text.find("$L_endfor_").unwrap()];
            assert!(!body.contains("ld.global"), "{what}");
            assert!(body.matches("stage dot operands").count() <= 1, "{what}");
            // The four readers: X^T as B and X W's A read plainly; X as B and X^T as A with
            // .trans (K and W, loaded before the loop, come through registers).
            assert!(
                text.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                "{what}"
            );
            assert!(
                text.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
                "{what}"
            );
        }
    }
}

#[test]
fn one_slot_for_several_dots_assembles_without_spills() {
    let Some(ptxas) = tegula_ptx::ptxas::find() else {
        eprintln!("ptxas not found: skipped");
        return;
    };
    let dir = std::env::temp_dir().join(format!("tegula-shared-slot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for stages in [2, 3] {
        let text = ptx(DType::BF16, (64, 64, 64, 32), 8, stages);
        let out = tegula_ptx::ptxas::assemble(&ptxas, &text, 90, &dir, "shared_slot")
            .unwrap_or_else(|e| panic!("{stages} stages: {e}"));
        assert_eq!(out.spill_stores, 0, "{stages} stages");
        assert!(out.registers > 0 && out.registers <= 255);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
