//! The PTX of small kernels contains the instructions it should.

mod common;

use common::*;
use tegula_ir::prelude::*;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

fn ptx(k: &tegula_ir::Kernel, warps: u32) -> String {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm: 80 }, &opts).unwrap().ptx
}

#[test]
fn aligned_f32_vector_add_uses_16_byte_accesses() {
    let p = ptx(&aligned(vector_add(DType::F32, 1024)), 4);
    assert!(p.contains("ld.global.v4.b32"), "{p}");
    assert!(p.contains("st.global.v4.b32"), "{p}");
    assert!(p.contains("add.f32"), "{p}");
    assert!(p.contains(".target sm_80"), "{p}");
    // 1024 elements over 128 threads: two vector loads per operand per thread.
    assert_eq!(p.matches("ld.global.v4.b32").count(), 4, "{p}");
}

#[test]
fn unaligned_vector_add_falls_back_to_scalar_accesses() {
    let p = ptx(&vector_add(DType::F32, 256), 4);
    assert!(!p.contains(".v4"), "{p}");
    assert!(p.contains("ld.global.b32"), "{p}");
}

#[test]
fn f16_loads_pack_eight_halves_per_access() {
    let p = ptx(&aligned(vector_add(DType::F16, 1024)), 4);
    assert!(p.contains("ld.global.v4.b32"), "{p}");
    assert!(p.contains("cvt.rn.f16.f32"), "{p}");
    assert!(p.contains("mov.b32 {%h"), "{p}");
}

#[test]
fn softmax_reduces_with_butterflies_and_shared_memory() {
    let p = ptx(&softmax(DType::F32, 1024), 4);
    assert!(p.contains("shfl.sync.bfly.b32"), "{p}");
    assert!(p.contains("max.NaN.f32"), "{p}");
    assert!(p.contains("ex2.approx.ftz.f32"), "{p}");
    assert!(p.contains("bar.sync 0"), "{p}");
    assert!(p.contains("div.full.f32"), "{p}");
    // Masked-off lanes read -inf.
    assert!(p.contains("0fFF800000"), "{p}");
}

#[test]
fn gemv_loop_carries_registers() {
    let c = compile(
        &aligned(gemv(DType::F16, 512)),
        &Target { sm: 90 },
        &CompileOptions::default(),
    )
    .unwrap();
    assert!(c.ptx.contains(".target sm_90a"));
    assert!(c.ptx.contains("$L_for_"), "{}", c.ptx);
    assert!(c.ptx.contains("ld.global.v4.b32"), "{}", c.ptx);
    assert_eq!(c.num_threads, 128);
    // The accumulator is carried in the loads' layout: shared memory only for the final
    // cross-warp sum (4 warps x 4 bytes), no conversion inside the loop.
    assert_eq!(c.shared_bytes, 16, "{}", c.ptx);
    assert_eq!(c.params.len(), 4);
    assert_eq!(c.params[3].size_bytes(), 4);
}

#[test]
fn casts_use_the_interpreters_rounding() {
    let p = ptx(&elementwise_kernel(), 4);
    assert!(p.contains("cvt.rzi.sat.s32.f32"), "{p}");
    assert!(
        p.contains("cvt.rz.bf16.f32") || p.contains("cvt.rz.f16.f32"),
        "{p}"
    );
    assert!(p.contains("ld.global.cg.L2::cache_hint"), "{p}");
    assert!(
        p.contains("createpolicy.fractional.L2::evict_first.b64"),
        "{p}"
    );
    assert!(p.contains("st.global.cs.L2::cache_hint"), "{p}");
    assert!(p.contains("ld.volatile.global"), "{p}");
    assert!(p.contains("tanh.approx.f32"), "{p}");
}

#[test]
fn atomics_pick_native_instructions_and_cas_loops() {
    let p = ptx(&atomics(), 4);
    assert!(p.contains("atom.acq_rel.gpu.global.add.f32"), "{p}");
    assert!(p.contains("atom.acq_rel.gpu.global.max.s32"), "{p}");
    assert!(p.contains("atom.acq_rel.gpu.global.cas.b32"), "{p}");
    assert!(p.contains("atom.acq_rel.gpu.global.xor.b64"), "{p}");
    assert!(p.contains("atom.acq_rel.gpu.global.add.noftz.f16"), "{p}");
}

#[test]
fn unsupported_ops_name_the_source_line() {
    let k = trace("odd", |p| {
        let x = p.ptr("x", DType::F32);
        store_unmasked(x, sum(full::<f32>([3], 1.0), 0));
    })
    .unwrap();
    let e = compile(&k, &Target { sm: 80 }, &CompileOptions::default()).unwrap_err();
    assert!(e.to_string().contains("powers of two"), "{e}");
    assert!(e.to_string().contains("golden.rs"), "{e}");
}

#[test]
fn unused_relaxed_atomic_adds_lower_to_red_and_vectorize_on_sm_90() {
    let k = aligned(
        trace("red", |p| {
            let fx = p.ptr("fx", DType::F32);
            let n = p.scalar("n", DType::I32);
            let offs = arange(0, 512);
            let _ = atomic_add_relaxed(fx + offs, offs.to::<f32>(), Some(offs.lt(n)));
        })
        .unwrap(),
    );
    let p80 = ptx(&k, 4);
    assert!(p80.contains("red.relaxed.gpu.global.add.f32"), "{p80}");
    assert!(!p80.contains("atom."), "{p80}");
    let opts = CompileOptions {
        num_warps: 4,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    let p90 = compile(&k, &Target { sm: 90 }, &opts).unwrap().ptx;
    // 512 elements over 128 threads, 16-byte aligned: one 4-wide `red` a thread.
    assert_eq!(
        p90.matches("red.relaxed.gpu.global.add.v4.f32").count(),
        1,
        "{p90}"
    );
    assert!(!p90.contains("atom."), "{p90}");
    assert!(p90.contains(".version 8.1"), "{p90}");
}

/// The `mov` instructions ending the body of the loop labelled `$L_for_...` (the copies of the
/// yielded values into the carried registers), as (destination, source).
fn loop_tail_moves(p: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = p.lines().map(str::trim).collect();
    let back_edge = lines
        .iter()
        .rposition(|l| l.starts_with("bra.uni $L_for"))
        .expect("a loop");
    // Before the back edge: the induction variable's step, then the copies.
    let mut i = back_edge - 1;
    assert!(lines[i].starts_with("add.s32"), "{p}");
    let mut moves = Vec::new();
    while i > 0 && lines[i - 1].starts_with("mov.") {
        i -= 1;
        let operands = lines[i].split_once(' ').unwrap().1.trim_end_matches(';');
        let (d, s) = operands.split_once(", ").unwrap();
        moves.push((d.to_string(), s.to_string()));
    }
    moves.reverse();
    moves
}

#[test]
fn loop_carried_values_move_directly_unless_they_swap() {
    let swap = trace("swap", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let init = (load_unmasked(x + 0), load_unmasked(x + 1));
        let (a, b) = for_range(0, n, 1, init, |_, (a, b)| (b, a));
        store_unmasked(out, a);
        store_unmasked(out + 1, b);
    })
    .unwrap();
    let p = ptx(&swap, 1);
    let moves = loop_tail_moves(&p);
    // Run the copies on register names: a swap needs its sources saved before either write.
    let mut now: std::collections::HashMap<&str, &str> = Default::default();
    for (d, s) in &moves {
        let v = *now.get(s.as_str()).unwrap_or(&s.as_str());
        now.insert(d, v);
    }
    let swapped: Vec<_> = now
        .iter()
        .filter(|(d, s)| now.get(*s) == Some(*d) && now.contains_key(*s))
        .collect();
    assert_eq!(swapped.len(), 2, "{moves:?}\n{p}");

    // Carried values computed in the body are moved into place directly: no source of a copy
    // is written by the copies.
    let p = ptx(&aligned(for_carried(512)), 4);
    let moves = loop_tail_moves(&p);
    assert!(!moves.is_empty(), "{p}");
    for (_, s) in &moves {
        assert!(
            moves.iter().all(|(d, _)| d != s),
            "{s} is overwritten: {moves:?}"
        );
    }
}

/// `fp_fusion` (on by default, as Triton's `enable_fp_fusion`): float add, sub and mul carry
/// no rounding modifier, so ptxas may contract `x * y + z` into one `fma`; off, each carries
/// `.rn` and rounds on its own, as on the interpreter. The math library's arithmetic (f32 in
/// `asin`) rounds each operation either way (it must give the interpreter's bits).
#[test]
fn fp_fusion_leaves_float_arithmetic_unrounded_for_ptxas_to_contract() {
    let k = trace("mul_add", |p| {
        let (x, y, z, out) = (
            p.ptr("x", DType::F32),
            p.ptr("y", DType::F32),
            p.ptr("z", DType::F32),
            p.ptr("out", DType::F32),
        );
        let o = arange(0, 128);
        let (a, b, c) = (
            load_unmasked(x + o),
            load_unmasked(y + o),
            load_unmasked(z + o),
        );
        store_unmasked(out + o, asin(a * b + c) - c);
    })
    .unwrap();
    let ptx_with = |fp_fusion: bool| {
        let opts = CompileOptions {
            num_warps: 4,
            num_stages: 1,
            mma: MmaChoice::Sync,
            fp_fusion,
            tma: false,
        };
        compile(&k, &Target { sm: 90 }, &opts).unwrap().ptx
    };
    let fused = ptx_with(true);
    let strict = ptx_with(false);
    assert!(fused.contains("fma.rn.f32"), "{fused}");
    for op in ["mul", "add", "sub"] {
        let (plain, rn) = (format!("{op}.f32 "), format!("{op}.rn.f32 "));
        assert!(fused.contains(&plain), "{op}:\n{fused}");
        assert!(!strict.contains(&plain), "{op}:\n{strict}");
        // The kernel's own operations lose `.rn`, the library's keep it.
        assert_eq!(
            strict.matches(&rn).count(),
            fused.matches(&rn).count() + fused.matches(&plain).count(),
            "{op}"
        );
    }
}

/// f32 `/` is Triton's `div.full.f32` (within 2 ulp); `div_rn` and f64 `/` are IEEE `div.rn`.
#[test]
fn f32_division_is_div_full_and_div_rn_is_ieee() {
    let k = trace("divisions", |p| {
        let (x, y, out) = (
            p.ptr("x", DType::F32),
            p.ptr("y", DType::F32),
            p.ptr("out", DType::F32),
        );
        let (d, e) = (p.ptr("d", DType::F64), p.ptr("e", DType::F64));
        let o = arange(0, 128);
        let (a, b) = (load_unmasked(x + o), load_unmasked(y + o));
        store_unmasked(out + o, a / b + div_rn(a, b));
        store_unmasked(e + o, load_unmasked(d + o) / load_unmasked(e + o));
    })
    .unwrap();
    let p = ptx(&k, 4);
    assert!(p.contains("div.full.f32 "), "{p}");
    assert!(p.contains("div.rn.f32 "), "{p}");
    assert!(p.contains("div.rn.f64 "), "{p}");
}
