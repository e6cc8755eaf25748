//! Philox random numbers (`randint4x`, `randint`, `rand`, `randn`, ..) against Random123's
//! known-answer vectors, an independent implementation written here from the Philox spec, and
//! Triton's definitions of the float conversions.

#![allow(clippy::needless_range_loop)]

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, Options};
use tegula_ir::prelude::*;

/// Philox 4x32, written from Salmon et al. (SC'11) / Random123's `philox4x32_R` independently
/// of the builder's version: `mulhilo` through a u64 product, the key bumped between rounds.
fn philox_ref(ctr: [u32; 4], key: [u32; 2], rounds: usize) -> [u32; 4] {
    let mulhilo = |a: u32, b: u32| {
        let p = a as u64 * b as u64;
        ((p >> 32) as u32, p as u32)
    };
    let (mut c, mut k) = (ctr, key);
    for r in 0..rounds {
        if r > 0 {
            k = [
                k[0].wrapping_add(0x9E37_79B9),
                k[1].wrapping_add(0xBB67_AE85),
            ];
        }
        let (hi0, lo0) = mulhilo(0xD251_1F53, c[0]);
        let (hi1, lo1) = mulhilo(0xCD9E_8D57, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// Triton's `uint_to_uniform_float` for 32-bit words, in plain Rust.
fn uniform_ref(w: u32) -> f32 {
    let i = w as i32;
    let folded = if i < 0 { -(i as i64) - 1 } else { i as i64 };
    (folded as f32) * 4.656_612_7e-10_f32
}

/// Runs a one-program kernel over `n` lanes: `f(offsets)` returns tiles stored to one output
/// buffer each (of the tile's dtype).
fn run_lanes(
    n: usize,
    offset_dtype: DType,
    base: i64,
    f: impl Fn(Tile) -> Vec<Tile>,
) -> Vec<Arc<Buffer>> {
    let mut dtypes = Vec::new();
    let kernel = trace("random", |p| {
        let base_t = p.scalar("base", offset_dtype);
        let offs = arange(0, n as i64).cast(offset_dtype) + base_t;
        let outs = f(offs);
        for (i, t) in outs.iter().enumerate() {
            let o = p.ptr(&format!("out{i}"), t.dtype());
            dtypes.push(t.dtype());
            store_unmasked(o + arange(0, n as i64), *t);
        }
    })
    .expect("traces");
    let bufs: Vec<Arc<Buffer>> = dtypes
        .iter()
        .map(|&d| Arc::new(Buffer::zeroed(d, n)))
        .collect();
    let mut args = vec![Arg::Int(base)];
    args.extend(bufs.iter().map(ptr));
    run(&kernel, [1, 1, 1], &args, &Options::default()).expect("runs");
    bufs
}

#[test]
fn philox_matches_random123_known_answers() {
    // Random123's kat_vectors for philox4x32_10: counter, key, result.
    let kats: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        (
            [0, 0, 0, 0],
            [0, 0],
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
        ),
        (
            [0xffff_ffff; 4],
            [0xffff_ffff; 2],
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
        ),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];
    for (ctr, key, want) in kats {
        assert_eq!(philox_ref(ctr, key, 10), want, "reference implementation");
        let seed = ((key[1] as u64) << 32) | key[0] as u64;
        let outs = run_lanes(1, DType::U32, 0, |_| {
            let c = ctr.map(|w| Operand::Int(w as i64));
            philox(seed, c, 10).to_vec()
        });
        let got: Vec<u32> = outs.iter().map(|b| b.to_vec::<u32>().unwrap()[0]).collect();
        assert_eq!(
            got,
            want.to_vec(),
            "philox4x32-10 of {ctr:x?} under {key:x?}"
        );
    }
}

#[test]
fn randint4x_is_philox_of_the_offset_under_the_seed() {
    let n = 256;
    for (seed, base) in [(0u64, 0i64), (42, 1000), (0xDEAD_BEEF_1234_5678, -128)] {
        let outs = run_lanes(n, DType::I32, base, |offs| randint4x(seed, offs).to_vec());
        let words: Vec<Vec<u32>> = outs.iter().map(|b| b.to_vec::<u32>().unwrap()).collect();
        for i in 0..n {
            let off = (base + i as i64) as i32 as u32;
            let want = philox_ref([off, 0, 0, 0], [seed as u32, (seed >> 32) as u32], 10);
            for (w, want_w) in want.iter().enumerate() {
                assert_eq!(words[w][i], *want_w, "seed {seed} offset {off} word {w}");
            }
        }
    }
}

#[test]
fn wide_offsets_and_signed_seeds_split_as_in_triton() {
    // A 64-bit offset puts its high word in counter 1; a negative i32 seed sign-extends to
    // u64, so its high key word is all ones.
    let n = 64;
    let base = (7i64 << 32) + 5;
    let kernel_seed = -3i64;
    let outs = run_lanes(n, DType::I64, base, |offs| {
        let s = scalar(kernel_seed).cast(DType::I32);
        randint4x(s, offs).to_vec()
    });
    let w0 = outs[0].to_vec::<u32>().unwrap();
    let w3 = outs[3].to_vec::<u32>().unwrap();
    for i in 0..n {
        let off = base + i as i64;
        let seed = kernel_seed as u64;
        let want = philox_ref(
            [off as u32, (off >> 32) as u32, 0, 0],
            [seed as u32, (seed >> 32) as u32],
            10,
        );
        assert_eq!((w0[i], w3[i]), (want[0], want[3]), "offset {off}");
    }
    // randint is word 0 of randint4x, with the seed as a scalar tile argument as well.
    let outs = run_lanes(n, DType::U32, 9, |offs| {
        vec![randint(scalar(77u32).cast(DType::U32), offs)]
    });
    let got = outs[0].to_vec::<u32>().unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, philox_ref([9 + i as u32, 0, 0, 0], [77, 0], 10)[0]);
    }
}

#[test]
fn rand_is_the_folded_word_times_the_scale_bit_for_bit() {
    let n = 1024;
    let seed = 123_456_789u64;
    let outs = run_lanes(n, DType::I32, 0, |offs| {
        let mut v = vec![rand(seed, offs)];
        v.extend(rand4x(seed, offs));
        v
    });
    let r = outs[0].to_vec::<f32>().unwrap();
    let quads: Vec<Vec<f32>> = outs[1..]
        .iter()
        .map(|b| b.to_vec::<f32>().unwrap())
        .collect();
    let (mut sum, mut sq) = (0.0f64, 0.0f64);
    for i in 0..n {
        let w = philox_ref([i as u32, 0, 0, 0], [seed as u32, 0], 10);
        assert_eq!(r[i].to_bits(), uniform_ref(w[0]).to_bits(), "offset {i}");
        for k in 0..4 {
            assert_eq!(quads[k][i].to_bits(), uniform_ref(w[k]).to_bits());
            assert!((0.0..1.0).contains(&quads[k][i]));
        }
        sum += r[i] as f64;
        sq += (r[i] as f64).powi(2);
    }
    // Uniform [0, 1): mean 1/2, variance 1/12 (4 sigma of the sample statistics).
    let mean = sum / n as f64;
    let var = sq / n as f64 - mean * mean;
    assert!(
        (mean - 0.5).abs() < 4.0 * (1.0f64 / 12.0 / n as f64).sqrt(),
        "{mean}"
    );
    assert!((var - 1.0 / 12.0).abs() < 0.01, "{var}");
    // The extreme words map inside [0, 1): i32::MAX and i32::MIN fold onto the top.
    assert!(uniform_ref(0x7FFF_FFFF) < 1.0 && uniform_ref(0x8000_0000) < 1.0);
    assert_eq!(uniform_ref(0), 0.0);
}

#[test]
fn uniform_conversion_of_extreme_words() {
    let words = [0u32, 1, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 0x1234_5678];
    let kernel = trace("u", |p| {
        let (x, y) = (p.ptr("x", DType::U32), p.ptr("y", DType::F32));
        let o = arange(0, 8);
        let w = load(x + o, o.lt(words.len() as i64), 0);
        store(y + o, uint_to_uniform_float(w), o.lt(words.len() as i64));
    })
    .unwrap();
    let (x, y) = (
        buf(&words),
        Arc::new(Buffer::zeroed(DType::F32, words.len())),
    );
    run(&kernel, [1, 1, 1], &[ptr(&x), ptr(&y)], &Options::default()).unwrap();
    let got = y.to_vec::<f32>().unwrap();
    for (w, g) in words.iter().zip(&got) {
        assert_eq!(g.to_bits(), uniform_ref(*w).to_bits(), "word {w:#x}");
        assert!((0.0..1.0).contains(g));
    }
    // 64-bit words use Triton's 64-bit scale.
    let kernel = trace("u64", |p| {
        let (x, y) = (p.ptr("x", DType::U64), p.ptr("y", DType::F32));
        let o = arange(0, 2);
        store_unmasked(y + o, uint_to_uniform_float(load_unmasked(x + o)));
    })
    .unwrap();
    let (x, y) = (
        buf(&[u64::MAX, 1u64 << 62]),
        Arc::new(Buffer::zeroed(DType::F32, 2)),
    );
    run(&kernel, [1, 1, 1], &[ptr(&x), ptr(&y)], &Options::default()).unwrap();
    let got = y.to_vec::<f32>().unwrap();
    assert_eq!(got[0], 0.0);
    assert_eq!(
        got[1],
        ((1u64 << 62) as f32) * (1.0842020432385337e-19_f64 as f32)
    );
}

#[test]
fn randn_is_box_muller_of_the_first_two_uniforms() {
    let n = 4096;
    let seed = 2024u64;
    let outs = run_lanes(n, DType::I32, 0, |offs| {
        let mut v = vec![randn(seed, offs)];
        v.extend(randn4x(seed, offs));
        v
    });
    let z = outs[0].to_vec::<f32>().unwrap();
    let z4: Vec<Vec<f32>> = outs[1..]
        .iter()
        .map(|b| b.to_vec::<f32>().unwrap())
        .collect();
    let (mut sum, mut sq) = (0.0f64, 0.0f64);
    for i in 0..n {
        let w = philox_ref([i as u32, 0, 0, 0], [seed as u32, 0], 10);
        let u: Vec<f32> = w.iter().map(|&x| uniform_ref(x)).collect();
        // Box-Muller in f64 from the same f32 uniforms, with Triton's clamp and f32 angle.
        let bm = |u1: f32, u2: f32| {
            let u1 = u1.max(1.0e-7) as f64;
            let th = (6.283_185_5_f32 * u2) as f64;
            let r = (-2.0 * u1.ln()).sqrt();
            (r * th.cos(), r * th.sin())
        };
        let (n1, n2) = bm(u[0], u[1]);
        let (n3, n4) = bm(u[2], u[3]);
        let close = |got: f32, want: f64| (got as f64 - want).abs() <= 4e-6 * want.abs().max(1.0);
        assert!(close(z[i], n1), "offset {i}: {} vs {n1}", z[i]);
        assert_eq!(z[i].to_bits(), z4[0][i].to_bits());
        for (k, want) in [n1, n2, n3, n4].into_iter().enumerate() {
            assert!(close(z4[k][i], want), "offset {i} normal {k}");
        }
        sum += z[i] as f64;
        sq += (z[i] as f64).powi(2);
    }
    let mean = sum / n as f64;
    let var = sq / n as f64 - mean * mean;
    assert!(mean.abs() < 4.0 / (n as f64).sqrt(), "{mean}");
    assert!((var - 1.0).abs() < 0.1, "{var}");
}

#[test]
fn umulhi_is_the_high_half_of_the_unsigned_product() {
    let a = [0xFFFF_FFFFu32, 0x8000_0000, 3, 0xDEAD_BEEF];
    let b = [0xFFFF_FFFFu32, 2, 5, 0xCAFE_BABE];
    let out = eval(&[buf(&a), buf(&b)], |t| umulhi(t[0], t[1]));
    let want: Vec<u32> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| ((x as u64 * y as u64) >> 32) as u32)
        .collect();
    assert_eq!(out.to_vec::<u32>().unwrap(), want);
    // Signed operands: the bits are multiplied as unsigned (Triton's `__nv_umulhi`).
    let out = eval(&[buf(&[-1i32, -2, 7]), buf(&[-1i32, 3, -1])], |t| {
        umulhi(t[0], t[1])
    });
    let want: Vec<i32> = [(-1i32, -1i32), (-2, 3), (7, -1)]
        .iter()
        .map(|&(x, y)| ((x as u32 as u64 * y as u32 as u64) >> 32) as u32 as i32)
        .collect();
    assert_eq!(out.to_vec::<i32>().unwrap(), want);
    let a64 = [u64::MAX, 1 << 63, 12345];
    let b64 = [u64::MAX, 6, 1 << 40];
    let out = eval(&[buf(&a64), buf(&b64)], |t| umulhi(t[0], t[1]));
    let want: Vec<u64> = a64
        .iter()
        .zip(&b64)
        .map(|(&x, &y)| ((x as u128 * y as u128) >> 64) as u64)
        .collect();
    assert_eq!(out.to_vec::<u64>().unwrap(), want);
    // Narrow integers are a trace error.
    let e = trace("k", |p| {
        let x = p.scalar("x", DType::I16);
        let _ = umulhi(x, x);
    })
    .unwrap_err();
    assert!(e.message.contains("umulhi"), "{e}");
}

/// Philox 4x64, written from Random123's `philox4x64_R` independently of the builder's
/// version: `mulhilo` through a u128 product, the key bumped between rounds.
fn philox64_ref(ctr: [u64; 4], key: [u64; 2], rounds: usize) -> [u64; 4] {
    let mulhilo = |a: u64, b: u64| {
        let p = a as u128 * b as u128;
        ((p >> 64) as u64, p as u64)
    };
    let (mut c, mut k) = (ctr, key);
    for r in 0..rounds {
        if r > 0 {
            k = [
                k[0].wrapping_add(0x9E37_79B9_7F4A_7C15),
                k[1].wrapping_add(0xBB67_AE85_84CA_A73B),
            ];
        }
        let (hi0, lo0) = mulhilo(0xD2E7_470E_E14C_6C93, c[0]);
        let (hi1, lo1) = mulhilo(0xCA5A_8263_9512_1157, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

#[test]
fn philox_on_64_bit_counters_is_philox4x64() {
    // Random123's kat_vectors for philox4x64_10: counter, key, result.
    let kats: [([u64; 4], [u64; 2], [u64; 4]); 3] = [
        (
            [0; 4],
            [0; 2],
            [
                0x1655_4d9e_ca36_314c,
                0xdb20_fe9d_672d_0fdc,
                0xd7e7_72ce_e186_176b,
                0x7e68_b68a_ec7b_a23b,
            ],
        ),
        (
            [u64::MAX; 4],
            [u64::MAX; 2],
            [
                0x87b0_92c3_013f_e90b,
                0x438c_3c67_be8d_0224,
                0x9cc7_d7c6_9cd7_77b6,
                0xa09c_aebf_594f_0ba0,
            ],
        ),
        (
            [
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            ],
            [0x4528_21e6_38d0_1377, 0xbe54_66cf_34e9_0c6c],
            [
                0xa528_f454_03e6_1d95,
                0x38c7_2dbd_566e_9788,
                0xa5a1_610e_72fd_18b5,
                0x57bd_43b5_e52b_7fe6,
            ],
        ),
    ];
    for (ctr, key, want) in kats {
        assert_eq!(philox64_ref(ctr, key, 10), want, "reference implementation");
    }
    // Through the kernel: 64-bit counters take the whole seed as key word 0 and 0 as word 1
    // (Triton's `philox` for 64-bit counters), on 256 lanes of counters that use all 64 bits.
    let n = 256;
    for (seed, base) in [(0u64, 0i64), (0xDEAD_BEEF_1234_5678, -(1 << 40) - 3)] {
        let outs = run_lanes(n, DType::I64, base, |offs| {
            let hi = offs * 0x1_0000_0001i64;
            let c = [offs, hi, offs ^ 0x5555, Tile::cast(offs * 3, DType::U64)];
            philox(seed, c.map(Operand::Tile), 10).to_vec()
        });
        for b in &outs {
            assert_eq!(b.dtype(), DType::U64);
        }
        let words: Vec<Vec<u64>> = outs.iter().map(|b| b.to_vec::<u64>().unwrap()).collect();
        for i in 0..n {
            let off = base.wrapping_add(i as i64);
            let ctr = [
                off as u64,
                off.wrapping_mul(0x1_0000_0001) as u64,
                (off ^ 0x5555) as u64,
                off.wrapping_mul(3) as u64,
            ];
            let want = philox64_ref(ctr, [seed, 0], 10);
            for w in 0..4 {
                assert_eq!(
                    words[w][i], want[w],
                    "seed {seed:#x} counter {ctr:x?} word {w}"
                );
            }
        }
    }
    // The zero vector through the kernel too (seed 0: the key the KAT uses).
    let outs = run_lanes(1, DType::U64, 0, |offs| {
        philox(0u64, [offs; 4].map(Operand::Tile), 10).to_vec()
    });
    let got: Vec<u64> = outs.iter().map(|b| b.to_vec::<u64>().unwrap()[0]).collect();
    assert_eq!(got, kats[0].2.to_vec());
}

#[test]
fn philox_counters_of_two_widths_are_a_trace_error() {
    let err = trace("mixed", |p| {
        let o = p.ptr("o", DType::U64);
        let offs = arange(0, 16);
        let [a, _, _, _] = philox(
            1,
            [
                Operand::Tile(offs.cast(DType::I64)),
                Operand::Tile(offs),
                Operand::Int(0),
                Operand::Int(0),
            ],
            10,
        );
        store_unmasked(o + arange(0, 16), a);
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("one width"), "{text}");
    assert!(
        text.contains("random.rs"),
        "the error names the user's line: {text}"
    );
}
