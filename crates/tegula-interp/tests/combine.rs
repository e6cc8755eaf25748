//! `reduce_with` and `scan_with` with user combine functions against host references on fresh
//! random inputs: an argmax with indices and 2x2 integer matrix products exactly, Welford's
//! (mean, m2, count) against float64, on masked tiles with odd extents along every axis; and
//! the combine order (a balanced tree of adjacent pairs for reductions, index order for scans)
//! shown by a combine that is not associative.
//!
//! The seed is printed and comes from the clock, or from `TEGULA_TEST_SEED`.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, Options};
use tegula_ir::prelude::*;

struct Rng(u64);

impl Rng {
    fn new(test: &str) -> Rng {
        let seed = std::env::var("TEGULA_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("{test}: seed {seed} (TEGULA_TEST_SEED={seed} repeats it)");
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A `[rows, cols]` problem held in a `[R, C]` tile (powers of two), reduced or scanned along
/// `axis`.
#[derive(Clone, Copy, Debug)]
struct Case {
    tile: [usize; 2],
    ext: [usize; 2],
    axis: usize,
}

impl Case {
    fn random(r: &mut Rng) -> Case {
        let tile = [1 << r.below(6), 1 << r.below(7)];
        let ext = [1 + r.below(tile[0]), 1 + r.below(tile[1])];
        Case {
            tile,
            ext,
            axis: r.below(2),
        }
    }

    /// The valid elements' coordinates along the axis for each position of the other axis.
    fn lines(&self) -> Vec<Vec<(usize, usize)>> {
        let other = 1 - self.axis;
        (0..self.ext[other])
            .map(|o| {
                (0..self.ext[self.axis])
                    .map(|j| if self.axis == 0 { (j, o) } else { (o, j) })
                    .collect()
            })
            .collect()
    }

    /// Offsets (`rows x cols` row-major, the problem's layout), the mask and the index along
    /// the axis of the tile.
    fn tiles(&self, rows: Tile, cols: Tile) -> (Tile, Tile, Tile) {
        let r = arange(0, self.tile[0] as i64).col();
        let c = arange(0, self.tile[1] as i64).row();
        let offs = (r * self.ext[1] as i64 + c).broadcast_to(self.tile);
        let mask = (r.lt(rows) & c.lt(cols)).broadcast_to(self.tile);
        let along = if self.axis == 0 { r } else { c }.broadcast_to(self.tile);
        (offs, mask, along)
    }

    /// Offsets of the results: the other axis (reductions) or the whole tile (scans), in the
    /// problem's layout, and their mask.
    fn out_tiles(&self, scan: bool, rows: Tile, cols: Tile) -> (Tile, Tile) {
        if scan {
            let (o, m, _) = self.tiles(rows, cols);
            return (o, m);
        }
        let other = 1 - self.axis;
        let o = arange(0, self.tile[other] as i64);
        let lim = if other == 0 { rows } else { cols };
        (o, o.lt(lim))
    }

    fn numel(&self) -> usize {
        self.ext[0] * self.ext[1]
    }
}

/// Runs a kernel of `case` over the inputs `ins` (one buffer per combined tile, of
/// `case.numel()` elements): `body(offs, mask, along, inputs)` returns the tiles to store.
fn run_case(
    case: Case,
    scan: bool,
    ins: &[Arc<Buffer>],
    body: impl FnOnce(Tile, Tile, &[Tile]) -> Vec<Tile>,
) -> Vec<Arc<Buffer>> {
    let mut outs = Vec::new();
    let n_out = if scan {
        case.numel()
    } else {
        case.ext[1 - case.axis]
    };
    let k = trace("combine", |p| {
        let xs: Vec<Tile> = ins
            .iter()
            .enumerate()
            .map(|(i, b)| p.ptr(&format!("x{i}"), b.dtype()))
            .collect();
        let ys: Vec<Tile> = ins
            .iter()
            .enumerate()
            .map(|(i, b)| p.ptr(&format!("y{i}"), b.dtype()))
            .collect();
        let (rows, cols) = (p.scalar("rows", DType::I32), p.scalar("cols", DType::I32));
        let (offs, mask, along) = case.tiles(rows, cols);
        let loaded: Vec<Tile> = xs.iter().map(|&x| load(x + offs, mask, 0)).collect();
        let results = body(mask, along, &loaded);
        let (o, m) = case.out_tiles(scan, rows, cols);
        for (y, r) in ys.iter().zip(results) {
            store(*y + o, r, m);
        }
    })
    .unwrap();
    for b in ins {
        outs.push(Arc::new(Buffer::zeroed(b.dtype(), n_out)));
    }
    let mut args: Vec<Arg> = ins.iter().map(ptr).collect();
    args.extend(outs.iter().map(ptr));
    args.push(Arg::Int(case.ext[0] as i64));
    args.push(Arg::Int(case.ext[1] as i64));
    run(&k, [1, 1, 1], &args, &Options::default()).unwrap();
    outs
}

fn argmax_combine((v0, i0): (Tile, Tile), (v1, i1): (Tile, Tile)) -> (Tile, Tile) {
    let take = v1.gt(v0) | (v1.eq(v0) & i1.lt(i0));
    (select(take, v1, v0), select(take, i1, i0))
}

/// The argmax inputs of the tile: masked-off lanes are -inf at an index past every valid one.
fn argmax_inputs(mask: Tile, along: Tile, v: Tile) -> (Tile, Tile) {
    (
        select(mask, v, f64::NEG_INFINITY),
        select(mask, along, i32::MAX),
    )
}

#[test]
fn argmax_with_indices_matches_the_host() {
    let mut r = Rng::new("argmax_with_indices_matches_the_host");
    for _ in 0..40 {
        let case = Case::random(&mut r);
        for scan in [false, true] {
            // Few distinct values: many ties, which the lowest index wins.
            let x: Vec<f32> = (0..case.numel()).map(|_| r.below(7) as f32 - 3.0).collect();
            let reverse = scan && r.below(2) == 1;
            let outs = run_case(
                case,
                scan,
                &[buf(&x), buf(&vec![0i32; x.len()])],
                |m, a, t| {
                    let ins = argmax_inputs(m, a, t[0]);
                    let (v, i) = if scan {
                        scan_with(ins, case.axis, reverse, argmax_combine)
                    } else {
                        reduce_with(ins, case.axis, argmax_combine)
                    };
                    vec![v, i]
                },
            );
            let (v, i) = (
                outs[0].to_vec::<f32>().unwrap(),
                outs[1].to_vec::<i32>().unwrap(),
            );
            for (o, line) in case.lines().iter().enumerate() {
                let at = |(rr, cc): (usize, usize)| rr * case.ext[1] + cc;
                let along = |(rr, cc): (usize, usize)| if case.axis == 0 { rr } else { cc };
                if !scan {
                    let best = line.iter().map(|&p| x[at(p)]).fold(f32::MIN, f32::max);
                    let first = line.iter().find(|&&p| x[at(p)] == best).unwrap();
                    assert_eq!(
                        (v[o], i[o]),
                        (best, along(*first) as i32),
                        "{case:?} line {o}"
                    );
                    continue;
                }
                // Scans: each element's argmax over the elements before it (after it, reversed).
                for (j, &p) in line.iter().enumerate() {
                    let seen: Vec<(usize, usize)> = if reverse {
                        line[j..].to_vec()
                    } else {
                        line[..=j].to_vec()
                    };
                    let best = seen.iter().map(|&q| x[at(q)]).fold(f32::MIN, f32::max);
                    let first = seen.iter().find(|&&q| x[at(q)] == best).unwrap();
                    let what = format!("{case:?} reverse {reverse} at {p:?}");
                    assert_eq!((v[at(p)], i[at(p)]), (best, along(*first) as i32), "{what}");
                }
            }
        }
    }
}

#[allow(clippy::type_complexity)]
fn matmul_combine(
    (a0, b0, c0, d0): (Tile, Tile, Tile, Tile),
    (a1, b1, c1, d1): (Tile, Tile, Tile, Tile),
) -> (Tile, Tile, Tile, Tile) {
    (
        a0 * a1 + b0 * c1,
        a0 * b1 + b0 * d1,
        c0 * a1 + d0 * c1,
        c0 * b1 + d0 * d1,
    )
}

type Mat = [i32; 4];

fn mat_mul(x: Mat, y: Mat) -> Mat {
    let m = |p: i32, q: i32| p.wrapping_mul(q);
    [
        m(x[0], y[0]).wrapping_add(m(x[1], y[2])),
        m(x[0], y[1]).wrapping_add(m(x[1], y[3])),
        m(x[2], y[0]).wrapping_add(m(x[3], y[2])),
        m(x[2], y[1]).wrapping_add(m(x[3], y[3])),
    ]
}

/// Products of 2x2 matrices (four i32 tiles): associative, not commutative, so the result
/// checks that every combine keeps the lower indices on the left.
#[test]
fn matrix_products_match_the_host() {
    let mut r = Rng::new("matrix_products_match_the_host");
    for _ in 0..40 {
        let case = Case::random(&mut r);
        for scan in [false, true] {
            let reverse = scan && r.below(2) == 1;
            let mats: Vec<Mat> = (0..case.numel())
                .map(|_| std::array::from_fn(|_| r.below(7) as i32 - 3))
                .collect();
            let ins: Vec<Arc<Buffer>> = (0..4)
                .map(|c| buf(&mats.iter().map(|m| m[c]).collect::<Vec<_>>()))
                .collect();
            let outs = run_case(case, scan, &ins, |m, _, t| {
                // Masked-off lanes: the identity.
                let x = (
                    select(m, t[0], 1),
                    select(m, t[1], 0),
                    select(m, t[2], 0),
                    select(m, t[3], 1),
                );
                let (a, b, c, d) = if scan {
                    scan_with(x, case.axis, reverse, matmul_combine)
                } else {
                    reduce_with(x, case.axis, matmul_combine)
                };
                vec![a, b, c, d]
            });
            let got: Vec<Vec<i32>> = outs.iter().map(|b| b.to_vec::<i32>().unwrap()).collect();
            let at = |(rr, cc): (usize, usize)| rr * case.ext[1] + cc;
            for (o, line) in case.lines().iter().enumerate() {
                // The product in the order of `ps`, each next matrix on the right.
                let fold = |ps: &[(usize, usize)]| {
                    ps.iter()
                        .fold([1, 0, 0, 1], |acc, &p| mat_mul(acc, mats[at(p)]))
                };
                if !scan {
                    let want = fold(line);
                    let have: Mat = std::array::from_fn(|c| got[c][o]);
                    assert_eq!(have, want, "{case:?} line {o}");
                    continue;
                }
                for (j, &p) in line.iter().enumerate() {
                    // A reverse scan keeps what it has passed (the later elements) on the left.
                    let want = if reverse {
                        let later: Vec<_> = line[j..].iter().rev().copied().collect();
                        fold(&later)
                    } else {
                        fold(&line[..=j])
                    };
                    let have: Mat = std::array::from_fn(|c| got[c][at(p)]);
                    assert_eq!(have, want, "{case:?} reverse {reverse} at {p:?}");
                }
            }
        }
    }
}

fn welford_combine(
    (m0, s0, n0): (Tile, Tile, Tile),
    (m1, s1, n1): (Tile, Tile, Tile),
) -> (Tile, Tile, Tile) {
    let n = n0 + n1;
    let delta = m1 - m0;
    let w = select(n.eq(0.0), 0.0, n1 / n);
    (m0 + delta * w, s0 + s1 + delta * delta * n0 * w, n)
}

/// Welford's (mean, m2, count) in f32 against the float64 mean and sum of squared deviations.
#[test]
fn welford_matches_float64() {
    let mut r = Rng::new("welford_matches_float64");
    for _ in 0..40 {
        let case = Case::random(&mut r);
        for scan in [false, true] {
            let reverse = scan && r.below(2) == 1;
            let x: Vec<f32> = (0..case.numel())
                .map(|_| 5.0 + (r.next() % 10_000) as f32 / 1000.0)
                .collect();
            let zeros = vec![0f32; x.len()];
            let outs = run_case(
                case,
                scan,
                &[buf(&x), buf(&zeros), buf(&zeros)],
                |m, _, t| {
                    let v = select(m, t[0], 0.0);
                    let w = (v, v * 0.0, select(m, 1.0f32, 0.0f32));
                    let (mean, m2, n) = if scan {
                        scan_with(w, case.axis, reverse, welford_combine)
                    } else {
                        reduce_with(w, case.axis, welford_combine)
                    };
                    vec![mean, m2, n]
                },
            );
            let got: Vec<Vec<f32>> = outs.iter().map(|b| b.to_vec::<f32>().unwrap()).collect();
            let at = |(rr, cc): (usize, usize)| rr * case.ext[1] + cc;
            let check = |slot: usize, ps: &[(usize, usize)], what: &str| {
                let n = ps.len() as f64;
                let mean = ps.iter().map(|&p| x[at(p)] as f64).sum::<f64>() / n;
                let m2: f64 = ps.iter().map(|&p| (x[at(p)] as f64 - mean).powi(2)).sum();
                let (gm, gs, gn) = (got[0][slot] as f64, got[1][slot] as f64, got[2][slot]);
                assert_eq!(gn as f64, n, "{what}: count");
                assert!(
                    (gm - mean).abs() <= 1e-5 * mean.abs(),
                    "{what}: mean {gm} vs {mean}"
                );
                // m2 loses digits to cancellation; bound the error by the data's scale.
                let scale = ps.iter().map(|&p| (x[at(p)] as f64).powi(2)).sum::<f64>();
                assert!((gs - m2).abs() <= 1e-5 * scale, "{what}: m2 {gs} vs {m2}");
            };
            for (o, line) in case.lines().iter().enumerate() {
                if !scan {
                    check(o, line, &format!("{case:?} line {o}"));
                    continue;
                }
                for (j, &p) in line.iter().enumerate() {
                    let seen = if reverse { &line[j..] } else { &line[..=j] };
                    check(at(p), seen, &format!("{case:?} reverse {reverse} at {p:?}"));
                }
            }
        }
    }
}

/// A three-axis tile reduced along its middle axis with a single-tile combine (`max`).
#[test]
fn a_single_tile_reduces_along_a_middle_axis() {
    let x: Vec<i32> = (0..2 * 4 * 8).map(|i| (i * 37 % 23) - 11).collect();
    let b = buf(&x);
    let out = Arc::new(Buffer::zeroed(DType::I32, 16));
    let k = trace("middle", |p| {
        let (xp, yp) = (p.ptr("x", DType::I32), p.ptr("y", DType::I32));
        let offs = arange(0, 64).reshape([2, 4, 8]);
        let m = reduce_with(load_unmasked(xp + offs), 1, maximum);
        store_unmasked(yp + arange(0, 16).reshape([2, 8]), m);
    })
    .unwrap();
    run(&k, [1, 1, 1], &[ptr(&b), ptr(&out)], &Options::default()).unwrap();
    let got = out.to_vec::<i32>().unwrap();
    for a in 0..2 {
        for c in 0..8 {
            let want = (0..4).map(|m| x[a * 32 + m * 8 + c]).max().unwrap();
            assert_eq!(got[a * 8 + c], want);
        }
    }
}

/// `a - b` is not associative: its result shows the order. A reduction of 8 elements is the
/// balanced tree ((x0 - x1) - (x2 - x3)) - ((x4 - x5) - (x6 - x7)); a scan folds in index order.
#[test]
fn the_combine_order_is_a_tree_for_reductions_and_a_fold_for_scans() {
    let x: Vec<i32> = vec![1, 2, 4, 8, 16, 32, 64, 128];
    let b = buf(&x);
    let (red, sc) = (
        Arc::new(Buffer::zeroed(DType::I32, 1)),
        Arc::new(Buffer::zeroed(DType::I32, 8)),
    );
    let k = trace("order", |p| {
        let (xp, rp, sp) = (
            p.ptr("x", DType::I32),
            p.ptr("r", DType::I32),
            p.ptr("s", DType::I32),
        );
        let v = load_unmasked(xp + arange(0, 8));
        store_unmasked(rp, reduce_with(v, 0, |a, b| a - b));
        store_unmasked(sp + arange(0, 8), scan_with(v, 0, false, |a, b| a - b));
    })
    .unwrap();
    run(
        &k,
        [1, 1, 1],
        &[ptr(&b), ptr(&red), ptr(&sc)],
        &Options::default(),
    )
    .unwrap();
    let tree = ((x[0] - x[1]) - (x[2] - x[3])) - ((x[4] - x[5]) - (x[6] - x[7]));
    assert_eq!(red.to_vec::<i32>().unwrap(), vec![tree]);
    let mut acc = x[0];
    let mut fold = vec![acc];
    for &v in &x[1..] {
        acc -= v;
        fold.push(acc);
    }
    assert_eq!(sc.to_vec::<i32>().unwrap(), fold);
}
