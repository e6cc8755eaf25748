//! Independent reductions over one layout share one round through shared memory (a pair of
//! barriers), dependent ones take a round each; the shared round gives every reduction its
//! own slots, and the PTX assembles.

use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

fn ptx(k: &Kernel, warps: u32) -> String {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm: 90 }, &opts).unwrap().ptx
}

/// Row statistics of a `[rows, block]` tile: `sum(x)` and `sum(x * x)` (independent), or
/// `sum(x)` then `sum((x - mean)^2)` (the second needs the first) when `dependent`.
fn row_moments(rows: usize, block: usize, dependent: bool) -> Kernel {
    trace("row_moments", |p| {
        let (x, s1_out, s2_out) = (
            p.ptr("x", DType::F32),
            p.ptr("s1", DType::F32),
            p.ptr("s2", DType::F32),
        );
        let r = arange(0, rows as i64);
        let cols = arange(0, block as i64);
        let v = load_unmasked(x + r.col() * block as i64 + cols.row());
        let s1 = sum(v, 1);
        let centred = if dependent {
            v - (s1 / block as f64).col()
        } else {
            v
        };
        let s2 = sum(centred * centred, 1);
        store_unmasked(s1_out + r, s1);
        store_unmasked(s2_out + r, s2);
    })
    .unwrap()
}

/// An i32 sum, an f32 max and an f32 sum of one tile: three reductions of two register
/// classes in one round.
fn three_reductions(block: usize) -> Kernel {
    trace("three_reductions", |p| {
        let (x, k, out) = (
            p.ptr("x", DType::F32),
            p.ptr("k", DType::I32),
            p.ptr("out", DType::F32),
        );
        let cols = arange(0, block as i64);
        let v = load_unmasked(x + cols);
        let count = sum(load_unmasked(k + cols), 0);
        let biggest = max(v, 0);
        let total = sum(v, 0);
        store_unmasked(out, total * biggest + count.to::<f32>());
    })
    .unwrap()
}

fn barriers(p: &str) -> usize {
    p.matches("bar.sync").count()
}

#[test]
fn independent_row_sums_share_one_round() {
    for (rows, block, warps) in [(1, 1024, 4), (1, 4096, 8), (4, 512, 8), (2, 16384, 16)] {
        let fused = ptx(&row_moments(rows, block, false), warps);
        let chained = ptx(&row_moments(rows, block, true), warps);
        let what = format!("{rows}x{block}, {warps} warps");
        // The stores of the row results may convert layouts (a round of their own, the same
        // in both); the chained statistics take one reduction round more.
        assert_eq!(
            barriers(&chained),
            barriers(&fused) + 2,
            "{what}:\n{fused}\n{chained}"
        );
        // Both sums still cross the warps: twice the shared stores of one sum.
        assert_eq!(
            fused.matches("st.shared").count(),
            chained.matches("st.shared").count(),
            "{what}"
        );
    }
}

#[test]
fn a_reduction_inside_one_warp_needs_no_round() {
    let p = ptx(&row_moments(1, 32, false), 1);
    assert_eq!(barriers(&p), 0, "{p}");
    assert!(p.contains("shfl.sync.bfly.b32"), "{p}");
}

#[test]
fn each_reduction_of_a_round_has_its_own_slots() {
    let p = ptx(&three_reductions(1024), 4);
    assert_eq!(barriers(&p), 2, "{p}");
    // One store per reduction per thread and four loads (one per warp) per reduction, at
    // three distinct slots (0, 16, 32 bytes: each reduction's 4 x 4 bytes, 16-aligned).
    assert_eq!(p.matches("st.shared").count(), 3, "{p}");
    assert_eq!(p.matches("ld.shared").count(), 12, "{p}");
    for off in ["+16]", "+32]"] {
        assert!(p.contains(off), "no slot at {off}:\n{p}");
    }
    assert!(p.contains("max.NaN.f32"), "{p}");
}

#[test]
fn fused_rounds_assemble() {
    let Some(ptxas) = tegula_ptx::ptxas::find() else {
        panic!("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    };
    let dir = std::env::temp_dir().join(format!("tegula-reduce-rounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("moments", ptx(&row_moments(4, 512, false), 8)),
        ("three", ptx(&three_reductions(1024), 4)),
    ];
    for (stem, text) in cases {
        let a = tegula_ptx::ptxas::assemble(&ptxas, &text, 90, &dir, stem).unwrap();
        assert_eq!(a.spill_stores, 0, "{}", a.log);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The longest chain of dependent `op` instructions in `ptx` among those that combine a
/// thread's own values: each one's depth is one more than the deepest of its operands, and
/// anything computed from a shuffle's result (the reduction across lanes) is left out.
fn in_thread_chain_depth(ptx: &str, op: &str) -> usize {
    let mut depth: std::collections::HashMap<&str, usize> = Default::default();
    let mut from_lanes: std::collections::HashSet<&str> = Default::default();
    let mut deepest = 0;
    for line in ptx.lines().map(|l| l.trim().trim_end_matches(';')) {
        let Some((opcode, operands)) = line.split_once(' ') else {
            continue;
        };
        let regs: Vec<&str> = operands.split(',').map(str::trim).collect();
        if opcode.starts_with("shfl.") || regs[1..].iter().any(|r| from_lanes.contains(r)) {
            from_lanes.insert(regs[0]);
        } else if opcode == op {
            let d = 1 + regs[1..]
                .iter()
                .map(|r| depth.get(r).copied().unwrap_or(0))
                .max()
                .unwrap_or(0);
            depth.insert(regs[0], d);
            deepest = deepest.max(d);
        }
    }
    deepest
}

#[test]
fn a_threads_own_elements_combine_as_a_tree() {
    // One warp over 1024 f32 columns: 32 elements a thread. A chain would be 31 adds deep; a
    // balanced tree of adjacent pairs is 5 (the same for the maximum).
    let k = trace("row_sum_max", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let cols = arange(0, 1024);
        let v = load_unmasked(x + cols);
        store_unmasked(out, sum(v, 0) + max(v, 0));
    })
    .unwrap();
    let text = ptx(&k, 1);
    let adds = text
        .lines()
        .filter(|l| l.trim().starts_with("add.f32"))
        .count();
    assert!(adds >= 31, "expected the thread's 31 adds:\n{text}");
    assert_eq!(in_thread_chain_depth(&text, "add.f32"), 5, "{text}");
    assert_eq!(in_thread_chain_depth(&text, "max.NaN.f32"), 5, "{text}");
}
