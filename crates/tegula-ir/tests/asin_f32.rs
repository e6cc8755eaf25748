//! `asin` and `acos` evaluated in f32 arithmetic (`mathlib::unary_f32`) against float64, in
//! units in the last place of the f32 result: a fast test over dense inputs and the special
//! values, and an exhaustive one over all 2^32 f32 inputs (ignored: about ten minutes on two
//! cores; `cargo test --release -p tegula-ir --test asin_f32 -- --ignored --nocapture`).

use std::f64::consts::{FRAC_PI_3, FRAC_PI_6};
use tegula_ir::mathlib::{unary_f32, Eval, Fn1};
use ulps::ulps;

mod ulps;

fn f32_of(f: Fn1, x: f32) -> f32 {
    unary_f32(&mut Eval, f, x)
}

fn reference(f: Fn1, x: f32) -> f64 {
    match f {
        Fn1::Asin => (x as f64).asin(),
        Fn1::Acos => (x as f64).acos(),
        _ => unreachable!(),
    }
}

/// The largest error over the bit patterns, the pattern where it occurs, and how many results
/// are more than half an ulp off.
fn scan(f: Fn1, bits: impl Iterator<Item = u32>) -> (f64, u32, u64) {
    let mut worst = (0.0f64, 0u32, 0u64);
    for b in bits {
        let x = f32::from_bits(b);
        let e = ulps(f32_of(f, x), reference(f, x));
        if e > 0.5 {
            worst.2 += 1;
        }
        if e > worst.0 || e.is_nan() {
            worst.0 = e;
            worst.1 = b;
        }
    }
    worst
}

/// The largest errors the exhaustive test measured, rounded up: 0.5476 ulp for `asin` (at
/// 0.4581426; 619,504 of the 2^32 results are more than half an ulp off) and 0.5450 for
/// `acos` (at 0.58545727; 202,996 above half an ulp).
const BOUNDS: [(Fn1, f64); 2] = [(Fn1::Asin, 0.5477), (Fn1::Acos, 0.5451)];

#[test]
fn dense_inputs_within_the_bound() {
    // Every 1021st bit pattern of either sign (infinities and NaNs among them), the
    // neighbourhoods of +-1/2 (where the two ranges meet and the largest errors are) and of
    // +-1, and the smallest magnitudes. The bound is the exhaustive one, which these inputs
    // come within a hundredth of an ulp of (0.5419 and 0.5367), so that a dropped correction
    // term, a missing Newton step or a coefficient off in its fourth digit fails it.
    let one = 1f32.to_bits();
    let half = 0.5f32.to_bits();
    let mut bits: Vec<u32> = (0..=0x7FC0_0000).step_by(1021).collect();
    bits.extend(half - 20_000..half + 40_000);
    bits.extend(one - 20_000..=one + 10);
    bits.extend(0..2_000);
    let all: Vec<u32> = bits.iter().flat_map(|&b| [b, b | 0x8000_0000]).collect();
    for (f, bound) in BOUNDS {
        let (e, b, above) = scan(f, all.iter().copied());
        eprintln!(
            "{f:?}: {e:.4} ulp at {:e}, {above} of {} above 0.5",
            f32::from_bits(b),
            all.len()
        );
        assert!(e <= bound, "{f:?}: {e} ulp at {:e}", f32::from_bits(b));
    }
}

#[test]
fn special_values() {
    let pi_2 = std::f32::consts::FRAC_PI_2;
    let pi = std::f32::consts::PI;
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits();
    let asin = |x| f32_of(Fn1::Asin, x);
    let acos = |x| f32_of(Fn1::Acos, x);
    assert!(same(asin(0.0), 0.0) && same(asin(-0.0), -0.0));
    assert!(same(asin(1.0), pi_2) && same(asin(-1.0), -pi_2));
    let (pi_6, pi_3) = (std::f32::consts::FRAC_PI_6, std::f32::consts::FRAC_PI_3);
    assert!(same(asin(0.5), pi_6) && same(asin(-0.5), -pi_6));
    assert!(same(acos(1.0), 0.0) && same(acos(-1.0), pi));
    assert!(same(acos(0.0), pi_2) && same(acos(-0.0), pi_2));
    assert!(same(acos(0.5), pi_3) && same(acos(-0.5), 2.094_395_2));
    // Subnormal and tiny inputs: asin x = x, acos x = pi/2.
    for b in [1u32, 2, 0x7F_FFFF, 0x80_0000, 0x0C80_0000, 0x3280_0000] {
        let x = f32::from_bits(b);
        assert!(same(asin(x), x) && same(asin(-x), -x), "{x:e}");
        assert!(same(acos(x), pi_2) && same(acos(-x), pi_2), "{x:e}");
    }
    for x in [
        1.000_000_1,
        -1.000_000_1,
        2.0,
        1e30,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
    ] {
        assert!(asin(x).is_nan() && acos(x).is_nan(), "{x}");
    }
}

/// Against values from mpmath (30 digits, at the f32 inputs exactly), which do not lean on
/// the f64 library the other tests compare with.
#[test]
fn known_values() {
    // (the bits of x, asin x, acos x): small, mid-range, the worst cases of the exhaustive
    // test (0x3EEA91AB for asin, 0x3F15E087 for acos), 1/2 and its neighbour, near 1.
    let cases: [(u32, f64, f64); 11] = [
        (0x38D1B717, 9.999999764045418e-05, 1.5706963267972562),
        (0x3DCCCCCD, 0.10016742265918284, 1.4706289041357137),
        (0x3E99999A, 0.3046926665119266, 1.26610366028297),
        (0x3EEA91AB, 0.4759044810402515, 1.094891845754645),
        (0x3F000000, FRAC_PI_6, FRAC_PI_3),
        (0x3F000001, 0.5235988444238157, 1.047197482371081),
        (0x3F15E087, 0.6254439784079069, 0.9453523483869898),
        (0x3F400000, 0.848062078981481, 0.7227342478134157),
        (0xBF666666, -1.119769460301664, 2.6905657870965607),
        (0x3F7FBE77, 1.5260715275839687, 0.044724799210927854),
        (0x3F7FFFFF, 1.5704510598101804, 0.0003452669847162036),
    ];
    for (b, asin, acos) in cases {
        let x = f32::from_bits(b);
        let ea = ulps(f32_of(Fn1::Asin, x), asin);
        let ec = ulps(f32_of(Fn1::Acos, x), acos);
        assert!(
            ea <= BOUNDS[0].1 && ec <= BOUNDS[1].1,
            "{x}: asin {ea} ulp, acos {ec} ulp"
        );
    }
}

/// Every f32 input, split over the available cores.
#[test]
#[ignore]
fn exhaustive_every_f32() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    for (f, bound) in BOUNDS {
        let chunk = (1u64 << 32) / threads as u64;
        let parts: Vec<(f64, u32, u64)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads as u64)
                .map(|i| {
                    let lo = i * chunk;
                    let hi = if i + 1 == threads as u64 {
                        1u64 << 32
                    } else {
                        lo + chunk
                    };
                    s.spawn(move || scan(f, (lo..hi).map(|b| b as u32)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let above: u64 = parts.iter().map(|p| p.2).sum();
        let (e, b, _) = parts
            .into_iter()
            .fold((0.0, 0, 0), |w, p| if p.0 > w.0 { p } else { w });
        eprintln!(
            "{f:?}: max {e:.4} ulp at {:e} ({b:#010x}); {above} of 2^32 inputs above 0.5 ulp",
            f32::from_bits(b)
        );
        assert!(e <= bound, "{f:?}: {e} ulp at {:e}", f32::from_bits(b));
    }
}
