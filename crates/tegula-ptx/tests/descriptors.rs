//! Rule *tensor memory accelerator* (`plan/descriptors.rs`): which tensor-descriptor accesses
//! move on TMA, the tensor maps a compiled kernel asks the launch for, and the PTX of both
//! paths.

mod common;

use common::aligned;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::plan::descriptors::LaunchValue;
use tegula_ptx::{compile, CompileOptions, Compiled, MmaChoice, Target};

/// `out[block] = 2 * x[block]` through two descriptors of one block shape.
fn copy_kernel(dt: DType, block: [usize; 2], in_loop: bool) -> Kernel {
    shifted_copy_kernel(dt, block, in_loop, 0)
}

/// [`copy_kernel`] with its blocks `dr` rows (an argument) and `dc` columns (a constant) on.
fn shifted_copy_kernel(dt: DType, block: [usize; 2], in_loop: bool, dc: i32) -> Kernel {
    trace("desc_copy", |p| {
        let x = p.ptr("x", dt);
        let out = p.ptr("out", dt);
        let m = p.scalar("m", DType::I32);
        let n = p.scalar("n", DType::I32);
        let stride = p.scalar("stride", DType::I32);
        let dr = p.scalar("dr", DType::I32);
        let dx = make_tensor_descriptor(x, (m, n), (stride, 1), block);
        let dout = make_tensor_descriptor(out, (m, n), (stride, 1), block);
        let row = program_id(0) * block[0] as i32 + dr;
        if in_loop {
            for_range(0, n, block[1] as i32, (), |j, ()| {
                let v = dx.load((row, j));
                dout.store((row, j), v * 2.0);
            });
        } else {
            let col = program_id(1) * block[1] as i32 + dc;
            let v = dx.load((row, col));
            dout.store((row, col), v * 2.0);
        }
    })
    .unwrap()
}

fn compiled(k: &Kernel, sm: u32) -> Compiled {
    let options = CompileOptions {
        num_warps: 4,
        num_stages: 2,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: true,
    };
    compile(k, &Target { sm }, &options).unwrap()
}

#[test]
fn aligned_descriptors_move_on_tma_on_sm90() {
    let k = aligned(copy_kernel(DType::F16, [32, 64], false));
    let c = compiled(&k, 90);
    // One map: both descriptors differ only in their base, so two maps.
    assert_eq!(c.tensor_maps.len(), 2, "{:?}", c.tensor_maps);
    let m = &c.tensor_maps[0];
    assert_eq!(m.base, 0);
    assert_eq!(m.dims, [LaunchValue::Param(3), LaunchValue::Param(2)]);
    assert_eq!(m.row_stride, LaunchValue::Param(4));
    assert_eq!(m.box_dims, [64, 32]);
    assert_eq!(c.tensor_maps[1].base, 1);
    for needle in [
        ".param .align 64 .b8 tmap0[128]",
        ".param .align 64 .b8 tmap1[128]",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r",
        "], 4096;",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
        "fence.proxy.async.shared::cta",
        "cp.async.bulk.wait_group.read 0",
    ] {
        assert!(c.ptx.contains(needle), "missing `{needle}` in\n{}", c.ptx);
    }
    assert!(!c.ptx.contains("ld.global"), "{}", c.ptx);
    assert_eq!(c.report.tensor_maps, 2);
}

#[test]
fn without_tma_descriptors_are_masked_loads_and_stores() {
    let k = aligned(copy_kernel(DType::F16, [32, 64], false));
    let c = compiled(&k, 80);
    assert!(c.tensor_maps.is_empty());
    assert!(!c.ptx.contains("cp.async.bulk"), "{}", c.ptx);
    assert!(c.ptx.contains("ld.global"), "{}", c.ptx);
    assert!(c.ptx.contains("st.global"), "{}", c.ptx);
    let why = &c.report.descriptors_expanded;
    assert_eq!(why.len(), 2);
    assert!(why[0].1.contains("sm_80"), "{why:?}");
}

#[test]
fn each_unmet_condition_keeps_the_masked_access_and_says_why() {
    // Strides not known to be multiples of 16 bytes.
    let mut k = aligned(copy_kernel(DType::F16, [32, 64], false));
    k.params[4].facts.divisibility = 1;
    let c = compiled(&k, 90);
    assert!(c.tensor_maps.is_empty());
    assert!(c.report.descriptors_expanded[0].1.contains("first stride"));
    // A base not known to be aligned.
    let mut k = aligned(copy_kernel(DType::F16, [32, 64], false));
    k.params[0].facts.divisibility = 1;
    let c = compiled(&k, 90);
    assert_eq!(c.tensor_maps.len(), 1, "the store's base is still aligned");
    assert!(c.report.descriptors_expanded[0]
        .1
        .contains("16-byte aligned"));
    // Rows of 8 bytes.
    let k = aligned(copy_kernel(DType::F16, [32, 4], false));
    let c = compiled(&k, 90);
    assert!(c.tensor_maps.is_empty());
    assert!(c.report.descriptors_expanded[0].1.contains("16 bytes"));
    // A store whose last shape is not known to be whole 16-byte words (the GPU writes past
    // the end of such rows); the load still moves on TMA.
    let mut k = aligned(copy_kernel(DType::F32, [16, 32], false));
    k.params[3].facts.divisibility = 1;
    let c = compiled(&k, 90);
    assert_eq!(c.tensor_maps.len(), 1);
    assert!(c.report.descriptors_expanded[0].1.contains("last shape"));
    // A last offset not known to be 16-byte aligned (the GPU faults on such a box).
    let k = aligned(shifted_copy_kernel(DType::F32, [16, 32], false, 3));
    let c = compiled(&k, 90);
    assert!(c.tensor_maps.is_empty());
    assert!(c.report.descriptors_expanded[0]
        .1
        .contains("multiple of 4 elements"));
    let k = aligned(shifted_copy_kernel(DType::F32, [16, 32], false, 8));
    assert_eq!(compiled(&k, 90).tensor_maps.len(), 2);
    // 8-bit integers, held widened in registers.
    let k = aligned(copy_kernel(DType::I8, [32, 64], false));
    let c = compiled(&k, 90);
    assert!(c.tensor_maps.is_empty());
    assert!(c.report.descriptors_expanded[0].1.contains("widened"));
    // In a loop: the load streams through the pipeline, the store moves on TMA.
    let k = aligned(copy_kernel(DType::F32, [16, 32], true));
    let c = compiled(&k, 90);
    assert_eq!(c.tensor_maps.len(), 1);
    assert_eq!(c.tensor_maps[0].base, 1);
    assert!(c.report.descriptors_expanded[0].1.contains("loop"));
    assert!(c.ptx.contains("bulk_group"), "{}", c.ptx);
}

#[test]
fn tma_kernels_assemble() {
    let Some(ptxas) = tegula_ptx::ptxas::find() else {
        panic!("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    };
    let dir = std::env::temp_dir().join(format!("tegula-desc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (dt, block)) in [
        (DType::F16, [32, 64]),
        (DType::F32, [64, 32]),
        (DType::BF16, [128, 64]),
    ]
    .into_iter()
    .enumerate()
    {
        let k = aligned(copy_kernel(dt, block, i == 1));
        let c = compiled(&k, 90);
        assert!(!c.tensor_maps.is_empty());
        let a = tegula_ptx::ptxas::assemble(&ptxas, &c.ptx, 90, &dir, &format!("desc{i}"))
            .unwrap_or_else(|e| panic!("{e}\n{}", c.ptx));
        assert_eq!(a.spill_stores, 0);
    }
}

mod sim;

/// The TMA path on the PTX simulator (which models the bulk copies, their mbarriers and the
/// async proxy's fences): the copy kernel against a reference over an odd tensor with blocks
/// past every edge.
#[test]
fn tma_copies_run_on_the_simulator() {
    // Outside loops (a TMA load and store), and in a loop (a store an iteration, each
    // reusing the buffer the previous one's copy reads); blocks shifted up (the first row of
    // blocks starts at a negative row: the load zero-fills, the store takes its masked path,
    // since a TMA store there faults) and down.
    for in_loop in [false, true] {
        for dr in [0, -3, 5] {
            simulate_copy(in_loop, dr);
        }
    }
}

fn simulate_copy(in_loop: bool, dr: i32) {
    use tegula_ptx_sim::{Arg, TensorMapArg, TmaSwizzle};
    // Rows of whole 16-byte words (a TMA store needs them), ragged columns through a block
    // wholly past the end.
    let (m, n, stride) = (37usize, 48usize, 64usize);
    let (bm, bn) = (16usize, 32usize);
    // The specialization facts of the arguments below: aligned pointers, n and stride; m
    // and dr are not multiples of 16.
    let mut k = aligned(copy_kernel(DType::F32, [bm, bn], in_loop));
    for p in [2, 5] {
        k.params[p].facts.divisibility = 1;
    }
    let c = compiled(&k, 90);
    assert_eq!(c.tensor_maps.len(), if in_loop { 1 } else { 2 });
    let x = sim::values(m * stride, 7);
    let out_init = vec![-7.0f32; m * stride];
    let xb = sim::encode(DType::F32, &x);
    let ob = sim::encode(DType::F32, &out_init);
    let map = |buf| {
        Arg::TensorMap(TensorMapArg {
            buf,
            byte_offset: 0,
            elem_bytes: 4,
            dims: [n as u64, m as u64],
            row_stride_bytes: (stride * 4) as u64,
            box_dims: [bn as u32, bm as u32],
            swizzle: TmaSwizzle::None,
        })
    };
    let args = [
        Arg::Buf(&xb),
        Arg::Buf(&ob),
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(stride as i32),
        Arg::I32(dr),
        map(c.tensor_maps[0].base),
        map(c.tensor_maps.last().unwrap().base),
    ];
    let args = &args[..6 + c.tensor_maps.len()];
    let mut names = sim::param_names(&k);
    names.extend(c.tensor_maps.iter().map(|t| t.name.clone()));
    let cols = if in_loop {
        1
    } else {
        n.div_ceil(bn) as u64 + 1
    };
    let grid = [m.div_ceil(bm) as u64 + 1, cols, 1];
    let rows_covered = |i: i64| i >= dr as i64 && i < dr as i64 + (grid[0] as i64) * bm as i64;
    let out = tegula_ptx_sim::run_ptx(&c.ptx, c.shared_bytes as usize, &names, 4, grid, args);
    let got = sim::decode(DType::F32, &out[1]);
    for i in 0..m {
        for j in 0..stride {
            let want = if j < n && rows_covered(i as i64) {
                2.0 * x[i * stride + j]
            } else {
                -7.0
            };
            assert_eq!(
                got[i * stride + j],
                want,
                "out[{i}, {j}] (dr {dr}, loop {in_loop})"
            );
        }
    }
}

/// `desc.gather`, `desc.scatter` and the descriptor atomics (ordinary masked accesses after
/// tracing) on the PTX simulator give the interpreter's results, rows out of range included.
#[test]
fn descriptor_gather_scatter_and_atomics_match_the_interpreter() {
    use std::sync::Arc;
    use tegula_interp::{Arg as IArg, Buffer};
    let (m, n, y0) = (13usize, 40usize, 9i32);
    let k = trace("desc_rows", |p| {
        let x = p.ptr("x", DType::F32);
        let rows = p.ptr("rows", DType::I32);
        let out = p.ptr("out", DType::F32);
        let back = p.ptr("back", DType::F32);
        let count = p.ptr("count", DType::I32);
        let (mm, nn, y) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("y0", DType::I32),
        );
        let dx = make_tensor_descriptor(x, (mm, nn), (nn, 1), [1, 32]);
        let dback = make_tensor_descriptor(back, (mm, nn), (nn, 1), [1, 32]);
        let idx = load_unmasked(rows + arange(0, 8));
        let v = dx.gather(idx, y);
        store_unmasked(out + arange(0, 8).col() * 32 + arange(0, 32).row(), v);
        dback.scatter(v * 3.0, idx, y);
        let dcount = make_tensor_descriptor(count, (mm, nn), (nn, 1), [8, 32]);
        dcount.atomic_add((program_id(0) * 4 - 3, y), 1);
        dcount.atomic_xor((program_id(0) * 4 - 3, y), 256);
    })
    .unwrap();
    let xv = sim::values(m * n, 3);
    let idx: Vec<i32> = vec![4, -1, 12, 0, 13, 7, 2, 30];
    let inputs: Vec<Vec<u8>> = vec![
        sim::encode(DType::F32, &xv),
        idx.iter().flat_map(|v| v.to_le_bytes()).collect(),
        vec![0u8; 8 * 32 * 4],
        sim::encode(DType::F32, &vec![-7.0; m * n]),
        vec![0u8; m * n * 4],
    ];
    let dtypes = [DType::F32, DType::I32, DType::F32, DType::F32, DType::I32];
    let bufs: Vec<Arc<Buffer>> = inputs
        .iter()
        .zip(dtypes)
        .map(|(b, d)| {
            let buf = Buffer::zeroed(d, b.len() / 4);
            for (i, w) in b.chunks(4).enumerate() {
                buf.write_bits(i, u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64);
            }
            Arc::new(buf)
        })
        .collect();
    let mut iargs: Vec<IArg> = bufs.iter().map(IArg::ptr).collect();
    iargs.extend([
        IArg::Int(m as i64),
        IArg::Int(n as i64),
        IArg::Int(y0 as i64),
    ]);
    tegula_interp::run(&k, [3, 1, 1], &iargs, &tegula_interp::Options::default()).unwrap();
    let mut sargs: Vec<sim::Arg> = inputs.iter().map(|b| sim::Arg::Buf(b)).collect();
    sargs.extend([
        sim::Arg::I32(m as i32),
        sim::Arg::I32(n as i32),
        sim::Arg::I32(y0),
    ]);
    let out = sim::run_on(90, &k, 4, 1, [3, 1, 1], &sargs);
    for (i, buf) in bufs.iter().enumerate().skip(2) {
        let want: Vec<u32> = (0..buf.len()).map(|j| buf.read_bits(j) as u32).collect();
        let got: Vec<u32> = out[i]
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        assert_eq!(got, want, "buffer {i}");
    }
    // Not all zeros: the kernel gathered real rows and counted real blocks.
    assert!(bufs[2].read_bits(0) != 0 && bufs[4].read_bits(n * 5 + 10) != 0);
}

/// A 3-D descriptor's accesses are masked loads and stores (the rule moves 2-D blocks), and
/// say so; its PTX runs on the simulator as the interpreter runs the kernel.
#[test]
fn descriptors_of_three_axes_are_masked_accesses_that_run() {
    use std::sync::Arc;
    use tegula_interp::{Arg as IArg, Buffer};
    let k = trace("desc3", |p| {
        let x = p.ptr("x", DType::F32);
        let out = p.ptr("out", DType::F32);
        let (b, m, n) = (
            p.scalar("b", DType::I32),
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
        );
        let dx = make_tensor_descriptor(x, (b, m, n), (m * n, n, 1), [2, 4, 8]);
        let dout = make_tensor_descriptor(out, (b, m, n), (m * n, n, 1), [2, 4, 8]);
        let at = (program_id(0) * 2, program_id(1) * 4 - 1, program_id(2) * 8);
        dout.store(at, dx.load(at) * 3.0 + 1.0);
    })
    .map(aligned)
    .unwrap();
    let c = compiled(&k, 90);
    assert!(c.tensor_maps.is_empty());
    assert!(
        c.report.descriptors_expanded[0].1.contains("3-D"),
        "{}",
        c.report
    );
    let (b, m, n) = (3usize, 9usize, 19usize);
    let xv = sim::values(b * m * n, 11);
    let xb = sim::encode(DType::F32, &xv);
    let ob = sim::encode(DType::F32, &vec![-7.0; b * m * n]);
    let grid = [2u64, 3, 3];
    let out = sim::run_on(
        90,
        &k,
        4,
        1,
        grid,
        &[
            sim::Arg::Buf(&xb),
            sim::Arg::Buf(&ob),
            sim::Arg::I32(b as i32),
            sim::Arg::I32(m as i32),
            sim::Arg::I32(n as i32),
        ],
    );
    let bx = Arc::new(Buffer::from_slice(&xv));
    let bo = Arc::new(Buffer::from_slice(&vec![-7.0f32; b * m * n]));
    let args = [
        IArg::ptr(&bx),
        IArg::ptr(&bo),
        IArg::Int(b as i64),
        IArg::Int(m as i64),
        IArg::Int(n as i64),
    ];
    tegula_interp::run(&k, [2, 3, 3], &args, &tegula_interp::Options::default()).unwrap();
    let want: Vec<f32> = bo.to_vec().unwrap();
    let got = sim::decode(DType::F32, &out[1]);
    assert_eq!(got, want);
    for (i, (&g, &x)) in got.iter().zip(&xv).enumerate() {
        assert_eq!(g, x * 3.0 + 1.0, "out[{i}]");
    }
}
