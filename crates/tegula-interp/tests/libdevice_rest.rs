//! The rest of libdevice's float set on the interpreter: `rsqrt_rn` checked for correct
//! rounding exactly (integer arithmetic on the midpoints), `norm3d` / `norm4d` / `rnorm3d` /
//! `rnorm4d` against float64 (f32) and double-double (f64) references in ulps, `saturatef`
//! exactly, and the `fast_*` compositions against float64 within the error their
//! compositions allow.

mod common;
use common::*;
use tegula_ir::prelude::*;

/// `x` (positive, finite) as `(M, e)` with `x = M 2^e` and `M` odd.
fn odd_parts(x: f64) -> (u128, i32) {
    let b = x.to_bits();
    let exp = ((b >> 52) & 0x7ff) as i32;
    let (mut m, mut e) = if exp == 0 {
        ((b & ((1 << 52) - 1)) as u128, -1074)
    } else {
        (((b & ((1 << 52) - 1)) | 1 << 52) as u128, exp - 1075)
    };
    let tz = m.trailing_zeros();
    m >>= tz;
    e += tz as i32;
    (m, e)
}

/// The sign of `m^2 x - 1` for positive dyadic `m` (at most 26 significant bits) and `x`.
fn cmp_square_times(m: f64, x: f64) -> std::cmp::Ordering {
    let ((mm, me), (xm, xe)) = (odd_parts(m), odd_parts(x));
    let p = mm * mm * xm;
    // m^2 x = p 2^k against 1 = 2^0.
    let k = 2 * me + xe;
    if k >= 0 {
        // p >= 1, equal only when p = 1 and k = 0.
        return if p == 1 && k == 0 {
            std::cmp::Ordering::Equal
        } else {
            std::cmp::Ordering::Greater
        };
    }
    if -k >= 127 {
        return std::cmp::Ordering::Less;
    }
    p.cmp(&(1u128 << -k))
}

/// Whether `r` is `1 / sqrt(x)` rounded to the nearest f32 (`x` positive and finite, `r`
/// normal): the exact value lies strictly between the midpoints to `r`'s neighbours.
fn is_rounded_rsqrt(x: f32, r: f32) -> bool {
    let (lo, hi) = (
        f32::from_bits(r.to_bits() - 1),
        f32::from_bits(r.to_bits() + 1),
    );
    let m_lo = (lo as f64 + r as f64) / 2.0;
    let m_hi = (r as f64 + hi as f64) / 2.0;
    // 1/sqrt(x) > m_lo  <=>  m_lo^2 x < 1; 1/sqrt(x) < m_hi  <=>  m_hi^2 x > 1.
    cmp_square_times(m_lo, x as f64) == std::cmp::Ordering::Less
        && cmp_square_times(m_hi, x as f64) == std::cmp::Ordering::Greater
}

fn eval_f32(xs: &[f32], f: impl FnOnce(&[Tile]) -> Tile) -> Vec<f32> {
    eval(&[buf(xs)], f).to_vec::<f32>().unwrap()
}

#[test]
fn rsqrt_rn_is_correctly_rounded() {
    let mut r = Rng::new(41);
    // Random positive patterns (normals and subnormals), the powers of two and their
    // neighbours, and the binade edges where 1/sqrt(x) is a power of two.
    let mut xs: Vec<f32> = (0..200_000)
        .map(|_| f32::from_bits((r.next_u64() as u32) % 0x7F80_0000))
        .collect();
    for e in -149..128 {
        let p = 2f32.powi(e);
        xs.extend([p, p.next_up(), p.next_down()]);
    }
    xs.retain(|x| *x > 0.0 && x.is_finite());
    let got = eval_f32(&xs, |t| rsqrt_rn(t[0]));
    for (&x, &y) in xs.iter().zip(&got) {
        assert!(is_rounded_rsqrt(x, y), "rsqrt_rn({x:e}) = {y:e}");
    }
    let special = [0.0f32, -0.0, f32::INFINITY, -1.0, f32::NAN, 4.0, 0.25];
    let got = eval_f32(&special, |t| rsqrt_rn(t[0]));
    assert_eq!(got[0], f32::INFINITY);
    assert_eq!(got[1], f32::NEG_INFINITY);
    assert_eq!(got[2].to_bits(), 0);
    assert!(got[3].is_nan() && got[4].is_nan());
    assert_eq!((got[5], got[6]), (0.5, 2.0));
}

/// The composition itself over every positive finite f32: `sqrt.rn.f64`, `rcp.rn.f64` and
/// one rounding to f32 are Rust's `f64::sqrt`, `1.0 / _` and `as f32`, which is what the
/// interpreter runs per element (the test above runs it through a kernel). About 25 s on two
/// cores in the test profile (opt-level 2).
#[test]
fn rsqrt_rn_composition_is_correctly_rounded_for_every_f32() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u32;
    let end = 0x7F80_0000u32;
    let chunk = end.div_ceil(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let (lo, hi) = ((t * chunk).max(1), ((t + 1) * chunk).min(end));
                for b in lo..hi {
                    let x = f32::from_bits(b);
                    let r = (1.0 / (x as f64).sqrt()) as f32;
                    assert!(is_rounded_rsqrt(x, r), "rsqrt_rn({x:e}) = {r:e}");
                }
            });
        }
    });
}

/// The distance from `got` to `want` in ulps of `got`'s format at `want`.
fn ulps32(got: f32, want: f64) -> f64 {
    let w = want as f32;
    let ulp = (w.abs().next_up() - w.abs()) as f64;
    (got as f64 - want).abs() / ulp
}

/// `(hi, lo)` of `x^2 + y^2 + ..` in double-double, and its square root likewise.
fn dd_norm(xs: &[f64]) -> (f64, f64) {
    let (mut s, mut e) = (0.0f64, 0.0f64);
    for &x in xs {
        let p = x * x;
        let pe = x.mul_add(x, -p);
        let t = s + p;
        let bb = t - s;
        e += (s - (t - bb)) + (p - bb) + pe;
        s = t;
    }
    let (s, e) = (s + e, e - ((s + e) - s));
    let r = s.sqrt();
    let c = ((-r).mul_add(r, s) + e) / (2.0 * r);
    (r, c)
}

#[test]
fn norms_are_within_their_bounds() {
    let mut r = Rng::new(42);
    let n = 4000;
    let col = |r: &mut Rng| -> Vec<f32> {
        (0..n)
            .map(|i| {
                let m = r.uniform(-4.0, 4.0) as f32;
                // Every eighth: huge or tiny, where squaring in f32 would overflow or vanish.
                match i % 8 {
                    0 => m * 1e37,
                    1 => m * 1e-40,
                    _ => m,
                }
            })
            .collect()
    };
    let cols: Vec<Vec<f32>> = (0..4).map(|_| col(&mut r)).collect();
    let bufs: Vec<_> = cols.iter().map(|c| buf(c)).collect();
    let run = |k: usize, f: fn(&[Tile]) -> Tile| eval(&bufs[..k], f).to_vec::<f32>().unwrap();
    let outs = [
        (3, false, run(3, |t| norm3d(t[0], t[1], t[2]))),
        (3, true, run(3, |t| rnorm3d(t[0], t[1], t[2]))),
        (4, false, run(4, |t| norm4d(t[0], t[1], t[2], t[3]))),
        (4, true, run(4, |t| rnorm4d(t[0], t[1], t[2], t[3]))),
    ];
    for (k, reciprocal, got) in outs {
        let mut worst = 0.0f64;
        for i in 0..n {
            let xs: Vec<f64> = (0..k).map(|j| cols[j][i] as f64).collect();
            let (h, l) = dd_norm(&xs);
            let want = if reciprocal { 1.0 / (h + l) } else { h + l };
            worst = worst.max(ulps32(got[i], want));
        }
        // Rounded once from f64 values good to 2^-51: half an ulp and a hair.
        eprintln!("k={k} reciprocal={reciprocal}: {worst} ulp");
        assert!(
            worst <= 0.5001,
            "k={k} reciprocal={reciprocal}: {worst} ulp"
        );
    }
    // f64: scaled by the largest magnitude, against double-double.
    let cols64: Vec<Vec<f64>> = (0..4)
        .map(|_| {
            (0..n)
                .map(|i| {
                    let m = r.uniform(-4.0, 4.0);
                    match i % 8 {
                        0 => m * 1e300,
                        1 => m * 1e-300,
                        _ => m,
                    }
                })
                .collect()
        })
        .collect();
    let bufs64: Vec<_> = cols64.iter().map(|c| buf(c)).collect();
    let run64 = |k: usize, f: fn(&[Tile]) -> Tile| eval(&bufs64[..k], f).to_vec::<f64>().unwrap();
    for (k, reciprocal, got) in [
        (3, false, run64(3, |t| norm3d(t[0], t[1], t[2]))),
        (4, true, run64(4, |t| rnorm4d(t[0], t[1], t[2], t[3]))),
    ] {
        let mut worst = 0.0f64;
        for i in 0..n {
            let xs: Vec<f64> = (0..k).map(|j| cols64[j][i]).collect();
            // Scaled exactly by a power of two near the largest magnitude.
            let m = xs.iter().fold(0.0f64, |a, x| a.max(x.abs()));
            let m = 2f64.powi(m.log2().floor() as i32);
            let scaled: Vec<f64> = xs.iter().map(|x| x / m).collect();
            let (h, l) = dd_norm(&scaled);
            let exact = h + l;
            let rel = if reciprocal {
                (got[i] * m * exact - 1.0).abs()
            } else {
                (got[i] / m / exact - 1.0).abs()
            };
            worst = worst.max(rel / f64::EPSILON);
        }
        eprintln!("f64 k={k} reciprocal={reciprocal}: {worst} eps");
        assert!(
            worst <= 4.0,
            "f64 k={k} reciprocal={reciprocal}: {worst} eps"
        );
    }
    // Infinities win over NaN; zeros give 0 and +inf.
    let specials = [
        buf(&[f32::INFINITY, 0.0, f32::NAN]),
        buf(&[f32::NAN, 0.0, 1.0]),
        buf(&[1.0f32, 0.0, 1.0]),
    ];
    let n3 = eval(&specials, |t| norm3d(t[0], t[1], t[2]))
        .to_vec::<f32>()
        .unwrap();
    let r3 = eval(&specials, |t| rnorm3d(t[0], t[1], t[2]))
        .to_vec::<f32>()
        .unwrap();
    assert_eq!((n3[0], n3[1]), (f32::INFINITY, 0.0));
    assert!(n3[2].is_nan());
    assert_eq!((r3[0], r3[1]), (0.0, f32::INFINITY));
}

#[test]
fn saturatef_clamps_to_the_unit_interval() {
    let xs = [
        -1.0f32,
        -0.0,
        0.0,
        0.25,
        1.0,
        1.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-45,
    ];
    let got = eval_f32(&xs, |t| saturatef(t[0]));
    let want = [0.0f32, 0.0, 0.0, 0.25, 1.0, 1.0, 1.0, 0.0, 0.0, 1e-45];
    for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
        assert_eq!(g.to_bits(), w.to_bits(), "saturatef({x})");
    }
}

#[test]
fn fast_functions_follow_their_compositions() {
    let mut r = Rng::new(43);
    let xs: Vec<f32> = (0..5000).map(|_| r.uniform(-30.0, 30.0) as f32).collect();
    let pos: Vec<f32> = (0..5000).map(|_| r.uniform(1e-3, 1e3) as f32).collect();
    let ys: Vec<f32> = (0..5000).map(|_| r.uniform(-4.0, 4.0) as f32).collect();
    let rel = |g: f32, w: f64| ((g as f64 - w) / w).abs();
    let e = 2f64.powi(-23);
    let check =
        |name: &str, got: &[f32], want: &dyn Fn(usize) -> f64, bound: &dyn Fn(usize) -> f64| {
            for (i, &g) in got.iter().enumerate() {
                let w = want(i);
                assert!(rel(g, w) <= bound(i), "{name} at {i}: {g} vs {w}");
            }
        };
    let g = eval_f32(&xs, |t| fast_expf(t[0]));
    check("fast_expf", &g, &|i| (xs[i] as f64).exp(), &|_| e);
    // 10^x through 2^(x log2 10): the product's rounding scales with |x log2 10|.
    let g = eval_f32(&xs, |t| fast_exp10f(t[0]));
    let l10 = std::f64::consts::LOG2_10;
    check("fast_exp10f", &g, &|i| 10f64.powf(xs[i] as f64), &|i| {
        e * (2.0 + (xs[i] as f64 * l10).abs())
    });
    let g = eval_f32(&pos, |t| fast_logf(t[0]));
    check("fast_logf", &g, &|i| (pos[i] as f64).ln(), &|_| e);
    let g = eval_f32(&pos, |t| fast_log2f(t[0]));
    check("fast_log2f", &g, &|i| (pos[i] as f64).log2(), &|_| e);
    let g = eval_f32(&pos, |t| fast_log10f(t[0]));
    check("fast_log10f", &g, &|i| (pos[i] as f64).log10(), &|_| {
        2.0 * e
    });
    let g = eval_f32(&xs, |t| fast_sinf(t[0]));
    check("fast_sinf", &g, &|i| (xs[i] as f64).sin(), &|i| {
        e / (xs[i] as f64).sin().abs().max(1e-3)
    });
    let g = eval_f32(&xs, |t| fast_cosf(t[0]));
    check("fast_cosf", &g, &|i| (xs[i] as f64).cos(), &|i| {
        e / (xs[i] as f64).cos().abs().max(1e-3)
    });
    let g = eval_f32(&xs, |t| fast_tanf(t[0]));
    check("fast_tanf", &g, &|i| (xs[i] as f64).tan(), &|i| {
        let x = xs[i] as f64;
        3.0 * e / (x.sin() * x.cos()).abs().max(1e-6)
    });
    let g = eval(&[buf(&pos), buf(&ys)], |t| fast_powf(t[0], t[1]))
        .to_vec::<f32>()
        .unwrap();
    check(
        "fast_powf",
        &g,
        &|i| (pos[i] as f64).powf(ys[i] as f64),
        &|i| e * (2.0 + (ys[i] as f64 * (pos[i] as f64).log2()).abs()),
    );
    let g = eval(&[buf(&xs), buf(&pos)], |t| fast_dividef(t[0], t[1]))
        .to_vec::<f32>()
        .unwrap();
    check(
        "fast_dividef",
        &g,
        &|i| xs[i] as f64 / pos[i] as f64,
        &|_| e / 2.0,
    );
}

#[test]
fn f32_functions_reject_other_dtypes_naming_the_function() {
    for (name, f) in [
        ("fast_expf", fast_expf as fn(Tile) -> Tile),
        ("saturatef", saturatef),
        ("rsqrt_rn", rsqrt_rn),
    ] {
        let e = trace("k", |p| {
            let x = p.scalar("x", DType::F64);
            let _ = f(x);
        })
        .unwrap_err();
        assert!(e.message.contains(name), "{e}");
    }
}
