//! An ahead-of-time bundle of tuned launches: recorded on a device standing for a GPU, it
//! launches the config the tuner's cache holds for that GPU and carries the choice, which a
//! GPU of that name then answers from without tuning, whatever its driver.
//!
//! One test in its own binary: it points the process's tuner (`Autotuner::global`, which the
//! recording consults) at a cache directory of its own before anything reads the settings.

use tegula::aot::Bundle;
use tegula::autotune::{Source, Target as TuneTarget, TunedChoice};
use tegula::compiler::Target;
use tegula::prelude::*;
use tegula::{Autotuner, Config, StandIn, Tuning};

#[tegula::kernel]
fn scale(x: Ptr<f32>, out: Ptr<f32>, n: i32, alpha: f32, #[constexpr] block: usize) {
    let offs = program_id(0) * block + arange(0, block as i64);
    let mask = offs.lt(n);
    store(out + offs, load(x + offs, mask, 0.0) * alpha, mask);
}

fn candidates() -> Vec<Config> {
    vec![
        Config::new(4, 2).with("BLOCK", 1024),
        Config::new(8, 3).with("BLOCK", 512),
        Config::new(2, 1).with("BLOCK", 256),
    ]
}

fn tuning<'a>() -> Tuning<'a> {
    Tuning::new("scale", "scale v1", "n=5000", candidates())
}

/// The program: a tuned call, as a library wrapper makes it (the tuner's choice, then the
/// launch of that config).
fn tuned_call(dev: &Device) -> tegula::Result<()> {
    let tuned = Autotuner::global().tune(dev, &tuning(), |_| {
        panic!("a recording device or a bundled GPU times nothing")
    })?;
    let block = tuned.config.usize("BLOCK")?;
    let (x, out) = (dev.zeros::<f32>([5000])?, dev.zeros::<f32>([5000])?);
    scale::launch_with(
        dev,
        5000usize.div_ceil(block) as u32,
        tuned.config.launch_config(),
        &x,
        &out,
        5000,
        2.0,
        block,
    )
}

#[test]
fn a_bundle_records_and_carries_the_tuned_config_of_the_gpu_it_stands_for() {
    let cache = tempfile::tempdir().unwrap();
    // Before the settings are read (this binary's only test).
    std::env::set_var("TEGULA_CACHE_DIR", cache.path());
    std::env::set_var("TEGULA_AUTOTUNE", "on");

    let h200 = TuneTarget {
        device: "NVIDIA H200".into(),
        driver_version: 13000,
        tunable: true,
    };
    // Tuned "on the GPU": the second candidate wins.
    let times = [0.30, 0.10, 0.50];
    let tuned = Autotuner::global()
        .tune_for(&h200, &tuning(), |c| {
            let i = candidates().iter().position(|x| x == c).unwrap();
            Ok(times[i])
        })
        .unwrap();
    assert_eq!(tuned.config, candidates()[1]);

    let sm90 = Target { sm: 90 };
    let stand_in = StandIn {
        sm_count: 132,
        target: sm90,
        tuned_as: h200.clone(),
    };
    let tuned_bundle = Bundle::record_as(stand_in.clone(), tuned_call).unwrap();
    let plain = Bundle::record(&sm90, tuned_call).unwrap();
    // The stand-in launched the tuned config (8 warps, 3 stages), the plain recording the
    // default (the first candidate), and only the stand-in's bundle carries a choice.
    assert_eq!(tuned_bundle.entries.len(), 1);
    assert_eq!(plain.entries.len(), 1);
    assert!(
        tuned_bundle.entries[0].key.contains("w8s3"),
        "{}",
        tuned_bundle.entries[0].key
    );
    assert!(
        plain.entries[0].key.contains("w4s2"),
        "{}",
        plain.entries[0].key
    );
    assert_eq!(tuned_bundle.entries[0].num_threads, 256);
    assert!(plain.tuned.is_empty());
    assert_eq!(tuned_bundle.tuned.len(), 1, "{:?}", tuned_bundle.tuned);
    let choice: &TunedChoice = &tuned_bundle.tuned[0];
    assert_eq!(
        (choice.device.as_str(), &choice.config, choice.ms),
        ("NVIDIA H200", &candidates()[1], 0.10)
    );
    let back = Bundle::from_json(&tuned_bundle.to_json().unwrap()).unwrap();
    assert_eq!(back, tuned_bundle);

    // A stand-in for a GPU the cache knows nothing of records the default.
    let other = StandIn {
        tuned_as: TuneTarget {
            device: "NVIDIA A100".into(),
            ..h200.clone()
        },
        ..stand_in
    };
    let untuned = Bundle::record_as(other, tuned_call).unwrap();
    assert!(untuned.tuned.is_empty());
    assert!(
        untuned.entries[0].key.contains("w4s2"),
        "{}",
        untuned.entries[0].key
    );

    // What installing the bundle does on a GPU: a GPU of the choice's name, under another
    // driver, answers from it without timing anything; a GPU of another name does not.
    let updated = TuneTarget {
        driver_version: 13010,
        ..h200.clone()
    };
    let a100 = TuneTarget {
        device: "NVIDIA A100".into(),
        ..h200.clone()
    };
    let tuner = Autotuner::global();
    assert!(!tuner.remember(&a100, choice));
    assert!(tuner.remember(&updated, choice));
    let answer = tuner
        .tune_for(&updated, &tuning(), |_| panic!("answered from the bundle"))
        .unwrap();
    assert_eq!(answer.config, candidates()[1]);
    assert_eq!(answer.source, Source::Cached { ms: 0.10 });
    let fresh = tuner.tune_for(&a100, &tuning(), |_| Ok(1.0)).unwrap();
    assert!(
        matches!(fresh.source, Source::Tuned { timed: 3, .. }),
        "a GPU of another name tunes as without the bundle: {:?}",
        fresh.source
    );
}
