//! Rule *TMA slots* (`plan/pipeline.rs`): a tensor descriptor's load inside a pipelined loop
//! fills its slots with `cp.async.bulk.tensor` copies completed on an `mbarrier` a slot, and
//! the kernel still computes what the float64 reference does, on the PTX simulator (which
//! checks the swizzle, the barriers' phases and every read before its copy completes), on
//! `mma.sync` and on `wgmma`, with ragged edges the copies zero-fill.

mod common;
mod sim;

use common::aligned;
use sim::*;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, Compiled, MmaChoice, Target};
use tegula_ptx_sim::{TensorMapArg, TmaSwizzle};

/// `C = A B` over descriptors of A `[m, k]` and B `[k, n]`, the k-loop's loads addressed
/// from its counter.
fn desc_matmul(dt: DType, blocks: (usize, usize, usize)) -> Kernel {
    desc_matmul_with(dt, blocks, false)
}

/// [`desc_matmul`], or with `b_nk` B given as `[n, k]` and read as `db.load(..).trans()` (K
/// contiguous in both operands, as fp8 tensor cores need).
fn desc_matmul_with(dt: DType, (bm, bn, bk): (usize, usize, usize), b_nk: bool) -> Kernel {
    trace("desc_matmul", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
        let (m, n, kk) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let da = make_tensor_descriptor(a, (m, kk), (kk, 1), [bm, bk]);
        let db = if b_nk {
            make_tensor_descriptor(b, (n, kk), (kk, 1), [bn, bk])
        } else {
            make_tensor_descriptor(b, (kk, n), (n, 1), [bk, bn])
        };
        let row = program_id(0) * bm as i32;
        let col = program_id(1) * bn as i32;
        let acc = for_range(0, kk, bk as i32, zeros::<f32>([bm, bn]), |k0, acc| {
            let bt = if b_nk {
                db.load((col, k0)).trans()
            } else {
                db.load((k0, col))
            };
            dot_acc(da.load((row, k0)), bt, acc)
        });
        let offs_m = row + arange(0, bm as i64);
        let offs_n = col + arange(0, bn as i64);
        store(
            c + offs_m.col() * n + offs_n.row(),
            acc,
            offs_m.col().lt(m) & offs_n.row().lt(n),
        );
    })
    .map(aligned)
    .unwrap()
}

fn compiled(k: &Kernel, mma: MmaChoice, warps: u32, stages: u32) -> Compiled {
    let options = CompileOptions {
        num_warps: warps,
        num_stages: stages,
        mma,
        fp_fusion: true,
        tma: true,
    };
    compile(k, &Target { sm: 90 }, &options).unwrap()
}

/// The loop's PTX: from its label to its back edge.
fn loop_body(ptx: &str) -> &str {
    let body = ptx.split("$L_for_").nth(1).expect("a loop");
    body.split("bra.uni $L_for_").next().unwrap()
}

#[test]
fn descriptor_loads_in_a_pipelined_loop_fill_their_slots_by_tma() {
    let k = desc_matmul(DType::F16, (64, 64, 64));
    let c = compiled(&k, MmaChoice::Sync, 4, 3);
    let l = &c.report.loops[0];
    assert_eq!(
        (l.stages, l.streamed.len(), l.on_tma.len()),
        (3, 2, 2),
        "{l:?}"
    );
    assert_eq!(c.tensor_maps.len(), 2, "{:?}", c.tensor_maps);
    for m in &c.tensor_maps {
        assert_eq!((m.box_dims, m.swizzle), ([64, 64], 128), "{m:?}");
    }
    let body = loop_body(&c.ptx);
    for needle in [
        "mbarrier.try_wait.parity.shared::cta.b64",
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r",
        // Both tiles, 8 KB each, arm one barrier.
        "], 16384;",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
    ] {
        assert!(body.contains(needle), "missing `{needle}` in\n{body}");
    }
    // No thread copies or computes an address or a mask for them.
    for absent in [
        "cp.async.cg",
        "cp.async.ca",
        "cp.async.wait_group",
        "mul.wide",
    ] {
        assert!(!body.contains(absent), "`{absent}` in\n{body}");
    }
    assert!(
        c.report.to_string().contains("on TMA (tensor map 0)"),
        "{}",
        c.report
    );
}

#[test]
fn unmet_conditions_keep_the_slots_on_cp_async() {
    // A base not known to be 16-byte aligned: the report says so, the threads copy.
    let k = desc_matmul(DType::F16, (64, 64, 64));
    let mut unaligned = k.clone();
    unaligned.params[0].facts.divisibility = 8;
    let c = compiled(&unaligned, MmaChoice::Sync, 4, 3);
    assert_eq!(c.tensor_maps.len(), 1, "{:?}", c.tensor_maps);
    assert_eq!(c.report.loops[0].on_tma.len(), 1, "{:?}", c.report.loops[0]);
    let body = loop_body(&c.ptx);
    assert!(body.contains("cp.async.c"), "{body}");
    assert!(
        c.report
            .to_string()
            .contains("not specialized as 16-byte aligned"),
        "{}",
        c.report
    );
    // Rows of 256 bytes are no TMA swizzle's span for `ldmatrix`'s full-row slots.
    let k = desc_matmul(DType::F16, (64, 128, 128));
    let c = compiled(&k, MmaChoice::Sync, 4, 2);
    assert_eq!(c.report.loops[0].streamed.len(), 2);
    assert!(
        c.report.loops[0].on_tma.is_empty(),
        "{:?}",
        c.report.loops[0]
    );
    assert!(c.tensor_maps.is_empty(), "{:?}", c.tensor_maps);
    // Loads in a loop need no asking, but a loop of 1 stage streams nothing.
    let options = CompileOptions {
        num_warps: 4,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    let c = compile(&k, &Target { sm: 90 }, &options).unwrap();
    assert!(c.tensor_maps.is_empty());
    assert!(!c.ptx.contains("cp.async.bulk"));
}

#[test]
fn tma_slots_run_on_the_simulator() {
    // mma.sync reading swizzled 128-byte rows; wgmma reading them, and 64-byte rows; wgmma
    // with B's 256-byte rows as two panels (two copies a slot); ragged m, n and k.
    for (mma, blocks, stages) in [
        (MmaChoice::Sync, (64, 64, 64), 3),
        (MmaChoice::Wgmma, (64, 64, 64), 3),
        (MmaChoice::Wgmma, (64, 32, 32), 2),
        (MmaChoice::Wgmma, (64, 128, 64), 2),
    ] {
        simulate(DType::F16, mma, blocks, stages);
    }
}

fn simulate(dt: DType, mma: MmaChoice, (bm, bn, bk): (usize, usize, usize), stages: u32) {
    let what = format!("{mma} {bm}x{bn}x{bk} {stages} stages");
    let (m, n, kk) = (bm + 9, 2 * bn - 8, 3 * bk + 8);
    let k = desc_matmul(dt, (bm, bn, bk));
    let c = compiled(&k, mma, 4, stages);
    let l = &c.report.loops[0];
    assert_eq!(l.on_tma.len(), 2, "{what}: {l:?}\n{}", c.report);
    let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
    check_product(&k, &c, (m, n, kk), grid, 5, &what);
}

/// fp8 operands (e4m3, e5m2) through tensor maps of 1-byte elements, B given as `[n, k]`:
/// both slots filled by TMA and read by fp8 `wgmma` (and, asked for `mma.sync`, by plain
/// `ldmatrix`), on the simulator against float64.
#[test]
fn fp8_tma_slots_run_on_the_simulator() {
    for dt in [DType::F8E4M3, DType::F8E5M2] {
        for (mma, (bm, bn, bk), stages) in [
            (MmaChoice::Wgmma, (64, 64, 128), 3),
            (MmaChoice::Wgmma, (64, 32, 64), 2),
            (MmaChoice::Sync, (64, 64, 64), 3),
        ] {
            let what = format!("{dt} {mma} {bm}x{bn}x{bk} {stages} stages");
            let (m, n, kk) = (bm + 9, 2 * bn - 8, 3 * bk + 16);
            let k = desc_matmul_with(dt, (bm, bn, bk), true);
            let c = compiled(&k, mma, 4, stages);
            let l = &c.report.loops[0];
            assert_eq!(l.on_tma.len(), 2, "{what}: {l:?}\n{}", c.report);
            assert_eq!(
                c.report.wgmma_dots(),
                (mma == MmaChoice::Wgmma) as usize,
                "{what}"
            );
            let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
            check_product_of(dt, true, &k, &c, (m, n, kk), grid, 7, &what);
        }
    }
}

/// Runs a compiled `C = A B` kernel of [`desc_matmul`]'s signature (A `[m, k]`, B `[k, n]`
/// f16 through tensor maps, C f32) over `grid` on the simulator, on fresh values (`seed`),
/// and checks C against float64.
fn check_product(
    k: &Kernel,
    c: &Compiled,
    mnk: (usize, usize, usize),
    grid: [u64; 3],
    seed: u64,
    what: &str,
) {
    check_product_of(DType::F16, false, k, c, mnk, grid, seed, what);
}

/// [`check_product`] of `dt` operands, with `b_nk` B given as `[n, k]`.
#[allow(clippy::too_many_arguments)]
fn check_product_of(
    dt: DType,
    b_nk: bool,
    k: &Kernel,
    c: &Compiled,
    (m, n, kk): (usize, usize, usize),
    grid: [u64; 3],
    seed: u64,
    what: &str,
) {
    let es = dt.size_bytes();
    let av = values(m * kk, seed);
    let bv = values(kk * n, seed + 1);
    // The reference takes B as [k, n].
    let b_kn = if b_nk {
        transposed(&bv, n, kk)
    } else {
        bv.clone()
    };
    let (want, scale) = matmul_reference(dt, &av, &b_kn, (m, n, kk));
    let (ab, bb) = (encode(dt, &av), encode(dt, &bv));
    let out = vec![0u8; m * n * 4];
    let map = |t: &tegula_ptx::plan::descriptors::TensorMapAbi| {
        let (dims, stride) = match (t.base, b_nk) {
            (0, _) => ([kk, m], kk),
            (_, false) => ([n, kk], n),
            (_, true) => ([kk, n], kk),
        };
        Arg::TensorMap(TensorMapArg {
            buf: t.base,
            byte_offset: 0,
            elem_bytes: es as u32,
            dims: [dims[0] as u64, dims[1] as u64],
            row_stride_bytes: (stride * es) as u64,
            box_dims: t.box_dims,
            swizzle: match t.swizzle {
                0 => TmaSwizzle::None,
                32 => TmaSwizzle::B32,
                64 => TmaSwizzle::B64,
                128 => TmaSwizzle::B128,
                other => panic!("{what}: a swizzle of {other} bytes"),
            },
        })
    };
    let mut args = vec![
        Arg::Buf(&ab),
        Arg::Buf(&bb),
        Arg::Buf(&out),
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(kk as i32),
    ];
    args.extend(c.tensor_maps.iter().map(map));
    let mut names = param_names(k);
    names.extend(c.tensor_maps.iter().map(|t| t.name.clone()));
    let bufs = run_ptx(&c.ptx, c.shared_bytes as usize, &names, 4, grid, &args);
    assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 2e-3, what);
}

/// Two TMA-fed k-loops inside an outer loop over two column tiles: each run of a loop
/// initializes its barriers again after the last one invalidated them, and the products are
/// still A B.
#[test]
fn tma_slots_of_loops_run_again_and_again() {
    let (bm, bn, bk) = (64usize, 32usize, 32usize);
    let dt = DType::F16;
    let k = trace("desc_matmul_twice", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
        let (m, n, kk) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let da = make_tensor_descriptor(a, (m, kk), (kk, 1), [bm, bk]);
        let db = make_tensor_descriptor(b, (kk, n), (n, 1), [bk, bn]);
        let row = program_id(0) * bm as i32;
        let offs_m = row + arange(0, bm as i64);
        for_range(0, 2, 1, (), |t, ()| {
            let col = (program_id(1) * 2 + t) * bn as i32;
            // The first half of K, then the second, in two loops.
            let half = kk / (2 * bk as i32) * bk as i32;
            let acc = for_range(0, half, bk as i32, zeros::<f32>([bm, bn]), |k0, acc| {
                dot_acc(da.load((row, k0)), db.load((k0, col)), acc)
            });
            let acc = for_range(half, kk, bk as i32, acc, |k0, acc| {
                dot_acc(da.load((row, k0)), db.load((k0, col)), acc)
            });
            let offs_n = col + arange(0, bn as i64);
            store(
                c + offs_m.col() * n + offs_n.row(),
                acc,
                offs_m.col().lt(m) & offs_n.row().lt(n),
            );
        });
    })
    .map(aligned)
    .unwrap();
    let c = compiled(&k, MmaChoice::Wgmma, 4, 2);
    let on_tma: usize = c.report.loops.iter().map(|l| l.on_tma.len()).sum();
    assert_eq!(on_tma, 4, "{}", c.report);
    let (m, n, kk) = (bm + 3, 4 * bn - 16, 4 * bk);
    check_product(
        &k,
        &c,
        (m, n, kk),
        [m.div_ceil(bm) as u64, 2, 1],
        8,
        "twice",
    );
}

/// A persistent matmul (tutorial 09's descriptor kernel's shape): each program walks tiles
/// `pid, pid + programs, ..`, its k-loop a nest pipelined across the tile loop with its slots
/// filled by TMA; the slot barriers' parities carry over the tiles.
#[test]
fn tma_slots_in_a_nest_pipelined_across_the_tile_loop() {
    let (bm, bn, bk) = (64usize, 64usize, 64usize);
    let dt = DType::F16;
    let programs = 2usize;
    let k = trace("desc_persistent", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
        let (m, n, kk) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let da = make_tensor_descriptor(a, (m, kk), (kk, 1), [bm, bk]);
        let db = make_tensor_descriptor(b, (kk, n), (n, 1), [bk, bn]);
        let tiles_n = (n + (bn as i32 - 1)) / bn as i32;
        let tiles = (m + (bm as i32 - 1)) / bm as i32 * tiles_n;
        for_range(program_id(0), tiles, programs as i32, (), |tile, ()| {
            let row = tile / tiles_n * bm as i32;
            let col = tile % tiles_n * bn as i32;
            let acc = for_range(0, kk, bk as i32, zeros::<f32>([bm, bn]), |k0, acc| {
                dot_acc(da.load((row, k0)), db.load((k0, col)), acc)
            });
            let offs_m = row + arange(0, bm as i64);
            let offs_n = col + arange(0, bn as i64);
            store(
                c + offs_m.col() * n + offs_n.row(),
                acc,
                offs_m.col().lt(m) & offs_n.row().lt(n),
            );
        });
    })
    .map(aligned)
    .unwrap();
    for (mma, stages) in [(MmaChoice::Wgmma, 3), (MmaChoice::Sync, 2)] {
        let c = compiled(&k, mma, 4, stages);
        let outer = &c.report.loops[0];
        assert!(outer.pipelines_inner_loop, "{}", c.report);
        assert_eq!(c.report.loops[1].on_tma.len(), 2, "{}", c.report);
        // 3 x 2 tiles over 2 programs: three tiles each, k in 3 steps (the last ragged).
        let (m, n, kk) = (3 * bm - 5, 2 * bn - 16, 3 * bk - 16);
        let grid = [programs as u64, 1, 1];
        check_product(&k, &c, (m, n, kk), grid, 12, &format!("{mma}"));
    }
}
