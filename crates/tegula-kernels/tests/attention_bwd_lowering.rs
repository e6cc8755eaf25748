//! How the backward's dK/dV kernel lowers at FlashAttention-2's D = 128 tile (64 query rows x
//! 128 keys, 8 warps, 2 stages, bf16), specialized as a launch on contiguous `[4, 32, 4096,
//! 128]` tensors would be: K and V stay in shared memory for the whole sweep (one copy each,
//! written once before the loop over the heads; K read by two dots), Q and dO stream through
//! the cp.async pipeline (copied once a step for their two dots each), and dP^T shares P^T's
//! warp layout; dK and dV stay in the sweep's accumulator layout across the loop over the
//! heads. ptxas (when installed) must assemble it.

use tegula::compiler;
use tegula::ir::{passes, Constant, Kernel, ParamFacts};
use tegula::prelude::*;
use tegula_kernels::attention::kernels::attn_bwd_dkdv;

const HEADS: usize = 32;
const N: usize = 4096;
const D: usize = 128;

/// The launch's specialization: pointers 16-byte aligned, integers that 16 divides marked so,
/// the group size of 1 bound.
fn specialized(causal: bool) -> Kernel {
    let mut k =
        attn_bwd_dkdv::trace::<bf16>(causal, true, false, !N.is_multiple_of(64), D, 64, 128)
            .unwrap();
    // 10 pointers; strides (batch, head, row) of q, k, v, dO, dK, dV; Hkv, group, Nq, Nk; scale.
    let mut ints: Vec<Option<usize>> = vec![None; 10];
    for _ in 0..6 {
        ints.extend([Some(HEADS * N * D), Some(N * D), Some(D)]);
    }
    ints.extend([Some(HEADS), Some(1), Some(N), Some(N)]);
    for (i, p) in k.params.iter_mut().enumerate() {
        p.facts = match ints.get(i) {
            Some(None) => ParamFacts::of_value(0),
            Some(Some(v)) => ParamFacts::of_value(*v as u64),
            None => ParamFacts::default(),
        };
    }
    let group_size = ints.iter().rposition(|v| *v == Some(1)).unwrap();
    passes::bind_scalar_param(&mut k, group_size, Constant::Int(1));
    passes::canonicalize(&mut k);
    k
}

fn ptx(causal: bool) -> String {
    let config = LaunchConfig::new(8, 2).with_mma(MmaChoice::Sync);
    compiler::compile(&specialized(causal), config, &compiler::Target { sm: 90 })
        .unwrap()
        .ptx
}

fn count(ptx: &str, needle: &str) -> usize {
    ptx.matches(needle).count()
}

#[test]
fn dkdv_keeps_k_and_v_resident_streams_q_and_do_and_keeps_dp_in_p_layout() {
    for causal in [false, true] {
        let text = ptx(causal);
        // K and V (128 x 128 bf16, 32 KB each) are written to shared memory once, before the
        // loop over the heads of the group (the first loop), in 16-byte stores: 8 a thread
        // each. K is not written a second time for dQ's dot, which reads it with `.trans`.
        let comment = "loop-invariant dot operand: resident in shared memory";
        assert_eq!(count(&text, comment), 1, "causal={causal}");
        let written = text.find(comment).unwrap();
        let heads_loop = text.find("$L_for_").unwrap();
        assert!(written < heads_loop, "causal={causal}");
        let stores = count(&text[written..heads_loop], "st.shared.v4.b32");
        assert_eq!(stores, 2 * 8, "causal={causal}");
        // One pipelined loop over the query blocks (two when causal: the masked rows, then
        // the rest), each streaming Q and dO once a step: each feeds two dots from one slot
        // (64 x 128 bf16: 16 KB each). K is no longer among them. The rows' lse and delta (64
        // f32 each) ride in the same slots after the tiles (2 x 256 bytes).
        let loops = if causal { 2 } else { 1 };
        assert_eq!(
            count(
                &text,
                "// pipeline: 2 loads and 2 rank-1 loads, 2 stages of 33280 bytes"
            ),
            loops,
            "causal={causal}"
        );
        // One cp.async a 16-byte chunk: 32 KB over 256 threads is 8 copies a thread a refill,
        // and one each for lse and delta (by 16 lanes of warp 0), one refill in each loop plus
        // its prologue's.
        assert_eq!(
            count(&text, "cp.async.cg.shared.global"),
            (8 + 2) * 2 * loops,
            "causal={causal}"
        );
        // lse and delta come from the slot into the accumulator's slice: each thread's 16
        // columns as 8 pairs, each vector; no global load of them is left.
        assert_eq!(
            count(&text, "ld.shared.v2.f32"),
            2 * 8 * loops,
            "causal={causal}"
        );
        // dP^T = V dO^T is laid out like P^T (warps along the 128 keys), so no f32 [128, 64]
        // tile goes through shared memory between the dots; only dQ's dot differs.
        assert_eq!(count(&text, "warps 8x1)"), 4 * loops, "causal={causal}");
        assert_eq!(count(&text, "warps 2x4)"), loops, "causal={causal}");
        assert_eq!(count(&text, "convert f32[128, 64]"), 0, "causal={causal}");
        // dK and dV, carried by the loop over the heads, keep the sweep's accumulator layout:
        // no f32 [128, 128] conversion at either end of the sweep (there were 2 a sweep each).
        assert_eq!(count(&text, "convert f32[128, 128]"), 0, "causal={causal}");
    }
}

#[test]
fn dkdv_assembles_with_ptxas() {
    let Some(ptxas) = compiler::ptxas::find() else {
        eprintln!("ptxas not found: skipped");
        return;
    };
    let dir = std::env::temp_dir().join(format!("tegula-bwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for causal in [false, true] {
        let out = compiler::ptxas::assemble(&ptxas, &ptx(causal), 90, &dir, "dkdv")
            .unwrap_or_else(|e| panic!("causal={causal}: {e}"));
        println!(
            "causal={causal}: {} registers, {} bytes spilled",
            out.registers, out.spill_stores
        );
        assert!(out.registers > 0 && out.registers <= 255);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dq_atomics_precede_the_dk_dot_in_every_step() {
    // FlashAttention-2's step order: dQ = dS K and its atomic additions come before
    // dK += dS^T Q, so the dK dot's mmas cover the additions' late reads of their data
    // registers instead of the next step's first instructions.
    for causal in [false, true] {
        let text = ptx(causal);
        let dq_dot = "// dot 64x128x128 on tensor cores";
        let dk_dot = "// dot 128x128x64 on tensor cores";
        let loops = if causal { 2 } else { 1 };
        let steps: Vec<&str> = text
            .split("$L_for_")
            .filter(|s| s.contains(dq_dot))
            .collect();
        assert_eq!(steps.len(), loops, "causal={causal}");
        for step in steps {
            let dq = step.find(dq_dot).unwrap();
            let first_add = step.find("red.relaxed.gpu.global.add").unwrap();
            let last_add = step.rfind("red.relaxed.gpu.global.add").unwrap();
            // dV's dot and dK's dot have the same shape; dK's is the step's last.
            let dk = step.rfind(dk_dot).unwrap();
            assert!(dq < first_add, "causal={causal}");
            assert!(last_add < dk, "causal={causal}");
            assert_eq!(
                count(&step[first_add..dk], "red.relaxed.gpu.global.add"),
                16,
                "causal={causal}: the 16 additions a thread makes a step, all before dK's dot"
            );
        }
    }
}
