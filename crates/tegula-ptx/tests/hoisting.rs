//! Loop-invariant code motion below the top level: a free value that an inner loop asks for
//! but that depends only on an enclosing loop's values (a persistent matmul's tile index, its
//! row and column masks) is computed once before the inner loop, not at every iteration or
//! pipeline refill (and once for the next tile, when the nest is pipelined across the tiles). The results of the same kernel are checked on the PTX simulator in
//! `mma_sim.rs` (`persistent_matmul_reuses_the_slots_tile_after_tile`).

mod mma_kernels;

use mma_kernels::persistent_matmul_into;
use tegula_ir::prelude::*;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

fn ptx(stages: u32) -> String {
    let k = persistent_matmul_into(DType::BF16, DType::F32, 64, 64, 32);
    let options = CompileOptions {
        num_warps: 4,
        num_stages: stages,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(&k, &Target { sm: 90 }, &options).unwrap().ptx
}

/// The text between label `$L_<name>:` and the branch back to it.
fn loop_body<'t>(text: &'t str, name: &str) -> &'t str {
    let start = text
        .find(&format!("${name}:"))
        .unwrap_or_else(|| panic!("no loop {name}"));
    let end = start
        + text[start..]
            .find(&format!("bra.uni ${name};"))
            .unwrap_or_else(|| panic!("loop {name} does not branch back"));
    &text[start..end]
}

fn divisions(text: &str) -> usize {
    text.matches("div.s32").count() + text.matches("rem.s32").count()
}

#[test]
fn tile_index_is_computed_once_a_tile_not_once_a_k_step() {
    for stages in [1, 2, 3] {
        let text = ptx(stages);
        let tile_loop = loop_body(&text, "L_for_1");
        let k_loop = loop_body(&text, "L_for_3");
        // The k-loop (its loads, masks and, when pipelined, its refill) divides nothing.
        assert_eq!(divisions(k_loop), 0, "{stages} stages: k-loop\n{k_loop}");
        // The tile loop computes `tile / tiles_n` and `tile % tiles_n` once each: not again
        // for each prologue stage, refill or the store's masks. A pipelined nest computes
        // them once more for the next tile, whose first stages it copies during this tile's
        // store (pipeline.rs, `Nest`).
        let tiles_indexed = if stages >= 2 { 2 } else { 1 };
        assert_eq!(
            divisions(tile_loop),
            2 * tiles_indexed,
            "{stages} stages: tile loop\n{tile_loop}"
        );
    }
}
