//! The compiler's report: what a kernel's loops and dots got, and why a loop got fewer stages
//! than asked, at the user's lines.

mod mma_kernels;

use mma_kernels::{matmul_loop, matmul_loop_adding, persistent_matmul_into};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, plan, CompileOptions, DotKind, MmaChoice, OperandHome, Report, Target};

fn report(k: &Kernel, sm: u32, warps: u32, stages: u32, mma: MmaChoice) -> Report {
    let options = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma,
    };
    compile(k, &Target { sm }, &options).unwrap().report
}

#[test]
fn a_counter_addressed_k_loop_streams_both_operands() {
    let k = matmul_loop(DType::BF16, 128, 128, 32);
    let r = report(&k, 80, 4, 3, MmaChoice::Auto);
    assert_eq!(r.loops.len(), 1);
    let l = &r.loops[0];
    assert!(l.candidate);
    assert_eq!((l.stages, l.asked, l.streamed.len()), (3, 3, 2));
    assert_eq!(l.slot_bytes, (128 * 32 + 32 * 128) * 2);
    assert!(l.why.is_none(), "{:?}", l.why);
    assert_eq!(r.dots.len(), 1);
    let d = &r.dots[0];
    assert_eq!((d.m, d.n, d.k), (128, 128, 32));
    assert!(matches!(d.kind, DotKind::MmaSync { .. }), "{:?}", d.kind);
    assert_eq!((d.a, d.b), (OperandHome::Slot, OperandHome::Slot));
    assert!(r.shared_bytes >= 3 * l.slot_bytes);
    assert!(!r.stages_lost());
    // The plan without emission agrees on the decisions.
    let planned = plan(&k, &Target { sm: 80 }, &CompileOptions::default()).unwrap();
    assert_eq!(planned.loops, r.loops);
    assert_eq!(planned.dots, r.dots);
    assert!(r
        .to_string()
        .contains("3 stages of 16384 bytes, 2 streamed loads"));
}

#[test]
fn the_mma_choice_picks_the_dot_kind() {
    let k = matmul_loop(DType::BF16, 128, 128, 64);
    let kind = |sm, mma| report(&k, sm, 4, 4, mma).dots[0].kind;
    assert!(matches!(kind(90, MmaChoice::Sync), DotKind::MmaSync { .. }));
    assert!(matches!(
        kind(90, MmaChoice::Wgmma),
        DotKind::Wgmma {
            in_flight: true,
            in_place: true
        }
    ));
    // The compiler's choice on Hopper is wgmma where the plan places the dot; sm_80 has none.
    assert!(matches!(kind(90, MmaChoice::Auto), DotKind::Wgmma { .. }));
    assert!(matches!(
        kind(80, MmaChoice::Wgmma),
        DotKind::MmaSync { .. }
    ));
}

#[test]
fn an_accumulator_added_to_the_product_is_written_in_place() {
    // `acc + dot(a, b)` is `dot(a, b, acc)` after canonicalization (rule *dot accumulate*),
    // and the plan sees the loop-carried accumulator as the dot's alone.
    let k = matmul_loop_adding(DType::BF16, 128, 128, 64);
    let r = report(&k, 90, 4, 4, MmaChoice::Wgmma);
    assert!(
        matches!(
            r.dots[0].kind,
            DotKind::Wgmma {
                in_flight: true,
                in_place: true
            }
        ),
        "{:?}",
        r.dots[0].kind
    );
}

#[test]
fn one_stage_asked_is_said() {
    let r = report(
        &matmul_loop(DType::F16, 64, 64, 32),
        80,
        4,
        1,
        MmaChoice::Sync,
    );
    let l = &r.loops[0];
    assert_eq!(l.stages, 1);
    assert!(
        l.why.as_deref().unwrap().contains("1 stage asked for"),
        "{l:?}"
    );
    // Asked for one stage and got it: nothing lost.
    assert!(!r.stages_lost());
}

/// A load addressed by a value the loop loads (an index table): it cannot be copied ahead,
/// and the report names the load it depends on, at its line.
#[test]
fn a_gathered_load_is_not_streamed_and_says_why() {
    let k = trace("gather_matmul", |p| {
        let (a, b, idx, c) = (
            p.ptr("a", DType::F16),
            p.ptr("b", DType::F16),
            p.ptr("idx", DType::I32),
            p.ptr("c", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let r = arange(0, 64);
        let acc = for_range(0, n, 1, zeros::<f32>([64, 64]), |i, acc| {
            let rows = load_unmasked(idx + i * 64 + r);
            let at = load_unmasked(a + rows.col() * 64 + r.row());
            let bt = load_unmasked(b + (i * 64 + r).col() * 64 + r.row());
            dot_acc(at, bt, acc)
        });
        store_unmasked(c + r.col() * 64 + r.row(), acc);
    })
    .map(mma_kernels::aligned)
    .unwrap();
    let r = report(&k, 80, 4, 3, MmaChoice::Sync);
    let l = &r.loops[0];
    assert!(l.candidate);
    // B streams; A waits for the index load every iteration.
    assert_eq!((l.stages, l.streamed.len()), (3, 1));
    assert_eq!(r.dots[0].a, OperandHome::Registers);
    assert_eq!(r.dots[0].b, OperandHome::Slot);
    let k = trace("gather_only", |p| {
        let (a, b, idx, c) = (
            p.ptr("a", DType::F16),
            p.ptr("b", DType::F16),
            p.ptr("idx", DType::I32),
            p.ptr("c", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let r = arange(0, 64);
        let acc = for_range(0, n, 1, zeros::<f32>([64, 64]), |i, acc| {
            let rows = load_unmasked(idx + i * 64 + r);
            let at = load_unmasked(a + rows.col() * 64 + r.row());
            let bt = load_unmasked(b + rows.col() * 64 + r.row());
            dot_acc(at, bt, acc)
        });
        store_unmasked(c + r.col() * 64 + r.row(), acc);
    })
    .map(mma_kernels::aligned)
    .unwrap();
    let r = report(&k, 80, 4, 3, MmaChoice::Sync);
    let l = &r.loops[0];
    assert_eq!(l.stages, 1);
    let why = l.why.as_deref().unwrap();
    assert!(why.contains("cannot be copied ahead"), "{why}");
    assert!(why.contains("depends on the `load` at"), "{why}");
    assert!(why.contains("report.rs:"), "the load's line: {why}");
    assert!(r.stages_lost());
    let warnings = r.stage_warnings();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("runs with 1 of 3 stages"),
        "{warnings:?}"
    );
}

/// A persistent grid's tile loop copies its k-loop's first stages across tiles.
#[test]
fn a_persistent_nest_is_reported() {
    let k = persistent_matmul_into(DType::BF16, DType::F32, 128, 128, 32);
    let r = report(&k, 80, 8, 3, MmaChoice::Sync);
    assert_eq!(r.loops.len(), 2);
    let (outer, inner) = (&r.loops[0], &r.loops[1]);
    assert!(outer.pipelines_inner_loop && outer.stages == 1);
    assert!(inner.nested && inner.stages == 3);
    assert_eq!(inner.depth, 1);
    assert!(!r.stages_lost());
}
