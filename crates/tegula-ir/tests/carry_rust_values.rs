//! Rust values (not tiles) flowing through run-time loops and branches, the `Condition`
//! dispatch that `#[kernel]` expands into, and `static_range`.

use tegula_ir::prelude::*;
use tegula_ir::{BinaryOp, Op};

fn count_ops(k: &tegula_ir::Kernel, pred: impl Fn(&Op) -> bool) -> usize {
    k.walk().iter().filter(|&&i| pred(&k.insts[i].op)).count()
}

#[test]
fn unchanged_rust_value_flows_through_a_loop() {
    let k = trace("k", |p| {
        let n = p.scalar("n", DType::I32);
        let (acc, scale) = for_range(0, n, 1, (zeros::<f32>([16]), 3usize), |_, (acc, s)| {
            (acc + 1.0, s)
        });
        assert_eq!(scale, 3);
        let out = p.ptr("out", DType::F32);
        store_unmasked(out + arange(0, 16), acc);
    })
    .unwrap();
    assert_eq!(count_ops(&k, |o| matches!(o, Op::For { .. })), 1);
}

#[test]
fn changing_rust_value_in_a_loop_is_an_error_naming_it() {
    let e = trace("k", |p| {
        let n = p.scalar("n", DType::I32);
        let _ = for_range(0, n, 1, Named("count", 0i32), |_, Named(name, c)| {
            Named(name, c + 1)
        });
    })
    .unwrap_err();
    assert!(e.message.contains("`count`"), "{e}");
    assert!(e.message.contains("(0 and 1)"), "{e}");
    assert!(e.message.contains("make it a tile"), "{e}");
}

#[test]
fn branches_that_disagree_on_a_rust_value_are_an_error() {
    let e = trace("k", |p| {
        let n = p.scalar("n", DType::I32);
        let _ = if_else(n.gt(0), || (Named("mode", 1u8),), || (Named("mode", 2u8),));
    })
    .unwrap_err();
    assert!(e.message.contains("`mode`"), "{e}");
    assert!(e.message.contains("(1 and 2)"), "{e}");
}

#[test]
fn type_change_of_a_named_carried_tile_names_the_variable() {
    let e = trace("k", |p| {
        let n = p.scalar("n", DType::I32);
        let _ = for_range(
            0,
            n,
            1,
            (Named("acc", zeros::<f32>([8])),),
            |_, (Named(_, a),)| (Named("acc", a.to::<f16>()),),
        );
    })
    .unwrap_err();
    assert!(e.message.contains("`acc` enters as f32[8]"), "{e}");
    assert!(e.message.contains("f16[8]"), "{e}");
}

#[test]
fn bool_condition_runs_one_branch_at_trace_time() {
    let k = trace("k", |p| {
        let out = p.ptr("out", DType::I32);
        let mut taken = Vec::new();
        for flag in [true, false] {
            let v = flag.branch((), |t, ()| {
                taken.push(t);
                if t {
                    full::<i32>([4], 7)
                } else {
                    full::<i32>([4], 9)
                }
            });
            store_unmasked(out + arange(0, 4), v);
        }
        assert_eq!(taken, vec![true, false]);
    })
    .unwrap();
    assert_eq!(count_ops(&k, |o| matches!(o, Op::If)), 0);
}

#[test]
fn tile_condition_traces_both_branches_into_an_if() {
    let k = trace("k", |p| {
        let n = p.scalar("n", DType::I32);
        let out = p.ptr("out", DType::I32);
        let mut taken = Vec::new();
        let (v, (Named(_, x),)) = n.gt(5).branch((Named("x", 1i64),), |t, c| {
            taken.push(t);
            (if t { n * 2 } else { n + 3 }, c)
        });
        assert_eq!((taken, x), (vec![true, false], 1));
        store_unmasked(out, v);
    })
    .unwrap();
    assert_eq!(count_ops(&k, |o| matches!(o, Op::If)), 1);
}

#[test]
fn while_any_unrolls_on_bool_and_emits_while_on_tile() {
    let k = trace("k", |p| {
        let n = p.scalar("n", DType::I32);
        let out = p.ptr("out", DType::I32);
        // Rust condition: three trace-time iterations, three adds.
        let (i, t) = while_any((0, scalar(0)), |(i, _)| i < 3, |(i, t)| (i + 1, t + n));
        assert_eq!(i, 3);
        // Tile condition: one IR while.
        let u = while_any(t, |u| u.lt(100), |u| u * 2);
        store_unmasked(out, u);
    })
    .unwrap();
    assert_eq!(count_ops(&k, |o| matches!(o, Op::Binary(BinaryOp::Add))), 3);
    assert_eq!(count_ops(&k, |o| matches!(o, Op::While)), 1);
}

#[test]
fn static_range_steps_and_rejects_zero_step() {
    let k = trace("k", |_| {
        assert_eq!(static_range(1, 10, 3).collect::<Vec<i32>>(), vec![1, 4, 7]);
        assert_eq!(static_range(0usize, 0, 1).count(), 0);
    })
    .unwrap();
    assert_eq!(k.insts.len(), 0);
    let e = trace("k", |_| {
        assert_eq!(static_range(0, 4, 0).count(), 0);
    })
    .unwrap_err();
    assert!(e.message.contains("step must be positive"), "{e}");
}
