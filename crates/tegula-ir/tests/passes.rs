//! DCE, CSE and canonicalization: what each removes or merges, what each must keep, and that
//! the kernel still verifies afterwards.

use tegula_ir::passes::{canonicalize, common_subexpression_elimination, dead_code_elimination};
use tegula_ir::prelude::*;
use tegula_ir::verify::verify;
use tegula_ir::{Constant, Elem, Kernel, Loc, Op, Rounding as R, Shape, TileType, Value};

/// Runs `pass` on `k`, checks the result still verifies and prints exactly `expected` (which
/// starts with a newline for readability).
#[track_caller]
fn after(pass: fn(&mut Kernel), mut k: Kernel, expected: &str) -> Kernel {
    verify(&k).expect("the input verifies");
    pass(&mut k);
    if let Err(e) = verify(&k) {
        panic!("the pass broke the kernel: {e}\n{k}");
    }
    let got = k.to_string();
    let expected = expected.strip_prefix('\n').unwrap_or(expected);
    assert!(
        got == expected,
        "after the pass:\n{got}\n\nexpected:\n{expected}"
    );
    k
}

fn k_dce_basic() -> Kernel {
    trace("dce", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let v = load_unmasked(x);
        let _unused_math = exp(v) * 2.0;
        let _unused_load = load_unmasked(x + 1);
        store_unmasked(out, v);
    })
    .unwrap()
}

fn k_side_effects() -> Kernel {
    trace("effects", |p| {
        let (x, c) = (p.ptr("x", DType::F32), p.ptr("c", DType::I32));
        let _old = atomic_add(c, 1, None);
        let _v = load_with(
            x,
            LoadOptions {
                volatile: true,
                ..Default::default()
            },
        );
        let _dead = load_unmasked(x);
        let pid = program_id(0);
        device_print("pid", &[pid]);
        device_assert(pid.ge(0), "pid");
    })
    .unwrap()
}

fn k_loops() -> Kernel {
    trace("loops", |p| {
        let (out, n) = (p.ptr("out", DType::I32), p.scalar("n", DType::I32));
        // Pure and unused: removed with everything feeding it.
        let _pure = for_range(0, n, 1, scalar(0), |i, acc| acc + i * i);
        // Stores inside: kept, and so is its carried value though the loop's result is unused.
        let _stores = for_range(0, n, 1, scalar(1), |i, acc| {
            store_unmasked(out + i, acc);
            acc * 3
        });
        // Pure branches with unused results: removed; a branch that prints: kept.
        let _pick = if_else(n.gt(4), || scalar(1), || scalar(2));
        if_then(n.lt(0), || device_print("negative", &[n]));
    })
    .unwrap()
}

fn k_cse_scopes() -> Kernel {
    trace("scopes", |p| {
        let (out, n) = (p.ptr("out", DType::I32), p.scalar("n", DType::I32));
        let before = n * n;
        let r = for_range(0, 4, 1, before, |i, acc| {
            // Same as `before`, which is in scope: merged into it.
            let again = n * n;
            acc + again + (i + n)
        });
        // Same as the `i + n`-free `n * 7` in each branch; siblings do not see each other.
        let b = if_else(r.gt(0), || n * 7, || n * 7 + 1);
        // Same as the one inside the then branch, which is out of scope here: kept.
        let after = n * 7;
        store_unmasked(out, b + after);
    })
    .unwrap()
}

fn k_cse_commutes() -> Kernel {
    trace("commutes", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        // The two loads read the same address but are not merged; `a + b` and `b + a` are.
        let (a, b) = (load_unmasked(x), load_unmasked(x));
        let s = (a + b) * (b + a);
        // 0.0 and -0.0 are different constants.
        let z = full::<f32>([], 0.0) + full::<f32>([], -0.0) + full::<f32>([], 0.0);
        store_unmasked(out, s + z);
    })
    .unwrap()
}

fn k_fold() -> Kernel {
    trace("fold", |p| {
        let (o8, u8p, h, f, o32) = (
            p.ptr("o8", DType::I8),
            p.ptr("u8p", DType::U8),
            p.ptr("h", DType::F16),
            p.ptr("f", DType::F32),
            p.ptr("o32", DType::I32),
        );
        // Integer constants wrap at their width.
        store_unmasked(o8, full::<i8>([], 100) + full::<i8>([], 100));
        store_unmasked(u8p, full::<u8>([], 200) * full::<u8>([], 3));
        // Floats round once, to nearest even, in their own dtype: 1 + 2^-11 is a tie in f16.
        store_unmasked(h, full::<f16>([], 1.0) + full::<f16>([], 2f64.powi(-11)));
        store_unmasked(f, full::<f32>([], 0.1) + full::<f32>([], 0.2));
        // A chain folds completely, and a splat of a constant becomes a constant tile.
        let c = scalar(3) * 4 - 5;
        store_unmasked(o32 + arange(0, 16), c + arange(0, 16));
    })
    .unwrap()
}

#[test]
fn dce_removes_unused_math_and_loads_and_keeps_the_store() {
    after(
        dead_code_elimination,
        k_dce_basic(),
        r#"
kernel @dce(%x: ptr<f32>, %out: ptr<f32>) {
  %2 = load %x : f32
  store %out, %2
}"#,
    );
}

#[test]
fn dce_keeps_side_effects_whose_results_are_unused() {
    // Only the plain load goes: the atomic, the volatile load, print and assert stay, with the
    // values they need.
    after(
        dead_code_elimination,
        k_side_effects(),
        r#"
kernel @effects(%x: ptr<f32>, %c: ptr<i32>) {
  %2 = const 1 : i32
  %3 = atomic.add %c, %2 : i32
  %4 = load %x, volatile : f32
  %6 = program_id 0 : i32
  print "pid", %6
  %7 = const 0 : i32
  %8 = cmp.ge %6, %7 : i1
  assert %8, "pid"
}"#,
    );
}

#[test]
fn dce_removes_pure_loops_and_branches_and_keeps_effectful_ones() {
    let k = k_loops();
    assert!(k
        .to_string()
        .contains("%9 = for %5 = %3 to %n step %4 iter(%6 = %2)"));
    after(
        dead_code_elimination,
        k,
        r#"
kernel @loops(%out: ptr<i32>, %n: i32) {
  %10 = const 1 : i32
  %11 = const 0 : i32
  %12 = const 1 : i32
  %18 = for %13 = %11 to %n step %12 iter(%14 = %10) -> (i32) {
    %15 = addptr %out, %13 : ptr<i32>
    store %15, %14
    %16 = const 3 : i32
    %17 = mul %14, %16 : i32
    yield %17
  }
  %24 = const 0 : i32
  %25 = cmp.lt %n, %24 : i1
  if %25 {
    print "negative", %n
    yield
  } else {
    yield
  }
}"#,
    );
}

#[test]
fn dce_is_idempotent_and_keeps_an_already_minimal_kernel() {
    let mut k = k_dce_basic();
    dead_code_elimination(&mut k);
    let once = k.clone();
    dead_code_elimination(&mut k);
    assert_eq!(k, once);
}

#[test]
fn cse_merges_within_scope_only() {
    // In the loop, `n * n` becomes the outer %2, and the constants 0 and 1 reuse outer ones;
    // the two branches' `n * 7` are siblings and stay, as does the one after the if.
    after(
        common_subexpression_elimination,
        k_cse_scopes(),
        r#"
kernel @scopes(%out: ptr<i32>, %n: i32) {
  %2 = mul %n, %n : i32
  %3 = const 0 : i32
  %4 = const 4 : i32
  %5 = const 1 : i32
  %12 = for %6 = %3 to %4 step %5 iter(%7 = %2) -> (i32) {
    %9 = add %7, %2 : i32
    %10 = add %6, %n : i32
    %11 = add %9, %10 : i32
    yield %11
  }
  %14 = cmp.gt %12, %3 : i1
  %21 = if %14 -> (i32) {
    %15 = const 7 : i32
    %16 = mul %n, %15 : i32
    yield %16
  } else {
    %17 = const 7 : i32
    %18 = mul %n, %17 : i32
    %20 = add %18, %5 : i32
    yield %20
  }
  %22 = const 7 : i32
  %23 = mul %n, %22 : i32
  %24 = add %21, %23 : i32
  store %out, %24
}"#,
    );
}

#[test]
fn cse_merges_commuted_operands_but_not_loads_or_signed_zeros() {
    after(
        common_subexpression_elimination,
        k_cse_commutes(),
        r#"
kernel @commutes(%x: ptr<f32>, %out: ptr<f32>) {
  %2 = load %x : f32
  %3 = load %x : f32
  %4 = add %2, %3 : f32
  %6 = mul %4, %4 : f32
  %7 = const 0.0 : f32
  %8 = const -0.0 : f32
  %9 = add %7, %8 : f32
  %11 = add %9, %7 : f32
  %12 = add %6, %11 : f32
  store %out, %12
}"#,
    );
}

/// The constant stored through the parameter `name` after canonicalization.
fn stored_constant(k: &Kernel, name: &str) -> Constant {
    let p = k.params.iter().find(|p| p.name == name).unwrap().value;
    let store = k
        .walk()
        .into_iter()
        .find(|&i| matches!(k.insts[i].op, Op::Store { .. }) && k.insts[i].args[0] == p);
    let value = k.insts[store.unwrap()].args[1];
    match k.insts[k.def_inst(value).unwrap()].op {
        Op::Const(c) => c,
        ref other => panic!("{name} stores {other:?}, not a constant"),
    }
}

#[test]
fn canonicalize_folds_constant_arithmetic() {
    let k = after(
        canonicalize,
        k_fold(),
        r#"
kernel @fold(%o8: ptr<i8>, %u8p: ptr<u8>, %h: ptr<f16>, %f: ptr<f32>, %o32: ptr<i32>) {
  %7 = const -56 : i8
  store %o8, %7
  %10 = const 88 : u8
  store %u8p, %10
  %11 = const 1.0 : f16
  store %h, %11
  %16 = const 0.30000001192092896 : f32
  store %f, %16
  %22 = arange 0, 16 : i32[16]
  %23 = splat %o32 : ptr<i32>[16]
  %24 = addptr %23, %22 : ptr<i32>[16]
  %26 = const 7 : i32[16]
  %27 = add %26, %22 : i32[16]
  store %24, %27
}"#,
    );
    // The same values from Rust's own arithmetic in each type.
    assert_eq!(
        stored_constant(&k, "o8"),
        Constant::Int(100i8.wrapping_add(100) as i64)
    );
    assert_eq!(
        stored_constant(&k, "u8p"),
        Constant::Int(200u8.wrapping_mul(3) as i64)
    );
    let h = f16::from_f64(1.0) + f16::from_f64(2f64.powi(-11));
    assert_eq!(stored_constant(&k, "h"), Constant::Float(h.to_f64()));
    assert_eq!(
        stored_constant(&k, "f"),
        Constant::Float((0.1f32 + 0.2f32) as f64)
    );
}

#[test]
fn float_folds_round_operands_and_result_to_the_dtype() {
    // Odd values whose f64 and in-type results differ: 0.1 is not exact in bf16 or f32.
    for (dtype, expected) in [
        (
            DType::BF16,
            (bf16::from_f64(0.1) * bf16::from_f64(3.3)).to_f64(),
        ),
        (
            DType::F16,
            (f16::from_f64(0.1) * f16::from_f64(3.3)).to_f64(),
        ),
        (DType::F32, (0.1f32 * 3.3f32) as f64),
        (DType::F64, 0.1f64 * 3.3f64),
    ] {
        let mut k = trace("mul", |p| {
            let out = p.ptr("out", dtype);
            store_unmasked(out, full_dtype([], dtype, 0.1) * full_dtype([], dtype, 3.3));
        })
        .unwrap();
        canonicalize(&mut k);
        verify(&k).unwrap();
        assert_eq!(
            stored_constant(&k, "out"),
            Constant::Float(expected),
            "{dtype}"
        );
    }
    assert_ne!((0.1f32 * 3.3f32) as f64, 0.1f64 * 3.3f64);
}

#[test]
fn canonicalize_forwards_identity_conversions() {
    // The builder never emits these; other passes and front ends may.
    let mut k = Kernel::new("identity");
    let out = k.add_param("out", TileType::ptr(DType::I32));
    let body = k.body;
    let l = Loc::UNKNOWN;
    let i32x16 = TileType::tile(DType::I32, Shape::from([16]));
    let one = |k: &mut Kernel, op: Op, args: Vec<Value>, ty: TileType| {
        let i = k.append(body, op, args, &[ty], vec![], l);
        k.insts[i].results[0]
    };
    let a = one(&mut k, Op::Arange { start: 0, end: 16 }, vec![], i32x16);
    let b = one(&mut k, Op::Broadcast, vec![a], i32x16);
    let c = one(
        &mut k,
        Op::Cast {
            rounding: R::TowardZero,
        },
        vec![b],
        i32x16,
    );
    let d = one(&mut k, Op::Reshape, vec![c], i32x16);
    let e = one(&mut k, Op::Permute { perm: vec![0] }, vec![d], i32x16);
    let f = one(&mut k, Op::Bitcast, vec![e], i32x16);
    // Not identities: a real cast and a real reshape stay.
    let g = one(
        &mut k,
        Op::Cast {
            rounding: R::NearestEven,
        },
        vec![f],
        i32x16.with_elem(Elem::Scalar(DType::I64)),
    );
    let g = one(
        &mut k,
        Op::Cast {
            rounding: R::NearestEven,
        },
        vec![g],
        i32x16,
    );
    let h = one(
        &mut k,
        Op::Reshape,
        vec![g],
        TileType::tile(DType::I32, Shape::from([4, 4])),
    );
    let h = one(&mut k, Op::Reshape, vec![h], i32x16);
    let ptr_tile = TileType::new(Elem::Ptr(DType::I32), Shape::from([16]));
    let ptrs = one(&mut k, Op::Splat, vec![out], ptr_tile);
    let ptrs = one(&mut k, Op::AddPtr, vec![ptrs, f], ptr_tile);
    k.append(
        body,
        Op::Store {
            has_mask: false,
            cache: CacheModifier::None,
            evict: EvictionPolicy::Normal,
        },
        vec![ptrs, h],
        &[],
        vec![],
        l,
    );
    after(
        canonicalize,
        k,
        r#"
kernel @identity(%out: ptr<i32>) {
  %1 = arange 0, 16 : i32[16]
  %7 = cast %1 : i64[16]
  %8 = cast %7 : i32[16]
  %9 = reshape %8 : i32[4, 4]
  %10 = reshape %9 : i32[16]
  %11 = splat %out : ptr<i32>[16]
  %12 = addptr %11, %1 : ptr<i32>[16]
  store %12, %10
}"#,
    );
}

#[test]
fn canonicalize_keeps_loop_carried_values_and_the_loop() {
    let k = trace("gemv", |p| {
        let (a, x, y) = (
            p.ptr("a", DType::F16),
            p.ptr("x", DType::F16),
            p.ptr("y", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let row = program_id(0);
        let offs = arange(0, 32);
        let acc = for_range(0, n, 32, zeros::<f32>([32]), |start, acc| {
            let cols = start + offs;
            let mask = cols.lt(n);
            let av = load(a + row * n + cols, mask, 0.0).to::<f32>();
            let xv = load(x + cols, mask, 0.0).to::<f32>();
            acc + av * xv
        });
        store_unmasked(y + row, sum(acc, 0));
    })
    .unwrap();
    // Both loads' `other` constants (and the dead scalar zeros they came from) collapse into
    // one; both loads and the carried accumulator stay.
    after(
        canonicalize,
        k,
        r#"
kernel @gemv(%a: ptr<f16>, %x: ptr<f16>, %y: ptr<f32>, %n: i32) {
  %4 = program_id 0 : i32
  %5 = arange 0, 32 : i32[32]
  %6 = const 0.0 : f32[32]
  %7 = const 0 : i32
  %8 = const 32 : i32
  %31 = for %9 = %7 to %n step %8 iter(%10 = %6) -> (f32[32]) {
    %11 = splat %9 : i32[32]
    %12 = add %11, %5 : i32[32]
    %13 = splat %n : i32[32]
    %14 = cmp.lt %12, %13 : i1[32]
    %15 = mul %4, %n : i32
    %16 = addptr %a, %15 : ptr<f16>
    %17 = splat %16 : ptr<f16>[32]
    %18 = addptr %17, %12 : ptr<f16>[32]
    %20 = const 0.0 : f16[32]
    %21 = load %18, mask=%14, other=%20 : f16[32]
    %22 = cast %21 : f32[32]
    %23 = splat %x : ptr<f16>[32]
    %24 = addptr %23, %12 : ptr<f16>[32]
    %27 = load %24, mask=%14, other=%20 : f16[32]
    %28 = cast %27 : f32[32]
    %29 = mul %22, %28 : f32[32]
    %30 = add %10, %29 : f32[32]
    yield %30
  }
  %32 = addptr %y, %4 : ptr<f32>
  %33 = reduce.sum %31, axis=0 : f32
  store %32, %33
}"#,
    );
}

#[test]
fn unit_stride_binding_folds_the_multiply_away() {
    use tegula_ir::passes::{bind_scalar_param, canonicalize};
    let mut k = trace("strided", |p| {
        let x = p.ptr("x", DType::F32);
        let stride = p.scalar("stride", DType::I32);
        let offs = arange(0, 64);
        let v = load_unmasked(x + offs * stride);
        store_unmasked(x + offs * stride + 0, v * 1.0);
    })
    .unwrap();
    bind_scalar_param(&mut k, 1, Constant::Int(1));
    canonicalize(&mut k);
    verify(&k).unwrap();
    let text = k.to_string();
    // The integer multiplies by the bound stride are gone; the float `* 1.0` stays (it is not
    // folded for floats) and so does the store.
    assert_eq!(text.matches(" mul ").count(), 1, "{text}");
    assert!(text.contains("store"), "{text}");
    assert_eq!(
        text.matches("%stride").count(),
        1,
        "only the signature names it: {text}"
    );
}

/// The dots of `k` and the ops of the values they accumulate into.
fn dot_accumulators(k: &Kernel) -> Vec<String> {
    k.walk()
        .into_iter()
        .filter(|&i| matches!(k.insts[i].op, Op::Dot { .. }))
        .map(|i| match k.def_inst(k.insts[i].args[2]) {
            Some(d) => k.insts[d].op.name(),
            None => "block argument".to_string(),
        })
        .collect()
}

fn count_adds_of(k: &Kernel, ty: TileType) -> usize {
    k.walk()
        .into_iter()
        .filter(|&i| {
            matches!(k.insts[i].op, Op::Binary(tegula_ir::BinaryOp::Add))
                && k.ty(k.insts[i].results[0]) == ty
        })
        .count()
}

#[test]
fn dot_accumulate_folds_the_add_into_the_dot_in_either_order() {
    for swapped in [false, true] {
        let k = trace("acc", |p| {
            let (a, b, c) = (
                p.ptr("a", DType::F16),
                p.ptr("b", DType::F16),
                p.ptr("c", DType::F32),
            );
            let n = p.scalar("n", DType::I32);
            let offs = arange(0, 16).reshape([16, 1]) * 16 + arange(0, 16).reshape([1, 16]);
            let acc = for_range(0, n, 1, zeros::<f32>([16, 16]), |k, acc| {
                let at = load_unmasked(a + k * 256 + offs);
                let bt = load_unmasked(b + k * 256 + offs);
                if swapped {
                    dot(at, bt) + acc
                } else {
                    acc + dot(at, bt)
                }
            });
            store_unmasked(c + offs, acc);
        })
        .unwrap();
        let f32_16x16 = TileType::tile(DType::F32, Shape::new(&[16, 16]).unwrap());
        assert_eq!(count_adds_of(&k, f32_16x16), 1);
        let mut k2 = k.clone();
        canonicalize(&mut k2);
        verify(&k2).unwrap_or_else(|e| panic!("{e}\n{k2}"));
        assert_eq!(count_adds_of(&k2, f32_16x16), 0, "{k2}");
        // The dot now accumulates into the loop-carried value.
        assert_eq!(dot_accumulators(&k2), ["block argument"], "{k2}");
    }
}

#[test]
fn dot_accumulate_leaves_a_product_used_twice_or_a_dot_with_an_accumulator() {
    let k = trace("acc2", |p| {
        let (a, c, d) = (
            p.ptr("a", DType::F16),
            p.ptr("c", DType::F32),
            p.ptr("d", DType::F32),
        );
        let offs = arange(0, 16).reshape([16, 1]) * 16 + arange(0, 16).reshape([1, 16]);
        let at = load_unmasked(a + offs);
        let x = load_unmasked(c + offs);
        // The product is also stored: the add cannot take it over.
        let prod = dot(at, at);
        store_unmasked(d + offs, prod);
        let y = x + prod;
        // Already accumulating: x + dot(a, a, x) keeps its add.
        let z = y + dot_acc(at, at, x);
        store_unmasked(c + offs, z);
    })
    .unwrap();
    let f32_16x16 = TileType::tile(DType::F32, Shape::new(&[16, 16]).unwrap());
    let mut k2 = k.clone();
    canonicalize(&mut k2);
    verify(&k2).unwrap();
    assert_eq!(count_adds_of(&k2, f32_16x16), 2, "{k2}");
    assert_eq!(dot_accumulators(&k2), ["const", "load"], "{k2}");
}

/// The stage counts of the kernel's `for` loops, in program order.
fn loop_stages(k: &Kernel) -> Vec<Option<u32>> {
    k.walk()
        .into_iter()
        .filter_map(|i| match k.insts[i].op {
            Op::For { num_stages } => Some(num_stages),
            _ => None,
        })
        .collect()
}

/// A loop's own stage count survives every pass that rewrites loops: canonicalization (dot
/// accumulate, folding, CSE, DCE) and affine recurrences, which drops carried values.
#[test]
fn passes_keep_a_loops_stage_count() {
    let k = trace("staged", |p| {
        let (a, b, c) = (
            p.ptr("a", DType::F16),
            p.ptr("b", DType::F16),
            p.ptr("c", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs = arange(0, 16).reshape([16, 1]) * 16 + arange(0, 16).reshape([1, 16]);
        let init = (zeros::<f32>([16, 16]), a + offs, b + offs);
        let two = RangeOptions::new().num_stages(2);
        let (acc, _, _) = for_range_with(0, n, 1, two, init, |_, (acc, pa, pb)| {
            let (at, bt) = (load_unmasked(pa), load_unmasked(pb));
            (acc + dot(at, bt), pa + 256, pb + 256)
        });
        // A second loop with the same body and no count: never merged with the first.
        let (acc, _, _) = for_range(0, n, 1, (acc, a + offs, b + offs), |_, (acc, pa, pb)| {
            let (at, bt) = (load_unmasked(pa), load_unmasked(pb));
            (acc + dot(at, bt), pa + 256, pb + 256)
        });
        store_unmasked(c + offs, acc);
    })
    .unwrap();
    assert_eq!(loop_stages(&k), [Some(2), None]);
    let mut k2 = k.clone();
    canonicalize(&mut k2);
    assert!(tegula_ir::passes::affine_recurrences(&mut k2), "{k2}");
    canonicalize(&mut k2);
    verify(&k2).unwrap_or_else(|e| panic!("{e}\n{k2}"));
    assert_eq!(dot_accumulators(&k2).len(), 2, "{k2}");
    assert_eq!(loop_stages(&k2), [Some(2), None], "{k2}");
    assert!(k2.to_string().contains("num_stages=2"), "{k2}");
}
