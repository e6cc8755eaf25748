//! Loads and stores: masks, `other`, bounds checks, argument checking, the Buffer API.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, InterpError, Options};
use tegula_ir::prelude::*;

#[test]
fn masked_loads_yield_other_and_never_touch_masked_off_pointers() {
    let x = buf(&[1.5f32, 2.5, 3.5, 4.5, 5.5]);
    let out = Arc::new(Buffer::zeroed(DType::F32, 8));
    let k = trace("masked", |p| {
        let (x, out, n) = (
            p.ptr("x", DType::F32),
            p.ptr("out", DType::F32),
            p.scalar("n", DType::I32),
        );
        let offs = arange(0, 8);
        let mask = offs.lt(n);
        // Masked-off lanes point far out of bounds; they must not be dereferenced.
        let wild = select(mask, offs, offs * 1_000_000 - 50_000_000);
        let v = load(x + wild, mask, -1.0);
        store_unmasked(out + offs, v);
    })
    .unwrap();
    run(
        &k,
        [1, 1, 1],
        &[ptr(&x), ptr(&out), Arg::Int(5)],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        vec![1.5, 2.5, 3.5, 4.5, 5.5, -1.0, -1.0, -1.0]
    );
}

#[test]
fn loads_without_other_yield_zero_and_masked_stores_skip_lanes() {
    let x = buf(&[7i32, 8, 9]);
    let out = buf(&[-1i32; 4]);
    let k = trace("zero_other", |p| {
        let (x, out) = (p.ptr("x", DType::I32), p.ptr("out", DType::I32));
        let offs = arange(0, 4);
        let v = load_with(
            x + offs,
            LoadOptions {
                mask: Some(offs.lt(3)),
                ..Default::default()
            },
        );
        store(out + offs, v, offs.ne(1));
    })
    .unwrap();
    run(&k, [1, 1, 1], &[ptr(&x), ptr(&out)], &Options::default()).unwrap();
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![7, -1, 9, 0]);
}

fn oob_kernel(line: &std::cell::Cell<u32>, store_it: bool) -> tegula_ir::Kernel {
    trace("oob", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let offs = program_id(0) * 16 + arange(0, 16);
        if store_it {
            let l = line!();
            store_unmasked(out + offs - 20, 1.0);
            line.set(l + 1);
        } else {
            let (v, l) = (load_unmasked(x + offs), line!());
            line.set(l);
            store_unmasked(out + offs, v);
        }
    })
    .unwrap()
}

#[test]
fn out_of_bounds_load_names_kernel_line_program_and_index() {
    let line = std::cell::Cell::new(0);
    let k = oob_kernel(&line, false);
    let x = Arc::new(Buffer::zeroed(DType::F32, 20));
    let out = Arc::new(Buffer::zeroed(DType::F32, 64));
    let e = run(&k, [4, 1, 1], &[ptr(&x), ptr(&out)], &Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("out-of-bounds load"), "{msg}");
    assert!(msg.contains("kernel `oob`"), "{msg}");
    assert!(msg.contains(&format!("memory.rs:{}", line.get())), "{msg}");
    // Program 1 is the first (in grid order) to read past 20 elements: index 20.
    assert!(msg.contains("program (1, 0, 0)"), "{msg}");
    assert!(
        msg.contains("element 20 of argument `x`, a view of 20 elements"),
        "{msg}"
    );
    match e {
        InterpError::OutOfBounds {
            op,
            pid,
            index,
            len,
            ..
        } => {
            assert_eq!((op, pid, index, len), ("load", [1, 0, 0], 20, 20));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn out_of_bounds_store_reports_negative_index() {
    let line = std::cell::Cell::new(0);
    let k = oob_kernel(&line, true);
    let x = Arc::new(Buffer::zeroed(DType::F32, 64));
    let out = Arc::new(Buffer::zeroed(DType::F32, 64));
    let e = run(&k, [2, 1, 1], &[ptr(&x), ptr(&out)], &Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("out-of-bounds store"), "{msg}");
    assert!(msg.contains(&format!("memory.rs:{}", line.get())), "{msg}");
    assert!(msg.contains("program (0, 0, 0)"), "{msg}");
    assert!(
        msg.contains("element -20 of argument `out`, a view of 64"),
        "{msg}"
    );
}

#[test]
fn pointer_arguments_may_start_at_an_offset() {
    let x = buf(&[0i64, 1, 2, 3, 4, 5, 6, 7]);
    let out = Arc::new(Buffer::zeroed(DType::I64, 4));
    let k = trace("offset", |p| {
        let (x, out) = (p.ptr("x", DType::I64), p.ptr("out", DType::I64));
        let offs = arange(0, 4);
        store_unmasked(out + offs, load_unmasked(x + offs) * 10);
    })
    .unwrap();
    let args = [Arg::view(&x, 3, 5), ptr(&out)];
    run(&k, [1, 1, 1], &args, &Options::default()).unwrap();
    assert_eq!(out.to_vec::<i64>().unwrap(), vec![30, 40, 50, 60]);
    // Past the end of the view (elements 5..8 of x): its element 3, the buffer's 8.
    let args = [Arg::view(&x, 5, 3), ptr(&out)];
    let e = run(&k, [1, 1, 1], &args, &Options::default()).unwrap_err();
    assert!(
        matches!(
            e,
            InterpError::OutOfBounds {
                index: 3,
                len: 3,
                ..
            }
        ),
        "{e}"
    );
}

fn scale_kernel() -> tegula_ir::Kernel {
    trace("scale", |p| {
        let (x, s, n) = (
            p.ptr("x", DType::F32),
            p.scalar("s", DType::F32),
            p.scalar("n", DType::I8),
        );
        let offs = arange(0, 4);
        let m = offs.lt(n);
        store(x + offs, load(x + offs, m, 0.0) * s, m);
    })
    .unwrap()
}

#[test]
fn argument_mismatches_are_typed_errors() {
    let k = scale_kernel();
    let x = buf(&[1.0f32, 2.0, 3.0]);
    let opts = Options::default();
    let e = run(&k, [1, 1, 1], &[ptr(&x)], &opts).unwrap_err();
    assert!(
        matches!(
            e,
            InterpError::ArgCount {
                expected: 3,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
    let wrong = buf(&[1.0f64]);
    let e = run(
        &k,
        [1, 1, 1],
        &[ptr(&wrong), Arg::Float(2.0), Arg::Int(3)],
        &opts,
    )
    .unwrap_err();
    assert!(
        matches!(e, InterpError::ArgMismatch { index: 0, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("a buffer of f32"), "{e}");
    let e = run(
        &k,
        [1, 1, 1],
        &[Arg::Int(0), Arg::Float(2.0), Arg::Int(3)],
        &opts,
    )
    .unwrap_err();
    assert!(
        matches!(e, InterpError::ArgMismatch { index: 0, .. }),
        "{e}"
    );
    let e = run(&k, [1, 1, 1], &[ptr(&x), ptr(&x), Arg::Int(3)], &opts).unwrap_err();
    assert!(
        matches!(e, InterpError::ArgMismatch { index: 1, .. }),
        "{e}"
    );
    let e = run(
        &k,
        [1, 1, 1],
        &[ptr(&x), Arg::Float(2.0), Arg::Float(3.0)],
        &opts,
    )
    .unwrap_err();
    assert!(
        matches!(e, InterpError::ArgMismatch { index: 2, .. }),
        "{e}"
    );
    let e = run(
        &k,
        [1, 1, 1],
        &[ptr(&x), Arg::Float(2.0), Arg::Int(300)],
        &opts,
    )
    .unwrap_err();
    assert!(e.to_string().contains("fits in i8"), "{e}");
    let e = run(
        &k,
        [1, 1, 1],
        &[Arg::view(&x, 4, x.len()), Arg::Float(2.0), Arg::Int(3)],
        &opts,
    )
    .unwrap_err();
    assert!(
        matches!(e, InterpError::ArgMismatch { index: 0, .. }),
        "{e}"
    );
    // An Int for a float parameter converts.
    run(&k, [1, 1, 1], &[ptr(&x), Arg::Int(2), Arg::Int(3)], &opts).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
}

#[test]
fn buffer_api_round_trips_and_checks_types() {
    let b = Buffer::from_f64(DType::F16, &[1.0 + pow2(-11) + pow2(-40), 0.1, 1e6]);
    // Exact rounding (sticky bits below the f16 mantissa count), and overflow to inf.
    assert_eq!(b.to_f64()[0], 1.0 + pow2(-10));
    assert_eq!(b.to_f64()[1], half::f16::from_f32(0.1).to_f64());
    assert_eq!(b.to_f64()[2], f64::INFINITY);
    let i = Buffer::from_f64(DType::I8, &[300.0, -2.9, f64::NAN]);
    assert_eq!(i.to_vec::<i8>().unwrap(), vec![127, -2, 0]);
    assert!(matches!(
        i.to_vec::<u8>(),
        Err(InterpError::DTypeMismatch { .. })
    ));
    let u = Buffer::from_slice(&[u32::MAX, 7]);
    assert_eq!(u.to_f64(), vec![u32::MAX as f64, 7.0]);
    assert_eq!(u.read_bits(0), 0xFFFF_FFFF);
    u.write_bits(1, 0x1_0000_0009); // high bits beyond the width are dropped
    assert_eq!(u.to_vec::<u32>().unwrap(), vec![u32::MAX, 9]);
    let v = Buffer::zeroed(DType::U32, 2);
    assert!(!v.is_empty() && v.len() == 2 && v.dtype() == DType::U32);
    v.copy_from(&u).unwrap();
    assert_eq!(v.to_vec::<u32>().unwrap(), vec![u32::MAX, 9]);
    assert!(v.copy_from(&Buffer::zeroed(DType::U32, 3)).is_err());
    assert!(v.copy_from(&Buffer::zeroed(DType::I32, 2)).is_err());
    let flags = Buffer::from_slice(&[true, false, true]);
    assert_eq!(flags.to_vec::<bool>().unwrap(), vec![true, false, true]);
    assert!(Buffer::zeroed(DType::F64, 0).is_empty());
}

#[test]
fn program_ids_and_grid_sizes_cover_a_3d_grid() {
    let grid = [3u32, 2, 4];
    let n = (grid[0] * grid[1] * grid[2]) as usize;
    let out = Arc::new(Buffer::zeroed(DType::I32, n * 4));
    let k = trace("ids", |p| {
        let out = p.ptr("out", DType::I32);
        let (x, y, z) = (program_id(0), program_id(1), program_id(2));
        let linear = x + num_programs(0) * (y + num_programs(1) * z);
        let base = out + linear * 4;
        store_unmasked(base, x);
        store_unmasked(base + 1, y);
        store_unmasked(base + 2, z);
        store_unmasked(
            base + 3,
            num_programs(2) * 100 + num_programs(1) * 10 + num_programs(0),
        );
    })
    .unwrap();
    run(&k, grid, &[ptr(&out)], &Options::default()).unwrap();
    let v = out.to_vec::<i32>().unwrap();
    for z in 0..4 {
        for y in 0..2 {
            for x in 0..3 {
                let l = (x + 3 * (y + 2 * z)) as usize;
                assert_eq!(&v[l * 4..l * 4 + 4], &[x, y, z, 423]);
            }
        }
    }
}

/// An unmasked store through a 10-element view of a 100-element buffer stops at the view's
/// end: before views had extents, it silently overwrote elements 10..16 of the neighbour
/// and the reported index counted from the start of the allocation.
#[test]
fn accesses_are_checked_against_the_view_not_the_buffer() {
    let line = std::cell::Cell::new(0);
    let k = trace("fill16", |p| {
        let out = p.ptr("out", DType::F32);
        let offs = arange(0, 16);
        let l = line!();
        store_unmasked(out + offs, 7.0);
        line.set(l + 1);
    })
    .unwrap();
    let data = Arc::new(Buffer::zeroed(DType::F32, 100));
    // The view of elements 30..40: the kernel writes 16.
    let e = run(
        &k,
        [1, 1, 1],
        &[Arg::view(&data, 30, 10)],
        &Options::default(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("element 10 of argument `out`, a view of 10 elements"),
        "{msg}"
    );
    assert!(msg.contains(&format!("memory.rs:{}", line.get())), "{msg}");
    assert!(msg.contains("program (0, 0, 0)"), "{msg}");
    assert!(
        matches!(
            &e,
            InterpError::OutOfBounds { arg, index: 10, len: 10, op: "store", .. } if arg == "out"
        ),
        "{e:?}"
    );
    // The neighbours (40..46) are untouched. (The check runs before the store's first lane.)
    let after = data.to_vec::<f32>().unwrap();
    assert!(after[40..].iter().all(|&v| v == 0.0), "{after:?}");
    // The whole buffer from the same offset takes the 16 elements.
    run(
        &k,
        [1, 1, 1],
        &[Arg::view(&data, 30, 70)],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(
        data.to_vec::<f32>().unwrap()[30..47]
            .iter()
            .filter(|&&v| v == 7.0)
            .count(),
        16
    );
    // Loads and atomics obey the view too, and so does a negative offset from it.
    let k = trace("around", |p| {
        let x = p.ptr("x", DType::I32);
        let _ = atomic_add(x + program_id(0) - 1, 1, None);
    })
    .unwrap();
    let e = run(
        &k,
        [3, 1, 1],
        &[Arg::view(&data_i32(), 4, 2)],
        &Options::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            &e,
            InterpError::OutOfBounds {
                op: "atomic",
                index: -1,
                len: 2,
                ..
            }
        ),
        "{e}"
    );
}

fn data_i32() -> Arc<Buffer> {
    Arc::new(Buffer::zeroed(DType::I32, 16))
}

/// A view must lie inside its buffer.
#[test]
fn views_past_the_buffer_are_argument_errors() {
    let k = trace("noop", |p| {
        let _ = p.ptr("x", DType::F32);
    })
    .unwrap();
    let b = Arc::new(Buffer::zeroed(DType::F32, 8));
    for (offset, len) in [(0, 9), (8, 1), (usize::MAX, 2)] {
        let e = run(
            &k,
            [1, 1, 1],
            &[Arg::view(&b, offset, len)],
            &Options::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&e, InterpError::ArgMismatch { name, .. } if name == "x"),
            "{e}"
        );
    }
    run(&k, [1, 1, 1], &[Arg::view(&b, 8, 0)], &Options::default()).unwrap();
}

/// A buffer or tile larger than the host can hold is an error, not an abort or a
/// "capacity overflow" panic.
#[test]
fn allocations_the_host_cannot_meet_are_errors() {
    for len in [usize::MAX, usize::MAX / 8, 1 << 50] {
        let e = Buffer::try_zeroed(DType::F64, len).unwrap_err();
        assert!(matches!(e, InterpError::OutOfMemory { .. }), "{e}");
        assert!(e.to_string().contains("out of host memory"), "{e}");
    }
    // A tile of 2^32 - 2^16 f32 elements is 32 GB of f64 values in the interpreter: refused
    // before the op builds it (hosts that can give 32 GB (more than this test's budget) skip
    // the check below).
    let line = std::cell::Cell::new(0);
    let k = trace("huge", |p| {
        let out = p.ptr("out", DType::F32);
        let l = line!();
        let t = full::<f32>([(1 << 16) - 1, 1 << 16], 1.0);
        line.set(l + 1);
        store_unmasked(out, sum(sum(t, 1), 0));
    })
    .unwrap();
    let mut probe: Vec<u8> = Vec::new();
    if probe.try_reserve_exact(1 << 35).is_ok() {
        eprintln!("skipped the tile half: this host grants 32 GB");
        return;
    }
    drop(probe);
    let out = Arc::new(Buffer::zeroed(DType::F32, 1));
    let e = run(&k, [1, 1, 1], &[ptr(&out)], &Options::default()).unwrap_err();
    assert!(
        matches!(&e, InterpError::TileOutOfMemory { loc, .. } if loc.line == line.get()),
        "{e}"
    );
    assert!(e.to_string().contains("f32[65535, 65536]"), "{e}");
}
