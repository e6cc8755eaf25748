//! Shipping tuned configs: `Autotuner::export` on one machine, `Autotuner::import` (or
//! `import_json`) on another, on the CPU with fake targets and fake benchmarks. A benchmark
//! that panics proves that an imported entry is used without timing.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use tegula::autotune::{
    Autotuner, CacheError, Config, ImportReport, Mode, Source, Target, Tuned, Tuning,
};
use tegula::Error;

fn h200() -> Target {
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

const IR: &str = "kernel @k(%a: ptr<f16>) { %0 = program_id 0 }";

/// The two requests tuned on machine A.
fn requests() -> [Tuning<'static>; 2] {
    [
        Tuning::new("k", IR, "N=4096,f16", configs()),
        Tuning::new("k", IR, "N=64,f16", configs()),
    ]
}

/// A benchmark with a distinct time per config whose fastest block is `fastest`; counts calls.
fn bench_fastest(
    fastest: i64,
    calls: &Cell<usize>,
) -> impl FnMut(&Config) -> tegula::Result<f64> + '_ {
    move |c: &Config| {
        calls.set(calls.get() + 1);
        let block = c.get("BLOCK").unwrap();
        Ok(if block == fastest {
            1.0
        } else {
            2.0 + block as f64 / 64.0
        })
    }
}

fn never(_: &Config) -> tegula::Result<f64> {
    panic!("an imported entry was timed again")
}

fn cache_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("autotune.json")
}

/// Machine A: tunes the two requests (BLOCK=128 wins the first, BLOCK=64 the second) in its
/// own cache and exports them to `out`.
fn machine_a(out: &Path) -> (tempfile::TempDir, Vec<Tuned>) {
    let dir = tempfile::tempdir().unwrap();
    let a = Autotuner::new(Some(cache_in(&dir)), Mode::Full);
    let calls = Cell::new(0);
    let tuned: Vec<Tuned> = requests()
        .iter()
        .zip([128, 64])
        .map(|(t, fastest)| {
            a.tune_for(&h200(), t, bench_fastest(fastest, &calls))
                .unwrap()
        })
        .collect();
    assert!(calls.get() >= 8);
    assert_eq!(tuned[0].config.get("BLOCK"), Some(128));
    assert_eq!(tuned[1].config.get("BLOCK"), Some(64));
    assert_eq!(a.export(out).unwrap(), 2);
    (dir, tuned)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn an_exported_cache_imported_elsewhere_answers_without_timing() {
    let shipped = tempfile::tempdir().unwrap();
    let file = shipped.path().join("tuned.json");
    let (a_dir, a_tuned) = machine_a(&file);

    // The export is the cache file's format: its version, and each entry under the key its
    // fields give (the key `tune_for` stored it under).
    let exported = json(&file);
    assert_eq!(exported["version"], 2);
    let entries = exported["entries"].as_object().unwrap();
    assert_eq!(entries.len(), 2);
    for (key, e) in entries {
        let fields = [
            "kernel",
            "source_hash",
            "compiler",
            "candidates_hash",
            "key",
            "device",
        ]
        .map(|f| e[f].as_str().unwrap().to_string())
        .join("|");
        assert_eq!(*key, format!("{fields}|{}", e["driver_version"]));
    }
    assert_eq!(exported, json(&cache_in(&a_dir)));
    let a = Autotuner::new(Some(cache_in(&a_dir)), Mode::Full);
    let text = a.export_json().unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        exported
    );

    // Machine B, an empty cache: the import adds both, and B answers from them at once.
    let b_dir = tempfile::tempdir().unwrap();
    let b = Autotuner::new(Some(cache_in(&b_dir)), Mode::Full);
    let report = b.import(&file).unwrap();
    assert_eq!(
        report,
        ImportReport {
            added: 2,
            replaced: 0,
            unchanged: 0
        }
    );
    assert_eq!(report.to_string(), "2 added, 0 replaced, 0 unchanged");
    for (t, want) in requests().iter().zip(&a_tuned) {
        let got = b.tune_for(&h200(), t, never).unwrap();
        assert_eq!(got.config, want.config);
        let Source::Tuned { ms, .. } = want.source else {
            panic!("{:?}", want.source)
        };
        assert_eq!(got.source, Source::Cached { ms });
    }
    assert!(b.notes().is_empty(), "{:?}", b.notes());

    // The entries are in B's cache file: a later process (in `cached` mode, as CI runs) uses
    // them too.
    assert_eq!(json(&cache_in(&b_dir))["entries"], exported["entries"]);
    let later = Autotuner::new(Some(cache_in(&b_dir)), Mode::Cached);
    for (t, want) in requests().iter().zip(&a_tuned) {
        let got = later.tune_for(&h200(), t, never).unwrap();
        assert_eq!(got.config, want.config);
        assert!(matches!(got.source, Source::Cached { .. }));
    }

    // Importing the same file again changes nothing, and does not rewrite the file.
    let before = std::fs::read(cache_in(&b_dir)).unwrap();
    let again = b.import(&file).unwrap();
    assert_eq!((again.added, again.replaced, again.unchanged), (0, 0, 2));
    assert_eq!(std::fs::read(cache_in(&b_dir)).unwrap(), before);

    // On another GPU the imported entries never match: it tunes.
    let mut h100 = h200();
    h100.device = "NVIDIA H100 80GB HBM3".into();
    let calls = Cell::new(0);
    let got = b
        .tune_for(&h100, &requests()[0], bench_fastest(32, &calls))
        .unwrap();
    assert!(matches!(got.source, Source::Tuned { .. }));
    assert_eq!(got.config.get("BLOCK"), Some(32));
    assert!(calls.get() >= 4);
}

#[test]
fn import_json_takes_an_embedded_file() {
    let shipped = tempfile::tempdir().unwrap();
    let file = shipped.path().join("tuned.json");
    let (_a_dir, a_tuned) = machine_a(&file);
    // What `include_str!("tuned.json")` would give a crate.
    let embedded = std::fs::read_to_string(&file).unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let b = Autotuner::new(Some(cache_in(&b_dir)), Mode::Cached);
    let report = b.import_json(&embedded).unwrap();
    assert_eq!(report.added, 2);
    let got = b.tune_for(&h200(), &requests()[1], never).unwrap();
    assert_eq!(got.config, a_tuned[1].config);
}

#[test]
fn imported_entries_replace_existing_ones_and_keep_the_others() {
    let shipped = tempfile::tempdir().unwrap();
    let file = shipped.path().join("tuned.json");
    let (_a_dir, a_tuned) = machine_a(&file);

    // B tuned the first request itself (BLOCK=32 won there) and a third one A never saw.
    let b_dir = tempfile::tempdir().unwrap();
    let b = Autotuner::new(Some(cache_in(&b_dir)), Mode::Full);
    let calls = Cell::new(0);
    let own = b
        .tune_for(&h200(), &requests()[0], bench_fastest(32, &calls))
        .unwrap();
    assert_eq!(own.config.get("BLOCK"), Some(32));
    let third = Tuning::new("k", IR, "N=1,f16", configs());
    let own_third = b
        .tune_for(&h200(), &third, bench_fastest(256, &calls))
        .unwrap();

    let report = b.import(&file).unwrap();
    assert_eq!(
        report,
        ImportReport {
            added: 1,
            replaced: 1,
            unchanged: 0
        }
    );
    assert_eq!(report.to_string(), "1 added, 1 replaced, 0 unchanged");

    // The imported entry wins, in this process (whose memory held B's own winner) and in the
    // file; B's other entry stays.
    let got = b.tune_for(&h200(), &requests()[0], never).unwrap();
    assert_eq!(got.config, a_tuned[0].config);
    let later = Autotuner::new(Some(cache_in(&b_dir)), Mode::Cached);
    assert_eq!(
        later
            .tune_for(&h200(), &requests()[0], never)
            .unwrap()
            .config,
        a_tuned[0].config
    );
    assert_eq!(
        later.tune_for(&h200(), &third, never).unwrap().config,
        own_third.config
    );
    assert_eq!(
        json(&cache_in(&b_dir))["entries"]
            .as_object()
            .unwrap()
            .len(),
        3
    );
    assert!(!cache_in(&b_dir).with_extension("json.lock").exists());
}

/// Whether an import's error is the one a bad file should give.
type IsExpected = fn(&CacheError) -> bool;

#[test]
fn a_corrupt_foreign_or_hand_edited_file_is_refused_and_the_cache_left_alone() {
    let shipped = tempfile::tempdir().unwrap();
    let good = shipped.path().join("tuned.json");
    machine_a(&good);
    let good_text = std::fs::read_to_string(&good).unwrap();

    // B has an entry of its own.
    let b_dir = tempfile::tempdir().unwrap();
    let b = Autotuner::new(Some(cache_in(&b_dir)), Mode::Full);
    let calls = Cell::new(0);
    let own = b
        .tune_for(&h200(), &requests()[0], bench_fastest(32, &calls))
        .unwrap();
    let before = std::fs::read(cache_in(&b_dir)).unwrap();

    // A hand edit that retargets an entry's fields but not its key.
    let mut edited: serde_json::Value = serde_json::from_str(&good_text).unwrap();
    let (first_key, _) = edited["entries"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let first_key = first_key.clone();
    edited["entries"][&first_key]["device"] = "NVIDIA H200 NVL".into();
    let mut negative: serde_json::Value = serde_json::from_str(&good_text).unwrap();
    negative["entries"][&first_key]["ms"] = (-1.0).into();

    let cases: Vec<(&str, String, IsExpected)> = vec![
        (
            "truncated",
            good_text[..good_text.len() / 2].to_string(),
            |e| matches!(e, CacheError::Parse { .. }),
        ),
        ("garbage", "\u{0}\u{1}garbage".into(), |e| {
            matches!(e, CacheError::Parse { .. })
        }),
        ("array", "[2, {}]".into(), |e| {
            matches!(e, CacheError::Parse { .. })
        }),
        ("no version", "{\"entries\": {}}".into(), |e| {
            matches!(e, CacheError::Parse { .. })
        }),
        (
            "wrong shape",
            "{\"version\": 2, \"entries\": [1, 2]}".into(),
            |e| matches!(e, CacheError::Parse { .. }),
        ),
        (
            "version 1",
            good_text.replace("\"version\": 2", "\"version\": 1"),
            |e| {
                matches!(
                    e,
                    CacheError::Version {
                        found: 1,
                        expected: 2,
                        ..
                    }
                )
            },
        ),
        (
            "version 3",
            good_text.replace("\"version\": 2", "\"version\": 3"),
            |e| matches!(e, CacheError::Version { found: 3, .. }),
        ),
        ("edited", edited.to_string(), |e| {
            matches!(e, CacheError::Entry { .. })
        }),
        ("negative ms", negative.to_string(), |e| {
            matches!(e, CacheError::Entry { .. })
        }),
    ];
    for (what, text, expected) in cases {
        let path = shipped
            .path()
            .join(format!("{}.json", what.replace(' ', "_")));
        std::fs::write(&path, &text).unwrap();
        let e = b.import(&path).unwrap_err();
        let Error::Cache(cache_error) = &e else {
            panic!("{what}: {e:?}")
        };
        assert!(expected(cache_error), "{what}: {cache_error:?}");
        let message = e.to_string();
        assert!(
            message.contains(&path.display().to_string()),
            "{what}: {message}"
        );
        assert_eq!(
            std::fs::read(cache_in(&b_dir)).unwrap(),
            before,
            "{what}: B's cache file changed"
        );
        // The same text given as JSON is refused the same way, naming it.
        let e = b.import_json(&text).unwrap_err();
        assert!(e.to_string().contains("the imported JSON"), "{what}: {e}");
    }
    let e = b.import(&shipped.path().join("edited.json")).unwrap_err();
    assert!(
        e.to_string().contains("NVIDIA H200 NVL") && e.to_string().contains(&first_key),
        "the message gives both keys: {e}"
    );
    let e = b
        .import(&shipped.path().join("version_1.json"))
        .unwrap_err();
    assert!(e.to_string().contains("version 1"), "{e}");
    let missing = shipped.path().join("missing.json");
    let e = b.import(&missing).unwrap_err();
    assert!(
        matches!(e, Error::Cache(CacheError::Read { .. }))
            && e.to_string().contains("missing.json"),
        "{e:?}"
    );

    // Nothing reached B's memory either: it still answers with its own winner, and the file
    // holds only it.
    assert_eq!(std::fs::read(cache_in(&b_dir)).unwrap(), before);
    let got = b.tune_for(&h200(), &requests()[0], never).unwrap();
    assert_eq!(got.config, own.config);
    let got = Autotuner::new(Some(cache_in(&b_dir)), Mode::Cached)
        .tune_for(&h200(), &requests()[1], never)
        .unwrap();
    assert_eq!(got.source, Source::Default);
}

#[test]
fn without_a_cache_file_import_serves_from_memory_and_export_refuses() {
    let shipped = tempfile::tempdir().unwrap();
    let file = shipped.path().join("tuned.json");
    let (_a_dir, a_tuned) = machine_a(&file);

    let b = Autotuner::new(None, Mode::Full);
    let report = b.import(&file).unwrap();
    assert_eq!((report.added, report.replaced, report.unchanged), (2, 0, 0));
    for (t, want) in requests().iter().zip(&a_tuned) {
        let got = b.tune_for(&h200(), t, never).unwrap();
        assert_eq!(got.config, want.config);
        assert!(matches!(got.source, Source::Cached { .. }));
    }
    let again = b.import(&file).unwrap();
    assert_eq!((again.added, again.replaced, again.unchanged), (0, 0, 2));

    // A memory-only tuner has no file to export.
    let e = b.export(&shipped.path().join("out.json")).unwrap_err();
    assert!(matches!(e, Error::Cache(CacheError::NoCacheFile)), "{e:?}");
    assert!(e.to_string().contains("TEGULA_CACHE_DIR=off"), "{e}");
    assert!(!shipped.path().join("out.json").exists());
    assert!(matches!(
        b.export_json(),
        Err(Error::Cache(CacheError::NoCacheFile))
    ));
}

#[test]
fn export_of_a_missing_corrupt_or_unwritable_cache() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");

    // No cache file yet: an empty export, which imports as nothing.
    let empty = Autotuner::new(
        Some(dir.path().join("none").join("autotune.json")),
        Mode::Full,
    );
    assert_eq!(empty.export(&out).unwrap(), 0);
    assert_eq!(json(&out)["version"], 2);
    let b = Autotuner::new(Some(dir.path().join("b.json")), Mode::Full);
    assert_eq!(b.import(&out).unwrap(), ImportReport::default());
    assert!(
        !dir.path().join("b.json").exists(),
        "nothing imported, nothing written"
    );

    // A corrupt cache file is not exported (the export would not import).
    let corrupt = dir.path().join("corrupt.json");
    std::fs::write(&corrupt, "{\"version\": 2, \"entries\": {\"k|").unwrap();
    let e = Autotuner::new(Some(corrupt.clone()), Mode::Full)
        .export(&dir.path().join("out2.json"))
        .unwrap_err();
    assert!(
        matches!(e, Error::Cache(CacheError::Parse { .. }))
            && e.to_string().contains("corrupt.json"),
        "{e:?}"
    );
    assert!(!dir.path().join("out2.json").exists());

    // A destination that cannot be written: its parent is a file.
    let t = Autotuner::new(Some(dir.path().join("t.json")), Mode::Full);
    let calls = Cell::new(0);
    t.tune_for(&h200(), &requests()[0], bench_fastest(64, &calls))
        .unwrap();
    let e = t.export(&out.join("below_a_file.json")).unwrap_err();
    assert!(
        matches!(e, Error::Cache(CacheError::Write { .. }))
            && e.to_string().contains("below_a_file.json"),
        "{e:?}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
