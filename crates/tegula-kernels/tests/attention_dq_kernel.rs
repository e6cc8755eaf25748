//! The backward's 7-dot dQ path (`TEGULA_ATTN_BWD_DQ=kernel`). The variable is read once per
//! process, so this path has a test binary of its own; `tests/attention.rs` covers the default
//! (dQ added by atomics from the dK/dV kernel).

use half::f16;
use tegula::Device;
use tegula_kernels::attention::{self, AttentionOptions, Dims};

/// Forces the 7-dot path; every test here calls it before its first backward.
fn force_dq_kernel() {
    std::env::set_var("TEGULA_ATTN_BWD_DQ", "kernel");
}

#[test]
fn dq_kernel_path_matches_float64_and_traces_without_atomics() {
    force_dq_kernel();
    let dev = Device::cpu();
    let entry = tegula_kernels::find("attention_backward").unwrap();
    // B=1 H=2 Hkv=1 Nq=37 Nk=53 D=24, causal and not; the trace is the dK/dV kernel.
    for causal in [0, 1] {
        let shape = [1, 2, 1, 37, 53, 24, causal];
        for &dtype in entry.dtypes {
            let report = (entry.check)(&dev, &shape, dtype).unwrap();
            assert!(report.passed(), "{dtype} causal={causal}: {report:?}");
            let kernel = (entry.trace)(&shape, dtype).unwrap().to_string();
            assert!(kernel.contains("dot"), "{kernel}");
            assert!(!kernel.contains("atomic"), "{kernel}");
        }
    }
}

#[test]
fn dq_kernel_path_is_bitwise_deterministic_over_several_key_blocks() {
    force_dq_kernel();
    let dev = Device::cpu();
    let dm = Dims {
        batch: 1,
        heads: 4,
        kv_heads: 2,
        n_q: 37,
        n_k: 53,
        head_dim: 24,
    };
    let q = dev.randn::<f16>(dm.q_shape()).unwrap();
    let k = dev.randn::<f16>(dm.kv_shape()).unwrap();
    let v = dev.randn::<f16>(dm.kv_shape()).unwrap();
    let d_o = dev.randn::<f16>(dm.q_shape()).unwrap();
    let opt = AttentionOptions {
        causal: true,
        block_m: 16,
        block_n: 16,
        ..Default::default()
    };
    let (o, lse) = attention::forward(&q, &k, &v, &opt).unwrap();
    let a = attention::backward(&q, &k, &v, &o, &d_o, &lse, &opt).unwrap();
    let b = attention::backward(&q, &k, &v, &o, &d_o, &lse, &opt).unwrap();
    assert_eq!(a.dq.to_vec().unwrap(), b.dq.to_vec().unwrap());
    assert_eq!(a.dk.to_vec().unwrap(), b.dk.to_vec().unwrap());
    assert_eq!(a.dv.to_vec().unwrap(), b.dv.to_vec().unwrap());
}
