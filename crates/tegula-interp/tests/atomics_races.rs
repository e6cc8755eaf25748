//! Atomics from many programs, compare-and-swap, and the write-write race check.

mod common;
use common::*;
use half::f16;
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, InterpError, Options};
use tegula_ir::prelude::*;

fn checking() -> Options {
    Options {
        check_races: true,
        ..Default::default()
    }
}

#[test]
fn atomic_adds_from_many_programs_sum_exactly() {
    let k = trace("count", |p| {
        let (ci, cf, ch) = (
            p.ptr("ci", DType::I32),
            p.ptr("cf", DType::F32),
            p.ptr("ch", DType::F16),
        );
        let pid = program_id(0);
        // Every program adds pid + 1 to ci[0] and 1.0 to each of cf[0..4] (4 lanes).
        atomic_add(ci, pid + 1, None);
        let lanes = arange(0, 4);
        atomic_add(cf + lanes, full::<f32>([4], 1.0), None);
        atomic_add(ch, 1.0, None);
    })
    .unwrap();
    let ci = Arc::new(Buffer::zeroed(DType::I32, 1));
    let cf = Arc::new(Buffer::zeroed(DType::F32, 4));
    let ch = Arc::new(Buffer::zeroed(DType::F16, 1));
    let programs = 3000u32;
    run(
        &k,
        [programs, 1, 1],
        &[ptr(&ci), ptr(&cf), ptr(&ch)],
        &checking(),
    )
    .unwrap();
    assert_eq!(ci.to_vec::<i32>().unwrap(), vec![3000 * 3001 / 2]);
    assert_eq!(cf.to_vec::<f32>().unwrap(), vec![3000.0; 4]);
    // f16 stops counting at 2048: 2048 + 1 rounds back to 2048 (ties to even).
    assert_eq!(ch.to_f64(), vec![2048.0]);
}

#[test]
fn atomic_max_min_and_bit_ops_respect_dtypes() {
    let k = trace("extremes", |p| {
        let (mx, mn, um, bits) = (
            p.ptr("mx", DType::I32),
            p.ptr("mn", DType::F32),
            p.ptr("um", DType::U32),
            p.ptr("bits", DType::U32),
        );
        let pid = program_id(0);
        // Values -50..49 in a scrambled order.
        let v = (pid * 37) % 100 - 50;
        atomic_max(mx, v, None);
        atomic_min(mn, v.to::<f32>() * 0.5, None);
        atomic_max(um, v.to::<u32>(), None); // -1 as u32 is the largest
        let one = (pid - pid + 1).to::<u32>();
        atomic(AtomicOp::Or, bits, one << (pid % 32).to::<u32>(), None);
    })
    .unwrap();
    let mx = buf(&[i32::MIN]);
    let mn = buf(&[f32::INFINITY]);
    let um = buf(&[0u32]);
    let bits = buf(&[0u32]);
    run(
        &k,
        [100, 1, 1],
        &[ptr(&mx), ptr(&mn), ptr(&um), ptr(&bits)],
        &checking(),
    )
    .unwrap();
    assert_eq!(mx.to_vec::<i32>().unwrap(), vec![49]);
    assert_eq!(mn.to_vec::<f32>().unwrap(), vec![-25.0]);
    assert_eq!(um.to_vec::<u32>().unwrap(), vec![u32::MAX]);
    assert_eq!(bits.to_vec::<u32>().unwrap(), vec![u32::MAX]);
}

#[test]
fn exchange_and_compare_and_swap_return_old_values() {
    let data = buf(&[5i32, 7, 9, 11]);
    let old = Arc::new(Buffer::zeroed(DType::I32, 4));
    let k = trace("cas", |p| {
        let (d, old) = (p.ptr("d", DType::I32), p.ptr("old", DType::I32));
        let offs = arange(0, 4);
        // Swap in 100+i where the current value is 5 or 9.
        let cmp = select(offs.eq(0) | offs.eq(2), offs * 2 + 5, -1);
        let prev = atomic_cas(d + offs, cmp, offs + 100);
        let prev2 = atomic_xchg(d + offs, prev * 10, Some(offs.ge(2)));
        store_unmasked(old + offs, prev + prev2);
    })
    .unwrap();
    run(&k, [1, 1, 1], &[ptr(&data), ptr(&old)], &checking()).unwrap();
    // cas: [100, 7, 102, 11] returning [5, 7, 9, 11]; xchg on lanes 2, 3 stores 90, 110 and
    // returns 102, 11 (masked-off lanes return 0).
    assert_eq!(data.to_vec::<i32>().unwrap(), vec![100, 7, 90, 110]);
    assert_eq!(old.to_vec::<i32>().unwrap(), vec![5, 7, 9 + 102, 11 + 11]);
}

#[test]
fn atomic_float_add_rounds_in_the_dtype() {
    let h = buf(&[f16::from_f64(1.0)]);
    let k = trace("addh", |p| {
        let h = p.ptr("h", DType::F16);
        atomic_add(h, pow2(-11), None);
    })
    .unwrap();
    run(&k, [4, 1, 1], &[ptr(&h)], &Options::default()).unwrap();
    // Each 1 + 2^-11 is a tie back to 1.0.
    assert_eq!(h.to_f64(), vec![1.0]);
}

#[test]
fn out_of_bounds_atomics_are_reported() {
    let k = trace("oob_atomic", |p| {
        let c = p.ptr("c", DType::I32);
        atomic_add(c + program_id(0), 1, None);
    })
    .unwrap();
    let c = Arc::new(Buffer::zeroed(DType::I32, 3));
    let e = run(&k, [4, 1, 1], &[ptr(&c)], &Options::default()).unwrap_err();
    assert!(
        matches!(
            e,
            InterpError::OutOfBounds {
                op: "atomic",
                index: 3,
                pid: [3, 0, 0],
                ..
            }
        ),
        "{e}"
    );
}

fn overlap_kernel(line: &std::cell::Cell<u32>) -> tegula_ir::Kernel {
    trace("overlap", |p| {
        let out = p.ptr("out", DType::F32);
        let step = p.scalar("step", DType::I32);
        // Program i writes [i*step, i*step + 8): overlapping when step < 8.
        let offs = program_id(0) * step + arange(0, 8);
        let l = line!();
        store_unmasked(out + offs, program_id(0).to::<f32>());
        line.set(l + 1);
        // Writing an element twice within one program is not a race.
        store_unmasked(out + offs, program_id(0).to::<f32>() + 0.5);
    })
    .unwrap()
}

#[test]
fn write_write_races_between_programs_are_detected() {
    let line = std::cell::Cell::new(0);
    let k = overlap_kernel(&line);
    let out = Arc::new(Buffer::zeroed(DType::F32, 64));
    let e = run(&k, [4, 1, 1], &[ptr(&out), Arg::Int(6)], &checking()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("write-write race"), "{msg}");
    // Programs run on several threads here: the race is seen at whichever of the two stores
    // (3 lines apart) meets the other program's writes first; the sequential run below has
    // one answer.
    let (first_store, second_store) = (line.get(), line.get() + 3);
    assert!(
        msg.contains(&format!("atomics_races.rs:{first_store}:"))
            || msg.contains(&format!("atomics_races.rs:{second_store}:")),
        "{msg}"
    );
    match e {
        InterpError::Race {
            index,
            first,
            second,
            ..
        } => {
            // Neighbours overlap on [6(i+1), 6i + 8).
            let (a, b) = (first[0].min(second[0]), first[0].max(second[0]));
            assert_eq!(b, a + 1, "{msg}");
            assert!(
                index >= 6 * b as usize && index < 6 * a as usize + 8,
                "{msg}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // The same kernel sequentially: deterministic first race, between programs 0 and 1.
    let seq = Options {
        check_races: true,
        sequential: true,
    };
    let e = run(&k, [4, 1, 1], &[ptr(&out), Arg::Int(6)], &seq).unwrap_err();
    assert!(
        matches!(
            e,
            InterpError::Race {
                index: 6,
                first: [0, 0, 0],
                second: [1, 0, 0],
                ..
            }
        ),
        "{e}"
    );
    // Program 1's first store meets program 0's writes: the error names that line.
    assert!(
        e.to_string()
            .contains(&format!("atomics_races.rs:{first_store}:")),
        "{e}"
    );
    // Without the check, or with disjoint writes, the run succeeds.
    run(
        &k,
        [4, 1, 1],
        &[ptr(&out), Arg::Int(6)],
        &Options::default(),
    )
    .unwrap();
    run(&k, [4, 1, 1], &[ptr(&out), Arg::Int(8)], &checking()).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap()[31], 3.5);
}

#[test]
fn races_through_aliasing_arguments_are_detected() {
    let k = trace("alias", |p| {
        let (a, b) = (p.ptr("a", DType::I32), p.ptr("b", DType::I32));
        let which = program_id(0);
        if_else(
            which.eq(0),
            || store_unmasked(a + 2, 1),
            || store_unmasked(b, 2),
        );
    })
    .unwrap();
    let data = Arc::new(Buffer::zeroed(DType::I32, 8));
    let args = [ptr(&data), Arg::view(&data, 2, 6)];
    let e = run(&k, [2, 1, 1], &args, &checking()).unwrap_err();
    // Element 2 of `a` is element 0 of `b`: the second store names its own argument.
    assert!(
        matches!(
            &e,
            InterpError::Race { arg, index: 2, .. } if arg == "a"
        ) || matches!(
            &e,
            InterpError::Race { arg, index: 0, .. } if arg == "b"
        ),
        "{e}"
    );
}

const SEMS: [MemSem; 4] = [
    MemSem::Relaxed,
    MemSem::Acquire,
    MemSem::Release,
    MemSem::AcqRel,
];
const SCOPES: [MemScope; 3] = [MemScope::Cta, MemScope::Gpu, MemScope::Sys];

/// Every ordering at every scope: the interpreter performs each atomic whole and in one order
/// for the grid, so float sums are within the rounding of some order of additions of a float64
/// sum, integer sums are exact, and a ticket counter hands out each ticket once.
#[test]
fn atomic_adds_at_every_ordering_and_scope_match_the_reference() {
    const PROGRAMS: usize = 64;
    const BLOCK: usize = 32;
    const N: usize = BLOCK - 3; // masked-off columns stay as they were
    for (case, (sem, scope)) in SEMS
        .iter()
        .flat_map(|&s| SCOPES.iter().map(move |&c| (s, c)))
        .enumerate()
    {
        let k = trace("ordered_adds", |p| {
            let (xf, xi) = (p.ptr("xf", DType::F32), p.ptr("xi", DType::I32));
            let (af, ai) = (p.ptr("af", DType::F32), p.ptr("ai", DType::I32));
            let (ticket, tickets) = (p.ptr("ticket", DType::I32), p.ptr("tickets", DType::I32));
            let n = p.scalar("n", DType::I32);
            let pid = program_id(0);
            let offs = arange(0, BLOCK as i64);
            let mask = offs.lt(n);
            let row = pid * BLOCK as i64 + offs;
            let vf = load(xf + row, mask, 0.0);
            let vi = load(xi + row, mask, 0);
            let _ = atomic_with(AtomicOp::Add, af + offs, vf, Some(mask), sem, scope);
            let _ = atomic_with(AtomicOp::Add, ai + offs, vi, Some(mask), sem, scope);
            let t = atomic_with(AtomicOp::Add, ticket, 1, None, sem, scope);
            store_unmasked(tickets + pid, t);
        })
        .unwrap();
        let mut rng = Rng::new(100 + case as u64);
        let xf = rng.f32s(PROGRAMS * BLOCK, -1.0, 1.0);
        let xi: Vec<i32> = (0..PROGRAMS * BLOCK)
            .map(|_| rng.next_u64() as i32)
            .collect();
        let (af0, ai0) = (rng.f32s(BLOCK, -4.0, 4.0), vec![7i32; BLOCK]);
        let (bxf, bxi) = (buf(&xf), buf(&xi));
        let (af, ai) = (buf(&af0), buf(&ai0));
        let ticket = buf(&[0i32]);
        let tickets = Arc::new(Buffer::zeroed(DType::I32, PROGRAMS));
        run(
            &k,
            [PROGRAMS as u32, 1, 1],
            &[
                ptr(&bxf),
                ptr(&bxi),
                ptr(&af),
                ptr(&ai),
                ptr(&ticket),
                ptr(&tickets),
                Arg::Int(N as i64),
            ],
            &checking(),
        )
        .unwrap();
        let (af, ai) = (af.to_vec::<f32>().unwrap(), ai.to_vec::<i32>().unwrap());
        for c in 0..BLOCK {
            let what = format!("sem {} scope {} column {c}", sem.name(), scope.name());
            if c >= N {
                assert_eq!(af[c].to_bits(), af0[c].to_bits(), "{what}");
                assert_eq!(ai[c], ai0[c], "{what}");
                continue;
            }
            let col = (0..PROGRAMS).map(|p| p * BLOCK + c);
            let exact: f64 = af0[c] as f64 + col.clone().map(|i| xf[i] as f64).sum::<f64>();
            let magnitude: f64 =
                af0[c].abs() as f64 + col.clone().map(|i| xf[i].abs() as f64).sum::<f64>();
            // n additions, each rounding once: within n * 2^-24 of the magnitude.
            let bound = PROGRAMS as f64 * pow2(-24) * magnitude;
            assert!(
                (af[c] as f64 - exact).abs() <= bound,
                "{what}: {} vs {exact} (bound {bound})",
                af[c]
            );
            let sum = col.fold(ai0[c], |s, i| s.wrapping_add(xi[i]));
            assert_eq!(ai[c], sum, "{what}");
        }
        let mut t = tickets.to_vec::<i32>().unwrap();
        t.sort_unstable();
        assert_eq!(
            t,
            (0..PROGRAMS as i32).collect::<Vec<_>>(),
            "{sem:?} {scope:?}"
        );
        assert_eq!(ticket.to_vec::<i32>().unwrap(), vec![PROGRAMS as i32]);
    }
}

/// `atomic_cas_with` at every ordering and scope: a lock word taken by one program at a time.
#[test]
fn atomic_cas_at_every_ordering_and_scope_swaps_once() {
    for sem in SEMS {
        for scope in SCOPES {
            let k = trace("ordered_cas", |p| {
                let (word, won) = (p.ptr("word", DType::I32), p.ptr("won", DType::I32));
                let pid = program_id(0);
                // Every program tries to swap 0 for its id + 1; only the first finds 0.
                let old = atomic_cas_with(word, 0, pid + 1, sem, scope);
                store_unmasked(won + pid, old.eq(0).to::<i32>());
            })
            .unwrap();
            let word = buf(&[0i32]);
            let won = Arc::new(Buffer::zeroed(DType::I32, 50));
            run(&k, [50, 1, 1], &[ptr(&word), ptr(&won)], &checking()).unwrap();
            let won = won.to_vec::<i32>().unwrap();
            assert_eq!(won.iter().sum::<i32>(), 1, "{sem:?} {scope:?}");
            let winner = won.iter().position(|&w| w == 1).unwrap() as i32;
            assert_eq!(word.to_vec::<i32>().unwrap(), vec![winner + 1]);
        }
    }
}
