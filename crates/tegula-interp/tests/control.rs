//! Control flow, shape ops, hints, printing and assertions.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, InterpError, Options};
use tegula_ir::prelude::*;

fn run_scalar_kernel(k: &tegula_ir::Kernel, extra: Vec<Arg>) -> Result<Vec<i32>, InterpError> {
    let out = Arc::new(Buffer::zeroed(DType::I32, 4));
    let mut args = vec![ptr(&out)];
    args.extend(extra);
    run(k, [4, 1, 1], &args, &Options::default())?;
    Ok(out.to_vec::<i32>().unwrap())
}

#[test]
fn for_loops_count_up_and_down() {
    let k = trace("loops", |p| {
        let out = p.ptr("out", DType::I32);
        let (lo, hi, step) = (
            p.scalar("lo", DType::I32),
            p.scalar("hi", DType::I32),
            p.scalar("step", DType::I32),
        );
        // Sum of the induction variable plus the program id once per iteration.
        let pid = program_id(0);
        let s = for_range(lo, hi, step, scalar(0), |i, acc| acc + i + pid);
        store_unmasked(out + pid, s);
    })
    .unwrap();
    let up = run_scalar_kernel(&k, vec![Arg::Int(2), Arg::Int(11), Arg::Int(3)]).unwrap();
    // 2 + 5 + 8 = 15, plus pid three times.
    assert_eq!(up, vec![15, 18, 21, 24]);
    let down = run_scalar_kernel(&k, vec![Arg::Int(10), Arg::Int(0), Arg::Int(-3)]).unwrap();
    // 10 + 7 + 4 + 1 = 22, four iterations.
    assert_eq!(down, vec![22, 26, 30, 34]);
    let none = run_scalar_kernel(&k, vec![Arg::Int(5), Arg::Int(5), Arg::Int(1)]).unwrap();
    assert_eq!(none, vec![0; 4]);
    let e = run_scalar_kernel(&k, vec![Arg::Int(0), Arg::Int(5), Arg::Int(0)]).unwrap_err();
    assert!(
        matches!(e, InterpError::ZeroStep { pid: [0, 0, 0], .. }),
        "{e}"
    );
    assert!(e.to_string().contains("control.rs"), "{e}");
}

#[test]
fn if_else_and_while_loops_follow_runtime_values() {
    let k = trace("branches", |p| {
        let out = p.ptr("out", DType::I32);
        let pid = program_id(0);
        let v = if_else((pid % 2).eq(0), || pid * 100, || -pid);
        // Collatz steps of 27 + pid.
        let (_, steps) = while_loop(
            (pid + 27, scalar(0)),
            |(x, _)| x.ne(1),
            |(x, s)| (select((x % 2).eq(0), x / 2, x * 3 + 1), s + 1),
        );
        store_unmasked(out + pid, v * 1000 + steps);
    })
    .unwrap();
    let collatz = |mut x: i32| {
        let mut s = 0;
        while x != 1 {
            x = if x % 2 == 0 { x / 2 } else { 3 * x + 1 };
            s += 1;
        }
        s
    };
    let got = run_scalar_kernel(&k, vec![]).unwrap();
    assert_eq!(collatz(27), 111);
    let want: Vec<i32> = (0..4)
        .map(|p| (if p % 2 == 0 { p * 100 } else { -p }) * 1000 + collatz(27 + p))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn failing_assertions_name_message_line_and_program() {
    let line = std::cell::Cell::new(0);
    let k = trace("asserts", |p| {
        let out = p.ptr("out", DType::I32);
        let pid = program_id(0);
        device_assert(pid.ge(0), "never fails");
        let l = line!();
        device_assert((arange(0, 4) + pid).lt(5), "index below five");
        line.set(l + 1);
        device_print("pid is", &[pid]);
        store_unmasked(out + pid, pid);
    })
    .unwrap();
    let e = run_scalar_kernel(&k, vec![]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("index below five"), "{msg}");
    assert!(msg.contains(&format!("control.rs:{}", line.get())), "{msg}");
    assert!(msg.contains("program (2, 0, 0)"), "{msg}");
}

#[test]
fn shape_ops_move_elements_as_documented() {
    let x: Vec<i32> = (0..24).collect();
    let xb = buf(&x);
    let out = Arc::new(Buffer::zeroed(DType::I32, 24 * 4));
    let k = trace("shapes", |p| {
        let (x, out) = (p.ptr("x", DType::I32), p.ptr("out", DType::I32));
        // Load as [2, 3, 4]: arange lengths must be powers of two, so build the offsets
        // from [2], [4], [4] and mask the third axis to 3.
        let i = arange(0, 2).reshape([2, 1, 1]);
        let j = arange(0, 4).reshape([1, 4, 1]);
        let kk = arange(0, 4).reshape([1, 1, 4]);
        let offs = i * 12 + j * 4 + kk; // [2, 4, 4]
        let ok = j.lt(3).broadcast_to([2, 4, 4]);
        let t = load(x + offs, ok, -1); // t[i, j, k] = 12i + 4j + k for j < 3
                                        // Permute to [4, 2, 4] (axes j, i, k) and store row-major.
        let pt = t.permute(&[1, 0, 2]);
        store_unmasked(out + arange(0, 32).reshape([4, 2, 4]), pt);
        // Transpose of a 2-D slice: [8, 4] -> [4, 8].
        let flat = t.reshape([8, 4]);
        store_unmasked(out + 32 + arange(0, 32).reshape([4, 8]), flat.trans());
        // Broadcast a column and splat a scalar.
        let col = arange(0, 4).col().broadcast_to([4, 4]) + program_id(0);
        store_unmasked(out + 64 + arange(0, 16).reshape([4, 4]), col);
        let hinted = max_contiguous(multiple_of(arange(0, 16), 16), 16);
        store_unmasked(
            out + 80 + hinted,
            full::<i32>([16], 7) + hinted.expand_dims(0).reshape([16]),
        );
    })
    .unwrap();
    run(&k, [1, 1, 1], &[ptr(&xb), ptr(&out)], &Options::default()).unwrap();
    let v = out.to_vec::<i32>().unwrap();
    let t = |i: usize, j: usize, k: usize| {
        if j < 3 {
            (12 * i + 4 * j + k) as i32
        } else {
            -1
        }
    };
    for j in 0..4 {
        for i in 0..2 {
            for k in 0..4 {
                assert_eq!(v[j * 8 + i * 4 + k], t(i, j, k), "permute at {j},{i},{k}");
            }
        }
    }
    for c in 0..4 {
        for r in 0..8 {
            assert_eq!(v[32 + c * 8 + r], t(r / 4, r % 4, c), "trans at {c},{r}");
        }
    }
    for r in 0..4 {
        assert_eq!(&v[64 + r * 4..68 + r * 4], &[r as i32; 4]);
    }
    assert_eq!(v[80..96].to_vec(), (7..23).collect::<Vec<i32>>());
}

#[test]
fn the_first_failing_program_in_grid_order_is_reported() {
    let k = trace("fails_late", |p| {
        let x = p.ptr("x", DType::F32);
        let pid = program_id(0) + program_id(1) * 10;
        // Programs with pid >= 13 read out of bounds.
        let v = load_unmasked(x + pid * 4 + arange(0, 4));
        store_unmasked(x + pid * 4 + arange(0, 4), v);
    })
    .unwrap();
    let x = Arc::new(Buffer::zeroed(DType::F32, 52));
    for sequential in [false, true] {
        let opts = Options {
            sequential,
            ..Default::default()
        };
        let e = run(&k, [10, 3, 1], &[ptr(&x)], &opts).unwrap_err();
        // Linear id 13 (x fastest) is program (3, 1, 0); ids 14.. fail too.
        assert!(
            matches!(
                e,
                InterpError::OutOfBounds {
                    pid: [3, 1, 0],
                    index: 52,
                    ..
                }
            ),
            "{e}"
        );
    }
}
