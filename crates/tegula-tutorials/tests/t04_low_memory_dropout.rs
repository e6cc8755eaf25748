//! Tutorial 04 on the interpreter: the mask kernel against float64, and the seeded kernel's
//! Philox stream bit for bit against a host Philox that passes the Random123 known answers.

use tegula::prelude::*;
use tegula_tutorials::t04_low_memory_dropout::{
    dropout, philox4x32, rand_host, reference_seeded, seeded_dropout,
};

#[test]
fn host_philox_passes_the_random123_known_answers() {
    // Random123's kat_vectors for philox4x32_10.
    assert_eq!(
        philox4x32([0, 0, 0, 0], [0, 0], 10),
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    );
    assert_eq!(
        philox4x32([u32::MAX; 4], [u32::MAX; 2], 10),
        [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
    );
    assert_eq!(
        philox4x32(
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0],
            10
        ),
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    );
}

#[test]
fn the_kernel_draws_the_host_stream_bit_for_bit() -> tegula::Result<()> {
    #[tegula::kernel]
    fn rand_kernel(out: Ptr<f32>, seed: i32, n: i32, #[constexpr] block: usize) {
        let offs = program_id(0) * block + arange(0, block as i64);
        store(out + offs, rand(seed, offs), offs.lt(n));
    }
    let dev = Device::cpu();
    let n = 3000;
    for seed in [0, 123, -7, 0x7fff_ffff] {
        let out = dev.empty::<f32>([n])?;
        rand_kernel::launch(&dev, 3u32, &out, seed, n as i32, 1024)?;
        for (i, got) in out.to_vec()?.into_iter().enumerate() {
            let want = rand_host(seed, i as i32);
            assert_eq!(got.to_bits(), want.to_bits(), "seed {seed} offset {i}");
            assert!((0.0..1.0).contains(&got));
        }
    }
    Ok(())
}

#[test]
fn seeded_dropout_is_reproducible_and_keeps_one_minus_p() -> tegula::Result<()> {
    let dev = Device::cpu();
    let n = 50_001;
    let x = dev.randn::<f32>([n])?;
    let (a, b, c) = (
        seeded_dropout(&x, 0.5, 123)?.to_vec()?,
        seeded_dropout(&x, 0.5, 123)?.to_vec()?,
        seeded_dropout(&x, 0.5, 512)?.to_vec()?,
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
    let kept = a.iter().filter(|v| **v != 0.0).count() as f64 / n as f64;
    assert!((kept - 0.5).abs() < 0.01, "kept {kept}");
    let want = reference_seeded(&x.to_f64_vec()?, 0.5, 123);
    for (g, w) in a.iter().zip(&want) {
        assert!((*g as f64 - w).abs() <= w.abs() * 2f64.powi(-23));
    }
    for p in [0.1f32, 0.9] {
        let out = seeded_dropout(&x, p, 42)?.to_vec()?;
        let kept = out.iter().filter(|v| **v != 0.0).count() as f64 / n as f64;
        assert!((kept - (1.0 - p as f64)).abs() < 0.01, "p {p}: kept {kept}");
    }
    Ok(())
}

#[test]
fn dropout_with_a_mask_matches_float64() -> tegula::Result<()> {
    let dev = Device::cpu();
    for n in [10, 37, 4099] {
        let x = dev.randn::<f32>([n])?;
        let keep: Vec<i32> = dev
            .rand_uniform::<f32>([n], 0.0, 1.0)?
            .to_vec()?
            .iter()
            .map(|r| (*r > 0.3) as i32)
            .collect();
        let x_keep = dev.from_slice(&keep, [n])?;
        let out = dropout(&x, &x_keep, 0.3)?.to_vec()?;
        for ((g, x), k) in out.iter().zip(x.to_vec()?).zip(&keep) {
            let want = if *k != 0 {
                x as f64 / (1.0 - 0.3f32 as f64)
            } else {
                0.0
            };
            assert!(
                (*g as f64 - want).abs() <= want.abs() * 2f64.powi(-23),
                "{g} vs {want}"
            );
        }
    }
    Ok(())
}

#[test]
fn registry_check_passes() -> tegula::Result<()> {
    let t = tegula_tutorials::find("04-seeded-dropout").expect("registered");
    let r = (t.check)(&Device::cpu(), &[4097], t.dtypes[0])?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}
