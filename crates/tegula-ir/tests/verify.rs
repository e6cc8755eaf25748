//! The verifier on hand-built broken kernels: each error names the instruction, its op and its
//! source line, and says what is wrong.

use tegula_ir::prelude::*;
use tegula_ir::verify::verify;
use tegula_ir::{
    BinaryOp, CmpOp, Constant, Inst, Kernel, Loc, Op, ReduceOp, RoundedOp, Rounding, Shape,
    TernaryOp, TileType, UnaryOp, Value,
};

fn loc(line: u32) -> Loc {
    Loc {
        file: "broken.rs",
        line,
        col: 9,
    }
}

fn scalar(d: DType) -> TileType {
    TileType::scalar(d)
}

fn tile(d: DType, dims: &[usize]) -> TileType {
    TileType::tile(d, Shape::new(dims).unwrap())
}

fn ptr(d: DType) -> TileType {
    TileType::ptr(d)
}

/// Appends a one-result op with no regions to the kernel's body.
fn op(k: &mut Kernel, op: Op, args: &[Value], ty: TileType, line: u32) -> (Inst, Value) {
    let body = k.body;
    let i = k.append(body, op, args.to_vec(), &[ty], vec![], loc(line));
    (i, k.insts[i].results[0])
}

fn constant(k: &mut Kernel, ty: TileType, line: u32) -> Value {
    let c = if ty.dtype().is_float() {
        Constant::Float(1.5)
    } else if ty.dtype().is_bool() {
        Constant::Int(1)
    } else {
        Constant::Int(3)
    };
    op(k, Op::Const(c), &[], ty, line).1
}

/// Asserts that `k` fails verification at `inst` (`op`, line `line`) with a message containing
/// every one of `words`.
#[track_caller]
fn assert_rejects(k: &Kernel, inst: Inst, op_name: &str, line: u32, words: &[&str]) {
    let e = verify(k).expect_err("the kernel is broken");
    let shown = e.to_string();
    assert_eq!(e.inst, inst, "{shown}");
    assert_eq!(e.op, op_name, "{shown}");
    assert_eq!(e.loc, loc(line), "{shown}");
    assert_eq!(e.kernel, k.name);
    for w in words {
        assert!(e.message.contains(w), "`{w}` missing from: {shown}");
    }
    assert!(shown.contains(&format!("{inst} (`{op_name}`)")), "{shown}");
    assert!(shown.contains(&format!("broken.rs:{line}:9")), "{shown}");
}

fn load_op(has_mask: bool, has_other: bool) -> Op {
    Op::Load {
        has_mask,
        has_other,
        cache: CacheModifier::None,
        evict: EvictionPolicy::Normal,
        volatile: false,
    }
}

fn store_op(has_mask: bool) -> Op {
    Op::Store {
        has_mask,
        cache: CacheModifier::None,
        evict: EvictionPolicy::Normal,
    }
}

#[test]
fn accepts_a_hand_built_kernel() {
    let mut k = Kernel::new("ok");
    let x = k.add_param("x", ptr(DType::F32));
    let offs = op(
        &mut k,
        Op::Arange { start: 0, end: 16 },
        &[],
        tile(DType::I32, &[16]),
        1,
    )
    .1;
    let p = op(
        &mut k,
        Op::Splat,
        &[x],
        TileType::new(Elem::Ptr(DType::F32), [16].into()),
        2,
    )
    .1;
    let p = op(&mut k, Op::AddPtr, &[p, offs], p_ty(16), 3).1;
    let v = op(
        &mut k,
        load_op(false, false),
        &[p],
        tile(DType::F32, &[16]),
        4,
    )
    .1;
    let body = k.body;
    k.append(body, store_op(false), vec![p, v], &[], vec![], loc(5));
    verify(&k).unwrap();
}

use tegula_ir::Elem;

fn p_ty(n: usize) -> TileType {
    TileType::new(Elem::Ptr(DType::F32), [n].into())
}

#[test]
fn operand_count() {
    let mut k = Kernel::new("count");
    let a = constant(&mut k, scalar(DType::F32), 1);
    let (add, _) = op(
        &mut k,
        Op::Binary(BinaryOp::Add),
        &[a],
        scalar(DType::F32),
        2,
    );
    assert_rejects(&k, add, "add", 2, &["takes 2 operands (a, b), but has 1"]);
}

#[test]
fn masked_load_operand_count() {
    let mut k = Kernel::new("count");
    let x = k.add_param("x", ptr(DType::F32));
    // A load that says it has a mask but was given none.
    let (ld, _) = op(&mut k, load_op(true, false), &[x], scalar(DType::F32), 4);
    assert_rejects(
        &k,
        ld,
        "load",
        4,
        &["takes 2 operands (ptr, mask), but has 1"],
    );
}

#[test]
fn other_without_mask() {
    let mut k = Kernel::new("other");
    let x = k.add_param("x", ptr(DType::F32));
    let z = constant(&mut k, scalar(DType::F32), 1);
    let (ld, _) = op(&mut k, load_op(false, true), &[x, z], scalar(DType::F32), 7);
    assert_rejects(&k, ld, "load", 7, &["`other` value but no mask"]);
}

#[test]
fn result_count() {
    let mut k = Kernel::new("results");
    let x = k.add_param("x", ptr(DType::F32));
    let v = constant(&mut k, scalar(DType::F32), 1);
    let (st, _) = op(&mut k, store_op(false), &[x, v], scalar(DType::F32), 3);
    assert_rejects(&k, st, "store", 3, &["produces 0 results, but has 1"]);
}

#[test]
fn elementwise_operands_of_different_types() {
    let mut k = Kernel::new("mixed");
    let a = constant(&mut k, tile(DType::F32, &[16]), 1);
    let b = constant(&mut k, tile(DType::F16, &[16]), 2);
    let (mul, _) = op(
        &mut k,
        Op::Binary(BinaryOp::Mul),
        &[a, b],
        tile(DType::F32, &[16]),
        3,
    );
    assert_rejects(
        &k,
        mul,
        "mul",
        3,
        &["operands of one type", "f32[16]", "f16[16]"],
    );
}

#[test]
fn integer_only_op_on_floats() {
    let mut k = Kernel::new("shift");
    let a = constant(&mut k, scalar(DType::F32), 1);
    let (shl, _) = op(
        &mut k,
        Op::Binary(BinaryOp::Shl),
        &[a, a],
        scalar(DType::F32),
        2,
    );
    assert_rejects(&k, shl, "shl", 2, &["needs integer operands, got f32"]);
}

#[test]
fn integer_intrinsics_of_other_widths_or_floats() {
    let mut k = Kernel::new("clz");
    let a = constant(&mut k, tile(DType::F32, &[8]), 1);
    let (c, _) = op(
        &mut k,
        Op::Unary(UnaryOp::Clz),
        &[a],
        tile(DType::F32, &[8]),
        2,
    );
    assert_rejects(&k, c, "clz", 2, &["needs an integer operand, got f32[8]"]);
    let mut k = Kernel::new("popc");
    let a = constant(&mut k, tile(DType::I16, &[8]), 1);
    let (c, _) = op(
        &mut k,
        Op::Unary(UnaryOp::Popc),
        &[a],
        tile(DType::I16, &[8]),
        2,
    );
    assert_rejects(
        &k,
        c,
        "popc",
        2,
        &["needs a 32- or 64-bit integer, got i16[8]"],
    );
    let mut k = Kernel::new("mul24");
    let a = constant(&mut k, scalar(DType::I64), 1);
    let (m, _) = op(
        &mut k,
        Op::Binary(BinaryOp::Mul24),
        &[a, a],
        scalar(DType::I64),
        2,
    );
    assert_rejects(&k, m, "mul24", 2, &["needs 32-bit integers, got i64"]);
    let mut k = Kernel::new("prmt");
    let a = constant(&mut k, scalar(DType::U64), 1);
    let (p, _) = op(
        &mut k,
        Op::Ternary(TernaryOp::BytePerm),
        &[a, a, a],
        scalar(DType::U64),
        2,
    );
    assert_rejects(&k, p, "byte_perm", 2, &["needs 32-bit integers, got u64"]);
    let mut k = Kernel::new("sad");
    let a = constant(&mut k, scalar(DType::F32), 1);
    let (p, _) = op(
        &mut k,
        Op::Ternary(TernaryOp::Sad),
        &[a, a],
        scalar(DType::F32),
        2,
    );
    assert_rejects(&k, p, "sad", 2, &["takes 3 operands (a, b, c), but has 2"]);
}

#[test]
fn directed_rounding_needs_f32_or_f64() {
    let mut k = Kernel::new("add_rz");
    let a = constant(&mut k, scalar(DType::F16), 1);
    let (r, _) = op(
        &mut k,
        Op::Rounded {
            op: RoundedOp::Add,
            mode: Rounding::TowardZero,
        },
        &[a, a],
        scalar(DType::F16),
        2,
    );
    assert_rejects(&k, r, "add.rz", 2, &["needs f32 or f64 operands, got f16"]);
    let mut k = Kernel::new("sqrt_ru");
    let a = constant(&mut k, scalar(DType::F32), 1);
    let (r, _) = op(
        &mut k,
        Op::Rounded {
            op: RoundedOp::Sqrt,
            mode: Rounding::Up,
        },
        &[a, a],
        scalar(DType::F32),
        2,
    );
    assert_rejects(&k, r, "sqrt.ru", 2, &["takes 1 operand (a), but has 2"]);
}

#[test]
fn float_only_unary_on_integers() {
    let mut k = Kernel::new("exp");
    let a = constant(&mut k, tile(DType::I32, &[8]), 1);
    let (e, _) = op(
        &mut k,
        Op::Unary(UnaryOp::Exp),
        &[a],
        tile(DType::I32, &[8]),
        2,
    );
    assert_rejects(&k, e, "exp", 2, &["needs a float operand, got i32[8]"]);
}

#[test]
fn compare_must_produce_i1() {
    let mut k = Kernel::new("cmp");
    let a = constant(&mut k, tile(DType::I32, &[32]), 1);
    let (c, _) = op(
        &mut k,
        Op::Compare(CmpOp::Lt),
        &[a, a],
        tile(DType::I32, &[32]),
        2,
    );
    assert_rejects(
        &k,
        c,
        "cmp.lt",
        2,
        &["result is i32[32] but must be i1[32]"],
    );
}

#[test]
fn select_condition_must_be_i1() {
    let mut k = Kernel::new("select");
    let a = constant(&mut k, tile(DType::F32, &[4]), 1);
    let (s, _) = op(&mut k, Op::Select, &[a, a, a], tile(DType::F32, &[4]), 2);
    assert_rejects(&k, s, "select", 2, &["condition", "must be i1[4]"]);
}

#[test]
fn bitcast_needs_equal_widths() {
    let mut k = Kernel::new("bitcast");
    let a = constant(&mut k, tile(DType::F32, &[4]), 1);
    let (b, _) = op(&mut k, Op::Bitcast, &[a], tile(DType::I16, &[4]), 2);
    assert_rejects(&k, b, "bitcast", 2, &["f32 has 32 bits and i16 has 16"]);
}

#[test]
fn cast_must_keep_the_shape() {
    let mut k = Kernel::new("cast");
    let a = constant(&mut k, tile(DType::F32, &[4]), 1);
    let (c, _) = op(
        &mut k,
        Op::Cast {
            rounding: Rounding::NearestEven,
        },
        &[a],
        tile(DType::F16, &[8]),
        2,
    );
    assert_rejects(&k, c, "cast", 2, &["keeps the shape", "f32[4] to f16[8]"]);
}

#[test]
fn addptr_needs_integer_offsets_of_the_pointer_shape() {
    let mut k = Kernel::new("addptr");
    let x = k.add_param("x", ptr(DType::F32));
    let f = constant(&mut k, scalar(DType::F32), 1);
    let (a, _) = op(&mut k, Op::AddPtr, &[x, f], ptr(DType::F32), 2);
    assert_rejects(&k, a, "addptr", 2, &["offsets must be integers"]);

    let mut k = Kernel::new("addptr");
    let x = k.add_param("x", ptr(DType::F32));
    let o = constant(&mut k, tile(DType::I32, &[8]), 1);
    let (a, _) = op(&mut k, Op::AddPtr, &[x, o], ptr(DType::F32), 5);
    assert_rejects(&k, a, "addptr", 5, &["must have one shape"]);
}

#[test]
fn load_result_is_the_pointee() {
    let mut k = Kernel::new("load");
    let x = k.add_param("x", ptr(DType::F16));
    let (ld, _) = op(&mut k, load_op(false, false), &[x], scalar(DType::F32), 6);
    assert_rejects(
        &k,
        ld,
        "load",
        6,
        &["result is f32 but must be f16", "pointee"],
    );
}

#[test]
fn load_mask_must_be_i1() {
    let mut k = Kernel::new("mask");
    let x = k.add_param("x", ptr(DType::F32));
    let m = constant(&mut k, scalar(DType::I32), 1);
    let (ld, _) = op(&mut k, load_op(true, false), &[x, m], scalar(DType::F32), 2);
    assert_rejects(&k, ld, "load", 2, &["mask", "must be i1"]);
}

#[test]
fn store_value_must_match_pointee() {
    let mut k = Kernel::new("store");
    let x = k.add_param("out", ptr(DType::F32));
    let v = constant(&mut k, scalar(DType::F64), 1);
    let body = k.body;
    let st = k.append(body, store_op(false), vec![x, v], &[], vec![], loc(8));
    assert_rejects(&k, st, "store", 8, &["stored value", "f64", "must be f32"]);
}

#[test]
fn reduce_removes_the_axis_and_argmax_gives_i32() {
    let mut k = Kernel::new("reduce");
    let a = constant(&mut k, tile(DType::F32, &[16, 32]), 1);
    let sum = Op::Reduce {
        op: ReduceOp::Sum,
        axis: 1,
    };
    let (r, _) = op(&mut k, sum, &[a], tile(DType::F32, &[16, 32]), 2);
    assert_rejects(
        &k,
        r,
        "reduce.sum",
        2,
        &["must be f32[16]", "without the reduced axis"],
    );

    let mut k = Kernel::new("argmax");
    let a = constant(&mut k, tile(DType::F32, &[16, 32]), 1);
    let am = Op::Reduce {
        op: ReduceOp::ArgMax,
        axis: 0,
    };
    let (r, _) = op(&mut k, am, &[a], tile(DType::F32, &[32]), 3);
    assert_rejects(
        &k,
        r,
        "reduce.argmax",
        3,
        &["must be i32[32]", "i32 indices"],
    );
}

#[test]
fn scan_keeps_the_shape() {
    let mut k = Kernel::new("scan");
    let a = constant(&mut k, tile(DType::I32, &[64]), 1);
    let s = Op::Scan {
        op: ReduceOp::Sum,
        axis: 0,
        reverse: false,
    };
    let (r, _) = op(&mut k, s, &[a], tile(DType::I32, &[32]), 2);
    assert_rejects(&k, r, "scan.sum", 2, &["must be i32[64]"]);
}

#[test]
fn dot_shapes() {
    let mut k = Kernel::new("dot");
    let a = constant(&mut k, tile(DType::F16, &[16, 32]), 1);
    let b = constant(&mut k, tile(DType::F16, &[16, 64]), 2);
    let c = constant(&mut k, tile(DType::F32, &[16, 64]), 3);
    let dot = Op::Dot {
        precision: InputPrecision::Tf32,
    };
    let (d, _) = op(&mut k, dot, &[a, b, c], tile(DType::F32, &[16, 64]), 4);
    assert_rejects(
        &k,
        d,
        "dot",
        4,
        &[
            "a[M, K], b[K, N] and acc[M, N]",
            "a: f16[16, 32], b: f16[16, 64]",
        ],
    );
}

#[test]
fn shape_ops() {
    let mut k = Kernel::new("expand");
    let a = constant(&mut k, tile(DType::F32, &[8]), 1);
    let (e, _) = op(
        &mut k,
        Op::ExpandDims { axis: 0 },
        &[a],
        tile(DType::F32, &[8, 1]),
        2,
    );
    assert_rejects(&k, e, "expand_dims", 2, &["must be f32[1, 8]"]);

    let mut k = Kernel::new("reshape");
    let a = constant(&mut k, tile(DType::F32, &[8]), 1);
    let (r, _) = op(&mut k, Op::Reshape, &[a], tile(DType::F32, &[4, 4]), 3);
    assert_rejects(&k, r, "reshape", 3, &["cannot reshape", "to f32[4, 4]"]);

    let mut k = Kernel::new("permute");
    let a = constant(&mut k, tile(DType::F32, &[8, 4]), 1);
    let perm = Op::Permute { perm: vec![0, 0] };
    let (p, _) = op(&mut k, perm, &[a], tile(DType::F32, &[8, 8]), 4);
    assert_rejects(&k, p, "permute", 4, &["[0, 0] is not a permutation"]);

    let mut k = Kernel::new("broadcast");
    let a = constant(&mut k, tile(DType::F32, &[8, 2]), 1);
    let (b, _) = op(&mut k, Op::Broadcast, &[a], tile(DType::F32, &[8, 4]), 5);
    assert_rejects(&k, b, "broadcast", 5, &["only size-1 axes may stretch"]);

    let mut k = Kernel::new("splat");
    let a = constant(&mut k, tile(DType::F32, &[8]), 1);
    let (s, _) = op(&mut k, Op::Splat, &[a], tile(DType::F32, &[8, 8]), 6);
    assert_rejects(&k, s, "splat", 6, &["repeats a scalar", "is a tile"]);
}

#[test]
fn gather_and_flip_types() {
    let gather = |axis| Op::Gather { axis };
    // A well-typed gather: the source's dtype at the index's shape.
    let mut k = Kernel::new("gather");
    let src = constant(&mut k, tile(DType::F16, &[8, 4]), 1);
    let idx = constant(&mut k, tile(DType::U8, &[8, 16]), 2);
    op(
        &mut k,
        gather(1),
        &[src, idx],
        tile(DType::F16, &[8, 16]),
        3,
    );
    verify(&k).unwrap();

    let mut k = Kernel::new("gather");
    let src = constant(&mut k, tile(DType::F32, &[8, 4]), 1);
    let idx = constant(&mut k, tile(DType::F32, &[8, 4]), 2);
    let (g, _) = op(&mut k, gather(1), &[src, idx], tile(DType::F32, &[8, 4]), 3);
    assert_rejects(
        &k,
        g,
        "gather",
        3,
        &["indices must be integers", "f32[8, 4]"],
    );

    let mut k = Kernel::new("gather");
    let src = constant(&mut k, tile(DType::F32, &[8, 4]), 1);
    let idx = constant(&mut k, tile(DType::I1, &[8, 4]), 2);
    let (g, _) = op(&mut k, gather(1), &[src, idx], tile(DType::F32, &[8, 4]), 3);
    assert_rejects(&k, g, "gather", 3, &["indices must be integers"]);

    let mut k = Kernel::new("gather");
    let src = constant(&mut k, tile(DType::F32, &[8, 4]), 1);
    let idx = constant(&mut k, tile(DType::I32, &[32]), 2);
    let (g, _) = op(&mut k, gather(0), &[src, idx], tile(DType::F32, &[32]), 4);
    assert_rejects(&k, g, "gather", 4, &["of one rank"]);

    let mut k = Kernel::new("gather");
    let src = constant(&mut k, tile(DType::F32, &[8, 4]), 1);
    let idx = constant(&mut k, tile(DType::I32, &[8, 4]), 2);
    let (g, _) = op(&mut k, gather(2), &[src, idx], tile(DType::F32, &[8, 4]), 5);
    assert_rejects(&k, g, "gather", 5, &["along axis 2", "of one rank"]);

    let mut k = Kernel::new("gather");
    let src = constant(&mut k, tile(DType::F32, &[8, 4]), 1);
    let idx = constant(&mut k, tile(DType::I32, &[4, 4]), 2);
    let (g, _) = op(&mut k, gather(1), &[src, idx], tile(DType::F32, &[4, 4]), 6);
    assert_rejects(&k, g, "gather", 6, &["differ on axis 0"]);

    let mut k = Kernel::new("gather");
    let src = constant(&mut k, tile(DType::F32, &[8, 4]), 1);
    let idx = constant(&mut k, tile(DType::I64, &[8, 2]), 2);
    let (g, _) = op(&mut k, gather(1), &[src, idx], tile(DType::F32, &[8, 4]), 7);
    assert_rejects(&k, g, "gather", 7, &["must be f32[8, 2]", "index's shape"]);

    let mut k = Kernel::new("flip");
    let a = constant(&mut k, tile(DType::I8, &[8, 4]), 1);
    op(
        &mut k,
        Op::Flip { axis: 1 },
        &[a],
        tile(DType::I8, &[8, 4]),
        2,
    );
    verify(&k).unwrap();
    let (f, _) = op(
        &mut k,
        Op::Flip { axis: 2 },
        &[a],
        tile(DType::I8, &[8, 4]),
        3,
    );
    assert_rejects(&k, f, "flip", 3, &["cannot flip axis 2", "rank 2"]);
    let mut k = Kernel::new("flip");
    let a = constant(&mut k, tile(DType::I8, &[8, 4]), 1);
    let (f, _) = op(
        &mut k,
        Op::Flip { axis: 0 },
        &[a],
        tile(DType::I8, &[4, 8]),
        4,
    );
    assert_rejects(&k, f, "flip", 4, &["keeps the operand's type"]);
}

#[test]
fn arange_length_and_grid_axis() {
    let mut k = Kernel::new("arange");
    let (a, _) = op(
        &mut k,
        Op::Arange { start: 4, end: 20 },
        &[],
        tile(DType::I32, &[20]),
        1,
    );
    assert_rejects(&k, a, "arange", 1, &["must be i32[16]"]);

    let mut k = Kernel::new("pid");
    let (p, _) = op(
        &mut k,
        Op::ProgramId { axis: 3 },
        &[],
        scalar(DType::I32),
        2,
    );
    assert_rejects(&k, p, "program_id", 2, &["grid axis 3 does not exist"]);
}

/// A for loop over `0..n` carrying one f32 scalar; returns (kernel, for inst, body block,
/// carried block arg, yield inst).
fn for_loop(yield_f64: bool) -> (Kernel, Inst, tegula_ir::Block, Value, Inst) {
    let mut k = Kernel::new("loop");
    let n = k.add_param("n", scalar(DType::I32));
    let zero = constant(&mut k, scalar(DType::I32), 1);
    let init = constant(&mut k, scalar(DType::F32), 2);
    let body = k.add_block(&[scalar(DType::I32), scalar(DType::F32)]);
    let acc = k.blocks[body].args[1];
    let yielded = if yield_f64 {
        let c = Op::Cast {
            rounding: Rounding::NearestEven,
        };
        k.append(body, c, vec![acc], &[scalar(DType::F64)], vec![], loc(11));
        let i = *k.blocks[body].insts.last().unwrap();
        k.insts[i].results[0]
    } else {
        acc
    };
    let y = k.append(body, Op::Yield, vec![yielded], &[], vec![], loc(12));
    let top = k.body;
    let f = k.append(
        top,
        Op::For { num_stages: None },
        vec![zero, n, zero, init],
        &[scalar(DType::F32)],
        vec![body],
        loc(10),
    );
    (k, f, body, acc, y)
}

#[test]
fn for_loop_yield_types() {
    let (k, _, _, _, _) = for_loop(false);
    verify(&k).unwrap();
    let (k, _, _, _, y) = for_loop(true);
    assert_rejects(
        &k,
        y,
        "yield",
        12,
        &["passes (f64) to the body of the for loop", "expects (f32)"],
    );
}

#[test]
fn for_loop_block_arguments() {
    let mut k = Kernel::new("args");
    let n = k.add_param("n", scalar(DType::I32));
    let init = constant(&mut k, scalar(DType::F32), 1);
    // The body forgot the induction variable.
    let body = k.add_block(&[scalar(DType::F32)]);
    let acc = k.blocks[body].args[0];
    k.append(body, Op::Yield, vec![acc], &[], vec![], loc(3));
    let top = k.body;
    let f = k.append(
        top,
        Op::For { num_stages: None },
        vec![n, n, n, init],
        &[scalar(DType::F32)],
        vec![body],
        loc(2),
    );
    assert_rejects(
        &k,
        f,
        "for",
        2,
        &["takes arguments (f32), but must take (i32, f32) (induction variable"],
    );
}

#[test]
fn for_loop_must_end_in_yield() {
    let (mut k, f, body, _, y) = for_loop(false);
    k.blocks[body].insts.retain(|&i| i != y);
    assert_rejects(
        &k,
        f,
        "for",
        10,
        &["body of the for loop is empty", "`yield`"],
    );
}

#[test]
fn terminator_in_the_middle_of_a_region() {
    let (mut k, _, body, acc, y) = for_loop(false);
    // Something after the yield.
    k.append(
        body,
        Op::Unary(UnaryOp::Neg),
        vec![acc],
        &[scalar(DType::F32)],
        vec![],
        loc(13),
    );
    assert_rejects(
        &k,
        y,
        "yield",
        12,
        &["must be the last instruction of its region, but 1 instruction follow"],
    );
}

#[test]
fn terminator_at_top_level() {
    let mut k = Kernel::new("top");
    let a = constant(&mut k, scalar(DType::F32), 1);
    let top = k.body;
    let y = k.append(top, Op::Yield, vec![a], &[], vec![], loc(2));
    assert_rejects(&k, y, "yield", 2, &["top level of the kernel"]);
}

#[test]
fn if_branches() {
    let mut k = Kernel::new("branch");
    let c = constant(&mut k, scalar(DType::I1), 1);
    let one = constant(&mut k, scalar(DType::I32), 2);
    let then_ = k.add_block(&[]);
    k.append(then_, Op::Yield, vec![one], &[], vec![], loc(4));
    let else_ = k.add_block(&[]);
    let y = k.append(else_, Op::Yield, vec![], &[], vec![], loc(6));
    let top = k.body;
    k.append(
        top,
        Op::If,
        vec![c],
        &[scalar(DType::I32)],
        vec![then_, else_],
        loc(3),
    );
    assert_rejects(
        &k,
        y,
        "yield",
        6,
        &["passes () to the else branch of the if", "expects (i32)"],
    );
}

#[test]
fn if_needs_two_regions_and_scalar_condition() {
    let mut k = Kernel::new("branch");
    let c = constant(&mut k, tile(DType::I1, &[4]), 1);
    let then_ = k.add_block(&[]);
    k.append(then_, Op::Yield, vec![], &[], vec![], loc(4));
    let else_ = k.add_block(&[]);
    k.append(else_, Op::Yield, vec![], &[], vec![], loc(6));
    let top = k.body;
    let one = k.append(top, Op::If, vec![c], &[], vec![then_], loc(3));
    assert_rejects(&k, one, "if", 3, &["has 1 region, but 2 expected"]);
    k.insts[one].regions.push(else_);
    assert_rejects(&k, one, "if", 3, &["condition", "must be i1"]);
}

#[test]
fn while_before_region_ends_in_condition() {
    let mut k = Kernel::new("while");
    let init = constant(&mut k, scalar(DType::I32), 1);
    let before = k.add_block(&[scalar(DType::I32)]);
    let b_arg = k.blocks[before].args[0];
    k.append(before, Op::Yield, vec![b_arg], &[], vec![], loc(3));
    let after = k.add_block(&[scalar(DType::I32)]);
    let a_arg = k.blocks[after].args[0];
    k.append(after, Op::Yield, vec![a_arg], &[], vec![], loc(4));
    let top = k.body;
    let w = k.append(
        top,
        Op::While,
        vec![init],
        &[scalar(DType::I32)],
        vec![before, after],
        loc(2),
    );
    assert_rejects(
        &k,
        w,
        "while",
        2,
        &[
            "condition region of the while loop ends in `yield`",
            "instead of `condition`",
        ],
    );
    // With a condition that is a tile rather than a scalar.
    k.blocks[before].insts.clear();
    let cmp = Op::Compare(CmpOp::Lt);
    let four = TileType::tile(DType::I1, [4].into());
    let ci = k.append(
        before,
        cmp,
        vec![b_arg, b_arg],
        &[scalar(DType::I1)],
        vec![],
        loc(5),
    );
    let cv = k.insts[ci].results[0];
    let splat = k.append(before, Op::Splat, vec![cv], &[four], vec![], loc(6));
    let sv = k.insts[splat].results[0];
    let cond = k.append(before, Op::Condition, vec![sv], &[], vec![], loc(7));
    assert_rejects(
        &k,
        cond,
        "condition",
        7,
        &[
            "passes (i1[4]) to the condition region of the while loop",
            "expects (i1)",
        ],
    );
}

#[test]
fn use_before_definition() {
    let mut k = Kernel::new("order");
    let a = constant(&mut k, scalar(DType::F32), 1);
    let (neg, _) = op(&mut k, Op::Unary(UnaryOp::Neg), &[a], scalar(DType::F32), 2);
    let (_, later) = op(&mut k, Op::Unary(UnaryOp::Abs), &[a], scalar(DType::F32), 3);
    k.insts[neg].args[0] = later;
    assert_rejects(
        &k,
        neg,
        "neg",
        2,
        &[&format!(
            "value {later} is used before it is defined (by `abs` at broken.rs:3:9)"
        )],
    );
}

#[test]
fn value_leaking_out_of_a_for_loop() {
    let (mut k, _, body, acc, y) = for_loop(false);
    // %t = neg %acc inside the loop, then used after the loop.
    k.blocks[body].insts.retain(|&i| i != y);
    let t = k.append(
        body,
        Op::Unary(UnaryOp::Neg),
        vec![acc],
        &[scalar(DType::F32)],
        vec![],
        loc(11),
    );
    k.blocks[body].insts.push(y);
    let inner = k.insts[t].results[0];
    let (use_, _) = op(
        &mut k,
        Op::Unary(UnaryOp::Abs),
        &[inner],
        scalar(DType::F32),
        20,
    );
    assert_rejects(
        &k,
        use_,
        "abs",
        20,
        &[
            &format!(
                "value {inner} defined inside the for loop at broken.rs:10:9 is used outside it"
            ),
            "loop-carried value",
        ],
    );
    // Nor can the loop's carried block argument.
    k.insts[use_].args[0] = acc;
    assert_rejects(
        &k,
        use_,
        "abs",
        20,
        &["argument 1 of the body of the for loop at broken.rs:10:9"],
    );
}

#[test]
fn loop_result_used_inside_its_own_body() {
    let (mut k, f, _, _, y) = for_loop(false);
    let result = k.insts[f].results[0];
    k.insts[y].args[0] = result;
    assert_rejects(
        &k,
        y,
        "yield",
        12,
        &["result of the enclosing for loop at broken.rs:10:9"],
    );
}

#[test]
fn then_value_used_in_else_branch() {
    let mut k = Kernel::new("branches");
    let c = constant(&mut k, scalar(DType::I1), 1);
    let then_ = k.add_block(&[]);
    let i = k.append(
        then_,
        Op::Const(Constant::Int(7)),
        vec![],
        &[scalar(DType::I32)],
        vec![],
        loc(3),
    );
    let seven = k.insts[i].results[0];
    k.append(then_, Op::Yield, vec![seven], &[], vec![], loc(4));
    let else_ = k.add_block(&[]);
    let y = k.append(else_, Op::Yield, vec![seven], &[], vec![], loc(6));
    let top = k.body;
    k.append(
        top,
        Op::If,
        vec![c],
        &[scalar(DType::I32)],
        vec![then_, else_],
        loc(2),
    );
    assert_rejects(
        &k,
        y,
        "yield",
        6,
        &[&format!(
            "value {seven} defined inside the then branch of the if at broken.rs:2:9 is used outside it"
        )],
    );
}

#[test]
fn instruction_in_two_blocks() {
    let (mut k, _, body, _, _) = for_loop(false);
    let first = k.blocks[k.body].insts[0];
    k.blocks[body].insts.insert(0, first);
    assert_rejects(&k, first, "const", 1, &["exactly one block"]);
}

#[test]
fn removed_definition_is_reported() {
    let mut k = Kernel::new("removed");
    let a = constant(&mut k, scalar(DType::F32), 1);
    let (n, _) = op(&mut k, Op::Unary(UnaryOp::Neg), &[a], scalar(DType::F32), 2);
    let top = k.body;
    k.blocks[top].insts.remove(0);
    assert_rejects(&k, n, "neg", 2, &["not in any block"]);
}

#[test]
fn builder_output_verifies() {
    // Every builder entry point in one kernel: `trace` runs the verifier at the end.
    let k = trace("everything", |p| {
        let x = p.ptr("x", DType::F16);
        let y = p.ptr("y", DType::F32);
        let c = p.ptr("c", DType::I32);
        let n = p.scalar("n", DType::I32);
        let pid = program_id(1) + num_programs(0);
        let rows = arange(0, 16);
        let cols = arange(0, 32);
        let offs = rows.col() * 32 + cols.row();
        let mask = offs.lt(n);
        let a = load(x + offs, mask, 0.0).to::<f32>();
        let b = load_with(
            y + offs,
            LoadOptions {
                cache: CacheModifier::Cg,
                volatile: true,
                ..Default::default()
            },
        );
        let s = select(mask, exp(a) + sqrt(abs(b)), fma(a, b, 1.0));
        let m = maximum(s, 0.0)
            .cast_rounded(DType::F16, Rounding::TowardZero)
            .to::<f32>();
        let t = trans(m).reshape([8, 64]).permute(&[1, 0]);
        let r = sum(t, 0) + max(t, 0);
        let am = argmax(t, 1);
        let cs = cumsum(r.reshape([2, 4]), 1);
        let d = dot(full::<f16>([16, 16], 1.0), zeros::<f16>([16, 16]));
        let bits = d.bitcast::<u32>();
        let z = if_else(pid.gt(0), || cs, || -cs);
        let w = while_loop(pid, |v| v.lt(n), |v| v + 1);
        let acc = for_range(0, n, 4, (z, w), |i, (z, w)| (z * 2.0, w + i));
        store(y + offs, s, mask);
        store_with(
            y + arange(0, 8),
            acc.0.reshape([8]),
            StoreOptions {
                evict: EvictionPolicy::Last,
                ..Default::default()
            },
        );
        let row_sums = sum(bits.reshape([256]).to::<i32>().reshape([16, 16]), 1);
        atomic_add(c + rows, row_sums, None);
        store_unmasked(c + arange(0, 64), am);
        atomic_cas(c, 0, acc.1);
        if_then(n.eq(3), || device_print("n", &[n]));
        let window = make_block_ptr(y, (n, 32), (32, 1), (0, 0), [16, 32]);
        let tile = window.load(&[0, 1], Padding::Zero);
        window.advance((16, 0)).store(tile, &[0]);
        device_assert(
            multiple_of(max_contiguous(rows, 16), 1).ge(0),
            "non-negative",
        );
    });
    let k = k.unwrap();
    verify(&k).unwrap();
}

#[test]
fn value_leaked_from_for_range_closure_is_reported_by_trace() {
    let mut line = 0;
    let e = trace("leak", |p| {
        let out = p.ptr("out", DType::I32);
        let n = p.scalar("n", DType::I32);
        let mut leaked = None;
        let total = for_range(0, n, 1, zeros::<i32>([]), |i, acc| {
            leaked = Some(i * 2);
            acc + i
        });
        line = line!() + 1;
        store_unmasked(out, leaked.unwrap());
        store_unmasked(out + 1, total);
    })
    .unwrap_err();
    println!("{e}");
    assert_eq!(e.loc.line, line, "{e}");
    assert!(e.loc.file.ends_with("verify.rs"), "{e}");
    assert!(
        e.message.contains("defined inside the for loop at")
            && e.message.contains("is used outside it")
            && e.message
                .contains("return it from the body as a loop-carried value"),
        "{e}"
    );
    // The message points at the loop, a few lines above the store.
    assert!(
        e.message.contains(&format!("verify.rs:{}:", line - 5)),
        "{e}"
    );
}

#[test]
fn a_loop_of_zero_stages_is_rejected_at_its_line() {
    let (mut k, f, _, _, _) = for_loop(false);
    k.insts[f].op = Op::For {
        num_stages: Some(0),
    };
    assert_rejects(&k, f, "for", 10, &["num_stages(0)", "at least 1 stage"]);
    k.insts[f].op = Op::For {
        num_stages: Some(1),
    };
    verify(&k).unwrap();
}

#[test]
fn zero_stages_asked_by_the_builder_is_a_trace_error_at_the_loop() {
    let mut line = 0;
    let e = trace("zero_stages", |p| {
        let out = p.ptr("out", DType::I32);
        let n = p.scalar("n", DType::I32);
        line = line!() + 1;
        let total = for_range_with(
            0,
            n,
            1,
            RangeOptions::new().num_stages(0),
            zeros::<i32>([]),
            |i, acc| acc + i,
        );
        store_unmasked(out, total);
    })
    .unwrap_err();
    assert_eq!(e.loc.line, line, "{e}");
    assert!(e.loc.file.ends_with("verify.rs"), "{e}");
    assert!(e.message.contains("num_stages(0)"), "{e}");
    // A negative count never reaches the IR: the builder reports it at the loop.
    let e = trace("negative_stages", |p| {
        let out = p.ptr("out", DType::I32);
        let n = p.scalar("n", DType::I32);
        line = line!() + 1;
        let total = for_range_with(
            0,
            n,
            1,
            RangeOptions::new().num_stages(-2),
            zeros::<i32>([]),
            |i, acc| acc + i,
        );
        store_unmasked(out, total);
    })
    .unwrap_err();
    assert_eq!(e.loc.line, line, "{e}");
    assert!(e.message.contains("num_stages(-2)"), "{e}");
}

/// A `reduce_with` of `args` along `axis` with results `results` and a combine region taking
/// `region_args` and yielding the first `yields` of them (the left elements).
fn combine_kernel(
    k: &mut Kernel,
    op: Op,
    args: &[Value],
    results: &[TileType],
    region_args: &[TileType],
    yields: usize,
) -> Inst {
    let region = k.add_block(region_args);
    let left: Vec<Value> = k.blocks[region].args[..yields].to_vec();
    k.append(region, Op::Yield, left, &[], vec![], loc(9));
    let body = k.body;
    k.append(body, op, args.to_vec(), results, vec![region], loc(4))
}

#[test]
fn reduce_with_checks_shapes_results_and_its_combine_region() {
    let f = scalar(DType::F32);
    let i = scalar(DType::I32);
    let reduce = Op::ReduceWith { axis: 1 };
    // Accepted: two tiles, results without the axis, (f32, i32, f32, i32) -> (f32, i32).
    let mut k = Kernel::new("ok");
    let a = constant(&mut k, tile(DType::F32, &[4, 8]), 1);
    let b = constant(&mut k, tile(DType::I32, &[4, 8]), 2);
    let out = [tile(DType::F32, &[4]), tile(DType::I32, &[4])];
    combine_kernel(&mut k, reduce.clone(), &[a, b], &out, &[f, i, f, i], 2);
    verify(&k).unwrap();

    // Operands of two shapes.
    let mut k = Kernel::new("shapes");
    let a = constant(&mut k, tile(DType::F32, &[4, 8]), 1);
    let b = constant(&mut k, tile(DType::I32, &[8, 4]), 2);
    let r = combine_kernel(&mut k, reduce.clone(), &[a, b], &out, &[f, i, f, i], 2);
    assert_rejects(&k, r, "reduce_with", 4, &["one shape", "i32[8, 4]"]);

    // An axis out of range.
    let mut k = Kernel::new("axis");
    let a = constant(&mut k, tile(DType::F32, &[4, 8]), 1);
    let op = Op::ReduceWith { axis: 2 };
    let r = combine_kernel(&mut k, op, &[a], &out[..1], &[f, f], 1);
    assert_rejects(&k, r, "reduce_with", 4, &["axis 2", "rank 2"]);

    // Results that keep the axis.
    let mut k = Kernel::new("results");
    let a = constant(&mut k, tile(DType::F32, &[4, 8]), 1);
    let wrong = [tile(DType::F32, &[4, 8])];
    let r = combine_kernel(&mut k, reduce.clone(), &[a], &wrong, &[f, f], 1);
    assert_rejects(&k, r, "reduce_with", 4, &["without the reduced axis"]);

    // A combine region of the wrong arguments.
    let mut k = Kernel::new("region");
    let a = constant(&mut k, tile(DType::F32, &[4, 8]), 1);
    let r = combine_kernel(&mut k, reduce.clone(), &[a], &out[..1], &[f, i], 1);
    assert_rejects(
        &k,
        r,
        "reduce_with",
        4,
        &["combine function", "(f32, i32)", "(f32, f32)"],
    );

    // A combine region yielding too few values: named at its yield.
    let mut k = Kernel::new("yield");
    let a = constant(&mut k, tile(DType::F32, &[4, 8]), 1);
    let b = constant(&mut k, tile(DType::I32, &[4, 8]), 2);
    combine_kernel(&mut k, reduce.clone(), &[a, b], &out, &[f, i, f, i], 1);
    let e = verify(&k).unwrap_err();
    assert_eq!((e.op.as_str(), e.loc), ("yield", loc(9)), "{e}");
    assert!(e.message.contains("expects (f32, i32)"), "{e}");

    // A load inside a combine function.
    let mut k = Kernel::new("load");
    let p = k.add_param("p", ptr(DType::F32));
    let a = constant(&mut k, tile(DType::F32, &[4, 8]), 1);
    let region = k.add_block(&[f, f]);
    let ld = k.append(region, load_op(false, false), vec![p], &[f], vec![], loc(7));
    let v = k.insts[ld].results[0];
    k.append(region, Op::Yield, vec![v], &[], vec![], loc(9));
    let body = k.body;
    k.append(body, reduce, vec![a], &out[..1], vec![region], loc(4));
    let e = verify(&k).unwrap_err();
    assert_eq!((e.inst, e.loc), (ld, loc(7)), "{e}");
    assert!(e.message.contains("elementwise scalar ops only"), "{e}");
}

#[test]
fn scan_with_keeps_the_shape() {
    let i = scalar(DType::I32);
    let mut k = Kernel::new("scan");
    let a = constant(&mut k, tile(DType::I32, &[64]), 1);
    let op = Op::ScanWith {
        axis: 0,
        reverse: true,
    };
    let r = combine_kernel(&mut k, op, &[a], &[tile(DType::I32, &[])], &[i, i], 1);
    assert_rejects(&k, r, "scan_with", 4, &["must match the operands' types"]);
}
