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
