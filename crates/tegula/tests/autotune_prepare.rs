//! The tuner's prepare step (candidates compiled on several threads before they are timed
//! one by one) and `Device::prepare`, which compiles a host call's launches without running
//! them. No GPU: a fake tunable target, and the recording device and the interpreter.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tegula::autotune::{tune_threads, Autotuner, Config, Mode, Source, Target, Tuning};
use tegula::prelude::*;
use tegula::Error;

fn gpu() -> Target {
    Target {
        device: "NVIDIA H200".into(),
        driver_version: 13000,
        tunable: true,
    }
}

fn configs(n: i64) -> Vec<Config> {
    (0..n)
        .map(|b| Config::new(4, 2).with("BLOCK", 16 << (b % 6)).with("I", b))
        .collect()
}

#[test]
fn every_candidate_is_prepared_once_on_several_threads_before_any_timing() {
    let tuner = Autotuner::new(None, Mode::Full);
    let prepared = Mutex::new(Vec::new());
    let threads = Mutex::new(HashSet::new());
    let in_flight = AtomicUsize::new(0);
    let most_in_flight = AtomicUsize::new(0);
    let t = Tuning::new("k", "ir", "N=1", configs(12)).prepare_with(|c| {
        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        most_in_flight.fetch_max(now, Ordering::SeqCst);
        // Long enough for the other workers to start on their own candidates.
        std::thread::sleep(std::time::Duration::from_millis(20));
        threads.lock().unwrap().insert(std::thread::current().id());
        prepared.lock().unwrap().push(c.get("I").unwrap());
        in_flight.fetch_sub(1, Ordering::SeqCst);
        if c.get("I") == Some(3) {
            // A failure here is the benchmark's to report, not the tuning's.
            return Err(Error::Invalid {
                op: "prepare".into(),
                message: "no".into(),
            });
        }
        Ok(())
    });
    let mut timed_after = Vec::new();
    let got = tuner
        .tune_for(&gpu(), &t, |c| {
            timed_after.push(prepared.lock().unwrap().len());
            Ok(1.0 + c.get("I").unwrap() as f64)
        })
        .unwrap();
    drop(t);
    let mut order = prepared.into_inner().unwrap();
    order.sort();
    assert_eq!(order, (0..12).collect::<Vec<_>>(), "each candidate once");
    // Every timing saw all twelve prepared (the close-candidate re-timing included).
    assert!(timed_after.iter().all(|&n| n == 12), "{timed_after:?}");
    assert_eq!(got.config.get("I"), Some(0));
    assert!(matches!(got.source, Source::Tuned { timed: 12, .. }));
    if tune_threads(12) > 1 {
        assert!(threads.into_inner().unwrap().len() > 1);
        assert!(most_in_flight.load(Ordering::SeqCst) > 1);
    }
}

#[test]
fn nothing_is_prepared_when_nothing_is_timed() {
    let prepares = AtomicUsize::new(0);
    let make = || {
        Tuning::new("k2", "ir", "N=2", configs(4)).prepare_with(|_| {
            prepares.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    };
    for mode in [Mode::Off, Mode::Cached] {
        let tuner = Autotuner::new(None, mode);
        tuner.tune_for(&gpu(), &make(), |_| Ok(1.0)).unwrap();
    }
    let interpreter = Target {
        tunable: false,
        ..gpu()
    };
    let tuner = Autotuner::new(None, Mode::Full);
    tuner.tune_for(&interpreter, &make(), |_| Ok(1.0)).unwrap();
    assert_eq!(prepares.load(Ordering::SeqCst), 0);
    // A hit in the memo times and prepares nothing either.
    tuner.tune_for(&gpu(), &make(), |_| Ok(1.0)).unwrap();
    assert_eq!(prepares.load(Ordering::SeqCst), 4);
    tuner.tune_for(&gpu(), &make(), |_| Ok(1.0)).unwrap();
    assert_eq!(prepares.load(Ordering::SeqCst), 4);
}

#[test]
fn tune_threads_is_bounded_by_the_candidates() {
    assert_eq!(tune_threads(1), 1);
    assert_eq!(tune_threads(0), 1);
    assert!(tune_threads(1000) >= 1);
}

#[tegula::kernel]
fn scale(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] block: usize) {
    let offs = program_id(0) * block as i64 + arange(0, block as i64);
    let mask = offs.lt(n);
    store(y + offs, load(x + offs, mask, 0.0) * 3.0, mask);
}

#[test]
fn prepare_runs_no_launch_on_the_recording_device_or_the_interpreter() -> tegula::Result<()> {
    let n = 777usize;
    let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 9.0).collect();
    for dev in [Device::recording(132), Device::cpu()] {
        let x = dev.from_slice(&data, [n])?;
        let y = dev.zeros::<f32>([n])?;
        dev.prepare(|| scale::launch(&dev, n.div_ceil(128), &x, &y, n as i32, 128))?;
        assert!(
            y.to_vec()?.iter().all(|&v| v == 0.0),
            "{}: a launch ran",
            dev.name()
        );
        assert!(dev.take_recorded().is_empty(), "{}", dev.name());
        // The work's own error comes back.
        let e = dev
            .prepare(|| {
                Err(Error::Invalid {
                    op: "work".into(),
                    message: "failed".into(),
                })
            })
            .unwrap_err();
        assert!(e.to_string().contains("failed"), "{e}");
        // Afterwards launches run (or record) again.
        scale::launch(&dev, n.div_ceil(128), &x, &y, n as i32, 128)?;
        if dev.take_recorded().is_empty() {
            let want: Vec<f32> = data.iter().map(|v| v * 3.0).collect();
            assert_eq!(y.to_vec()?, want);
        }
    }
    Ok(())
}

/// A short list whose candidates the plans prune: each pruned one's replacement is prepared
/// before the first timing too (before, it compiled in the middle of the timing), and no
/// more candidates are prepared than the list needs and the idle threads take.
#[test]
fn a_pruned_candidates_replacement_is_prepared_before_the_timing() {
    let tuner = Autotuner::new(None, Mode::Full);
    let prepared = Mutex::new(Vec::new());
    // The model ranks by I; the plans prune I = 0 and I = 2.
    let pruned = |c: &Config| matches!(c.get("I"), Some(0) | Some(2));
    let t = Tuning::new("k3", "ir", "N=3", configs(10))
        .rank_with(3, |c| c.get("I").unwrap() as f64)
        .prepare_with(|c| {
            prepared.lock().unwrap().push(c.get("I").unwrap());
            if pruned(c) {
                return Err(Error::Pruned {
                    why: "a twin".into(),
                });
            }
            Ok(())
        });
    let mut seen_at_first_timing = None;
    let got = tuner
        .tune_for(&gpu(), &t, |c| {
            if pruned(c) {
                return Err(Error::Pruned {
                    why: "a twin".into(),
                });
            }
            seen_at_first_timing.get_or_insert_with(|| {
                let mut p = prepared.lock().unwrap().clone();
                p.sort();
                p
            });
            Ok(1.0 + c.get("I").unwrap() as f64)
        })
        .unwrap();
    drop(t);
    assert!(matches!(got.source, Source::Tuned { timed: 3, .. }));
    let seen = seen_at_first_timing.expect("timed");
    // The three timed (1, 3, 4) and the two pruned ahead of them were all prepared first.
    for i in [0, 1, 2, 3, 4] {
        assert!(
            seen.contains(&i),
            "{i} not prepared before the timing: {seen:?}"
        );
    }
    // At most the list (3) and as many again on idle threads, plus the replacements.
    assert!(seen.len() <= 3 + 3 + 2, "{seen:?}");
    assert_eq!(
        prepared.into_inner().unwrap().len(),
        seen.len(),
        "prepared during timing"
    );
}
