//! Golden tests of the printer: small traced kernels and their exact text.

use tegula_ir::prelude::*;
use tegula_ir::Kernel;

fn add_kernel() -> Kernel {
    trace("add", |p| {
        let (x, y, out) = (
            p.ptr("x", DType::F32),
            p.ptr("y", DType::F32),
            p.ptr("out", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs = program_id(0) * 64 + arange(0, 64);
        let mask = offs.lt(n);
        store(
            out + offs,
            load(x + offs, mask, 0.0) + load_unmasked(y + offs),
            mask,
        );
    })
    .unwrap()
}

fn gemv_kernel() -> Kernel {
    trace("gemv", |p| {
        let a = p.ptr("a", DType::F16);
        let x = p.ptr("x", DType::F16);
        let y = p.ptr("y", DType::F32);
        let n = p.scalar("n", DType::I32);
        let row = program_id(0);
        let offs = arange(0, 32);
        let acc = for_range(0, n, 32, zeros::<f32>([32]), |start, acc| {
            let cols = start + offs;
            let av = load_unmasked(a + row * n + cols).to::<f32>();
            let xv = load_unmasked(x + cols).to::<f32>();
            acc + av * xv
        });
        store_unmasked(y + row, sum(acc, 0));
    })
    .unwrap()
}

fn control_kernel() -> Kernel {
    trace("control", |p| {
        let out = p.ptr("out", DType::I32);
        let n = p.scalar("n", DType::I32);
        let steps = while_loop(
            (n, scalar(0)),
            |(v, _)| v.gt(1),
            |(v, c)| (if_else((v % 2).eq(0), || v / 2, || v * 3 + 1), c + 1),
        );
        if_then(steps.1.gt(100), || device_print("long: ", &[n, steps.1]));
        store_unmasked(out, steps.1);
    })
    .unwrap()
}

fn attributes_kernel() -> Kernel {
    trace("attrs", |p| {
        let x = p.ptr("x", DType::F32);
        let c = p.ptr("c", DType::I32);
        let rows = arange(0, 16).col();
        let cols = arange(0, 16).row();
        let ptrs = x + rows * 16 + cols;
        let t = load_with(
            ptrs,
            LoadOptions {
                cache: CacheModifier::Cg,
                evict: EvictionPolicy::First,
                ..Default::default()
            },
        );
        let h = t.cast_rounded(DType::F16, Rounding::TowardZero);
        let d = dot_with(t, trans(t), None, InputPrecision::Ieee);
        let m = argmax(d, 1);
        let s = scan(d, ReduceOp::Max, 0, true);
        atomic_add(c + arange(0, 16), m, None);
        store_with(
            ptrs,
            s + h.to::<f32>(),
            StoreOptions {
                cache: CacheModifier::Cs,
                ..Default::default()
            },
        );
        device_assert(m.ge(0), "index");
    })
    .unwrap()
}

/// Compares the printed kernel with `expected` (which starts with a newline for readability).
#[track_caller]
fn golden(k: &Kernel, expected: &str) {
    let got = k.to_string();
    let expected = expected.strip_prefix('\n').unwrap_or(expected);
    assert!(got == expected, "printed:\n{got}\n\nexpected:\n{expected}");
}

/// A masked elementwise kernel: splats, pointer arithmetic, `mask=` and `other=`.
#[test]
fn prints_add() {
    golden(
        &add_kernel(),
        r#"
kernel @add(%x: ptr<f32>, %y: ptr<f32>, %out: ptr<f32>, %n: i32) {
  %4 = program_id 0 : i32
  %5 = const 64 : i32
  %6 = mul %4, %5 : i32
  %7 = arange 0, 64 : i32[64]
  %8 = splat %6 : i32[64]
  %9 = add %8, %7 : i32[64]
  %10 = splat %n : i32[64]
  %11 = cmp.lt %9, %10 : i1[64]
  %12 = splat %out : ptr<f32>[64]
  %13 = addptr %12, %9 : ptr<f32>[64]
  %14 = splat %x : ptr<f32>[64]
  %15 = addptr %14, %9 : ptr<f32>[64]
  %16 = const 0.0 : f32
  %17 = const 0.0 : f32[64]
  %18 = load %15, mask=%11, other=%17 : f32[64]
  %19 = splat %y : ptr<f32>[64]
  %20 = addptr %19, %9 : ptr<f32>[64]
  %21 = load %20 : f32[64]
  %22 = add %18, %21 : f32[64]
  store %13, %22, mask=%11
}"#,
    );
}

/// A for loop: induction variable, carried value, results after `->`.
#[test]
fn prints_gemv() {
    golden(
        &gemv_kernel(),
        r#"
kernel @gemv(%a: ptr<f16>, %x: ptr<f16>, %y: ptr<f32>, %n: i32) {
  %4 = program_id 0 : i32
  %5 = arange 0, 32 : i32[32]
  %6 = const 0.0 : f32[32]
  %7 = const 0 : i32
  %8 = const 32 : i32
  %25 = for %9 = %7 to %n step %8 iter(%10 = %6) -> (f32[32]) {
    %11 = splat %9 : i32[32]
    %12 = add %11, %5 : i32[32]
    %13 = mul %4, %n : i32
    %14 = addptr %a, %13 : ptr<f16>
    %15 = splat %14 : ptr<f16>[32]
    %16 = addptr %15, %12 : ptr<f16>[32]
    %17 = load %16 : f16[32]
    %18 = cast %17 : f32[32]
    %19 = splat %x : ptr<f16>[32]
    %20 = addptr %19, %12 : ptr<f16>[32]
    %21 = load %20 : f16[32]
    %22 = cast %21 : f32[32]
    %23 = mul %18, %22 : f32[32]
    %24 = add %10, %23 : f32[32]
    yield %24
  }
  %26 = addptr %y, %4 : ptr<f32>
  %27 = reduce.sum %25, axis=0 : f32
  store %26, %27
}"#,
    );
}

/// A while loop with a nested if/else, and an if without results.
#[test]
fn prints_control() {
    golden(
        &control_kernel(),
        r#"
kernel @control(%out: ptr<i32>, %n: i32) {
  %2 = const 0 : i32
  %22, %23 = while iter(%3 = %n, %4 = %2) -> (i32, i32) {
    %5 = const 1 : i32
    %6 = cmp.gt %3, %5 : i1
    condition %6
  } do (%7, %8) {
    %9 = const 2 : i32
    %10 = rem %7, %9 : i32
    %11 = const 0 : i32
    %12 = cmp.eq %10, %11 : i1
    %19 = if %12 -> (i32) {
      %13 = const 2 : i32
      %14 = div %7, %13 : i32
      yield %14
    } else {
      %15 = const 3 : i32
      %16 = mul %7, %15 : i32
      %17 = const 1 : i32
      %18 = add %16, %17 : i32
      yield %18
    }
    %20 = const 1 : i32
    %21 = add %8, %20 : i32
    yield %19, %21
  }
  %24 = const 100 : i32
  %25 = cmp.gt %23, %24 : i1
  if %25 {
    print "long: ", %n, %23
    yield
  } else {
    yield
  }
  store %out, %23
}"#,
    );
}

/// Attributes: cache and eviction hints, rtz rounding, dot precision, axes, reverse scans.
#[test]
fn prints_attributes() {
    golden(
        &attributes_kernel(),
        r#"
kernel @attrs(%x: ptr<f32>, %c: ptr<i32>) {
  %2 = arange 0, 16 : i32[16]
  %3 = expand_dims %2, axis=1 : i32[16, 1]
  %4 = arange 0, 16 : i32[16]
  %5 = expand_dims %4, axis=0 : i32[1, 16]
  %6 = const 16 : i32
  %7 = const 16 : i32[16, 1]
  %8 = mul %3, %7 : i32[16, 1]
  %9 = splat %x : ptr<f32>[16, 1]
  %10 = addptr %9, %8 : ptr<f32>[16, 1]
  %11 = broadcast %10 : ptr<f32>[16, 16]
  %12 = broadcast %5 : i32[16, 16]
  %13 = addptr %11, %12 : ptr<f32>[16, 16]
  %14 = load %13, cache=cg, evict=first : f32[16, 16]
  %15 = cast %14, rounding=rz : f16[16, 16]
  %16 = permute %14, perm=[1, 0] : f32[16, 16]
  %17 = const 0.0 : f32[16, 16]
  %18 = dot %14, %16, %17, precision=ieee : f32[16, 16]
  %19 = reduce.argmax %18, axis=1 : i32[16]
  %20 = scan.max %18, axis=0, reverse : f32[16, 16]
  %21 = arange 0, 16 : i32[16]
  %22 = splat %c : ptr<i32>[16]
  %23 = addptr %22, %21 : ptr<i32>[16]
  %24 = atomic.add %23, %19 : i32[16]
  %25 = cast %15 : f32[16, 16]
  %26 = add %20, %25 : f32[16, 16]
  store %13, %26, cache=cs
  %27 = const 0 : i32
  %28 = const 0 : i32[16]
  %29 = cmp.ge %19, %28 : i1[16]
  assert %29, "index"
}"#,
    );
}

/// `{:#}` appends each op's source line as a comment, aligned in one column.
#[test]
fn alternate_format_shows_source_lines() {
    let line = line!() + 3;
    let k = trace("scale", |p| {
        let x = p.ptr("x", DType::F32);
        store_unmasked(x, load_unmasked(x) * 2.5);
    })
    .unwrap();
    let expected = r#"
kernel @scale(%x: ptr<f32>) {
  %1 = load %x : f32     // FILE:LINE
  %2 = const 2.5 : f32   // FILE:LINE
  %3 = mul %1, %2 : f32  // FILE:LINE
  store %x, %3           // FILE:LINE
}"#
    .replace("FILE", file!())
    .replace("LINE", &line.to_string());
    assert_eq!(format!("{k:#}"), expected.trim_start());
}

/// Parameter facts show up in the signature; a broken kernel still prints (for debugging).
#[test]
fn prints_param_facts_and_broken_kernels() {
    use tegula_ir::kernel::EntityRef;
    use tegula_ir::{Loc, Op, TileType, Value};
    let mut k = Kernel::new("facts");
    let x = k.add_param("x", TileType::ptr(DType::BF16));
    k.params[0].facts.divisibility = 16;
    let body = k.body;
    let ty = TileType::ptr(DType::BF16);
    let i = k.append(
        body,
        Op::MultipleOf { n: vec![16] },
        vec![x],
        &[ty],
        vec![],
        Loc::UNKNOWN,
    );
    // An operand that does not exist, and an `if` that lost its regions.
    k.insts[i].args[0] = Value::new(99);
    k.append(body, Op::If, vec![x], &[], vec![], Loc::UNKNOWN);
    golden(
        &k,
        r#"
kernel @facts(%x: ptr<bf16> div16) {
  %1 = multiple_of %99, 16 : ptr<bf16>
  if %x {
    <missing region 0>
  } else {
    <missing region 1>
  }
}"#,
    );
}

/// A loop's own stage count prints after its bounds; a loop without one prints none.
#[test]
fn prints_a_loops_stage_count() {
    let k = trace("staged", |p| {
        let out = p.ptr("out", DType::I32);
        let n = p.scalar("n", DType::I32);
        let total = for_range_with(
            0,
            n,
            1,
            RangeOptions::new().num_stages(3),
            scalar(0),
            |i, acc| acc + i,
        );
        let twice = for_range(0, n, 1, total, |i, acc| acc + i);
        store_unmasked(out, twice);
    })
    .unwrap();
    golden(
        &k,
        r#"
kernel @staged(%out: ptr<i32>, %n: i32) {
  %2 = const 0 : i32
  %3 = const 0 : i32
  %4 = const 1 : i32
  %8 = for %5 = %3 to %n step %4 num_stages=3 iter(%6 = %2) -> (i32) {
    %7 = add %6, %5 : i32
    yield %7
  }
  %9 = const 0 : i32
  %10 = const 1 : i32
  %14 = for %11 = %9 to %n step %10 iter(%12 = %8) -> (i32) {
    %13 = add %12, %11 : i32
    yield %13
  }
  store %out, %14
}"#,
    );
}

/// `gather` and `flip` print their operands and axis.
#[test]
fn prints_gather_and_flip() {
    let k = trace("indexing", |p| {
        let (x, idx) = (p.ptr("x", DType::F32), p.ptr("idx", DType::I64));
        let o = arange(0, 8);
        let v = load_unmasked(x + o);
        let g = gather(v, load_unmasked(idx + o), 0);
        store_unmasked(x + o, g.flip(0));
    })
    .unwrap();
    golden(
        &k,
        r#"
kernel @indexing(%x: ptr<f32>, %idx: ptr<i64>) {
  %2 = arange 0, 8 : i32[8]
  %3 = splat %x : ptr<f32>[8]
  %4 = addptr %3, %2 : ptr<f32>[8]
  %5 = load %4 : f32[8]
  %6 = splat %idx : ptr<i64>[8]
  %7 = addptr %6, %2 : ptr<i64>[8]
  %8 = load %7 : i64[8]
  %9 = gather %5, %8, axis=0 : f32[8]
  %10 = splat %x : ptr<f32>[8]
  %11 = addptr %10, %2 : ptr<f32>[8]
  %12 = flip %9, axis=0 : f32[8]
  store %11, %12
}"#,
    );
}

#[test]
fn a_hex_print_says_so() {
    let k = trace("hex", |_p| {
        device_print_hex("bits", &[arange(0, 16)]);
        device_print("value", &[arange(0, 16)]);
    })
    .unwrap();
    let text = k.to_string();
    assert!(text.contains("print hex \"bits\""), "{text}");
    assert!(text.contains("print \"value\""), "{text}");
}

/// `reduce_with` and `scan_with`: the operands, the axis, the results' types and the combine
/// region with its left and right arguments.
#[test]
fn prints_combine_regions() {
    let k = trace("argmax", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::I32));
        let v = load_unmasked(x + arange(0, 8));
        let (_, at) = reduce_with((v, arange(0, 8)), 0, |(v0, i0), (v1, i1)| {
            let take = v1.gt(v0);
            (select(take, v1, v0), select(take, i1, i0))
        });
        store_unmasked(out, at);
        let s = scan_with(v.to::<i32>(), 0, true, |a, b| a + b);
        store_unmasked(out + arange(0, 8), s);
    })
    .unwrap();
    golden(
        &k,
        r#"
kernel @argmax(%x: ptr<f32>, %out: ptr<i32>) {
  %2 = arange 0, 8 : i32[8]
  %3 = splat %x : ptr<f32>[8]
  %4 = addptr %3, %2 : ptr<f32>[8]
  %5 = load %4 : f32[8]
  %6 = arange 0, 8 : i32[8]
  %14, %15 = reduce_with %5, %6 axis=0 -> (f32, i32) combine(%7, %8, %9, %10) {
    %11 = cmp.gt %9, %7 : i1
    %12 = select %11, %9, %7 : f32
    %13 = select %11, %10, %8 : i32
    yield %12, %13
  }
  store %out, %15
  %16 = cast %5 : i32[8]
  %20 = scan_with %16 axis=0 reverse -> (i32[8]) combine(%17, %18) {
    %19 = add %17, %18 : i32
    yield %19
  }
  %21 = arange 0, 8 : i32[8]
  %22 = splat %out : ptr<i32>[8]
  %23 = addptr %22, %21 : ptr<i32>[8]
  store %23, %20
}"#,
    );
}

/// An atomic's ordering and scope print where they are not the defaults (acq_rel, gpu).
#[test]
fn prints_atomic_orderings_and_scopes() {
    let k = trace("orders", |p| {
        let (f, i) = (p.ptr("f", DType::F32), p.ptr("i", DType::I32));
        let _ = atomic_add(f, 1.0, None);
        let _ = atomic_with(AtomicOp::Add, f, 1.0, None, MemSem::Release, MemScope::Cta);
        let _ = atomic_with(AtomicOp::Max, i, 1, None, MemSem::AcqRel, MemScope::Sys);
        let _ = atomic_with(AtomicOp::Min, i, 1, None, MemSem::Acquire, MemScope::Gpu);
        let _ = atomic_add_relaxed(f, 1.0, None);
        let _ = atomic_cas_with(i, 0, 1, MemSem::Relaxed, MemScope::Cta);
        let _ = atomic_cas(i, 0, 1);
    })
    .unwrap();
    let text = k.to_string();
    let atomics: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("atomic"))
        .map(|l| l.trim().split_once(" = ").unwrap().1)
        .collect();
    assert_eq!(
        atomics,
        [
            "atomic.add %f, %2 : f32",
            "atomic.add %f, %4, sem=release, scope=cta : f32",
            "atomic.max %i, %6, scope=sys : i32",
            "atomic.min %i, %8, sem=acquire : i32",
            "atomic.add %f, %10, sem=relaxed : f32",
            "atomic.cas %i, %12, %13, sem=relaxed, scope=cta : i32",
            "atomic.cas %i, %15, %16 : i32",
        ],
        "{text}"
    );
}
