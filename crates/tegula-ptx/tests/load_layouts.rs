//! A global load whose every use converts its value to one other layout runs in that layout:
//! the attention backward's `lse` and `delta` row vectors load in the slice of the scores'
//! mma accumulator, with no round through shared memory (two barriers each). A use that wants
//! the load's own layout (a store) keeps the blocked load and the conversion. The values are
//! checked on the PTX simulator (`tests/mma_sim.rs`, `row_vectors_in_the_scores_layout_match`).

mod mma_kernels;

use mma_kernels::scores_with_row_vectors;
use tegula_ir::prelude::*;
use tegula_ptx::{compile, CompileOptions, Target};

fn ptx(dt: DType, tile: (usize, usize, usize), store_lse: bool, warps: u32) -> String {
    let k = scores_with_row_vectors(dt, tile, store_lse);
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: 1,
    };
    compile(&k, &Target { sm: 90 }, &opts).unwrap().ptx
}

/// The conversions of `f32[bm]` row vectors through shared memory.
fn row_conversions(p: &str, bm: usize) -> usize {
    p.matches(&format!("convert f32[{bm}] through shared memory"))
        .count()
}

#[test]
fn row_vectors_load_in_the_scores_layout() {
    for (dt, tile, warps) in [
        (DType::BF16, (128, 64, 64), 8),
        (DType::F16, (64, 32, 32), 4),
        (DType::BF16, (64, 64, 128), 4),
    ] {
        let what = format!("{dt} {tile:?} {warps} warps");
        let bm = tile.1;
        let direct = ptx(dt, tile, false, warps);
        let stored = ptx(dt, tile, true, warps);
        assert_eq!(row_conversions(&direct, bm), 0, "{what}:\n{direct}");
        // lse is also stored: its load stays blocked and is converted for the scores (delta
        // still loads directly).
        assert_eq!(row_conversions(&stored, bm), 1, "{what}:\n{stored}");
        // Each conversion costs a pair of barriers.
        let bars = |p: &str| p.matches("bar.sync").count();
        assert_eq!(bars(&stored), bars(&direct) + 2, "{what}");
        // The accumulator's column slice holds pairs of adjacent columns: 8-byte loads, one
        // per pair, under the pair's mask (`bm / 8` pairs a thread for lse and for delta).
        let pair_loads = direct
            .lines()
            .filter(|l| l.contains("ld.global.v2.b32"))
            .count();
        assert_eq!(pair_loads, 2 * bm / 8, "{what}:\n{direct}");
    }
}

#[test]
fn row_vector_loads_assemble_without_spills() {
    let ptxas = tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    let dir = std::env::temp_dir().join(format!("tegula-load-layouts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = ptx(DType::BF16, (128, 64, 64), false, 8);
    let a = tegula_ptx::ptxas::assemble(&ptxas, &text, 90, &dir, "row_vectors").unwrap();
    assert_eq!(a.spill_stores, 0, "{}", a.log);
    std::fs::remove_dir_all(&dir).ok();
}
