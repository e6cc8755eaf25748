//! `#[tegula::kernel]` traced without running: the IR each rewrite produces, the loop-carried
//! variables it detects, trace-time versus run-time control flow, and error locations.

use tegula::ir::{BinaryOp, Kernel, Op, UnaryOp};
use tegula::prelude::*;

/// The instructions of `k` (nested regions included) whose op satisfies `pred`.
fn find(k: &Kernel, pred: impl Fn(&Op) -> bool) -> Vec<tegula::ir::Inst> {
    k.walk()
        .into_iter()
        .filter(|&i| pred(&k.insts[i].op))
        .collect()
}

fn count(k: &Kernel, pred: impl Fn(&Op) -> bool) -> usize {
    find(k, pred).len()
}

/// The types of an instruction's results, printed (`f32[128]`).
fn result_types(k: &Kernel, inst: tegula::ir::Inst) -> Vec<String> {
    k.insts[inst]
        .results
        .iter()
        .map(|&v| k.ty(v).to_string())
        .collect()
}

/// The line after the comment `marker` in this file (so tests survive edits above them).
fn line_of(marker: &str) -> u32 {
    let src = include_str!("macro_trace.rs");
    let idx = src
        .lines()
        .position(|l| l.contains(marker) && !l.contains("line_of("))
        .unwrap_or_else(|| panic!("marker {marker} not found"));
    idx as u32 + 2
}

#[tegula::kernel]
fn gemv(a: Ptr<f16>, x: Ptr<f16>, y: Ptr<f32>, n: i32, #[constexpr] block: usize) {
    let row = program_id(0);
    let offs = arange(0, block as i64);
    let mut acc = zeros::<f32>([block]);
    for start in range(0, n, block) {
        let cols = start + offs;
        let mask = cols.lt(n);
        let av = load(a + row * n + cols, mask, 0.0).to::<f32>();
        let xv = load(x + cols, mask, 0.0).to::<f32>();
        acc += av * xv;
    }
    store_unmasked(y + row, sum(acc, 0));
}

#[test]
fn gemv_loop_carries_the_accumulator() {
    let k = gemv::trace(128).unwrap();
    let names: Vec<_> = k.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "x", "y", "n"]);
    let param_types: Vec<_> = k.params.iter().map(|p| p.ty.to_string()).collect();
    assert_eq!(param_types, ["ptr<f16>", "ptr<f16>", "ptr<f32>", "i32"]);
    let fors = find(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(fors.len(), 1);
    assert_eq!(result_types(&k, fors[0]), ["f32[128]"]);
    let text = k.to_string();
    for op in ["for ", "load ", "reduce.sum", "store ", "yield "] {
        assert!(text.contains(op), "missing {op:?} in\n{text}");
    }
    // The constexpr is a Rust value: another block size is another specialization.
    let k64 = gemv::trace(64).unwrap();
    let fors = find(&k64, |o| matches!(o, Op::For { .. }));
    assert_eq!(result_types(&k64, fors[0]), ["f32[64]"]);
}

#[tegula::kernel]
fn carried_mix(x: Ptr<f32>, out: Ptr<f32>, n: i32, #[constexpr] block: usize) {
    let offs = arange(0, block as i64);
    let mut acc = zeros::<f32>([block]);
    let mut hi = full::<f32>([block], -1.0e30);
    let mut count = scalar(0);
    let mut untouched = full::<f32>([block], 2.0);
    untouched *= 1.5;
    for start in range(0, n, block) {
        let v = load(x + start + offs, (start + offs).lt(n), 0.0);
        // Declared inside the loop: not carried, even though it is assigned.
        let mut local = v * untouched;
        local += 1.0;
        acc += local;
        if start.gt(0) {
            hi = maximum(hi, v);
        }
        {
            count += 1;
        }
    }
    store_unmasked(out + offs, acc + hi + count.to::<f32>());
}

#[test]
fn carried_variables_include_nested_ifs_and_blocks_only() {
    let k = carried_mix::trace(32).unwrap();
    let fors = find(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(fors.len(), 1);
    // acc, hi, count in order of first assignment; not `local`, not the read-only `untouched`.
    assert_eq!(result_types(&k, fors[0]), ["f32[32]", "f32[32]", "i32"]);
    let ifs = find(&k, |o| matches!(o, Op::If));
    assert_eq!(ifs.len(), 1);
    assert_eq!(result_types(&k, ifs[0]), ["f32[32]"]);
}

#[tegula::kernel]
fn unrolled(out: Ptr<i32>, #[constexpr] reps: usize) {
    let mut v = zeros::<i32>([16]);
    for i in static_range(reps) {
        v += i as i32 + 1;
    }
    for j in static_range(0, 10, 4) {
        v *= j + 2;
    }
    for _ in static_range(3, 5) {
        v -= 1;
    }
    store_unmasked(out + arange(0, 16), v);
}

#[test]
fn static_range_unrolls_at_trace_time() {
    for reps in [0, 1, 5] {
        let k = unrolled::trace(reps).unwrap();
        assert_eq!(count(&k, |o| matches!(o, Op::For { .. })), 0);
        assert_eq!(count(&k, |o| *o == Op::Binary(BinaryOp::Add)), reps);
        // j = 0, 4, 8
        assert_eq!(count(&k, |o| *o == Op::Binary(BinaryOp::Mul)), 3);
        // 3..5
        assert_eq!(count(&k, |o| *o == Op::Binary(BinaryOp::Sub)), 2);
    }
}

#[tegula::kernel]
fn activation(x: Ptr<f32>, out: Ptr<f32>, #[constexpr] kind: u32, #[constexpr] block: usize) {
    let offs = arange(0, block as i64);
    let mut v = load_unmasked(x + offs);
    if kind == 0 {
        v = exp(v);
    } else if kind == 1 {
        v *= 2.0;
    } else {
        v = sigmoid(v);
    }
    // Not visibly a bool to the macro: dispatched through `Condition`, decided at trace time.
    let big = block > 64;
    let scale = if big { 0.25 } else { 1.75 };
    store_unmasked(out + offs, v * scale);
}

#[test]
fn rust_bool_ifs_choose_at_trace_time() {
    let exp_count = |k: &Kernel| count(k, |o| *o == Op::Unary(UnaryOp::Exp));
    let k = activation::trace(0, 32).unwrap();
    assert_eq!(count(&k, |o| matches!(o, Op::If)), 0);
    assert_eq!(exp_count(&k), 1);
    assert!(k.to_string().contains("1.75"), "{k}");
    assert!(!k.to_string().contains("0.25"), "{k}");

    let k = activation::trace(1, 128).unwrap();
    assert_eq!(count(&k, |o| matches!(o, Op::If)), 0);
    assert_eq!(exp_count(&k), 0);
    assert!(k.to_string().contains("0.25"), "{k}");

    // sigmoid = 1 / (1 + exp(-x)): one exp, one negation.
    let k = activation::trace(2, 32).unwrap();
    assert_eq!(exp_count(&k), 1);
    assert_eq!(count(&k, |o| *o == Op::Unary(UnaryOp::Neg)), 1);
}

#[tegula::kernel]
fn branchy(out: Ptr<i32>, n: i32) {
    let pid = program_id(0);
    let mut v = pid * 10;
    let mut w = pid;
    if pid.lt(n) {
        v += 1;
    } else if pid.eq(n) {
        v += 2;
        w *= 3;
    } else {
        v -= 1;
    }
    let y = if v.gt(5) { v } else { w };
    store_unmasked(out + pid, y + w);
}

#[test]
fn tile_ifs_become_ir_ifs_with_results() {
    let k = branchy::trace().unwrap();
    let ifs = find(&k, |o| matches!(o, Op::If));
    // if / else if (nested in the else region) / the value-producing if.
    assert_eq!(ifs.len(), 3);
    assert_eq!(result_types(&k, ifs[0]), ["i32", "i32"]);
    assert_eq!(result_types(&k, ifs[1]), ["i32", "i32"]);
    assert_eq!(result_types(&k, ifs[2]), ["i32"]);
    // The else-if sits inside the else region of the first if.
    let outer_else = k.insts[ifs[0]].regions[1];
    assert!(k.blocks[outer_else].insts.contains(&ifs[1]));
}

#[tegula::kernel]
fn doubling(out: Ptr<i32>, n: i32) {
    let mut x = scalar(1);
    let mut steps = scalar(0);
    while x.lt(n) {
        x *= 2;
        steps += 1;
    }
    let mut k = 0;
    while k < 3 {
        x += 1;
        k += 1;
    }
    store_unmasked(out, x + steps);
}

#[test]
fn while_on_a_tile_is_an_ir_while_and_on_a_bool_unrolls() {
    let k = doubling::trace().unwrap();
    let whiles = find(&k, |o| matches!(o, Op::While));
    assert_eq!(whiles.len(), 1);
    assert_eq!(result_types(&k, whiles[0]), ["i32", "i32"]);
    // steps += 1 inside the IR while, three x + 1 from the Rust while, and the final add.
    assert_eq!(count(&k, |o| *o == Op::Binary(BinaryOp::Add)), 5);
}

#[tegula::kernel]
fn axpy<T: Element, const BLOCK: usize>(x: Ptr<T>, y: Ptr<T>, alpha: T, n: i32) {
    let offs = program_id(0) * (BLOCK as i32) + arange(0, BLOCK as i64);
    let mask = offs.lt(n);
    let v = load(x + offs, mask, 0.0) * alpha + load(y + offs, mask, 0.0);
    store(y + offs, v, mask);
}

#[test]
fn type_params_and_const_generics_specialize() {
    let k = axpy::trace::<f16, 64>().unwrap();
    let types: Vec<_> = k.params.iter().map(|p| p.ty.to_string()).collect();
    assert_eq!(types, ["ptr<f16>", "ptr<f16>", "f16", "i32"]);
    assert!(k.to_string().contains("arange 0, 64"), "{k}");
    let k = axpy::trace::<f32, 256>().unwrap();
    let types: Vec<_> = k.params.iter().map(|p| p.ty.to_string()).collect();
    assert_eq!(types, ["ptr<f32>", "ptr<f32>", "f32", "i32"]);
}

fn too_small(block: usize) -> bool {
    block < 32
}

#[tegula::kernel]
fn early_exit(out: Ptr<f32>, #[constexpr] block: usize) {
    if too_small(block) {
        return;
    }
    store_unmasked(out + arange(0, block as i64), 1.0);
}

#[test]
fn return_in_a_rust_if_ends_the_trace() {
    let k = early_exit::trace(16).unwrap();
    assert_eq!(count(&k, |o| matches!(o, Op::Store { .. })), 0);
    let k = early_exit::trace(64).unwrap();
    assert_eq!(count(&k, |o| matches!(o, Op::Store { .. })), 1);
}

#[tegula::kernel]
fn many_carried(out: Ptr<i32>, n: i32) {
    let (mut a0, mut a1, mut a2, mut a3, mut a4) =
        (scalar(0), scalar(1), scalar(2), scalar(3), scalar(4));
    let (mut a5, mut a6, mut a7, mut a8, mut a9) =
        (scalar(5), scalar(6), scalar(7), scalar(8), scalar(9));
    let (mut a10, mut a11, mut a12) = (scalar(10), scalar(11), scalar(12).to::<i64>());
    for i in range(n) {
        a0 += i;
        a1 += i;
        a2 += i;
        a3 += i;
        a4 += i;
        a5 += i;
        a6 += i;
        a7 += i;
        a8 += i;
        a9 += i;
        a10 += i;
        a11 += i;
        a12 += i.to::<i64>();
    }
    let s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    store_unmasked(out, s + a12.to::<i32>());
}

#[test]
fn more_than_twelve_carried_variables() {
    let k = many_carried::trace().unwrap();
    let fors = find(&k, |o| matches!(o, Op::For { .. }));
    let mut expected = vec!["i32"; 12];
    expected.push("i64");
    assert_eq!(result_types(&k, fors[0]), expected);
}

#[tegula::kernel]
fn two_accumulators(x: Ptr<f32>, out: Ptr<f32>, n: i32) {
    let offs = arange(0, 16);
    let mut accs = [zeros::<f32>([16]); 2];
    let mut steps = 0;
    for i in range(0, n, 32) {
        accs[0] += load_unmasked(x + i + offs);
        accs[1] += load_unmasked(x + i + 16 + offs);
    }
    for _ in range(n) {
        steps += 0; // a Rust value assigned but unchanged is fine
    }
    store_unmasked(out + offs, accs[0] + accs[1] + steps);
}

#[test]
fn arrays_assigned_by_index_are_carried_whole() {
    let k = two_accumulators::trace().unwrap();
    let fors = find(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(fors.len(), 2);
    assert_eq!(result_types(&k, fors[0]), ["f32[16]", "f32[16]"]);
    assert!(result_types(&k, fors[1]).is_empty());
}

#[tegula::kernel]
fn bad_carry(x: Ptr<f32>, n: i32) {
    let mut acc = zeros::<f32>([16]);
    // MARK: bad_carry loop
    for i in range(n) {
        acc = load_unmasked(x + i + arange(0, 16)).to::<f16>();
    }
    store_unmasked(x + arange(0, 16), acc);
}

#[test]
fn dtype_change_of_a_carried_variable_points_at_the_loop() {
    let e = bad_carry::trace().unwrap_err();
    assert!(e.message.contains("`acc` enters as f32[16]"), "{e}");
    assert!(e.message.contains("f16[16]"), "{e}");
    assert!(e.loc.file.ends_with("macro_trace.rs"), "{e}");
    assert_eq!(e.loc.line, line_of("MARK: bad_carry loop"), "{e}");
}

#[tegula::kernel]
fn counts_in_loop(out: Ptr<i32>, n: i32) {
    let mut count = 0i32;
    let mut t = scalar(0);
    // MARK: count loop
    for i in range(n) {
        count += 1;
        t += i;
    }
    store_unmasked(out, t + count);
}

#[test]
fn rust_value_changing_in_a_runtime_loop_is_a_trace_error() {
    let e = counts_in_loop::trace().unwrap_err();
    assert!(e.message.contains("`count` is a Rust value"), "{e}");
    assert!(e.message.contains("make it a tile"), "{e}");
    assert_eq!(e.loc.line, line_of("MARK: count loop"), "{e}");
}

#[tegula::kernel]
fn branch_disagrees(out: Ptr<i32>, n: i32) {
    let mut mode = 1u8;
    // MARK: mode if
    if n.gt(0) {
        mode = 2;
    }
    store_unmasked(out, scalar(mode as i32));
}

#[tegula::kernel]
fn shape_error(out: Ptr<f32>) {
    let a = arange(0, 16);
    let b = arange(0, 32);
    // MARK: shape error
    store_unmasked(out + a, (a + b).to::<f32>());
}

#[test]
fn other_trace_errors_point_at_user_lines() {
    let e = branch_disagrees::trace().unwrap_err();
    assert!(e.message.contains("`mode`"), "{e}");
    assert_eq!(e.loc.line, line_of("MARK: mode if"), "{e}");
    let e = shape_error::trace().unwrap_err();
    assert!(e.message.contains("shape mismatch"), "{e}");
    assert_eq!(e.loc.line, line_of("MARK: shape error"), "{e}");
}

/// Nested run-time loops: the inner loop's carried values are carried by the outer one too.
#[tegula::kernel]
fn nested(out: Ptr<f32>, m: i32, n: i32) {
    let mut total = zeros::<f32>([8]);
    let mut rows = scalar(0);
    for i in range(m) {
        let mut row = zeros::<f32>([8]);
        for j in range(n) {
            row += (i * n + j).to::<f32>();
        }
        total += row;
        rows += 1;
    }
    store_unmasked(out + arange(0, 8), total + rows.to::<f32>());
}

#[test]
fn nested_runtime_loops() {
    let k = nested::trace().unwrap();
    let fors = find(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(fors.len(), 2);
    assert_eq!(result_types(&k, fors[0]), ["f32[8]", "i32"]);
    assert_eq!(result_types(&k, fors[1]), ["f32[8]"]);
}

#[tegula::kernel]
fn staged_sums(
    x: Ptr<f32>,
    out: Ptr<f32>,
    n: i32,
    #[constexpr] block: usize,
    #[constexpr] num_stages: u32,
) {
    let offs = arange(0, block as i64);
    let mut acc = zeros::<f32>([block]);
    let mut count = zeros::<i32>([]);
    for start in range(0, n, block).num_stages(num_stages) {
        acc += load(x + start + offs, (start + offs).lt(n), 0.0);
    }
    for _ in range(n).num_stages(1) {
        count += 1;
    }
    // zero-stages marker: the line after this one
    for _ in range(1, n).num_stages(num_stages - 3) {
        count += 2;
    }
    store_unmasked(out + offs, acc + count.to::<f32>());
}

/// `range(..).num_stages(s)`: the loop carries the constexpr's count as an attribute (and a
/// plain `range` none), the interpreter runs it as any loop, and 0 is an error at its line.
#[test]
fn range_num_stages_is_a_loop_attribute() -> tegula::Result<()> {
    let stages_of = |k: &Kernel| -> Vec<Option<u32>> {
        find(k, |o| matches!(o, Op::For { .. }))
            .into_iter()
            .map(|i| match k.insts[i].op {
                Op::For { num_stages } => num_stages,
                _ => unreachable!(),
            })
            .collect()
    };
    let k = staged_sums::trace(32, 4).unwrap();
    assert_eq!(stages_of(&k), [Some(4), Some(1), Some(1)]);
    assert!(k.to_string().contains("num_stages=4"), "{k}");
    let k = staged_gemv::trace(32).unwrap();
    assert_eq!(stages_of(&k), [None]);
    let dev = Device::cpu();
    let n = 100usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = dev.from_slice(&xs, [n])?;
    let out = dev.zeros::<f32>([32])?;
    staged_sums::launch(&dev, 1u32, &x, &out, n as i32, 32, 4)?;
    let got = out.to_vec()?;
    // 4 trips of 32 lanes (the last masked), then n + 2 (n - 1) counted.
    let count = (n + 2 * (n - 1)) as f32;
    for (lane, g) in got.iter().enumerate() {
        let want: f32 = (0..n).filter(|i| i % 32 == lane).map(|i| i as f32).sum();
        assert_eq!(*g, want + count, "lane {lane}");
    }
    let e = staged_sums::trace(32, 3).unwrap_err();
    assert_eq!(e.loc.line, line_of("zero-stages marker"), "{e}");
    assert!(e.message.contains("num_stages(0)"), "{e}");
    Ok(())
}

#[tegula::kernel]
fn staged_gemv(x: Ptr<f32>, out: Ptr<f32>, n: i32, #[constexpr] block: usize) {
    let offs = arange(0, block as i64);
    let mut acc = zeros::<f32>([block]);
    for start in range(0, n, block) {
        acc += load(x + start + offs, (start + offs).lt(n), 0.0);
    }
    store_unmasked(out + offs, acc);
}

/// `range(lo, hi, step).loop_unroll_factor(u)` with a carried recurrence whose result depends
/// on every iteration and its order (`h = 31 h + i`, wrapping), and a store an iteration.
#[tegula::kernel]
fn unrolled_hash(
    out: Ptr<i32>,
    trace_out: Ptr<i32>,
    lo: i32,
    hi: i32,
    #[constexpr] step: i32,
    #[constexpr] unroll: u32,
) {
    let mut h = zeros::<i32>([1]) + 7;
    let mut slot = zeros::<i32>([1]);
    for i in range(lo, hi, step).num_stages(2).loop_unroll_factor(unroll) {
        h = h * 31 + i;
        store_unmasked(trace_out + slot, zeros::<i32>([1]) + i);
        slot += 1;
    }
    store_unmasked(out + arange(0, 1), h);
}

#[test]
fn loop_unroll_factor_keeps_every_iteration_in_order() -> tegula::Result<()> {
    let dev = Device::cpu();
    for (lo, hi, step, unroll) in [
        (0, 37, 1, 4),
        (-5, 20, 3, 2),
        (3, 3, 1, 4),
        (10, 2, 1, 3),
        (0, 3, 1, 4),
        (0, 4, 1, 4),
        (1, 18, 2, 8),
        (0, 9, 1, 1),
    ] {
        let out = dev.zeros::<i32>([1])?;
        let seen = dev.full([64], -1i32)?;
        unrolled_hash::launch(&dev, 1u32, &out, &seen, lo, hi, step, unroll)?;
        let iters: Vec<i32> = (lo..hi).step_by(step as usize).collect();
        let want = iters
            .iter()
            .fold(7i32, |h, &i| h.wrapping_mul(31).wrapping_add(i));
        let what = format!("range({lo}, {hi}, {step}).loop_unroll_factor({unroll})");
        assert_eq!(out.to_vec()?[0], want, "{what}");
        let got = seen.to_vec()?;
        assert_eq!(&got[..iters.len()], &iters[..], "{what}");
        assert!(got[iters.len()..].iter().all(|&x| x == -1), "{what}");
    }
    // Two loops: the unrolled one (its body 4 copies, its stages the loop's) and the rest
    // (one stage: it runs fewer than 4 iterations).
    let k = unrolled_hash::trace(1, 4).unwrap();
    let loops = find(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(loops.len(), 2, "{k}");
    let stages: Vec<Option<u32>> = loops
        .iter()
        .map(|&l| match k.insts[l].op {
            Op::For { num_stages } => num_stages,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(stages, [Some(2), Some(1)]);
    let stores_in = |l| {
        let body = k.insts[l].regions[0];
        k.blocks[body]
            .insts
            .iter()
            .filter(|&&i| matches!(k.insts[i].op, Op::Store { .. }))
            .count()
    };
    assert_eq!((stores_in(loops[0]), stores_in(loops[1])), (4, 1));
    let e = unrolled_hash::trace(1, 0).unwrap_err();
    assert!(e.message.contains("loop_unroll_factor(0)"), "{e}");
    Ok(())
}

/// [`unrolled_hash`] with a run-time step, which may be negative.
#[tegula::kernel]
fn unrolled_hash_runtime_step(out: Ptr<i32>, lo: i32, hi: i32, step: i32) {
    let mut h = zeros::<i32>([1]) + 7;
    for i in range(lo, hi, step).loop_unroll_factor(3) {
        h = h * 31 + i;
    }
    store_unmasked(out + arange(0, 1), h);
}

#[test]
fn loop_unroll_factor_with_a_run_time_step_of_either_sign() -> tegula::Result<()> {
    let dev = Device::cpu();
    for (lo, hi, step) in [
        (0, 20, 1),
        (2, 30, 4),
        (20, 0, -1),
        (17, -5, -3),
        (0, 5, -1),
    ] {
        let out = dev.zeros::<i32>([1])?;
        unrolled_hash_runtime_step::launch(&dev, 1u32, &out, lo, hi, step)?;
        let mut want = 7i32;
        let mut i = lo;
        while (step > 0 && i < hi) || (step < 0 && i > hi) {
            want = want.wrapping_mul(31).wrapping_add(i);
            i += step;
        }
        assert_eq!(out.to_vec()?[0], want, "range({lo}, {hi}, {step})");
    }
    Ok(())
}
