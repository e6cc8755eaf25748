//! Two worked examples of attention, small enough to check by hand, as kernels on the
//! interpreter: one query over four tokens (the softmax weights and the weighted sum of the
//! values), and the online softmax over two blocks of keys where the second block raises the
//! running maximum.

use tegula::ir::builder::{self as tl, trace};
use tegula::ir::{DType, InputPrecision, Kernel, TraceError};
use tegula::{Device, KernelArg, Launch, LaunchConfig, TensorArg};

fn int(v: usize) -> KernelArg {
    KernelArg::Int {
        dtype: DType::I32,
        value: v as i64,
    }
}

/// Attention for one block of queries and keys, padded to 16 (the smallest `dot`), storing
/// both the softmax weights and the output.
fn attention_one_block() -> Result<Kernel, TraceError> {
    const B: i64 = 16;
    trace("attention_trace", |p| {
        let (q, k, v) = (
            p.ptr("q", DType::F32),
            p.ptr("k", DType::F32),
            p.ptr("v", DType::F32),
        );
        let (weights, out) = (p.ptr("weights", DType::F32), p.ptr("out", DType::F32));
        let (m, n, d) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("d", DType::I32),
        );
        let scale = p.scalar("scale", DType::F32);
        let rows = tl::arange(0, B);
        let feats = tl::arange(0, B);
        let q_mask = rows.col().lt(m) & feats.row().lt(d);
        let kv_mask = rows.col().lt(n) & feats.row().lt(d);
        let qt = tl::load(q + rows.col() * d + feats.row(), q_mask, 0.0);
        let kt = tl::load(k + rows.col() * d + feats.row(), kv_mask, 0.0);
        let vt = tl::load(v + rows.col() * d + feats.row(), kv_mask, 0.0);
        let scores = tl::dot_with(qt, kt.trans(), None, InputPrecision::Ieee) * scale;
        let scores = tl::select(rows.row().lt(n), scores, f32::NEG_INFINITY);
        let e = tl::exp(scores - tl::max(scores, 1).col());
        let w = e / tl::sum(e, 1).col();
        let o = tl::dot_with(w, vt, None, InputPrecision::Ieee);
        let keys = tl::arange(0, B);
        tl::store(
            weights + rows.col() * n + keys.row(),
            w,
            rows.col().lt(m) & keys.row().lt(n),
        );
        tl::store(out + rows.col() * d + feats.row(), o, q_mask);
    })
}

#[test]
fn four_token_attention_trace() {
    let dev = Device::cpu();
    let q = dev.from_slice(&[1.0f32, 0.0], [1, 2]).unwrap();
    let kv = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0];
    let k = dev.from_slice(&kv, [4, 2]).unwrap();
    let v = dev.from_slice(&kv, [4, 2]).unwrap();
    let weights = dev.zeros::<f32>([1, 4]).unwrap();
    let out = dev.zeros::<f32>([1, 2]).unwrap();
    let args = vec![
        (&q).kernel_arg(),
        (&k).kernel_arg(),
        (&v).kernel_arg(),
        (&weights).kernel_arg(),
        (&out).kernel_arg(),
        int(1),
        int(4),
        int(2),
        KernelArg::Float {
            dtype: DType::F32,
            value: 1.0 / 2f64.sqrt(),
        },
    ];
    dev.launch(Launch {
        name: "attention_trace",
        key: String::new(),
        trace: &attention_one_block,
        grid: 1u32.into(),
        config: LaunchConfig::default(),
        args,
    })
    .unwrap();
    let w = weights.to_vec().unwrap();
    for (got, want) in w.iter().zip([0.335, 0.165, 0.335, 0.165]) {
        assert!((*got as f64 - want).abs() < 5e-4, "weights {w:?}");
    }
    assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    let o = out.to_vec().unwrap();
    assert!((o[0] as f64 - 0.670).abs() < 1e-3, "output {o:?}");
    assert!((o[1] as f64 - 0.500).abs() < 1e-6, "output {o:?}");
}

/// The online-softmax recurrence over blocks of two keys with given (already scaled) scores;
/// stores the final state m, l, o and the output o / l.
fn online_softmax() -> Result<Kernel, TraceError> {
    trace("online_softmax", |p| {
        let (s, v) = (p.ptr("s", DType::F32), p.ptr("v", DType::F32));
        let (state, out) = (p.ptr("state", DType::F32), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let two = tl::arange(0, 2);
        let init = (
            tl::full::<f32>([], f32::NEG_INFINITY),
            tl::full::<f32>([], 0.0),
            tl::zeros::<f32>([2]),
        );
        let (m, l, o) = tl::for_range(0, n, 2, init, |start, (m, l, o)| {
            let keys = start + two;
            let s_blk = tl::load_unmasked(s + keys);
            let v_blk = tl::load_unmasked(v + keys.col() * 2 + two.row());
            let m_new = tl::maximum(m, tl::max(s_blk, 0));
            let alpha = tl::exp(m - m_new);
            let p = tl::exp(s_blk - m_new);
            let l_new = alpha * l + tl::sum(p, 0);
            let o_new = alpha * o + tl::sum(p.col() * v_blk, 0);
            (m_new, l_new, o_new)
        });
        tl::store_unmasked(state, m);
        tl::store_unmasked(state + 1, l);
        tl::store_unmasked(state + 2 + two, o);
        tl::store_unmasked(out + two, o / l);
    })
}

fn run_online_softmax(n: usize) -> (Vec<f32>, Vec<f32>) {
    let dev = Device::cpu();
    let ln2 = std::f32::consts::LN_2;
    let s = dev.from_slice(&[0.0f32, 0.0, ln2, ln2], [4]).unwrap();
    let v = dev
        .from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0], [4, 2])
        .unwrap();
    let state = dev.zeros::<f32>([4]).unwrap();
    let out = dev.zeros::<f32>([2]).unwrap();
    let args = vec![
        (&s).kernel_arg(),
        (&v).kernel_arg(),
        (&state).kernel_arg(),
        (&out).kernel_arg(),
        int(n),
    ];
    dev.launch(Launch {
        name: "online_softmax",
        key: String::new(),
        trace: &online_softmax,
        grid: 1u32.into(),
        config: LaunchConfig::default(),
        args,
    })
    .unwrap();
    (state.to_vec().unwrap(), out.to_vec().unwrap())
}

#[test]
fn online_softmax_two_blocks() {
    // After the first block: m = 0, l = 2, o = [1, 1].
    let (state, _) = run_online_softmax(2);
    assert_eq!(state, vec![0.0, 2.0, 1.0, 1.0]);
    // After both: m = ln 2, l = 3, o = [1.5, 1.5], output [0.5, 0.5].
    let (state, out) = run_online_softmax(4);
    assert!(
        (state[0] - std::f32::consts::LN_2).abs() < 1e-7,
        "{state:?}"
    );
    assert!((state[1] - 3.0).abs() < 1e-6, "{state:?}");
    assert!(
        (state[2] - 1.5).abs() < 1e-6 && (state[3] - 1.5).abs() < 1e-6,
        "{state:?}"
    );
    assert!(
        (out[0] - 0.5).abs() < 1e-6 && (out[1] - 0.5).abs() < 1e-6,
        "{out:?}"
    );
}
