//! Ahead-of-time bundles: recorded for a target, one entry per specialization keyed as a GPU
//! launch keys it, round-tripped through JSON, refused when another compiler or format made
//! them, and harmless on devices that compile nothing.
//!
//! What only a GPU shows (a bundled launch runs without tracing) is the ignored test at the
//! end: `TEGULA_GPU_TESTS=1 cargo test -p tegula --test aot -- --ignored`.

use tegula::aot::{Bundle, BundleError, Installed, FORMAT};
use tegula::compiler::Target;
use tegula::prelude::*;
use tegula::Error;

#[tegula::kernel]
fn scale(x: Ptr<f32>, out: Ptr<f32>, n: i32, alpha: f32, #[constexpr] block: usize) {
    let offs = program_id(0) * block + arange(0, block as i64);
    let mask = offs.lt(n);
    store(out + offs, load(x + offs, mask, 0.0) * alpha, mask);
}

const SM90: Target = Target { sm: 90 };

/// Two shapes (4096 is a multiple of 16, 1000 is not: different facts) and two configs; the
/// first call twice.
fn calls(dev: &Device) -> tegula::Result<()> {
    for n in [4096usize, 1000] {
        let (x, out) = (dev.zeros::<f32>([n])?, dev.zeros::<f32>([n])?);
        let grid = n.div_ceil(1024) as u32;
        scale::launch(dev, grid, &x, &out, n as i32, 2.0, 1024)?;
        scale::launch_with(
            dev,
            grid,
            LaunchConfig::new(8, 2),
            &x,
            &out,
            n as i32,
            2.0,
            1024,
        )?;
    }
    let (x, out) = (dev.zeros::<f32>([4096])?, dev.zeros::<f32>([4096])?);
    scale::launch(dev, 4u32, &x, &out, 4096, 3.0, 1024)
}

fn bundle() -> Bundle {
    Bundle::record(&SM90, calls).expect("records")
}

#[test]
fn a_bundle_holds_one_entry_per_specialization_keyed_as_the_launches_are() {
    let bundle = bundle();
    let dev = Device::recording(132);
    calls(&dev).unwrap();
    let recorded = dev.take_recorded();
    assert_eq!(recorded.len(), 5);
    // The fifth call is the first's specialization again (alpha is an argument, not a fact).
    let keys: Vec<String> = recorded[..4]
        .iter()
        .map(|r| r.specialization_key())
        .collect();
    assert_eq!(recorded[4].specialization_key(), keys[0]);
    let bundled: Vec<&str> = bundle.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(bundled, keys.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(bundle.entries.len(), 4);
    // The key holds the name, the constexpr key, the facts and the config.
    assert!(keys[0].starts_with("scale|block=1024|"), "{}", keys[0]);
    assert!(keys[0].contains("|w4s3"), "{}", keys[0]);
    assert!(keys[1].contains("|w8s2"), "{}", keys[1]);
    assert_ne!(keys[0], keys[2], "n = 4096 and n = 1000 differ in facts");
    for (e, r) in bundle.entries.iter().zip(&recorded) {
        assert_eq!(e.sm, 90);
        assert!(e.ptx.contains(".entry"));
        assert_eq!(e.num_threads, 32 * r.config.num_warps);
        assert_eq!(e.params.len(), 4);
        // The entry rebuilds the compiled kernel the recorded launch compiles.
        let compiled = r.compile(&SM90).unwrap();
        let rebuilt = e.to_compiled().unwrap();
        assert_eq!(rebuilt.ptx, compiled.ptx);
        assert_eq!(rebuilt.entry, compiled.entry);
        assert_eq!(rebuilt.shared_bytes, compiled.shared_bytes);
        assert_eq!(rebuilt.params, compiled.params);
        assert_eq!(
            rebuilt.report.stages_compiled,
            compiled.report.stages_compiled
        );
    }
}

#[test]
fn a_bundle_round_trips_through_json_and_files() {
    let bundle = bundle();
    let text = bundle.to_json().unwrap();
    assert_eq!(Bundle::from_json(&text).unwrap(), bundle);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.json");
    bundle.write(&path).unwrap();
    assert_eq!(Bundle::read(&path).unwrap(), bundle);
    let e = Bundle::read(&dir.path().join("missing.json")).unwrap_err();
    assert!(matches!(e, Error::Bundle(BundleError::Read { .. })), "{e}");
}

#[test]
fn another_compiler_or_format_or_garbage_is_refused_with_a_typed_error() {
    let mut other = bundle();
    other.compiler = "tegula-0.0.0-0000000000000000".into();
    let e = Bundle::from_json(&other.to_json().unwrap()).unwrap_err();
    match &e {
        Error::Bundle(BundleError::Compiler { found, expected }) => {
            assert_eq!(found, "tegula-0.0.0-0000000000000000");
            assert_eq!(expected, tegula::autotune::COMPILER);
        }
        _ => panic!("{e}"),
    }
    let message = e.to_string();
    assert!(
        message.contains("tegula-0.0.0-0000000000000000"),
        "{message}"
    );
    assert!(message.contains(tegula::autotune::COMPILER), "{message}");
    // Installing one built in code is refused as well.
    assert!(matches!(
        Device::cpu().install_bundle(&other),
        Err(Error::Bundle(BundleError::Compiler { .. }))
    ));

    let mut newer = bundle();
    newer.format = FORMAT + 1;
    let e = Bundle::from_json(&newer.to_json().unwrap()).unwrap_err();
    assert!(
        matches!(e, Error::Bundle(BundleError::Format { found, expected })
            if found == u64::from(FORMAT + 1) && expected == FORMAT),
        "{e}"
    );

    for text in ["", "[]", "{\"format\": 1}", "{not json"] {
        let e = Bundle::from_json(text).unwrap_err();
        assert!(
            matches!(e, Error::Bundle(BundleError::Parse { .. })),
            "{text}: {e}"
        );
    }

    let mut bad = bundle();
    bad.entries[0].params[0].dtype = "f7".into();
    let e = Bundle::from_json(&bad.to_json().unwrap()).unwrap_err();
    assert!(
        matches!(&e, Error::Bundle(BundleError::Param { dtype, .. }) if dtype == "f7"),
        "{e}"
    );
}

#[test]
fn installing_on_the_interpreter_or_a_recording_device_installs_nothing() -> tegula::Result<()> {
    let bundle = bundle();
    let nothing = Installed::default();
    assert_eq!(Device::recording(132).install_bundle(&bundle)?, nothing);
    let dev = Device::cpu();
    assert_eq!(dev.install_bundle(&bundle)?, nothing);
    // Launches still run on the interpreter, traced as before.
    let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let x = dev.from_slice(&data, [1000])?;
    let out = dev.zeros::<f32>([1000])?;
    scale::launch(&dev, 1u32, &x, &out, 1000, 2.0, 1024)?;
    let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
    assert_eq!(out.to_vec()?, want);
    assert_eq!(dev.traced_kernels(), 1);
    Ok(())
}

fn gpu() -> Device {
    assert!(
        tegula::env::bool_var("TEGULA_GPU_TESTS", false),
        "GPU tests run with TEGULA_GPU_TESTS=1 on a machine with a GPU: \
         TEGULA_GPU_TESTS=1 cargo test -- --ignored"
    );
    let dev = Device::cuda(0).unwrap_or_else(|e| panic!("TEGULA_GPU_TESTS=1, but no GPU: {e}"));
    dev.set_poison_empty(true);
    dev
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn a_bundled_specialization_launches_on_the_gpu_without_tracing() -> tegula::Result<()> {
    let dev = gpu();
    let target = dev.target().expect("a GPU has a target");
    let mut bundle = Bundle::record(&target, calls)?;
    // With ptxas (the GPU machine has one), each entry carries its cubin, which the first
    // launch loads instead of the driver's JIT.
    let ptxas = tegula::compiler::ptxas::find().expect("ptxas on the GPU machine");
    assert_eq!(bundle.assemble(&ptxas)?, 4);
    let bundle = Bundle::from_json(&bundle.to_json()?)?;
    let installed = dev.install_bundle(&bundle)?;
    assert_eq!(
        (installed.entries, installed.cubins),
        (4, 4),
        "{installed:?}"
    );
    // Installing again adds nothing; another target's entries are skipped.
    assert_eq!(dev.install_bundle(&bundle)?.entries, 0);
    let other_sm = if target.sm == 80 { 90 } else { 80 };
    let other = Bundle::record(&Target { sm: other_sm }, calls)?;
    assert_eq!(dev.install_bundle(&other)?.entries, 0);

    for n in [4096usize, 1000] {
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let x = dev.from_slice(&data, [n])?;
        let out = dev.empty::<f32>([n])?;
        let grid = n.div_ceil(1024) as u32;
        scale::launch_with(
            &dev,
            grid,
            LaunchConfig::new(8, 2),
            &x,
            &out,
            n as i32,
            2.0,
            1024,
        )?;
        let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
        assert_eq!(out.to_vec()?, want);
    }
    assert_eq!(dev.traced_kernels(), 0, "a bundled launch traced");
    // Each launched module is the bundled cubin (the runtime's loaded kernel of that PTX).
    let rt = dev.cuda_runtime().expect("a GPU runtime");
    for entry in &bundle.entries {
        let loaded = rt.load(&entry.ptx, &entry.entry, &|_| None)?;
        assert_eq!(
            loaded.source(),
            tegula::cuda::ModuleSource::AheadOfTime,
            "{}",
            entry.key
        );
    }
    // A specialization not bundled (another block) falls back to the JIT.
    let x = dev.full::<f32>([64], 1.0)?;
    let out = dev.empty::<f32>([64])?;
    scale::launch(&dev, 1u32, &x, &out, 64, 3.0, 64)?;
    assert_eq!(out.to_vec()?, vec![3.0; 64]);
    assert_eq!(dev.traced_kernels(), 1);
    // A tensor of another device is refused naming the parameter, bundled or not.
    let cpu = Device::cpu();
    let host = cpu.zeros::<f32>([4096])?;
    let out = dev.empty::<f32>([4096])?;
    let e = scale::launch(&dev, 4u32, &host, &out, 4096, 2.0, 1024).unwrap_err();
    assert!(matches!(e, Error::Device { .. }), "{e}");
    assert!(e.to_string().contains("`x`"), "{e}");
    Ok(())
}

#[test]
fn an_assembled_bundle_carries_each_entrys_cubin_through_json() {
    let ptxas = tegula::compiler::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    let mut bundle = bundle();
    assert!(bundle.entries.iter().all(|e| e.cubin.is_none()));
    assert_eq!(bundle.assemble(&ptxas).unwrap(), 4);
    // Entries already assembled are left as they are.
    assert_eq!(bundle.assemble(&ptxas).unwrap(), 0);
    for entry in &bundle.entries {
        let cubin = entry.cubin.as_ref().expect("assembled");
        assert_eq!(cubin.arch, "sm_90a");
        assert!(cubin.log.contains("Used"), "{}", cubin.log);
        let image = entry.cubin_bytes().unwrap().expect("a cubin");
        assert_eq!(&image[..4], b"\x7fELF", "{}", entry.key);
    }
    let back = Bundle::from_json(&bundle.to_json().unwrap()).unwrap();
    assert_eq!(back, bundle);

    let mut damaged = bundle.clone();
    damaged.entries[1]
        .cubin
        .as_mut()
        .unwrap()
        .base64
        .insert(3, '!');
    let e = Bundle::from_json(&damaged.to_json().unwrap()).unwrap_err();
    assert!(
        matches!(&e, Error::Bundle(BundleError::Cubin { key, .. }) if *key == bundle.entries[1].key),
        "{e}"
    );

    let mut broken = damaged.clone();
    for entry in &mut broken.entries {
        entry.cubin = None;
    }
    broken.entries[0].ptx = broken.entries[0].ptx.replace(".entry", ".entry_typo");
    let e = broken.assemble(&ptxas).unwrap_err();
    assert!(
        matches!(&e, Error::Bundle(BundleError::Assemble { key, .. }) if *key == broken.entries[0].key),
        "{e}"
    );
}
