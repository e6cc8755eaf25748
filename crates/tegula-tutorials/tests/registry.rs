//! The registry: names and shapes as the Triton harness prints them, and every entry's check
//! passing on the interpreter at its default (small, odd) shape.

use tegula::prelude::*;

/// Every `<tutorial> <shape>` the harness prints as `TRITON <tutorial> <shape> <ms>` for the
/// ported tutorials (`triton_tutorials.py`, its `t01` .. `t11`).
const HARNESS: &[(&str, &str)] = &[
    ("01-vector-add", "n=134217728"),
    ("02-fused-softmax", "4096x8192"),
    ("02-fused-softmax-wrapper", "4096x8192"),
    ("03-matmul", "4096x4096x4096"),
    ("03-matmul-leaky-relu", "4096x4096x4096"),
    ("04-seeded-dropout", "n=16777216"),
    ("05-layer-norm-fwd", "4096x8192"),
    ("05-layer-norm-bwd", "4096x8192"),
    ("06-attention-fwd", "Z4H32N4096D64"),
    ("06-attention-bwd", "Z4H32N4096D64"),
    ("06-attention-fwd-causal", "Z4H32N4096D64"),
    ("06-attention-bwd-causal", "Z4H32N4096D64"),
    ("07-extern-asin", "n=16777216"),
    (
        "08-grouped-gemm-square",
        "1024x1024x1024,1024x1024x1024,1024x1024x1024,1024x1024x1024",
    ),
    (
        "08-grouped-gemm-batches",
        "1024x8192x8192,1024x8192x8192,1024x8192x8192,1024x8192x8192",
    ),
    (
        "08-grouped-gemm-tma-square",
        "1024x1024x1024,1024x1024x1024,1024x1024x1024,1024x1024x1024",
    ),
    (
        "08-grouped-gemm-tma-batches",
        "1024x8192x8192,1024x8192x8192,1024x8192x8192,1024x8192x8192",
    ),
    ("09-matmul-naive", "8192x8192x512"),
    ("09-matmul-persistent", "8192x8192x512"),
    ("09-matmul-descriptor-persistent", "8192x8192x512"),
    ("09-matmul-tma", "8192x8192x512"),
    ("09-matmul-tma-persistent", "8192x8192x512"),
    ("11-pdl-add-nogdc", "n=16777216"),
];

#[test]
fn names_and_shapes_are_the_harness_s() {
    let all = tegula_tutorials::tutorials();
    let mut names: Vec<&str> = all.iter().map(|t| t.name).collect();
    for t in &all {
        assert_eq!(t.kind, tegula::registry::Kind::Tutorial, "{}", t.name);
        assert_eq!(t.bench.op, t.name, "the records' op is the entry's name");
        assert_eq!(t.bench.dims, t.dims, "{}", t.name);
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all.len(), "duplicate names");
    for t in &all {
        assert!(t.name.starts_with("tutorial-"), "{}", t.name);
        assert!(
            !t.bench.shapes.is_empty() && !t.dtypes.is_empty(),
            "{}",
            t.name
        );
        for s in t.bench.shapes {
            assert!(
                HARNESS.contains(&(t.triton_name().unwrap(), s.label)),
                "{} {} is not a harness line",
                t.name,
                s.label
            );
            assert!(s.dims.len() <= t.dims.len(), "{}", t.name);
        }
        assert_eq!(t.default_shape.len(), t.dims.len(), "{}", t.name);
    }
    for (name, shape) in HARNESS {
        let t = tegula_tutorials::find(name).unwrap_or_else(|| panic!("{name} is not registered"));
        assert!(
            t.bench.shapes.iter().any(|s| s.label == *shape),
            "{name} {shape}"
        );
    }
}

#[test]
fn the_bench_shapes_agree_with_their_labels() {
    for t in tegula_tutorials::tutorials() {
        for s in t.bench.shapes {
            let numbers: Vec<usize> = s
                .label
                .split(|c: char| !c.is_ascii_digit())
                .filter(|p| !p.is_empty())
                .map(|p| p.parse().unwrap())
                .collect();
            let dims: Vec<usize> = match t.triton_name().unwrap() {
                // G products of M x N x K, listed G times.
                n if n.starts_with("08-") => s.dims[1..].repeat(s.dims[0]),
                _ => s.dims.to_vec(),
            };
            assert_eq!(numbers, dims, "{} {}", t.name, s.label);
        }
    }
}

#[test]
fn every_entry_passes_its_check_at_its_default_shape_in_every_dtype() -> tegula::Result<()> {
    let dev = Device::cpu();
    for t in tegula_tutorials::tutorials() {
        for &dtype in t.dtypes {
            let r = (t.check)(&dev, t.default_shape, dtype)?;
            assert!(r.passed(), "{} {dtype}: {r:?}", t.name);
        }
    }
    Ok(())
}

#[test]
fn benches_prepare_and_launch_on_the_interpreter() -> tegula::Result<()> {
    // At the default shapes (the harness's are for the GPU): a prepared launch runs twice.
    let dev = Device::cpu();
    for t in tegula_tutorials::tutorials() {
        let mut b = (t.bench.prepare)(&dev, t.default_shape, t.dtypes[0])?;
        assert!(b.bytes > 0.0, "{}", t.name);
        (b.launch)()?;
        (b.launch)()?;
    }
    Ok(())
}

#[test]
fn every_entry_records_its_launches() -> tegula::Result<()> {
    for t in tegula_tutorials::tutorials() {
        let launches = t.record(t.default_shape, t.dtypes[0], None, 132)?;
        assert!(!launches.is_empty(), "{}", t.name);
        for l in &launches {
            assert!(l.grid.num_programs() > 0, "{} {}", t.name, l.name);
        }
    }
    // The attention backward's call is its three kernels, without the forward that prepared
    // its inputs.
    let t = tegula_tutorials::find("06-attention-bwd").expect("registered");
    let names: Vec<&str> = t
        .record(t.default_shape, t.dtypes[0], None, 132)?
        .iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(
        names,
        ["_scale_kernel", "_attn_bwd_preprocess", "_attn_bwd"]
    );
    Ok(())
}

#[test]
fn a_config_pins_a_port_s_tuning() -> tegula::Result<()> {
    // `tegula bench --config`: the port's tuned kernel launches at the pinned config (its
    // recorded launch shows that config's grid and warps), every launch, not only the first.
    let t = tegula_tutorials::find("06-attention-fwd").expect("registered");
    let dev = Device::cpu();
    for (bm, warps) in [(64, 4), (128, 8)] {
        let c = tegula::autotune::Config::new(warps, 2)
            .with("BLOCK_M", bm)
            .with("BLOCK_N", 32);
        let launches = t.record(t.default_shape, t.dtypes[0], Some(&c), 132)?;
        let fwd = launches
            .iter()
            .find(|l| l.name == "_attn_fwd")
            .expect("the forward");
        assert_eq!(
            fwd.grid.0[0] as usize,
            t.default_shape[2].div_ceil(bm as usize),
            "{c}"
        );
        assert_eq!(fwd.config.num_warps, warps, "{c}");
        let mut b = t.prepare(&dev, t.default_shape, t.dtypes[0], Some(&c))?;
        (b.launch)()?;
        (b.launch)()?;
    }
    // A config the port's list does not hold is an error naming the candidates.
    let odd = tegula::autotune::Config::new(4, 2)
        .with("BLOCK_M", 48)
        .with("BLOCK_N", 32);
    let mut b = t.prepare(&dev, t.default_shape, t.dtypes[0], Some(&odd))?;
    let e = (b.launch)().expect_err("48 rows is not a candidate");
    assert!(e.to_string().contains("not one of kernel"), "{e}");
    // A port that tunes nothing (the vector add launches a fixed block) refuses a config.
    let add = tegula_tutorials::find("01-vector-add").expect("registered");
    let mut b = add.prepare(&dev, add.default_shape, add.dtypes[0], Some(&odd))?;
    let e = (b.launch)().expect_err("nothing to pin");
    assert!(e.to_string().contains("tunes no kernel"), "{e}");
    Ok(())
}
