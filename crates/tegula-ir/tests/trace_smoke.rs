use tegula_ir::prelude::*;

#[test]
fn gemv_traces() {
    let block = 128usize;
    let k = trace("gemv", |p| {
        let a = p.ptr("a", DType::F16);
        let x = p.ptr("x", DType::F16);
        let y = p.ptr("y", DType::F32);
        let n = p.scalar("n", DType::I32);
        let row = program_id(0);
        let offs = arange(0, block as i64);
        let acc = for_range(0, n, block, zeros::<f32>([block]), |start, acc| {
            let cols = start + offs;
            let mask = cols.lt(n);
            let av = load(a + row * n + cols, mask, 0.0).to::<f32>();
            let xv = load(x + cols, mask, 0.0).to::<f32>();
            acc + av * xv
        });
        store_unmasked(y + row, sum(acc, 0));
    })
    .unwrap();
    println!("{k}");
    assert!(k.insts.len() > 10);
}

#[test]
fn shape_error_names_line() {
    let e = trace("bad", |_| {
        let a = arange(0, 16);
        let b = arange(0, 32);
        let _ = a + b;
    })
    .unwrap_err();
    assert!(e.message.contains("shape mismatch"), "{e}");
    assert!(e.loc.file.ends_with("trace_smoke.rs"), "{e}");
    assert_eq!(e.loc.line, 32);
}

/// The line of the caller, for comparing with a trace error's `loc`.
#[track_caller]
fn here() -> u32 {
    std::panic::Location::caller().line()
}

/// Tiles of 2^32 elements or more (or a dimension that large) are trace errors at the line
/// that asked for them, not panics ("dimension too large for u32" before).
#[test]
fn oversized_tiles_are_trace_errors_at_the_users_line() {
    // Each case asks for an oversized tile and returns the line that asked.
    type Case = Box<dyn Fn() -> u32>;
    let cases: Vec<(&str, Case)> = vec![
        (
            "zeros",
            Box::new(|| {
                let line = here();
                let _ = zeros::<f32>([1usize << 32]);
                line + 1
            }),
        ),
        (
            "full 2-D",
            Box::new(|| {
                let line = here();
                let _ = full::<f32>([1 << 16, 1 << 16], 1.0);
                line + 1
            }),
        ),
        (
            "reshape",
            Box::new(|| {
                let a = arange(0, 16);
                let line = here();
                let _ = a.reshape([16, 1 << 32]);
                line + 1
            }),
        ),
        (
            "broadcast_to",
            Box::new(|| {
                let a = arange(0, 16).col();
                let line = here();
                let _ = a.broadcast_to([16, usize::MAX]);
                line + 1
            }),
        ),
        (
            "arange",
            Box::new(|| {
                let line = here();
                let _ = arange(0, 1i64 << 33);
                line + 1
            }),
        ),
        (
            "broadcast of two operands",
            Box::new(|| {
                let a = zeros::<f32>([1 << 16, 1]);
                let b = zeros::<f32>([1, 1 << 16]);
                let line = here();
                let _ = a + b;
                line + 1
            }),
        ),
    ];
    for (what, body) in cases {
        let line = std::cell::Cell::new(0);
        let e = trace("big", |_| line.set(body())).unwrap_err();
        assert!(e.loc.file.ends_with("trace_smoke.rs"), "{what}: {e}");
        assert_eq!(e.loc.line, line.get(), "{what}: {e}");
        assert!(
            e.message.contains("2^32 - 1") || e.message.contains("does not fit in i32"),
            "{what}: {e}"
        );
    }
}

/// `reduce_with`'s trace errors, each at the caller's line.
#[test]
fn combine_errors_are_trace_errors_at_the_users_line() {
    let line = line!() + 4;
    let e = trace("shapes", |p| {
        let x = p.ptr("x", DType::F32);
        let v = load_unmasked(x + arange(0, 8));
        reduce_with((v, arange(0, 16)), 0, |a, _| a);
    })
    .unwrap_err();
    assert_eq!(e.loc.line, line, "{e}");
    assert!(
        e.message.contains("one shape") && e.message.contains("i32[16]"),
        "{e}"
    );

    let line = line!() + 3;
    let e = trace("axis", |_| {
        let v = arange(0, 8);
        scan_with(v, 1, false, |a, b| a + b);
    })
    .unwrap_err();
    assert_eq!(e.loc.line, line, "{e}");
    assert!(e.message.contains("axis 1 does not exist"), "{e}");

    // The combine promotes i32 + i64 to i64: the wrong dtype for the i32 tile.
    let line = line!() + 3;
    let e = trace("dtype", |_| {
        let v = arange(0, 8);
        reduce_with(v, 0, |a, b| a + b.to::<i64>());
    })
    .unwrap_err();
    assert_eq!(e.loc.line, line, "{e}");
    assert!(
        e.message.contains("returns i64") && e.message.contains("must be i32"),
        "{e}"
    );

    // A Vec of tiles whose combine drops one.
    let line = line!() + 3;
    let e = trace("arity", |_| {
        let v = arange(0, 8);
        reduce_with(vec![v, v], 0, |a, _| vec![a[0]]);
    })
    .unwrap_err();
    assert_eq!(e.loc.line, line, "{e}");
    assert!(e.message.contains("must return 2 values"), "{e}");

    // A combine that returns a captured tile rather than a scalar.
    let line = line!() + 3;
    let e = trace("captured", |_| {
        let v = arange(0, 8);
        reduce_with(v, 0, |_, _| v);
    })
    .unwrap_err();
    assert_eq!(e.loc.line, line, "{e}");
    assert!(e.message.contains("i32[8]"), "{e}");
}
