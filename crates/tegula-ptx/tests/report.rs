//! The compiler's report: what a kernel's loops and dots got, and why a loop got fewer stages
//! than asked, at the user's lines.

mod mma_kernels;

use mma_kernels::{
    aligned, matmul_loop, matmul_loop_adding, matmul_loop_with, persistent_matmul_into,
    persistent_matmul_with,
};
use tegula_ir::prelude::*;
use tegula_ir::{Kernel, Op};
use tegula_ptx::{compile, plan, CompileOptions, DotKind, MmaChoice, OperandHome, Report, Target};

fn report(k: &Kernel, sm: u32, warps: u32, stages: u32, mma: MmaChoice) -> Report {
    let options = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma,
        fp_fusion: true,
        tma: false,
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
        DotKind::Wgmma { in_flight: true }
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
        matches!(r.dots[0].kind, DotKind::Wgmma { in_flight: true }),
        "{:?}",
        r.dots[0].kind
    );
}

#[test]
fn only_a_loops_one_dot_stays_in_flight() {
    // Two dots accumulating in one k-loop (A and two Bs from the slots): each
    // writes its carried accumulator in place, neither stays in flight (the second's wait
    // would retire the first's k-tile within the iteration).
    let k = trace("two_dots", |p| {
        let (a, b, c) = (
            p.ptr("a", DType::BF16),
            p.ptr("b", DType::BF16),
            p.ptr("c", DType::F32),
        );
        let kk = p.scalar("k", DType::I32);
        let (rows, cols, offs_k) = (arange(0, 128), arange(0, 64), arange(0, 64));
        let init = (zeros::<f32>([128, 64]), zeros::<f32>([128, 64]));
        let (x, y) = for_range(0, kk, 64, init, |start, (x, y)| {
            let ks = start + offs_k;
            let at = load_unmasked(a + rows.col() * kk + ks.row());
            let bt = load_unmasked(b + ks.col() * 64 + cols.row());
            let bt2 = load_unmasked(b + 64 + ks.col() * 128 + cols.row());
            (dot_acc(at, bt, x), dot_acc(at, bt2, y))
        });
        store_unmasked(c + rows.col() * 64 + cols.row(), x + y);
    })
    .map(aligned)
    .unwrap();
    let r = report(&k, 90, 4, 3, MmaChoice::Wgmma);
    let kinds: Vec<_> = r.dots.iter().map(|d| d.kind).collect();
    let wgmma = DotKind::Wgmma { in_flight: false };
    assert_eq!(kinds, vec![wgmma, wgmma], "{kinds:?}");
    assert!(r.dots.iter().all(|d| d.accumulator_in_carried));
    // The one-dot loop of the same shape does.
    let one = matmul_loop(DType::BF16, 128, 64, 64);
    assert!(matches!(
        report(&one, 90, 4, 3, MmaChoice::Wgmma).dots[0].kind,
        DotKind::Wgmma { in_flight: true }
    ));
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

fn stages(s: u32) -> RangeOptions {
    RangeOptions::new().num_stages(s)
}

/// `range(..).num_stages(2)` under a launch of 4 stages: the loop asks for and gets its own 2.
#[test]
fn a_loops_own_stages_replace_the_launchs() {
    let k = matmul_loop_with(DType::BF16, 128, 128, 32, stages(2));
    let r = report(&k, 80, 4, 4, MmaChoice::Sync);
    let l = &r.loops[0];
    assert!(l.candidate && l.own_stages);
    assert_eq!((l.stages, l.asked, l.streamed.len()), (2, 2, 2), "{r}");
    assert!(l.why.is_none(), "{:?}", l.why);
    assert_eq!(r.stages_asked, 4);
    assert!(!r.stages_lost(), "{r}");
    assert!(r.shared_bytes >= 2 * l.slot_bytes && r.shared_bytes < 3 * l.slot_bytes);
    let text = r.to_string();
    assert!(
        text.contains("2 stages of 16384 bytes, 2 streamed loads"),
        "{text}"
    );
    assert!(text.contains(", 2 asked by the loop\n"), "{text}");
    // The plan without emission agrees.
    let options = CompileOptions {
        num_stages: 4,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
        ..CompileOptions::default()
    };
    assert_eq!(
        plan(&k, &Target { sm: 80 }, &options).unwrap().loops,
        r.loops
    );
}

/// `num_stages(4)` under a launch of 1 (which pipelines nothing): the loop is pipelined over
/// its own 4 stages, and on sm_90a its dot is a `wgmma` candidate that runs on `wgmma`.
#[test]
fn a_loop_pipelines_under_a_launch_of_one_stage() {
    let k = matmul_loop_with(DType::BF16, 128, 128, 32, stages(4));
    let r = report(&k, 80, 4, 1, MmaChoice::Sync);
    let l = &r.loops[0];
    assert_eq!((l.stages, l.asked, l.streamed.len()), (4, 4, 2), "{r}");
    assert_eq!(
        (r.dots[0].a, r.dots[0].b),
        (OperandHome::Slot, OperandHome::Slot)
    );
    assert!(!r.stages_lost(), "{r}");
    let k = matmul_loop_with(DType::BF16, 128, 128, 64, stages(4));
    let r = report(&k, 90, 4, 1, MmaChoice::Auto);
    assert_eq!(r.loops[0].stages, 4, "{r}");
    assert!(matches!(r.dots[0].kind, DotKind::Wgmma { .. }), "{r}");
    // The same loop without its own count follows the launch: not pipelined, no wgmma.
    let k = matmul_loop(DType::BF16, 128, 128, 64);
    let r = report(&k, 90, 4, 1, MmaChoice::Auto);
    assert_eq!(r.loops[0].stages, 1, "{r}");
    assert!(matches!(r.dots[0].kind, DotKind::MmaSync { .. }), "{r}");
}

/// `num_stages(1)` under a launch of 3: not pipelined, and the report says why; nothing lost.
#[test]
fn a_loop_of_one_stage_is_not_pipelined() {
    let k = matmul_loop_with(DType::F16, 64, 64, 32, stages(1));
    let r = report(&k, 80, 4, 3, MmaChoice::Sync);
    let l = &r.loops[0];
    assert_eq!((l.stages, l.asked), (1, 1));
    assert!(l.streamed.is_empty());
    assert!(
        l.why.as_deref().unwrap().contains("1 stage asked for"),
        "{l:?}"
    );
    assert!(!r.stages_lost(), "{r}");
    assert!(r.stage_warnings().is_empty());
}

/// More stages than shared memory holds, asked by the loop: the cut and its warning count
/// from the loop's own stages, not the launch's.
#[test]
fn the_shared_memory_cut_works_from_the_loops_stages() {
    let k = matmul_loop_with(DType::BF16, 128, 128, 32, stages(16));
    let r = report(&k, 80, 4, 2, MmaChoice::Sync);
    let l = &r.loops[0];
    assert_eq!(l.asked, 16);
    assert!(l.stages > 2 && l.stages < 16, "{r}");
    assert!(l.shared_cut, "{r}");
    assert!(r.stages_lost() && r.stages_cut_by_shared_memory());
    let warnings = r.stage_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let want = format!("runs with {} of 16 stages", l.stages);
    assert!(warnings[0].contains(&want), "{warnings:?}");
    assert!(warnings[0].contains("shared memory"), "{warnings:?}");
    assert!(r.shared_bytes <= Target { sm: 80 }.max_shared_bytes());
}

/// A persistent nest whose k-loop asks for its own stages: the outer loop copies that many
/// first stages across tiles, whatever the launch asks for.
#[test]
fn a_nests_inner_loop_takes_its_own_stages() {
    let k = persistent_matmul_with(
        DType::BF16,
        DType::F32,
        (128, 128, 32),
        RangeOptions::new(),
        stages(2),
    );
    let r = report(&k, 80, 8, 4, MmaChoice::Sync);
    let (outer, inner) = (&r.loops[0], &r.loops[1]);
    assert!(outer.pipelines_inner_loop && !outer.own_stages, "{r}");
    assert_eq!(outer.asked, 4);
    assert!(inner.nested && inner.own_stages, "{r}");
    assert_eq!((inner.stages, inner.asked), (2, 2), "{r}");
    assert!(!r.stages_lost(), "{r}");
}

/// A loop of 0 stages is a typed error at its line, also for a kernel built without the
/// builder's verifier.
#[test]
fn zero_stages_is_an_error_at_the_loop() {
    let mut k = matmul_loop(DType::F16, 64, 64, 32);
    let l = k
        .walk()
        .into_iter()
        .find(|&i| matches!(k.insts[i].op, Op::For { .. }))
        .unwrap();
    k.insts[l].op = Op::For {
        num_stages: Some(0),
    };
    let e = compile(&k, &Target { sm: 80 }, &CompileOptions::default()).unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("num_stages(0)"), "{shown}");
    assert!(shown.contains("mma_kernels"), "the loop's line: {shown}");
}

/// A loop whose body also stores its accumulator (crossing through shared memory above the
/// slots) asks for more stages than leave room for that crossing: the kernel is compiled again
/// under a lower stage cap, and the loop's warning says so.
#[test]
fn the_kernel_stage_cap_cuts_a_loops_own_stages() {
    let k = trace("store_each_step", |p| {
        let (a, b, c) = (
            p.ptr("a", DType::BF16),
            p.ptr("b", DType::BF16),
            p.ptr("c", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let r = arange(0, 128);
        let ks = arange(0, 32);
        let acc = for_range_with(0, n, 1, stages(16), zeros::<f32>([128, 128]), |i, acc| {
            let at = load_unmasked(a + r.col() * 32 + (i * 32 + ks).row());
            let bt = load_unmasked(b + (i * 32 + ks).col() * 128 + r.row());
            let acc = dot_acc(at, bt, acc);
            store_unmasked(c + r.col() * 128 + r.row(), acc);
            acc
        });
        store_unmasked(c + r.col() * 128 + r.row(), acc);
    })
    .map(mma_kernels::aligned)
    .unwrap();
    let r = report(&k, 80, 4, 2, MmaChoice::Sync);
    let l = &r.loops[0];
    assert_eq!(l.asked, 16);
    assert!(l.stages > 2 && l.stages < 10, "{r}");
    let cut = r.stage_cut.as_deref().unwrap();
    assert!(
        cut.contains(&format!("with {} stages", l.stages + 1)),
        "{r}"
    );
    assert!(l.shared_cut && r.stages_cut_by_shared_memory());
    // The launch's 2 stages were not cut: the one warning is the loop's.
    assert_eq!((r.stages_asked, r.stages_compiled), (2, 2));
    let warnings = r.stage_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let want = format!("runs with {} of 16 stages", l.stages);
    assert!(warnings[0].contains(&want), "{warnings:?}");
    assert!(
        warnings[0].contains("the kernel's shared memory exceeds"),
        "{warnings:?}"
    );
}
