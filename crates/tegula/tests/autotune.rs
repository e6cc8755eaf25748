//! The autotuner on the CPU: cache keys, persistence across tuner instances (as across
//! processes), invalidation, corrupt cache files, pruning, failing candidates and the modes.
//! Benchmarks are fake closures that return chosen times and count their calls.

use std::cell::Cell;
use std::path::PathBuf;
use tegula::autotune::{
    measure, source_hash, Autotuner, Config, MeasureOptions, Mode, Source, Target, Timing, TopK,
    Tuning,
};
use tegula::{Device, Error};

fn gpu() -> Target {
    Target {
        device: "NVIDIA H200".into(),
        driver_version: 13000,
        tunable: true,
    }
}

fn configs() -> Vec<Config> {
    [(32, 4), (64, 4), (128, 8), (256, 8)]
        .iter()
        .map(|&(block, warps)| Config::new(warps, 3).with("BLOCK", block))
        .collect()
}

/// A fake benchmark: BLOCK=128 is fastest (1.5 ms); counts calls.
fn fake_bench(calls: &Cell<usize>) -> impl FnMut(&Config) -> tegula::Result<f64> + '_ {
    move |c: &Config| {
        calls.set(calls.get() + 1);
        Ok(match c.get("BLOCK") {
            Some(32) => 4.0,
            Some(64) => 2.25,
            Some(128) => 1.5,
            _ => 3.0,
        })
    }
}

fn cache_file(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("autotune.json")
}

const IR_V1: &str = "kernel @k(%a: ptr<f16>) { %0 = program_id 0 }";
const IR_V2: &str = "kernel @k(%a: ptr<f16>) { %0 = program_id 1 }";

#[test]
fn tunes_on_miss_and_stores_the_winner() {
    let dir = tempfile::tempdir().unwrap();
    let tuner = Autotuner::new(Some(cache_file(&dir)), Mode::Full);
    let calls = Cell::new(0);
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    let got = tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
    assert_eq!(got.config, Config::new(8, 3).with("BLOCK", 128));
    assert_eq!(got.source, Source::Tuned { ms: 1.5, timed: 4 });
    assert_eq!(calls.get(), 4);

    // The same tuner answers from memory without timing.
    let again = tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
    assert_eq!(again.config, got.config);
    assert_eq!(again.source, Source::Cached { ms: 1.5 });
    assert_eq!(calls.get(), 4);

    // The file holds one entry with every part of the key.
    let text = std::fs::read_to_string(cache_file(&dir)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = json["entries"].as_object().unwrap();
    assert_eq!(entries.len(), 1);
    let e = entries.values().next().unwrap();
    assert_eq!(e["kernel"], "k");
    assert_eq!(e["source_hash"], source_hash(IR_V1));
    assert_eq!(e["key"], "N=4096,f16");
    assert_eq!(e["device"], "NVIDIA H200");
    assert_eq!(e["driver_version"], 13000);
    assert_eq!(e["config"]["constexprs"]["BLOCK"], 128);
    assert_eq!(e["config"]["num_warps"], 8);
    assert!(tuner.notes().is_empty(), "{:?}", tuner.notes());
}

#[test]
fn a_second_process_reuses_the_winner_without_timing() {
    let dir = tempfile::tempdir().unwrap();
    let first_calls = Cell::new(0);
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    let first = Autotuner::new(Some(cache_file(&dir)), Mode::Full)
        .tune_for(&gpu(), &t, fake_bench(&first_calls))
        .unwrap();
    assert_eq!(first_calls.get(), 4);

    // A fresh tuner over the same file stands in for a second process.
    let second_calls = Cell::new(0);
    let second = Autotuner::new(Some(cache_file(&dir)), Mode::Full)
        .tune_for(&gpu(), &t, fake_bench(&second_calls))
        .unwrap();
    assert_eq!(second_calls.get(), 0);
    assert_eq!(second.config, first.config);
    assert_eq!(second.source, Source::Cached { ms: 1.5 });

    // `cached` mode reads the same entry.
    let third = Autotuner::new(Some(cache_file(&dir)), Mode::Cached)
        .tune_for(&gpu(), &t, fake_bench(&second_calls))
        .unwrap();
    assert_eq!(third.config, first.config);
    assert_eq!(second_calls.get(), 0);
}

#[test]
fn every_part_of_the_key_selects_its_own_entry() {
    let dir = tempfile::tempdir().unwrap();
    let tuner = Autotuner::new(Some(cache_file(&dir)), Mode::Full);
    let calls = Cell::new(0);
    let base = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    tuner.tune_for(&gpu(), &base, fake_bench(&calls)).unwrap();
    assert_eq!(calls.get(), 4);

    let other_key = Tuning::new("k", IR_V1, "N=8192,f16", configs());
    let other_kernel = Tuning::new("k2", IR_V1, "N=4096,f16", configs());
    let other_source = Tuning::new("k", IR_V2, "N=4096,f16", configs());
    let mut other_driver = gpu();
    other_driver.driver_version = 12080;
    let mut other_device = gpu();
    other_device.device = "NVIDIA H100 80GB HBM3".into();
    for (tuning, target) in [
        (&other_key, gpu()),
        (&other_kernel, gpu()),
        (&other_source, gpu()),
        (&base, other_driver),
        (&base, other_device),
    ] {
        let before = calls.get();
        let got = tuner.tune_for(&target, tuning, fake_bench(&calls)).unwrap();
        assert_eq!(
            calls.get(),
            before + 4,
            "{} on {target:?} was not timed",
            tuning.key
        );
        assert!(matches!(got.source, Source::Tuned { .. }));
    }
    let text = std::fs::read_to_string(cache_file(&dir)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["entries"].as_object().unwrap().len(), 6);
}

#[test]
fn a_changed_kernel_source_invalidates_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Cell::new(0);
    let v1 = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    Autotuner::new(Some(cache_file(&dir)), Mode::Full)
        .tune_for(&gpu(), &v1, fake_bench(&calls))
        .unwrap();
    assert_eq!(calls.get(), 4);

    // The kernel body changed: its new IR hashes differently, so the old winner is not used,
    // not even in `cached` mode, which then falls back to the default.
    let v2 = Tuning::new("k", IR_V2, "N=4096,f16", configs());
    let cached = Autotuner::new(Some(cache_file(&dir)), Mode::Cached)
        .tune_for(&gpu(), &v2, fake_bench(&calls))
        .unwrap();
    assert_eq!(cached.source, Source::Default);
    assert_eq!(cached.config, configs()[0]);
    assert_eq!(calls.get(), 4);

    let full = Autotuner::new(Some(cache_file(&dir)), Mode::Full)
        .tune_for(&gpu(), &v2, fake_bench(&calls))
        .unwrap();
    assert!(matches!(full.source, Source::Tuned { .. }));
    assert_eq!(calls.get(), 8);
    assert_ne!(source_hash(IR_V1), source_hash(IR_V2));
    assert_eq!(source_hash(IR_V1), source_hash(IR_V1));
    assert_eq!(source_hash(""), "cbf29ce484222325"); // FNV-1a offset basis: stable on disk
}

#[test]
fn a_corrupt_cache_file_is_reported_once_and_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_file(&dir);
    std::fs::write(&path, "{\"version\": 1, \"entries\": {\"k|").unwrap();
    let tuner = Autotuner::new(Some(path.clone()), Mode::Full);
    let calls = Cell::new(0);
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());

    // `cached` reads the corrupt file: default config, one note, no panic.
    let cached_tuner = Autotuner::new(Some(path.clone()), Mode::Cached);
    let got = cached_tuner
        .tune_for(&gpu(), &t, fake_bench(&calls))
        .unwrap();
    assert_eq!(got.source, Source::Default);
    let other = Tuning::new("k", IR_V1, "N=1,f16", configs());
    cached_tuner
        .tune_for(&gpu(), &other, fake_bench(&calls))
        .unwrap();
    let notes = cached_tuner.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("corrupt") && notes[0].contains("autotune.json"),
        "{notes:?}"
    );

    // `full` tunes anyway and replaces the file with a valid one.
    let got = tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(128));
    assert_eq!(calls.get(), 4);
    assert_eq!(tuner.notes().len(), 1);
    let reread = Autotuner::new(Some(path.clone()), Mode::Cached)
        .tune_for(&gpu(), &t, fake_bench(&calls))
        .unwrap();
    assert_eq!(reread.source, Source::Cached { ms: 1.5 });

    // Valid JSON of the wrong shape, binary garbage and a directory in the file's place are
    // all ignored the same way.
    for (i, bad) in [
        "[1, 2, 3]",
        "{\"version\": 99, \"entries\": {}}",
        "\u{0}\u{1}garbage",
    ]
    .iter()
    .enumerate()
    {
        let p = dir.path().join(format!("bad{i}.json"));
        std::fs::write(&p, bad).unwrap();
        let tuner = Autotuner::new(Some(p), Mode::Cached);
        let got = tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
        assert_eq!(got.source, Source::Default);
        assert_eq!(tuner.notes().len(), 1, "{bad}: {:?}", tuner.notes());
    }
    let as_dir = dir.path().join("dir.json");
    std::fs::create_dir(&as_dir).unwrap();
    let tuner = Autotuner::new(Some(as_dir), Mode::Full);
    let got = tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
    assert_eq!(
        got.config.get("BLOCK"),
        Some(128),
        "tuning still works in memory"
    );
    assert!(!tuner.notes().is_empty());
}

#[test]
fn pruning_runs_before_timing_and_picks_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let tuner = Autotuner::new(Some(cache_file(&dir)), Mode::Full);
    let timed = std::cell::RefCell::new(Vec::new());
    let n = 100; // a problem of 100 elements: blocks over 128 are pointless
    let t = Tuning::new("k", IR_V1, format!("N={n}"), configs())
        .prune(move |c| c.get("BLOCK").is_some_and(|b| (64..=128).contains(&b)));
    assert_eq!(t.candidates().len(), 2);
    let got = tuner
        .tune_for(&gpu(), &t, |c| {
            timed.borrow_mut().push(c.get("BLOCK").unwrap());
            Ok(c.get("BLOCK").unwrap() as f64)
        })
        .unwrap();
    assert_eq!(*timed.borrow(), vec![64, 128]);
    assert_eq!(got.config.get("BLOCK"), Some(64));

    // With tuning off the default is the first candidate pruning keeps, not configs[0].
    let off = Autotuner::new(None, Mode::Off)
        .tune_for(&gpu(), &t, |_| panic!("off must not time"))
        .unwrap();
    assert_eq!(off.config.get("BLOCK"), Some(64));
    assert_eq!(off.source, Source::Default);

    // One candidate left: nothing to compare, so no timing.
    let single = Tuning::new("k", IR_V1, "N=1", configs()).prune(|c| c.get("BLOCK") == Some(256));
    let got = tuner
        .tune_for(&gpu(), &single, |_| {
            panic!("a single candidate needs no timing")
        })
        .unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(256));
}

#[test]
fn failing_candidates_are_dropped_with_a_note() {
    let tuner = Autotuner::new(None, Mode::Full);
    let t = Tuning::new("k", IR_V1, "N=4096", configs());
    let got = tuner
        .tune_for(&gpu(), &t, |c| match c.get("BLOCK") {
            Some(128) => Err(Error::Invalid {
                op: "launch".into(),
                message: "needs 300000 bytes of shared memory".into(),
            }),
            Some(256) => Ok(f64::NAN),
            Some(b) => Ok(b as f64 / 10.0),
            None => unreachable!(),
        })
        .unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(32));
    assert_eq!(got.source, Source::Tuned { ms: 3.2, timed: 2 });
    assert_eq!(got.dropped.len(), 2);
    assert_eq!(got.dropped[0].0.get("BLOCK"), Some(128));
    assert!(got.dropped[0].1.contains("shared memory"));

    // When every candidate fails, the first failure is the answer.
    let err = Autotuner::new(None, Mode::Full)
        .tune_for(&gpu(), &t, |c| {
            Err(Error::Invalid {
                op: "launch".into(),
                message: format!("refused {c}"),
            })
        })
        .unwrap_err();
    assert!(err.to_string().contains("refused BLOCK=32,"), "{err}");

    // No candidates at all is a typed error, not a panic.
    let empty = Tuning::new("k", IR_V1, "N=1", Vec::new());
    assert!(Autotuner::new(None, Mode::Full)
        .tune_for(&gpu(), &empty, |_| Ok(1.0))
        .is_err());
}

#[test]
fn modes_and_the_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Cell::new(0);
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    for mode in [Mode::Off, Mode::Cached] {
        let got = Autotuner::new(Some(cache_file(&dir)), mode)
            .tune_for(&gpu(), &t, fake_bench(&calls))
            .unwrap();
        assert_eq!(
            (got.config, got.source),
            (configs()[0].clone(), Source::Default)
        );
    }
    assert_eq!(calls.get(), 0);
    assert!(!cache_file(&dir).exists(), "off and cached never write");

    // Full tunes; off then ignores the cache and keeps the default.
    Autotuner::new(Some(cache_file(&dir)), Mode::Full)
        .tune_for(&gpu(), &t, fake_bench(&calls))
        .unwrap();
    let off = Autotuner::new(Some(cache_file(&dir)), Mode::Off)
        .tune_for(&gpu(), &t, fake_bench(&calls))
        .unwrap();
    assert_eq!(off.config, configs()[0]);

    // The interpreter: default config, no timing, whatever the mode.
    let dev = Device::cpu();
    let target = Target::of(&dev);
    assert!(!target.tunable);
    let got = Autotuner::new(None, Mode::Full)
        .tune(&dev, &t, |_| panic!("the interpreter must not time"))
        .unwrap();
    assert_eq!(got.source, Source::Default);

    for (text, mode) in [
        ("off", Some(Mode::Off)),
        ("CACHED", Some(Mode::Cached)),
        ("full", Some(Mode::Full)),
        ("", Some(Mode::Full)),
        ("fast", None),
    ] {
        assert_eq!(Mode::parse(text), mode, "{text}");
    }
}

#[test]
fn config_accessors_and_display() {
    let c = Config::new(4, 2).with("BLOCK_N", 64).with("BLOCK_M", 128);
    assert_eq!(c.to_string(), "BLOCK_M=128,BLOCK_N=64,warps=4,stages=2");
    assert_eq!(c.usize("BLOCK_M").unwrap(), 128);
    assert!(c.usize("BLOCK_K").is_err());
    assert!(Config::new(4, 2).with("X", -1).usize("X").is_err());
    let lc = c.launch_config();
    assert_eq!((lc.num_warps, lc.num_stages), (4, 2));
}

#[test]
fn timing_statistics() {
    let t = Timing::from_samples(vec![5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
    assert_eq!(
        (t.min, t.q1, t.median, t.q3, t.max),
        (1.0, 2.0, 3.0, 4.0, 5.0)
    );
    let t = Timing::from_samples(vec![4.0, 1.0]).unwrap();
    assert_eq!((t.median, t.q1, t.q3), (2.5, 1.75, 3.25));
    assert!(Timing::from_samples(vec![]).is_none());
    assert!(Timing::from_samples(vec![1.0, f64::INFINITY]).is_none());
}

#[test]
fn measure_keeps_the_first_call_out() {
    // On the interpreter `Device::time` is the wall clock; a first call that sleeps stands in
    // for compilation and must not show in the samples.
    let dev = Device::cpu();
    let calls = Cell::new(0usize);
    let options = MeasureOptions {
        warmup_ms: 1.0,
        rep_ms: 2.0,
        min_reps: 7,
        max_reps: 7,
        max_total_ms: 1000.0,
        batch: true,
        stop_above: None,
    };
    let t = measure(&dev, &options, || {
        calls.set(calls.get() + 1);
        if calls.get() == 1 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(t.samples.len(), 7);
    assert!(
        t.max < 100.0,
        "the first call leaked into the samples: {t:?}"
    );
    assert!(calls.get() >= 1 + 1 + 7);

    // Slow calls get fewer samples, never fewer than 3; fast ones stay within the bounds.
    let o = MeasureOptions::default();
    assert_eq!(o.reps_for(0.01), 1000);
    assert_eq!(o.reps_for(2.0), 50);
    assert_eq!(o.reps_for(100.0), 10);
    assert_eq!(o.reps_for(1000.0), 5);
    assert_eq!(o.reps_for(60_000.0), 3);
}

#[test]
fn measure_times_a_batch_only_when_asked() {
    // Each call takes at least 2 ms of wall clock (the interpreter's `Device::time`), so the
    // back-to-back batch divided by its calls must be at least that, and absent unless asked.
    let dev = Device::cpu();
    let calls = Cell::new(0usize);
    let mut options = MeasureOptions {
        warmup_ms: 0.0,
        rep_ms: 1.0,
        min_reps: 4,
        max_reps: 4,
        max_total_ms: 1000.0,
        batch: true,
        stop_above: None,
    };
    let mut work = || {
        calls.set(calls.get() + 1);
        std::thread::sleep(std::time::Duration::from_millis(2));
        Ok(())
    };
    let t = measure(&dev, &options, &mut work).unwrap();
    let batch = t.batch.expect("a batch time was asked for");
    assert!((2.0..50.0).contains(&batch), "batch {batch} ms a call");
    let with_batch = calls.replace(0);
    options.batch = false;
    assert!(measure(&dev, &options, &mut work).unwrap().batch.is_none());
    // The batch repeats the 4 timed calls once more.
    assert_eq!(with_batch, calls.get() + 4);
}

#[test]
fn the_settings_choose_mode_and_cache_file() {
    use tegula::env::Settings;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let of = |cache: &str, mode: &str| {
        let (cache, mode) = (cache.to_string(), mode.to_string());
        Autotuner::from_settings(&Settings::from_lookup(move |name| match name {
            "TEGULA_CACHE_DIR" => Some(cache.clone()),
            "TEGULA_AUTOTUNE" => Some(mode.clone()),
            _ => None,
        }))
    };
    let tuner = of(&path, "cached");
    assert_eq!(tuner.mode(), Mode::Cached);
    assert_eq!(
        tuner.cache_path(),
        Some(dir.path().join("autotune.json").as_path())
    );
    let tuner = of("off", "off");
    assert_eq!((tuner.mode(), tuner.cache_path()), (Mode::Off, None));
    assert_eq!(of("off", "bogus").mode(), Mode::Full);
}

/// The sweep's quick timings can misrank configs: the candidates within 5% of the best are
/// timed again with the full budget (`confirming()` is true then) and ranked by that timing.
/// A candidate clearly ahead in both keeps its place, those further than 5% are not re-timed,
/// and a close candidate that fails the second time drops out.
#[test]
fn close_candidates_are_timed_again_with_the_full_budget() {
    use tegula::autotune::confirming;
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    let calls = std::cell::RefCell::new(Vec::<(i64, bool)>::new());
    // BLOCK=64: 0.98 ms in the sweep, 1.06 under the full budget; BLOCK=128: 1.0 and 1.01;
    // BLOCK=32 and 256 are far behind.
    let got = Autotuner::new(None, Mode::Full)
        .tune_for(&gpu(), &t, |c| {
            let block = c.get("BLOCK").unwrap();
            calls.borrow_mut().push((block, confirming()));
            Ok(match (block, confirming()) {
                (64, false) => 0.98,
                (64, true) => 1.06,
                (128, false) => 1.0,
                (128, true) => 1.01,
                _ => 3.0,
            })
        })
        .unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(128));
    assert_eq!(got.source, Source::Tuned { ms: 1.01, timed: 4 });
    let calls = calls.into_inner();
    assert_eq!(
        calls,
        [
            (32, false),
            (64, false),
            (128, false),
            (256, false),
            (64, true),
            (128, true)
        ]
    );
    assert!(!confirming(), "the flag must not outlive the tuning");

    // A lead that holds under the full budget is kept.
    let got = Autotuner::new(None, Mode::Full)
        .tune_for(&gpu(), &t, |c| {
            Ok(match c.get("BLOCK") {
                Some(64) => 0.96,
                Some(128) => 1.0,
                _ => 3.0,
            })
        })
        .unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(64));

    // A close candidate whose second timing fails drops out.
    let got = Autotuner::new(None, Mode::Full)
        .tune_for(&gpu(), &t, |c| match (c.get("BLOCK"), confirming()) {
            (Some(64), false) => Ok(0.99),
            (Some(64), true) => Err(Error::Invalid {
                op: "bench".into(),
                message: "lost the device".into(),
            }),
            (Some(128), _) => Ok(1.0),
            _ => Ok(3.0),
        })
        .unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(128));

    // Of many close candidates, only the 4 fastest in the sweep are timed again.
    let many: Vec<Config> = (1..=6)
        .map(|b| Config::new(4, 3).with("BLOCK", b))
        .collect();
    let t = Tuning::new("k", IR_V1, "N=64,f16", many);
    let again = std::cell::RefCell::new(Vec::<i64>::new());
    let got = Autotuner::new(None, Mode::Full)
        .tune_for(&gpu(), &t, |c| {
            let block = c.get("BLOCK").unwrap();
            if confirming() {
                again.borrow_mut().push(block);
            }
            // 1.00, 1.01, ... 1.05 ms in the sweep; under the full budget BLOCK=3 is fastest.
            Ok(match (block, confirming()) {
                (3, true) => 0.9,
                _ => 1.0 + 0.01 * (block - 1) as f64,
            })
        })
        .unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(3));
    assert_eq!(again.into_inner(), [1, 2, 3, 4]);
}

/// A bench that times like [`fake_bench`] but fails for BLOCK=128, the way a config that no
/// longer compiles fails.
fn bench_without_128(c: &Config) -> tegula::Result<f64> {
    match c.get("BLOCK") {
        Some(128) => Err(broken()),
        Some(32) => Ok(4.0),
        Some(64) => Ok(2.25),
        _ => Ok(3.0),
    }
}

fn broken() -> Error {
    Error::Invalid {
        op: "launch".into(),
        message: "BLOCK=128 no longer compiles".into(),
    }
}

/// A stored winner that fails when it runs (it no longer traces, compiles or launches) is
/// dropped with a note and tuned again; before, every later call of that shape failed until
/// the file was deleted.
#[test]
fn a_stored_config_that_fails_to_run_is_dropped_and_retuned() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    let calls = Cell::new(0);
    Autotuner::new(Some(cache_file(&dir)), Mode::Full)
        .tune_for(&gpu(), &t, fake_bench(&calls))
        .unwrap();

    // A later process: BLOCK=128 is stored, and now fails.
    let tuner = Autotuner::new(Some(cache_file(&dir)), Mode::Full);
    let ran = std::cell::RefCell::new(Vec::new());
    let (tuned, result) = tuner
        .tune_and_run(&gpu(), &t, bench_without_128, |c| {
            ran.borrow_mut().push(c.get("BLOCK").unwrap());
            match c.get("BLOCK") {
                Some(128) => Err(broken()),
                Some(b) => Ok(b),
                None => unreachable!(),
            }
        })
        .unwrap();
    assert_eq!(*ran.borrow(), vec![128, 64]);
    assert_eq!(result, 64);
    assert!(matches!(tuned.source, Source::Tuned { .. }), "{tuned:?}");
    assert_eq!(tuned.dropped.len(), 1);
    let notes = tuner.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("BLOCK=128") && notes[0].contains("no longer compiles"),
        "{notes:?}"
    );
    // The file now holds the new winner: a third process reuses it.
    let third = Autotuner::new(Some(cache_file(&dir)), Mode::Cached)
        .tune_for(&gpu(), &t, |_| panic!("cached must not time"))
        .unwrap();
    assert_eq!(third.config.get("BLOCK"), Some(64));

    // A config that was tuned now (not cached) and fails is the caller's error, as it is.
    let fresh = Autotuner::new(None, Mode::Full);
    let e = fresh
        .tune_and_run(&gpu(), &t, fake_bench(&calls), |_| Err::<(), _>(broken()))
        .unwrap_err();
    assert!(e.to_string().contains("no longer compiles"), "{e}");
}

/// A well-formed entry that holds a config the kernel does not offer (a hand edit, or a file
/// from a build whose key collided) is dropped with a note and tuned again.
#[test]
fn a_stored_config_that_is_not_a_candidate_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    let calls = Cell::new(0);
    Autotuner::new(Some(cache_file(&dir)), Mode::Full)
        .tune_for(&gpu(), &t, fake_bench(&calls))
        .unwrap();
    let path = cache_file(&dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace("\"BLOCK\": 128", "\"BLOCK\": 7");
    assert_ne!(text, edited);
    std::fs::write(&path, edited).unwrap();

    let tuner = Autotuner::new(Some(path.clone()), Mode::Full);
    let got = tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(128));
    assert!(matches!(got.source, Source::Tuned { .. }));
    assert!(
        tuner.notes()[0].contains("BLOCK=7") && tuner.notes()[0].contains("not one of"),
        "{:?}",
        tuner.notes()
    );
    // In `cached` mode the broken entry is dropped too: the default, not BLOCK=7.
    std::fs::write(&path, text.replace("\"BLOCK\": 128", "\"BLOCK\": 7")).unwrap();
    let cached = Autotuner::new(Some(path), Mode::Cached)
        .tune_for(&gpu(), &t, |_| panic!("cached must not time"))
        .unwrap();
    assert_eq!(cached.source, Source::Default);
    assert_eq!(cached.config, configs()[0]);
}

/// The key holds the compiler and the candidate list: a winner picked from another list is
/// not reused.
#[test]
fn the_key_holds_the_compiler_and_the_candidate_list() {
    let dir = tempfile::tempdir().unwrap();
    let tuner = Autotuner::new(Some(cache_file(&dir)), Mode::Full);
    let calls = Cell::new(0);
    let t = Tuning::new("k", IR_V1, "N=4096,f16", configs());
    tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
    assert_eq!(calls.get(), 4);
    // One more candidate: a new list, a new entry (timed again).
    let mut more = configs();
    more.push(Config::new(4, 2).with("BLOCK", 128));
    let t2 = Tuning::new("k", IR_V1, "N=4096,f16", more);
    assert_ne!(t.candidates_hash, t2.candidates_hash);
    tuner.tune_for(&gpu(), &t2, fake_bench(&calls)).unwrap();
    assert_eq!(
        calls.get(),
        4 + 5 + 2,
        "timed the new list (and confirmed the two 128s)"
    );

    let text = std::fs::read_to_string(cache_file(&dir)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["version"], 2);
    let entries = json["entries"].as_object().unwrap();
    assert_eq!(entries.len(), 2);
    for (key, e) in entries {
        assert_eq!(e["compiler"], tegula::autotune::COMPILER);
        assert!(key.contains(tegula::autotune::COMPILER), "{key}");
        assert!(
            key.contains(e["candidates_hash"].as_str().unwrap()),
            "{key}"
        );
    }
    assert!(
        tegula::autotune::COMPILER.starts_with("tegula-ptx ")
            && tegula::autotune::COMPILER.contains("+src."),
        "{}",
        tegula::autotune::COMPILER
    );
    // A file of the previous version (no compiler in its keys) is ignored with a note.
    let old = dir.path().join("old.json");
    std::fs::write(&old, text.replace("\"version\": 2", "\"version\": 1")).unwrap();
    let tuner = Autotuner::new(Some(old), Mode::Cached);
    let got = tuner.tune_for(&gpu(), &t, |_| panic!()).unwrap();
    assert_eq!(got.source, Source::Default);
    assert!(
        tuner.notes()[0].contains("version 1"),
        "{:?}",
        tuner.notes()
    );
}

/// Tuners writing one file at once (processes, here threads with a tuner each) merge their
/// entries under the file's lock: none is lost, and the file always parses.
#[test]
fn concurrent_writers_keep_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_file(&dir);
    let (writers, keys) = (8, 6);
    std::thread::scope(|s| {
        for w in 0..writers {
            let path = path.clone();
            s.spawn(move || {
                let tuner = Autotuner::new(Some(path.clone()), Mode::Full);
                for k in 0..keys {
                    let t = Tuning::new("k", IR_V1, format!("writer={w},key={k}"), configs());
                    let calls = Cell::new(0);
                    tuner.tune_for(&gpu(), &t, fake_bench(&calls)).unwrap();
                    // A reader between writes never sees half a file.
                    let text = std::fs::read_to_string(&path).unwrap();
                    serde_json::from_str::<serde_json::Value>(&text).unwrap();
                }
                assert!(tuner.notes().is_empty(), "{:?}", tuner.notes());
            });
        }
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["entries"].as_object().unwrap().len(), writers * keys);
    assert!(!path.with_extension("json.lock").exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "autotune.json")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A ranked request: the model's order, `top_k` of them timed, its first as the default.
#[test]
fn a_ranked_request_times_only_its_models_first() {
    // The model prefers large blocks; the fake bench's fastest is BLOCK=128.
    let model = |c: &Config| 1000.0 / c.get("BLOCK").unwrap() as f64;
    let ranked = || Tuning::new("k", IR_V1, "N=1", configs()).rank_with(2, model);
    let order: Vec<i64> = ranked()
        .ranked()
        .iter()
        .map(|c| c.get("BLOCK").unwrap())
        .collect();
    assert_eq!(order, [256, 128, 64, 32]);

    let timed = std::cell::RefCell::new(Vec::new());
    let bench = |c: &Config| {
        timed.borrow_mut().push(c.get("BLOCK").unwrap());
        fake_bench(&Cell::new(0))(c)
    };
    let tuner = Autotuner::new(None, Mode::Full);
    let got = tuner.tune_for(&gpu(), &ranked(), bench).unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(128));
    assert_eq!(*timed.borrow(), [256, 128]);
    assert!(matches!(got.source, Source::Tuned { timed: 2, .. }));
    assert_eq!(got.timings.len(), 2);

    // `TEGULA_TUNE_TOP_K` replaces the request's number, `all` times every candidate.
    for (top_k, want) in [(TopK::All, 4), (TopK::First(3), 3)] {
        timed.borrow_mut().clear();
        let tuner = Autotuner::new(None, Mode::Full).with_top_k(Some(top_k));
        tuner.tune_for(&gpu(), &ranked(), bench).unwrap();
        assert_eq!(timed.borrow().len(), want, "{top_k:?}");
    }

    // A candidate the benchmark skips as another's kernels leaves its place to the next.
    timed.borrow_mut().clear();
    let skip_256 = |c: &Config| {
        timed.borrow_mut().push(c.get("BLOCK").unwrap());
        if c.get("BLOCK") == Some(256) {
            return Err(Error::Pruned {
                why: "a twin".into(),
            });
        }
        fake_bench(&Cell::new(0))(c)
    };
    let fresh = Autotuner::new(None, Mode::Full);
    let got = fresh.tune_for(&gpu(), &ranked(), skip_256).unwrap();
    assert_eq!(*timed.borrow(), [256, 128, 64]);
    assert_eq!((got.pruned, got.timings.len()), (1, 2));

    // Tuning off: the model's first on a GPU, the list's first on the interpreter.
    let off = Autotuner::new(None, Mode::Off);
    let never = |_: &Config| -> tegula::Result<f64> { panic!("timed with tuning off") };
    let got = off.tune_for(&gpu(), &ranked(), never).unwrap();
    assert_eq!(
        (got.config.get("BLOCK"), got.source),
        (Some(256), Source::Default)
    );
    let cpu = Target::of(&Device::cpu());
    let got = off.tune_for(&cpu, &ranked(), never).unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(32));
}

/// After the first candidate, each is timed under a bound 25% above the best so far (none
/// while the close candidates are confirmed); `measure` stops sampling above it.
#[test]
fn the_sweep_bounds_each_candidate_by_the_best_so_far() {
    let seen = std::cell::RefCell::new(Vec::new());
    let bench = |c: &Config| {
        seen.borrow_mut().push((
            c.get("BLOCK").unwrap(),
            tegula::autotune::sweep_bound(),
            tegula::autotune::confirming(),
        ));
        fake_bench(&Cell::new(0))(c)
    };
    let tuner = Autotuner::new(None, Mode::Full);
    let got = tuner
        .tune_for(&gpu(), &Tuning::new("k", IR_V1, "N=2", configs()), bench)
        .unwrap();
    assert_eq!(got.config.get("BLOCK"), Some(128));
    let scale = 1.0 + tegula::autotune::EARLY_STOP_ABOVE;
    // Sweep: 32 (4 ms), 64 (2.25), 128 (1.5), 256 (3.0); only 128 is within 5% of itself.
    assert_eq!(
        *seen.borrow(),
        [
            (32, None, false),
            (64, Some(4.0 * scale), false),
            (128, Some(2.25 * scale), false),
            (256, Some(1.5 * scale), false),
        ]
    );
    assert_eq!(tegula::autotune::sweep_bound(), None);

    // Two close winners are confirmed without a bound.
    seen.borrow_mut().clear();
    let close = |c: &Config| {
        seen.borrow_mut().push((
            c.get("BLOCK").unwrap(),
            tegula::autotune::sweep_bound(),
            tegula::autotune::confirming(),
        ));
        Ok(if c.get("BLOCK") == Some(64) {
            1.0
        } else {
            1.02
        })
    };
    let pair = Tuning::new("k", IR_V1, "N=3", configs()[..2].to_vec());
    tuner.tune_for(&gpu(), &pair, close).unwrap();
    let confirmed: Vec<_> = seen.borrow().iter().filter(|s| s.2).cloned().collect();
    assert_eq!(confirmed.len(), 2);
    assert!(confirmed.iter().all(|s| s.1.is_none()), "{confirmed:?}");

    // `measure` with a bound: five samples of a 2 ms call above a 1 ms bound, then done.
    let dev = Device::cpu();
    let calls = Cell::new(0usize);
    let options = MeasureOptions {
        warmup_ms: 0.0,
        rep_ms: 1000.0,
        min_reps: 20,
        max_reps: 20,
        max_total_ms: 1000.0,
        batch: false,
        stop_above: Some(1.0),
    };
    let t = measure(&dev, &options, || {
        calls.set(calls.get() + 1);
        std::thread::sleep(std::time::Duration::from_millis(2));
        Ok(())
    })
    .unwrap();
    assert_eq!(t.samples.len(), tegula::autotune::EARLY_STOP_SAMPLES);
    let unbounded = MeasureOptions {
        stop_above: None,
        ..options
    };
    let t = measure(&dev, &unbounded, || {
        std::thread::sleep(std::time::Duration::from_millis(2));
        Ok(())
    })
    .unwrap();
    assert_eq!(t.samples.len(), 20);
}

/// `with_log`: one JSON line a tuning, with every timing and the model's predictions.
#[test]
fn each_tuning_appends_a_line_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tune.jsonl");
    let tuner = Autotuner::new(None, Mode::Full).with_log(Some(log.clone()));
    let model = |c: &Config| c.get("BLOCK").unwrap() as f64;
    for key in ["N=1", "N=2"] {
        let t = Tuning::new("k", IR_V1, key, configs()).rank_with(3, model);
        tuner
            .tune_for(&gpu(), &t, fake_bench(&Cell::new(0)))
            .unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["key"], "N=2");
    assert_eq!(lines[0]["kept"], 4);
    let timed = lines[0]["timed"].as_array().unwrap();
    // The model's first three (BLOCK 32, 64, 128), each with its prediction.
    let blocks: Vec<i64> = timed
        .iter()
        .map(|t| t["config"]["constexprs"]["BLOCK"].as_i64().unwrap())
        .collect();
    assert_eq!(blocks, [32, 64, 128]);
    assert_eq!(timed[1]["ms"], 2.25);
    assert_eq!(timed[1]["predicted"], 64.0);
    assert_eq!(lines[0]["winner"]["constexprs"]["BLOCK"], 128);
}

/// A ranked request confirms at most two close candidates, with the shorter budget; an
/// unranked one up to four, with `do_bench`'s.
#[test]
fn a_ranked_request_confirms_at_most_two() {
    use tegula::autotune::{confirming_budget, MeasureOptions};
    let budgets = std::cell::RefCell::new(Vec::new());
    let close = |confirmed: &Cell<usize>, c: &Config| {
        if tegula::autotune::confirming() {
            confirmed.set(confirmed.get() + 1);
        }
        budgets.borrow_mut().push(confirming_budget());
        // All four within 5% of the best.
        Ok(1.0 + c.get("BLOCK").unwrap() as f64 / 10_000.0)
    };
    for (ranked, want) in [(true, 2), (false, 4)] {
        let confirmed = Cell::new(0);
        let t = Tuning::new("k", IR_V1, "N=1", configs());
        let t = if ranked {
            t.rank_with(4, |c| c.get("BLOCK").unwrap() as f64)
        } else {
            t
        };
        let tuner = Autotuner::new(None, Mode::Full);
        tuner
            .tune_for(&gpu(), &t, |c| close(&confirmed, c))
            .unwrap();
        assert_eq!(confirmed.get(), want, "ranked: {ranked}");
        let seen = budgets.take();
        let full = if ranked {
            MeasureOptions::confirm_ranked()
        } else {
            MeasureOptions::default()
        };
        // The sweep's timings first, outside any confirmation; then each confirmation's.
        assert_eq!(seen.iter().filter(|b| b.is_none()).count(), 4, "{seen:?}");
        assert!(seen[4..].iter().all(|b| *b == Some(full)), "{seen:?}");
    }
    assert_eq!(confirming_budget(), None);
    assert!(MeasureOptions::confirm_ranked().rep_ms < MeasureOptions::default().rep_ms);
}

/// A conditional rank (`rank_when`): where its condition fails every candidate is timed, where
/// it holds the short list is; the condition is asked once, on a miss, and never on a hit.
#[test]
fn a_conditional_rank_is_asked_only_on_a_miss() {
    let model = |c: &Config| 1000.0 / c.get("BLOCK").unwrap() as f64;
    let asked = &Cell::new(0);
    let request = |holds: bool| {
        Tuning::new("k", IR_V1, "N=1", configs()).rank_when(2, model, move || {
            asked.set(asked.get() + 1);
            holds
        })
    };
    for (holds, want) in [(false, 4), (true, 2)] {
        asked.set(0);
        let timed = Cell::new(0);
        let tuner = Autotuner::new(None, Mode::Full);
        let got = tuner
            .tune_for(&gpu(), &request(holds), fake_bench(&timed))
            .unwrap();
        assert!(
            matches!(got.source, Source::Tuned { timed, .. } if timed == want),
            "holds: {holds}: {:?}",
            got.source
        );
        assert_eq!(asked.get(), 1, "asked once per tuning");
        // A hit answers without asking.
        asked.set(0);
        let hit = tuner
            .tune_for(&gpu(), &request(holds), |_| panic!("a hit times nothing"))
            .unwrap();
        assert!(matches!(hit.source, Source::Cached { .. }));
        assert_eq!(asked.get(), 0, "a hit asked the condition");
    }
}
