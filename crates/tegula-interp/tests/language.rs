//! Triton-language ops on the interpreter: `debug_barrier`, `assume`, pointers from integers
//! and back, `select` on numeric conditions, `load` without `other`, per-axis hints,
//! `split` / `join` / `interleave`.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::{run, Buffer, Options};
use tegula_ir::prelude::*;
use tegula_ir::Op;

#[test]
fn debug_barrier_is_a_no_op_in_program_order() {
    let k = trace("barrier", |p| {
        let x = p.ptr("x", DType::I32);
        let o = arange(0, 8);
        store_unmasked(x + o, o * 2);
        debug_barrier();
        let v = load_unmasked(x + (7 - o));
        debug_barrier();
        store_unmasked(x + o, v + 1);
    })
    .unwrap();
    assert!(k.to_string().contains("debug_barrier"));
    let x = Arc::new(Buffer::zeroed(DType::I32, 8));
    run(&k, [1, 1, 1], &[ptr(&x)], &Options::default()).unwrap();
    assert_eq!(x.to_vec::<i32>().unwrap(), vec![15, 13, 11, 9, 7, 5, 3, 1]);
}

#[test]
fn assume_is_checked_by_the_interpreter() {
    let line = std::cell::Cell::new(0);
    let k = trace("assume", |p| {
        let (x, n) = (p.ptr("x", DType::I32), p.scalar("n", DType::I32));
        assume(n.gt(0));
        line.set(line!() + 1);
        assume(n % 4); // numeric: nonzero is true
        store_unmasked(x + arange(0, 4), n);
    })
    .unwrap();
    let x = Arc::new(Buffer::zeroed(DType::I32, 4));
    let arg = |v| tegula_interp::Arg::Int(v);
    run(&k, [1, 1, 1], &[ptr(&x), arg(5)], &Options::default()).unwrap();
    let e = run(&k, [1, 1, 1], &[ptr(&x), arg(8)], &Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("assumption violated"), "{msg}");
    assert!(
        msg.contains(&format!("language.rs:{}", line.get())),
        "{msg}"
    );
}

#[test]
fn pointers_round_trip_through_integers() {
    // to_int differences are byte distances; int_to_ptr of an address (plus a byte offset)
    // reads the same elements; a pointer table stored as i64 works within a launch.
    let k = trace("ptrs", |p| {
        let (x, y, out) = (
            p.ptr("x", DType::F32),
            p.ptr("y", DType::F32),
            p.ptr("out", DType::F32),
        );
        let dist = p.ptr("dist", DType::I64);
        let o = arange(0, 4);
        let xa = (x + o).to_int();
        store_unmasked(dist + o, xa - x.to_int());
        let back = int_to_ptr::<f32>(xa + 4);
        let table = select(o.lt(2), x.to_int(), y.to_int());
        let base = int_to_ptr::<f32>(table);
        store_unmasked(
            out + o,
            load_unmasked(back) + load_unmasked(base + o) * 100.0,
        );
        let as_u32 = (x + o).cast_ptr::<u32>();
        store_unmasked(
            out + 4 + o,
            load_unmasked(as_u32).cast(DType::F32) * 0.0 + 1.0,
        );
    })
    .unwrap();
    let x = buf(&[1.0f32, 2.0, 3.0, 4.0, 5.0]);
    let y = buf(&[10.0f32, 20.0, 30.0, 40.0]);
    let out = Arc::new(Buffer::zeroed(DType::F32, 8));
    let dist = Arc::new(Buffer::zeroed(DType::I64, 4));
    let args = [ptr(&x), ptr(&y), ptr(&out), ptr(&dist)];
    run(&k, [1, 1, 1], &args, &Options::default()).unwrap();
    assert_eq!(dist.to_vec::<i64>().unwrap(), vec![0, 4, 8, 12]);
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        vec![102.0, 203.0, 3004.0, 4005.0, 1.0, 1.0, 1.0, 1.0]
    );
    // An integer that is no address is an error when it becomes a pointer.
    let k = trace("bad", |p| {
        let (a, out) = (p.scalar("a", DType::I64), p.ptr("out", DType::F32));
        store_unmasked(out, load_unmasked(int_to_ptr::<f32>(a)));
    })
    .unwrap();
    let e = run(
        &k,
        [1, 1, 1],
        &[tegula_interp::Arg::Int(12345), ptr(&out)],
        &Options::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("not an address"), "{e}");
    // Pointers need i64/u64 integers.
    let e = trace("k", |p| {
        let a = p.scalar("a", DType::I32);
        let _ = int_to_ptr::<f32>(a);
    })
    .unwrap_err();
    assert!(e.message.contains("i64"), "{e}");
}

#[test]
fn select_takes_numeric_conditions_and_load_masked_reads_zero() {
    let out = eval(
        &[buf(&[0i32, 3, -1, 0]), buf(&[1.0f32, 2.0, 3.0, 4.0])],
        |t| select(t[0], t[1], -1.0),
    );
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![-1.0, 2.0, 3.0, -1.0]);
    let out = eval(&[buf(&[0.0f32, f32::NAN, -0.0, 0.5])], |t| {
        select(t[0], 1.0f32, 2.0f32)
    });
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![2.0, 1.0, 2.0, 1.0]);
    let k = trace("lm", |p| {
        let (x, y) = (p.ptr("x", DType::F32), p.ptr("y", DType::F32));
        let o = arange(0, 8);
        store_unmasked(y + o, load_masked(x + o, o.lt(3)));
    })
    .unwrap();
    let x = buf(&[7.0f32, 8.0, 9.0]);
    let y = Arc::new(Buffer::zeroed(DType::F32, 8));
    y.write_bits(5, 0x4000_0000);
    run(&k, [1, 1, 1], &[ptr(&x), ptr(&y)], &Options::default()).unwrap();
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![7.0, 8.0, 9.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
}

#[test]
fn hints_take_one_value_per_axis() {
    let k = trace("hints", |p| {
        let x = p.ptr("x", DType::F32);
        let rows = arange(0, 16).col() * 64;
        let cols = arange(0, 64).row();
        let offs = multiple_of(max_contiguous(rows + cols, [1, 64]), [64, 16]);
        let one = multiple_of(arange(0, 16), 16);
        let rows_alike = max_constancy(rows, [1, 64]);
        store_unmasked(x + offs, 1.0);
        store_unmasked(x + one, 2.0);
        store_unmasked(x + rows_alike + cols, 3.0);
    })
    .unwrap();
    let ops: Vec<Op> = k.insts.iter().map(|(_, d)| d.op.clone()).collect();
    assert!(ops.contains(&Op::MaxConstancy { n: vec![1, 64] }));
    assert!(ops.contains(&Op::MultipleOf { n: vec![64, 16] }));
    assert!(ops.contains(&Op::MaxContiguous { n: vec![1, 64] }));
    assert!(ops.contains(&Op::MultipleOf { n: vec![16] }));
    let e = trace("k", |p| {
        let x = p.ptr("x", DType::F32);
        let o = arange(0, 16).col() + arange(0, 16).row();
        store_unmasked(x + multiple_of(o, [16, 16, 16]), 0.0);
    })
    .unwrap_err();
    assert!(e.message.contains("one positive value per axis"), "{e}");
}

#[test]
fn split_join_interleave_follow_triton() {
    let a = buf(&[1.0f32, -0.0, 3.0, f32::INFINITY]);
    let b = buf(&[5.0f32, 6.0, -7.0, 8.0]);
    let j = eval(&[a.clone(), b.clone()], |t| {
        let j = join(t[0], t[1]); // [4, 2]
        let (x, y) = split(j);
        x * 10.0 + y
    });
    assert_eq!(
        j.to_vec::<f32>().unwrap(),
        vec![15.0, 6.0, 23.0, f32::INFINITY]
    );
    // split keeps -0.0.
    let z = eval(&[a.clone(), b.clone()], |t| split(join(t[0], t[1])).0);
    assert_eq!(z.to_vec::<f32>().unwrap()[1].to_bits(), (-0.0f32).to_bits());
    // interleave: a0 b0 a1 b1 .., stored through a tile twice as long.
    let k = trace("il", |p| {
        let (x, y, out) = (
            p.ptr("x", DType::I16),
            p.ptr("y", DType::I16),
            p.ptr("out", DType::I16),
        );
        let o = arange(0, 4);
        let v = interleave(load_unmasked(x + o), load_unmasked(y + o));
        store_unmasked(out + arange(0, 8), v);
        let (lo, hi) = split(
            join(load_unmasked(x + o), load_unmasked(y + o))
                .trans()
                .trans(),
        );
        store_unmasked(out + 8 + o, hi - lo);
    })
    .unwrap();
    let (x, y) = (buf(&[1i16, 2, 3, -32768]), buf(&[10i16, 20, 30, 32767]));
    let out = Arc::new(Buffer::zeroed(DType::I16, 12));
    run(
        &k,
        [1, 1, 1],
        &[ptr(&x), ptr(&y), ptr(&out)],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(
        out.to_vec::<i16>().unwrap(),
        vec![1, 10, 2, 20, 3, 30, -32768, 32767, 9, 18, 27, -1]
    );
    let e = trace("k", |p| {
        let x = p.ptr("x", DType::F32);
        let _ = split(load_unmasked(x + arange(0, 4)));
    })
    .unwrap_err();
    assert!(e.message.contains("size 2"), "{e}");
}

#[test]
fn cat_puts_a_before_b_along_the_first_axis() {
    // [2, 4] and [2, 4] (b an i8 tile promoted to a's i32) into [4, 4], stored row-major.
    let k = trace("cat", |p| {
        let (x, y, out) = (
            p.ptr("x", DType::I32),
            p.ptr("y", DType::I8),
            p.ptr("out", DType::I32),
        );
        let o = arange(0, 2).col() * 4 + arange(0, 4).row();
        let v = cat(load_unmasked(x + o), load_unmasked(y + o), true);
        let oo = arange(0, 4).col() * 4 + arange(0, 4).row();
        store_unmasked(out + oo, v);
        // Rank 1, b a scalar broadcast to a's shape.
        store_unmasked(
            out + 16 + arange(0, 8),
            cat(load_unmasked(x + arange(0, 4)), 7, false),
        );
    })
    .unwrap();
    let x = buf(&[1i32, 2, 3, 4, 5, 6, 7, i32::MIN]);
    let y = buf(&[-1i8, -2, -3, -4, 127, -128, 0, 9]);
    let out = Arc::new(Buffer::zeroed(DType::I32, 24));
    run(
        &k,
        [1, 1, 1],
        &[ptr(&x), ptr(&y), ptr(&out)],
        &Options::default(),
    )
    .unwrap();
    let mut want = vec![
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        i32::MIN,
        -1,
        -2,
        -3,
        -4,
        127,
        -128,
        0,
        9,
    ];
    want.extend([1, 2, 3, 4, 7, 7, 7, 7]);
    assert_eq!(out.to_vec::<i32>().unwrap(), want);
    let e = trace("k", |p| {
        let x = p.ptr("x", DType::F32);
        let _ = cat(load_unmasked(x), 1.0, true);
    })
    .unwrap_err();
    assert!(e.message.contains("rank 1 or more"), "{e}");
}
