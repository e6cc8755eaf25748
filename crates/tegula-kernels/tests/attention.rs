//! FlashAttention (single-head f32, batched forward, backward) against float64 references on
//! fresh random inputs, property-style over shapes, and the contract errors.
//!
//! Tolerances: outputs and gradients use `check::tolerance(dtype)` as
//! `|got - want| <= atol + rtol * magnitude`, where the magnitude is the sum of the absolute
//! values of the element's terms (`reference` computes it; it is at least `|want|`): rounding P
//! and dS to f16/bf16 before their dots, as FlashAttention does, moves an element by a unit
//! roundoff of that sum, which is far more than `|want|` for gradient elements that cancel to
//! near zero. The logsumexp is f32 from f32 accumulation for every input dtype, so it uses the
//! f32 tolerance relative to `|want|`; the single-head f32 attention uses its contract's rtol = atol = 2e-3
//! relative to `|want|` (and must also stay below 1e-5 absolute, as f32 with exact `ieee` dots
//! does).

use half::{bf16, f16};
use tegula::ir::{DType, Element};
use tegula::{Device, Error, Tensor};
use tegula_kernels::attention::{self, reference, AttentionOptions, Dims, DqPath, TailSplit};
use tegula_kernels::check;

/// A small xorshift generator for shapes (data comes from `Device::randn`, fresh every run).
struct Shapes(u64);

impl Shapes {
    fn new() -> Shapes {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        println!("shape seed {seed}");
        Shapes(seed)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// Asserts `|got - want| <= atol + rtol * magnitude` elementwise (equal values, infinities
/// included, pass; NaN fails); returns the largest absolute error.
fn assert_bounded(
    what: &str,
    got: &[f64],
    want: &[f64],
    magnitude: &[f64],
    (atol, rtol): (f64, f64),
) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    assert_eq!(magnitude.len(), want.len(), "{what}: lengths");
    let mut max_err = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g == w {
            continue;
        }
        let err = (g - w).abs();
        let m = magnitude[i];
        assert!(
            err <= atol + rtol * m,
            "{what}: element {i}: got {g}, want {w}, magnitude {m} (atol {atol}, rtol {rtol})"
        );
        max_err = max_err.max(err);
    }
    max_err
}

/// [`assert_bounded`] relative to `|want|`.
fn assert_close(what: &str, got: &[f64], want: &[f64], tol: (f64, f64)) -> f64 {
    let magnitude: Vec<f64> = want.iter().map(|w| w.abs()).collect();
    assert_bounded(what, got, want, &magnitude, tol)
}

fn dims(batch: usize, heads: usize, kv_heads: usize, n_q: usize, n_k: usize, d: usize) -> Dims {
    Dims {
        batch,
        heads,
        kv_heads,
        n_q,
        n_k,
        head_dim: d,
    }
}

/// How the inputs are laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// Contiguous `[B, H, N, D]`.
    Bhnd,
    /// `[B, N, H, D]` buffers passed as `transpose(1, 2)` views, no copy.
    Bnhd,
}

/// A random `[B, H, N, D]` tensor in `layout`.
fn randn<T: Element>(dev: &Device, shape: [usize; 4], layout: Layout) -> Tensor<T> {
    match layout {
        Layout::Bhnd => dev.randn::<T>(shape).unwrap(),
        Layout::Bnhd => dev
            .randn::<T>([shape[0], shape[2], shape[1], shape[3]])
            .unwrap()
            .transpose(1, 2)
            .unwrap(),
    }
}

fn scale_of(options: &AttentionOptions, d: usize) -> f64 {
    options
        .sm_scale
        .map_or((1.0 / (d as f64).sqrt()) as f32 as f64, |s| s as f64)
}

/// Runs the forward on fresh inputs and checks output and logsumexp; returns the max errors.
fn check_forward<T: Element>(
    dev: &Device,
    dims: Dims,
    options: AttentionOptions,
    layout: Layout,
) -> (f64, f64) {
    let q = randn::<T>(dev, dims.q_shape(), layout);
    let k = randn::<T>(dev, dims.kv_shape(), layout);
    let v = randn::<T>(dev, dims.kv_shape(), layout);
    let (out, lse) = attention::forward(&q, &k, &v, &options).unwrap();
    assert_eq!(out.shape(), &dims.q_shape());
    assert_eq!(lse.shape(), &dims.lse_shape());
    let want = reference::attention(
        &q.to_f64_vec().unwrap(),
        &k.to_f64_vec().unwrap(),
        &v.to_f64_vec().unwrap(),
        dims,
        options.causal,
        scale_of(&options, dims.head_dim),
    );
    let what = format!(
        "{} {} causal={} {layout:?}",
        T::DTYPE,
        dims.describe(),
        options.causal
    );
    let e_out = assert_bounded(
        &format!("out {what}"),
        &out.to_f64_vec().unwrap(),
        &want.out,
        &want.out_magnitude,
        check::tolerance(T::DTYPE),
    );
    let e_lse = assert_close(
        &format!("lse {what}"),
        &lse.to_f64_vec().unwrap(),
        &want.lse,
        check::tolerance(DType::F32),
    );
    (e_out, e_lse)
}

/// Runs forward then backward on fresh inputs and checks dQ, dK, dV against the analytic f64
/// gradient; returns the max error.
fn check_backward<T: Element>(
    dev: &Device,
    dims: Dims,
    options: AttentionOptions,
    layout: Layout,
) -> f64 {
    let q = randn::<T>(dev, dims.q_shape(), layout);
    let k = randn::<T>(dev, dims.kv_shape(), layout);
    let v = randn::<T>(dev, dims.kv_shape(), layout);
    let d_o = randn::<T>(dev, dims.q_shape(), layout);
    let (o, lse) = attention::forward(&q, &k, &v, &options).unwrap();
    let g = attention::backward(&q, &k, &v, &o, &d_o, &lse, &options).unwrap();
    let want = reference::attention_backward(
        &q.to_f64_vec().unwrap(),
        &k.to_f64_vec().unwrap(),
        &v.to_f64_vec().unwrap(),
        &d_o.to_f64_vec().unwrap(),
        dims,
        options.causal,
        scale_of(&options, dims.head_dim),
    );
    let what = format!(
        "{} {} causal={} {layout:?}",
        T::DTYPE,
        dims.describe(),
        options.causal
    );
    let tol = check::tolerance(T::DTYPE);
    let mut err = 0.0f64;
    for (name, got, want, magnitude) in [
        ("dq", &g.dq, &want.dq, &want.dq_magnitude),
        ("dk", &g.dk, &want.dk, &want.dk_magnitude),
        ("dv", &g.dv, &want.dv, &want.dv_magnitude),
    ] {
        let got = got.to_f64_vec().unwrap();
        let e = assert_bounded(&format!("{name} {what}"), &got, want, magnitude, tol);
        err = err.max(e);
    }
    err
}

fn causal(on: bool) -> AttentionOptions {
    AttentionOptions {
        causal: on,
        ..Default::default()
    }
}

// --- the single-head f32 attention, basic kernel -------------------------------------------

#[test]
fn single_head_basic_cases_match_float64_softmax() {
    let dev = Device::cpu();
    let mut worst = 0.0f64;
    for (m, n, d) in [(7, 13, 8), (35, 67, 32), (64, 129, 128)] {
        let q = dev.randn::<f32>([m, d]).unwrap();
        let k = dev.randn::<f32>([n, d]).unwrap();
        let v = dev.randn::<f32>([n, d]).unwrap();
        let out = attention::single_head_f32_basic(&q, &k, &v).unwrap();
        let want = reference::attention(
            &q.to_f64_vec().unwrap(),
            &k.to_f64_vec().unwrap(),
            &v.to_f64_vec().unwrap(),
            dims(1, 1, 1, m, n, d),
            false,
            1.0 / (d as f64).sqrt(),
        );
        let err = assert_close(
            &format!("single head ({m},{n},{d})"),
            &out.to_f64_vec().unwrap(),
            &want.out,
            (2e-3, 2e-3),
        );
        println!("single head ({m},{n},{d}): max abs error {err:.3e}");
        worst = worst.max(err);
    }
    // Exact f32 products and f32 sums: far inside the contract's tolerance.
    assert!(worst < 1e-5, "single head max error {worst:e}");
}

#[test]
fn single_head_contract_errors() {
    let dev = Device::cpu();
    let q = dev.randn::<f32>([5, 8]).unwrap();
    let k = dev.randn::<f32>([9, 8]).unwrap();
    let v = dev.randn::<f32>([9, 8]).unwrap();
    let bad_d = dev.randn::<f32>([9, 6]).unwrap();
    assert!(matches!(
        attention::single_head_f32_basic(&q, &bad_d, &v),
        Err(Error::Shape { .. })
    ));
    let kt = dev.randn::<f32>([8, 9]).unwrap().transpose(0, 1).unwrap();
    assert!(matches!(
        attention::single_head_f32_basic(&q, &kt, &v),
        Err(Error::Stride { .. })
    ));
    let out = q.clone();
    assert!(matches!(
        attention::single_head_f32_basic_into(&q, &k, &v, &out),
        Err(Error::Aliasing { .. })
    ));
    let other = Device::cpu();
    let v_other = other.randn::<f32>([9, 8]).unwrap();
    assert!(matches!(
        attention::single_head_f32_basic(&q, &k, &v_other),
        Err(Error::Device { .. })
    ));
    let empty = dev.randn::<f32>([0, 8]).unwrap();
    assert!(matches!(
        attention::single_head_f32_basic(&q, &empty, &empty),
        Err(Error::Shape { .. })
    ));
}

// --- the batched forward -----------------------------------------------------------------

#[test]
fn forward_matches_reference_over_shapes() {
    let dev = Device::cpu();
    // (B, H, Hkv, Nq, Nk, D, causal): odd and prime lengths, length 1, Nq != Nk both ways,
    // every head dim of the contract's list, GQA and MQA.
    let cases = [
        (1, 1, 1, 1, 1, 8, false),
        (1, 2, 2, 1, 13, 24, true),
        (2, 2, 1, 17, 5, 64, false),
        (1, 4, 2, 31, 31, 80, true),
        (1, 3, 1, 13, 37, 128, true),
        (1, 2, 1, 7, 19, 256, false),
        (1, 1, 1, 37, 16, 24, true),
        (2, 1, 1, 16, 33, 8, true),
        // Lengths that are exact multiples of the blocks: the masked loop is empty or all band.
        (1, 2, 1, 32, 48, 64, false),
        (1, 2, 1, 48, 32, 64, true),
        (1, 1, 1, 32, 32, 16, true),
    ];
    for (i, &(b, h, hkv, nq, nk, d, c)) in cases.iter().enumerate() {
        let dm = dims(b, h, hkv, nq, nk, d);
        let (e_out, e_lse) = match i % 3 {
            0 => check_forward::<f32>(&dev, dm, causal(c), Layout::Bhnd),
            1 => check_forward::<f16>(&dev, dm, causal(c), Layout::Bhnd),
            _ => check_forward::<bf16>(&dev, dm, causal(c), Layout::Bhnd),
        };
        println!(
            "forward {} causal={c}: out {e_out:.2e} lse {e_lse:.2e}",
            dm.describe()
        );
    }
    // And a few random shapes, every dtype.
    let mut rng = Shapes::new();
    for i in 0..30 {
        let hkv = rng.pick(&[1, 2]);
        let dm = dims(
            1 + rng.below(2),
            hkv * rng.pick(&[1, 2, 3]),
            hkv,
            1 + rng.below(70),
            1 + rng.below(70),
            rng.pick(&[8, 24, 64, 80, 128, 256]),
        );
        let c = causal(rng.below(2) == 1);
        match i % 3 {
            0 => check_forward::<f32>(&dev, dm, c, Layout::Bhnd),
            1 => check_forward::<f16>(&dev, dm, c, Layout::Bhnd),
            _ => check_forward::<bf16>(&dev, dm, c, Layout::Bhnd),
        };
    }
}

#[test]
fn forward_f32_is_accurate_to_f32_rounding() {
    // Every dtype passes check::tolerance; f32 with exact dots does much better.
    let dev = Device::cpu();
    let (e_out, e_lse) =
        check_forward::<f32>(&dev, dims(1, 2, 1, 29, 41, 40), causal(true), Layout::Bhnd);
    assert!(e_out < 2e-6 && e_lse < 2e-5, "out {e_out:e} lse {e_lse:e}");
}

#[test]
fn forward_reads_bnhd_buffers_through_strides() {
    let dev = Device::cpu();
    check_forward::<f16>(&dev, dims(2, 4, 2, 19, 23, 24), causal(true), Layout::Bnhd);
    check_forward::<f32>(&dev, dims(1, 3, 3, 9, 40, 64), causal(false), Layout::Bnhd);

    // Output written into a [B, N, H, D] buffer, and inputs that are narrowed views.
    let (b, h, n, d) = (1, 2, 21, 16);
    let big = dev.randn::<f32>([b, n + 5, h, d]).unwrap();
    let q = big.narrow(1, 3, n).unwrap().transpose(1, 2).unwrap(); // offset view
    let k = dev
        .randn::<f32>([b, n, h, d])
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    let v = dev.randn::<f32>([b, h, n, d]).unwrap();
    let out_buf = dev.zeros::<f32>([b, n, h, d]).unwrap();
    let out = out_buf.transpose(1, 2).unwrap();
    let lse = dev.zeros::<f32>([b, h, n]).unwrap();
    attention::forward_into(&q, &k, &v, &out, &lse, &causal(true)).unwrap();
    let want = reference::attention(
        &q.to_f64_vec().unwrap(),
        &k.to_f64_vec().unwrap(),
        &v.to_f64_vec().unwrap(),
        dims(b, h, h, n, n, d),
        true,
        0.25,
    );
    assert_close(
        "strided out",
        &out.to_f64_vec().unwrap(),
        &want.out,
        check::tolerance(DType::F32),
    );
    assert_close(
        "strided lse",
        &lse.to_f64_vec().unwrap(),
        &want.lse,
        check::tolerance(DType::F32),
    );
}

#[test]
fn forward_block_sizes_and_explicit_scale() {
    let dev = Device::cpu();
    for (bm, bn) in [(32, 16), (16, 32), (64, 64)] {
        let options = AttentionOptions {
            causal: true,
            sm_scale: Some(0.3),
            block_m: bm,
            block_n: bn,
            ..Default::default()
        };
        check_forward::<f32>(&dev, dims(1, 2, 1, 45, 38, 24), options, Layout::Bhnd);
        check_forward::<bf16>(&dev, dims(1, 1, 1, 30, 71, 64), options, Layout::Bhnd);
    }
}

/// Causal, with blocks of 16 queries and 16 keys: many blocks at small sizes.
fn causal_blocks_of_16() -> AttentionOptions {
    AttentionOptions {
        causal: true,
        block_m: 16,
        block_n: 16,
        ..Default::default()
    }
}

/// Causal attention over many query blocks, several heads and GQA groups, Nq above and below
/// Nk (rows without keys): every program must land on its rows and heads.
#[test]
fn forward_causal_over_many_query_blocks_heads_and_gqa() {
    let dev = Device::cpu();
    let options = causal_blocks_of_16();
    check_forward::<f32>(&dev, dims(2, 3, 1, 67, 50, 16), options, Layout::Bhnd);
    check_forward::<bf16>(&dev, dims(1, 4, 2, 35, 93, 32), options, Layout::Bnhd);
}

/// Causal grids hand out programs by heaviness within groups of up to 8 heads
/// (`heavy_blocks_first`): 11 heads (10 for the dK/dV kernel's KV heads under GQA) make a
/// whole group and a partial one of 3 (or 2), so a program mapped to a wrong or repeated
/// (block, head) would leave rows unwritten or written twice.
#[test]
fn causal_programs_in_heavy_first_groups_cover_every_block_once() {
    let dev = Device::cpu();
    let options = causal_blocks_of_16();
    check_forward::<f32>(&dev, dims(1, 11, 11, 41, 41, 16), options, Layout::Bhnd);
    check_forward::<bf16>(&dev, dims(1, 11, 11, 23, 50, 16), options, Layout::Bnhd);
    check_backward::<f32>(&dev, dims(1, 11, 11, 37, 37, 16), options, Layout::Bhnd);
    check_backward::<f32>(&dev, dims(2, 10, 5, 29, 45, 16), options, Layout::Bhnd);
}

/// The `wgmma` option asks the GPU compiler for Hopper's wgmma (a launch option the
/// interpreter ignores): a recorded launch carries `MmaChoice::Wgmma` with it and
/// `MmaChoice::Sync` without, the forward with it on matches the float64 reference, and gives
/// the same bits as without it.
#[test]
fn forward_with_the_wgmma_option() {
    let mma = |wgmma: bool| {
        let dev = Device::recording(132);
        let d = dims(1, 2, 1, 128, 128, 64);
        let q = dev.randn::<bf16>(d.q_shape()).unwrap();
        let k = dev.randn::<bf16>(d.kv_shape()).unwrap();
        let options = AttentionOptions {
            block_m: 64,
            block_n: 64,
            config: tegula::LaunchConfig::new(4, 2),
            wgmma: Some(wgmma),
            ..Default::default()
        };
        attention::forward(&q, &k, &k, &options).unwrap();
        let launches = dev.take_recorded();
        assert_eq!(launches.len(), 1);
        launches[0].config.mma
    };
    assert_eq!(mma(true), tegula::MmaChoice::Wgmma);
    assert_eq!(mma(false), tegula::MmaChoice::Sync);
    let dev = Device::cpu();
    for causal in [false, true] {
        let options = AttentionOptions {
            causal,
            block_m: 64,
            block_n: 32,
            config: tegula::LaunchConfig::new(4, 2),
            wgmma: Some(true),
            ..Default::default()
        };
        check_forward::<bf16>(&dev, dims(1, 2, 1, 70, 45, 64), options, Layout::Bhnd);
        check_forward::<f16>(&dev, dims(2, 2, 2, 33, 96, 128), options, Layout::Bnhd);
        let d = dims(1, 3, 1, 41, 67, 64);
        let q = dev.randn::<bf16>(d.q_shape()).unwrap();
        let k = dev.randn::<bf16>(d.kv_shape()).unwrap();
        let v = dev.randn::<bf16>(d.kv_shape()).unwrap();
        let (on, lse_on) = attention::forward(&q, &k, &v, &options).unwrap();
        let off = AttentionOptions {
            wgmma: Some(false),
            ..options
        };
        let (off, lse_off) = attention::forward(&q, &k, &v, &off).unwrap();
        assert_eq!(on.to_vec().unwrap(), off.to_vec().unwrap());
        assert_eq!(lse_on.to_vec().unwrap(), lse_off.to_vec().unwrap());
    }
}

/// Without causal masking and with Nk a multiple of BLOCK_N the forward is traced without its
/// masked loop (`ragged_keys` off); a partial last key block brings it back. Both must match the
/// reference, over several key blocks and on either side of a whole number of them.
#[test]
fn forward_whole_key_blocks_drop_the_masked_loop() {
    let loops = |ragged: bool, causal: bool| {
        attention::kernels::attn_fwd::trace::<f32>(false, causal, ragged, true, 24, 32, 16)
            .unwrap()
            .to_string()
            .matches(" = for ")
            .count()
    };
    assert_eq!(loops(false, false), 1);
    assert_eq!(loops(true, false), 2);
    assert_eq!(loops(false, true), 2);
    let dev = Device::cpu();
    let options = AttentionOptions {
        block_m: 32,
        block_n: 16,
        ..Default::default()
    };
    for n_k in [47, 48, 49, 16] {
        check_forward::<f32>(&dev, dims(1, 2, 1, 37, n_k, 24), options, Layout::Bhnd);
        check_forward::<bf16>(&dev, dims(2, 2, 2, 33, n_k, 64), options, Layout::Bnhd);
    }
}

/// The masked loads, stores and atomics in a kernel's IR text.
fn masked_memory_ops(ir: &tegula::ir::Kernel) -> usize {
    ir.to_string()
        .lines()
        .filter(|l| l.contains("mask="))
        .count()
}

/// With Nq a multiple of BLOCK_M the forward is traced without row masks (`ragged_queries`
/// off): Q's load and the stores of the output and the logsumexp take no mask at all when the
/// head dim fills its block too; a partial last query block brings the three masks back.
/// Both must match the reference, causal or not, on either side of a whole number of blocks.
#[test]
fn forward_whole_query_blocks_drop_the_row_masks() {
    let masked_accesses = |ragged_queries: bool| {
        let ir = attention::kernels::attn_fwd::trace::<f32>(
            false,
            false,
            false,
            ragged_queries,
            32,
            32,
            16,
        )
        .unwrap();
        masked_memory_ops(&ir)
    };
    assert_eq!(masked_accesses(false), 0);
    assert_eq!(masked_accesses(true), 3);
    let dev = Device::cpu();
    for causal in [false, true] {
        let options = AttentionOptions {
            causal,
            block_m: 32,
            block_n: 16,
            ..Default::default()
        };
        for n_q in [64, 65, 63, 32] {
            check_forward::<f32>(&dev, dims(1, 2, 1, n_q, 41, 24), options, Layout::Bhnd);
            check_forward::<bf16>(&dev, dims(2, 2, 2, n_q, 48, 64), options, Layout::Bnhd);
        }
    }
}

/// The kernel folds the scale into one FMA with a positive factor: a negative scale negates
/// Q, a zero one is made tiny; both must still match the reference (masked rows included).
#[test]
fn forward_negative_and_zero_scales() {
    let dev = Device::cpu();
    for scale in [-3.0f32, -0.7, -0.05, 0.0] {
        for causal in [false, true] {
            let options = AttentionOptions {
                causal,
                sm_scale: Some(scale),
                block_m: 32,
                block_n: 16,
                ..Default::default()
            };
            check_forward::<f32>(&dev, dims(1, 2, 1, 37, 29, 24), options, Layout::Bhnd);
            check_forward::<bf16>(&dev, dims(1, 1, 1, 23, 51, 64), options, Layout::Bhnd);
        }
    }
}

#[test]
fn forward_rows_without_keys_give_zero_and_minus_infinity() {
    let dev = Device::cpu();
    // Causal with Nq > Nk: row i sees keys j <= i - (Nq - Nk), so rows 0..Nq-Nk see nothing.
    let dm = dims(1, 2, 1, 29, 11, 24);
    let q = dev.randn::<f16>(dm.q_shape()).unwrap();
    let k = dev.randn::<f16>(dm.kv_shape()).unwrap();
    let v = dev.randn::<f16>(dm.kv_shape()).unwrap();
    let (out, lse) = attention::forward(&q, &k, &v, &causal(true)).unwrap();
    let (out, lse) = (out.to_f64_vec().unwrap(), lse.to_f64_vec().unwrap());
    assert!(
        out.iter().chain(&lse).all(|x| !x.is_nan()),
        "NaN in the result"
    );
    for h in 0..2 {
        for i in 0..29 {
            let row = &out[(h * 29 + i) * 24..(h * 29 + i + 1) * 24];
            let l = lse[h * 29 + i];
            if i < 18 {
                assert!(
                    row.iter().all(|&x| x == 0.0),
                    "row {i} should be 0: {row:?}"
                );
                assert_eq!(l, f64::NEG_INFINITY, "lse of row {i}");
            } else {
                assert!(row.iter().any(|&x| x != 0.0) && l.is_finite(), "row {i}");
            }
        }
    }
    // And the full comparison (the reference has the same convention).
    check_forward::<f32>(&dev, dm, causal(true), Layout::Bhnd);

    // No keys at all: every row.
    let k0 = dev.randn::<f32>([1, 1, 0, 8]).unwrap();
    let q0 = dev.randn::<f32>([1, 1, 5, 8]).unwrap();
    let (out, lse) = attention::forward(&q0, &k0, &k0, &causal(false)).unwrap();
    assert!(out.to_vec().unwrap().iter().all(|&x| x == 0.0));
    assert!(lse
        .to_vec()
        .unwrap()
        .iter()
        .all(|&x| x == f32::NEG_INFINITY));
}

// --- the backward ------------------------------------------------------------------------

#[test]
fn backward_matches_analytic_gradient_over_shapes() {
    let dev = Device::cpu();
    let cases = [
        (1, 1, 1, 1, 1, 8, false),
        (1, 2, 1, 13, 29, 24, true),
        (1, 2, 2, 23, 7, 64, true),
        (2, 1, 1, 17, 17, 80, false),
        (1, 4, 2, 19, 19, 24, true),
        (1, 3, 1, 11, 20, 128, false),
        (1, 1, 1, 5, 9, 256, true),
        (1, 2, 1, 32, 48, 64, true),
        (1, 2, 2, 48, 32, 16, false),
    ];
    for (i, &(b, h, hkv, nq, nk, d, c)) in cases.iter().enumerate() {
        let dm = dims(b, h, hkv, nq, nk, d);
        let err = match i % 3 {
            0 => check_backward::<f32>(&dev, dm, causal(c), Layout::Bhnd),
            1 => check_backward::<f16>(&dev, dm, causal(c), Layout::Bhnd),
            _ => check_backward::<bf16>(&dev, dm, causal(c), Layout::Bhnd),
        };
        println!("backward {} causal={c}: {err:.2e}", dm.describe());
    }
    let mut rng = Shapes::new();
    for i in 0..15 {
        let hkv = rng.pick(&[1, 2]);
        let dm = dims(
            1 + rng.below(2),
            hkv * rng.pick(&[1, 2, 3]),
            hkv,
            1 + rng.below(60),
            1 + rng.below(60),
            rng.pick(&[8, 24, 64, 80, 128, 256]),
        );
        let c = causal(rng.below(2) == 1);
        match i % 3 {
            0 => check_backward::<f32>(&dev, dm, c, Layout::Bhnd),
            1 => check_backward::<f16>(&dev, dm, c, Layout::Bhnd),
            _ => check_backward::<bf16>(&dev, dm, c, Layout::Bhnd),
        };
    }
}

#[test]
fn backward_gqa_with_bnhd_strides_and_block_sizes() {
    let dev = Device::cpu();
    check_backward::<f32>(&dev, dims(2, 4, 2, 21, 26, 24), causal(true), Layout::Bnhd);
    check_backward::<f16>(&dev, dims(1, 3, 1, 18, 11, 64), causal(false), Layout::Bnhd);
    let options = AttentionOptions {
        causal: true,
        sm_scale: Some(0.2),
        block_m: 32,
        block_n: 16,
        ..Default::default()
    };
    check_backward::<f32>(&dev, dims(1, 2, 1, 40, 35, 24), options, Layout::Bhnd);
    let options = AttentionOptions {
        block_m: 16,
        block_n: 32,
        ..options
    };
    check_backward::<f32>(&dev, dims(1, 2, 1, 35, 40, 24), options, Layout::Bhnd);
}

/// With Nq a multiple of BLOCK_M the dK/dV kernel is traced without row masks
/// (`ragged_queries` off): Q, dO, lse and delta load unmasked and dQ's atomic additions take no
/// mask when the head dim fills its block; a partial last query block brings the 5 masks back.
/// Both must match the reference, causal or not, on either side of a whole number of blocks.
#[test]
fn backward_whole_query_blocks_drop_the_row_masks() {
    let masked_accesses = |ragged_queries: bool| {
        let ir = attention::kernels::attn_bwd_dkdv::trace::<f32>(
            false,
            true,
            false,
            ragged_queries,
            16,
            32,
            16,
        )
        .unwrap();
        masked_memory_ops(&ir)
    };
    // K and V's loads and dK and dV's stores keep their key mask either way.
    assert_eq!(masked_accesses(false), 4);
    assert_eq!(masked_accesses(true), 4 + 5);
    let dev = Device::cpu();
    for causal in [false, true] {
        let options = AttentionOptions {
            causal,
            block_m: 32,
            block_n: 16,
            ..Default::default()
        };
        for n_q in [64, 65, 63, 32] {
            check_backward::<f32>(&dev, dims(1, 2, 1, n_q, 41, 16), options, Layout::Bhnd);
            check_backward::<bf16>(&dev, dims(1, 2, 2, n_q, 48, 64), options, Layout::Bnhd);
        }
    }
}

#[test]
fn backward_is_deterministic_under_gqa() {
    // dK/dV of a KV head sum over its query heads inside one program, in a fixed order. dQ is
    // added by atomics from the key-block programs, in an unspecified order in general; these
    // 29 keys fit the default key block, so one program adds into each dQ row and its sums are
    // ordered too (tests/attention_dq_kernel.rs checks the 7-dot path over several key blocks).
    let dev = Device::cpu();
    let dm = dims(1, 4, 1, 37, 29, 24);
    let q = dev.randn::<f16>(dm.q_shape()).unwrap();
    let k = dev.randn::<f16>(dm.kv_shape()).unwrap();
    let v = dev.randn::<f16>(dm.kv_shape()).unwrap();
    let d_o = dev.randn::<f16>(dm.q_shape()).unwrap();
    let opt = causal(true);
    let (o, lse) = attention::forward(&q, &k, &v, &opt).unwrap();
    let a = attention::backward(&q, &k, &v, &o, &d_o, &lse, &opt).unwrap();
    let b = attention::backward(&q, &k, &v, &o, &d_o, &lse, &opt).unwrap();
    assert_eq!(a.dk.to_vec().unwrap(), b.dk.to_vec().unwrap());
    assert_eq!(a.dv.to_vec().unwrap(), b.dv.to_vec().unwrap());
    assert_eq!(a.dq.to_vec().unwrap(), b.dq.to_vec().unwrap());
}

/// The `wgmma` option asks the GPU compiler to put the dK/dV kernel's dots on Hopper's wgmma
/// (a launch option the interpreter ignores): the recorded dK/dV launch carries
/// `MmaChoice::Wgmma` with it and every other launch `MmaChoice::Sync`; the backward with it
/// on matches the float64 reference, causal or not, and gives the same bits as without it (one
/// key block: one program adds into each dQ row, in a fixed order).
#[test]
fn backward_with_the_wgmma_option() {
    let mma = |wgmma: bool| {
        let dev = Device::recording(132);
        let d = dims(1, 2, 1, 128, 128, 64);
        let q = dev.randn::<bf16>(d.q_shape()).unwrap();
        let k = dev.randn::<bf16>(d.kv_shape()).unwrap();
        let lse = dev.randn::<f32>(d.lse_shape()).unwrap();
        let options = AttentionOptions {
            block_m: 32,
            block_n: 64,
            config: tegula::LaunchConfig::new(4, 2),
            wgmma: Some(wgmma),
            ..Default::default()
        };
        attention::backward(&q, &k, &k, &q, &q, &lse, &options).unwrap();
        dev.take_recorded()
            .iter()
            .map(|l| (l.name, l.config.mma))
            .collect::<Vec<_>>()
    };
    for (name, choice) in mma(true) {
        let want = if name.ends_with("_dkdv") {
            tegula::MmaChoice::Wgmma
        } else {
            tegula::MmaChoice::Sync
        };
        assert_eq!(choice, want, "{name}");
    }
    assert!(mma(true).iter().any(|(n, _)| n.ends_with("_dkdv")));
    assert!(mma(false)
        .iter()
        .all(|&(_, c)| c == tegula::MmaChoice::Sync));
    let dev = Device::cpu();
    for is_causal in [false, true] {
        let options = AttentionOptions {
            causal: is_causal,
            block_m: 32,
            block_n: 64,
            config: tegula::LaunchConfig::new(4, 2),
            wgmma: Some(true),
            ..Default::default()
        };
        check_backward::<bf16>(&dev, dims(1, 2, 1, 70, 45, 64), options, Layout::Bhnd);
        check_backward::<f16>(&dev, dims(1, 2, 2, 33, 96, 128), options, Layout::Bnhd);
        let dm = dims(1, 3, 1, 41, 60, 64);
        let q = dev.randn::<bf16>(dm.q_shape()).unwrap();
        let k = dev.randn::<bf16>(dm.kv_shape()).unwrap();
        let v = dev.randn::<bf16>(dm.kv_shape()).unwrap();
        let d_o = dev.randn::<bf16>(dm.q_shape()).unwrap();
        let (o, lse) = attention::forward(&q, &k, &v, &causal(is_causal)).unwrap();
        let on = attention::backward(&q, &k, &v, &o, &d_o, &lse, &options).unwrap();
        let off = AttentionOptions {
            wgmma: Some(false),
            ..options
        };
        let off = attention::backward(&q, &k, &v, &o, &d_o, &lse, &off).unwrap();
        assert_eq!(on.dq.to_vec().unwrap(), off.dq.to_vec().unwrap());
        assert_eq!(on.dk.to_vec().unwrap(), off.dk.to_vec().unwrap());
        assert_eq!(on.dv.to_vec().unwrap(), off.dv.to_vec().unwrap());
    }
}

#[test]
fn backward_rows_without_keys_have_zero_gradients() {
    let dev = Device::cpu();
    let dm = dims(1, 1, 1, 25, 6, 8);
    let q = dev.randn::<f32>(dm.q_shape()).unwrap();
    let k = dev.randn::<f32>(dm.kv_shape()).unwrap();
    let v = dev.randn::<f32>(dm.kv_shape()).unwrap();
    let d_o = dev.randn::<f32>(dm.q_shape()).unwrap();
    let (o, lse) = attention::forward(&q, &k, &v, &causal(true)).unwrap();
    let g = attention::backward(&q, &k, &v, &o, &d_o, &lse, &causal(true)).unwrap();
    let dq = g.dq.to_vec().unwrap();
    let all = dq
        .iter()
        .chain(&g.dk.to_vec().unwrap())
        .chain(&g.dv.to_vec().unwrap())
        .copied()
        .collect::<Vec<f32>>();
    assert!(all.iter().all(|x| !x.is_nan()), "NaN in the gradients");
    assert!(
        dq[..19 * 8].iter().all(|&x| x == 0.0),
        "rows 0..19 see no key"
    );
    assert!(dq[19 * 8..].iter().any(|&x| x != 0.0));
    check_backward::<f32>(&dev, dm, causal(true), Layout::Bhnd);

    // No keys at all (every lse is -inf) and no queries at all: zero gradients, no NaN.
    let q = dev.randn::<f32>([1, 2, 7, 16]).unwrap();
    let none = dev.randn::<f32>([1, 1, 0, 16]).unwrap();
    let d_o = dev.randn::<f32>([1, 2, 7, 16]).unwrap();
    let (o, lse) = attention::forward(&q, &none, &none, &causal(true)).unwrap();
    let g = attention::backward(&q, &none, &none, &o, &d_o, &lse, &causal(true)).unwrap();
    assert!(g.dq.to_vec().unwrap().iter().all(|&x| x == 0.0));
    let q0 = dev.randn::<f32>([1, 2, 0, 16]).unwrap();
    let k = dev.randn::<f32>([1, 1, 5, 16]).unwrap();
    let (o0, lse0) = attention::forward(&q0, &k, &k, &causal(false)).unwrap();
    // dK and dV start non-zero: with no query rows the kernel must still write zeros.
    let dk = dev.full::<f32>([1, 1, 5, 16], 7.0).unwrap();
    let dv = dev.full::<f32>([1, 1, 5, 16], 7.0).unwrap();
    let dq0 = dev.zeros::<f32>([1, 2, 0, 16]).unwrap();
    attention::backward_into(&q0, &k, &k, &o0, &o0, &lse0, &dq0, &dk, &dv, &causal(false)).unwrap();
    assert!(dk
        .to_vec()
        .unwrap()
        .iter()
        .chain(&dv.to_vec().unwrap())
        .all(|&x| x == 0.0));
}

#[test]
fn medium_case_forward_and_backward() {
    let dev = Device::cpu();
    let dm = dims(1, 2, 1, 160, 192, 64);
    let (e_out, _) = check_forward::<f16>(&dev, dm, causal(true), Layout::Bhnd);
    let e_grad = check_backward::<f16>(&dev, dm, causal(true), Layout::Bhnd);
    println!(
        "medium {}: out {e_out:.2e} grads {e_grad:.2e}",
        dm.describe()
    );
}

// --- contracts ---------------------------------------------------------------------------

#[test]
fn forward_contract_errors() {
    let dev = Device::cpu();
    let o = AttentionOptions::default();
    let q = dev.randn::<f32>([1, 4, 7, 16]).unwrap();
    let k = dev.randn::<f32>([1, 2, 9, 16]).unwrap();
    let v = dev.randn::<f32>([1, 2, 9, 16]).unwrap();
    attention::forward(&q, &k, &v, &o).unwrap();

    let shape =
        |r: tegula::Result<(Tensor<f32>, Tensor<f32>)>| matches!(r, Err(Error::Shape { .. }));
    let q3 = dev.randn::<f32>([4, 7, 16]).unwrap();
    assert!(shape(attention::forward(&q3, &k, &v, &o)), "rank 3");
    let k3h = dev.randn::<f32>([1, 3, 9, 16]).unwrap();
    assert!(
        shape(attention::forward(&q, &k3h, &k3h, &o)),
        "Hkv must divide H"
    );
    let kd = dev.randn::<f32>([1, 2, 9, 8]).unwrap();
    assert!(
        shape(attention::forward(&q, &kd, &kd, &o)),
        "head dims differ"
    );
    let v8 = dev.randn::<f32>([1, 2, 8, 16]).unwrap();
    assert!(shape(attention::forward(&q, &k, &v8, &o)), "v shape");
    let q_big = dev.randn::<f32>([1, 1, 2, 264]).unwrap();
    let k_big = dev.randn::<f32>([1, 1, 2, 264]).unwrap();
    assert!(
        shape(attention::forward(&q_big, &k_big, &k_big, &o)),
        "D > 256"
    );

    // Unit stride on D is required.
    let qt = dev
        .randn::<f32>([1, 4, 16, 7])
        .unwrap()
        .transpose(2, 3)
        .unwrap();
    assert!(matches!(
        attention::forward(&qt, &k, &v, &o),
        Err(Error::Stride { .. })
    ));

    // Outputs: aliasing an input, overlapping themselves, wrong shape.
    let lse = dev.zeros::<f32>([1, 4, 7]).unwrap();
    assert!(matches!(
        attention::forward_into(&q, &k, &v, &q, &lse, &o),
        Err(Error::Aliasing { .. })
    ));
    let lse_alias = q
        .reshape([4 * 7 * 16])
        .unwrap()
        .narrow(0, 0, 28)
        .unwrap()
        .reshape([1, 4, 7])
        .unwrap();
    let out = dev.zeros::<f32>([1, 4, 7, 16]).unwrap();
    assert!(matches!(
        attention::forward_into(&q, &k, &v, &out, &lse_alias, &o),
        Err(Error::Aliasing { .. })
    ));
    let row = dev.zeros::<f32>([1, 1, 7, 16]).unwrap();
    let broadcast_out = row.transpose(0, 1).unwrap(); // fine: size-1 axes
    assert!(matches!(
        attention::forward_into(&q, &k, &v, &broadcast_out, &lse, &o),
        Err(Error::Shape { .. })
    ));
    let lse_bad = dev.zeros::<f32>([1, 4, 8]).unwrap();
    assert!(matches!(
        attention::forward_into(&q, &k, &v, &out, &lse_bad, &o),
        Err(Error::Shape { .. })
    ));

    // Options and devices.
    let bad_block = AttentionOptions { block_m: 24, ..o };
    assert!(matches!(
        attention::forward(&q, &k, &v, &bad_block),
        Err(Error::Invalid { .. })
    ));
    let small_block = AttentionOptions { block_n: 8, ..o };
    assert!(matches!(
        attention::forward(&q, &k, &v, &small_block),
        Err(Error::Invalid { .. })
    ));
    let nan_scale = AttentionOptions {
        sm_scale: Some(f32::NAN),
        ..o
    };
    assert!(matches!(
        attention::forward(&q, &k, &v, &nan_scale),
        Err(Error::Invalid { .. })
    ));
    let other = Device::cpu();
    let v_other = other.randn::<f32>([1, 2, 9, 16]).unwrap();
    assert!(matches!(
        attention::forward(&q, &k, &v_other, &o),
        Err(Error::Device { .. })
    ));
    // Integer inputs are not attention inputs.
    let qi = dev.zeros::<i32>([1, 1, 2, 16]).unwrap();
    assert!(matches!(
        attention::forward(&qi, &qi, &qi, &o),
        Err(Error::DType { .. })
    ));
}

#[test]
fn backward_contract_errors() {
    let dev = Device::cpu();
    let opt = AttentionOptions::causal();
    let q = dev.randn::<f32>([1, 2, 7, 16]).unwrap();
    let k = dev.randn::<f32>([1, 1, 9, 16]).unwrap();
    let v = dev.randn::<f32>([1, 1, 9, 16]).unwrap();
    let d_o = dev.randn::<f32>([1, 2, 7, 16]).unwrap();
    let (o, lse) = attention::forward(&q, &k, &v, &opt).unwrap();
    attention::backward(&q, &k, &v, &o, &d_o, &lse, &opt).unwrap();

    let lse_bad = dev.zeros::<f32>([1, 2, 6]).unwrap();
    assert!(matches!(
        attention::backward(&q, &k, &v, &o, &d_o, &lse_bad, &opt),
        Err(Error::Shape { .. })
    ));
    let do_bad = dev.randn::<f32>([1, 2, 7, 8]).unwrap();
    assert!(matches!(
        attention::backward(&q, &k, &v, &o, &do_bad, &lse, &opt),
        Err(Error::Shape { .. })
    ));
    let dq = dev.zeros::<f32>([1, 2, 7, 16]).unwrap();
    let dk = dev.zeros::<f32>([1, 1, 9, 16]).unwrap();
    let dv = dev.zeros::<f32>([1, 1, 9, 16]).unwrap();
    attention::backward_into(&q, &k, &v, &o, &d_o, &lse, &dq, &dk, &dv, &opt).unwrap();
    // dK written over V, and dV over dK.
    assert!(matches!(
        attention::backward_into(&q, &k, &v, &o, &d_o, &lse, &dq, &v, &dv, &opt),
        Err(Error::Aliasing { .. })
    ));
    assert!(matches!(
        attention::backward_into(&q, &k, &v, &o, &d_o, &lse, &dq, &dk, &dk, &opt),
        Err(Error::Aliasing { .. })
    ));
    assert!(matches!(
        attention::backward_into(&q, &k, &v, &o, &d_o, &lse, &d_o, &dk, &dv, &opt),
        Err(Error::Aliasing { .. })
    ));
    let dq_t = dev
        .zeros::<f32>([1, 2, 16, 7])
        .unwrap()
        .transpose(2, 3)
        .unwrap();
    assert!(matches!(
        attention::backward_into(&q, &k, &v, &o, &d_o, &lse, &dq_t, &dk, &dv, &opt),
        Err(Error::Stride { .. })
    ));
}

// --- library entries ---------------------------------------------------------------------

#[test]
fn library_entries_check_and_trace() {
    let dev = Device::cpu();
    for name in [
        "attention_single_head_f32",
        "attention",
        "attention_backward",
    ] {
        let entry = tegula_kernels::find(name).unwrap();
        for &dtype in entry.dtypes {
            let shape: Vec<usize> = match name {
                "attention_single_head_f32" => vec![19, 23, 24],
                _ => vec![1, 2, 1, 13, 21, 24, 1],
            };
            let report = (entry.check)(&dev, &shape, dtype).unwrap();
            assert!(report.passed(), "{name} {dtype}: {report:?}");
            let kernel = (entry.trace)(&shape, dtype).unwrap();
            assert!(kernel.to_string().contains("dot"), "{name}: {kernel}");
        }
    }
}

// --- the non-causal dK/dV grid's split tail ------------------------------------------------

/// `TailSplit::choose` keeps the whole programs to full waves and covers every block once:
/// whole programs plus split blocks make the grid, each block's slices cover its query blocks
/// with no empty slice, and a grid that fills its waves exactly is never split.
#[test]
fn tail_split_keeps_full_waves_and_covers_every_block() {
    let mut shapes = Shapes::new();
    let mut splits = 0;
    for _ in 0..2000 {
        let sms = 1 + shapes.below(140);
        let programs = 1 + shapes.below(5000);
        let query_blocks = 1 + shapes.below(70);
        let group = 1 + shapes.below(4);
        let Some(s) = TailSplit::choose(programs, sms, query_blocks, group) else {
            continue;
        };
        splits += 1;
        let what = format!("{programs} programs, {sms} SMs, {query_blocks} query blocks: {s:?}");
        assert_ne!(programs % sms, 0, "{what}");
        assert_eq!(s.whole_programs % sms, 0, "{what}");
        assert_eq!(s.whole_programs + s.split_blocks, programs, "{what}");
        assert!(s.slices >= 2 && s.slice_blocks >= 1, "{what}");
        assert!(s.slices * s.slice_blocks >= query_blocks, "{what}");
        assert!((s.slices - 1) * s.slice_blocks < query_blocks, "{what}");
        assert_eq!(s.programs(), s.whole_programs + s.split_blocks * s.slices);
    }
    assert!(splits > 0, "no grid was split");
    // 132 SMs at [4, 32, 4096, 128]: 4096 programs of 64 steps leave a last wave of 4.
    let h200 = TailSplit::choose(4096, 132, 64, 1).expect("the 4k grid's tail is split");
    assert_eq!(h200.whole_programs, 31 * 132);
}

/// The backward with a split tail against the float64 reference, on the interpreter's 3 SMs
/// (`backward_tail_split` must split each case, or the test proves nothing): a slice skipped
/// or added twice changes dK and dV of its block; a split block that missed its conversion
/// keeps `backward`'s zeros. Slice counts that do not divide the query blocks, a partial last
/// query block, a last key block of one key, GQA and a batch of 2 (split blocks in the last
/// batch) are covered.
#[test]
fn backward_split_tail_matches_reference() {
    let dev = Device::cpu();
    let options = AttentionOptions {
        block_m: 16,
        block_n: 16,
        ..Default::default()
    };
    let cases = [
        // (B, H, Hkv, Nq, Nk, D), dtype 0 = f32, 1 = bf16
        (dims(1, 3, 1, 117, 65, 16), 0),
        (dims(1, 2, 2, 75, 29, 24), 0),
        (dims(1, 4, 1, 96, 65, 16), 0),
        (dims(2, 6, 2, 117, 17, 32), 1),
    ];
    let mut uneven = false;
    for (dm, dtype) in cases {
        let split = attention::backward_tail_split(&dev, &dm, &options, 16, 16)
            .unwrap_or_else(|| panic!("{} takes no split", dm.describe()));
        uneven |= dm.n_q.div_ceil(16) % split.slice_blocks != 0;
        let err = match dtype {
            0 => check_backward::<f32>(&dev, dm, options, Layout::Bhnd),
            _ => check_backward::<bf16>(&dev, dm, options, Layout::Bnhd),
        };
        println!("split tail {} {split:?}: {err:.2e}", dm.describe());
        // The causal kernel never splits, nor one whose options turn the split off.
        for off in [
            AttentionOptions {
                causal: true,
                ..options
            },
            AttentionOptions {
                tail_split: false,
                ..options
            },
        ] {
            assert_eq!(
                attention::backward_tail_split(&dev, &dm, &off, 16, 16),
                None
            );
        }
    }
    assert!(uneven, "no case has a short last slice");
}

/// The backward's 7-dot dQ path (`dq_path: DqPath::Kernel`): float64 in every dtype, causal
/// and not, over several key blocks; its launches hold no atomics (the default path adds dQ
/// by atomics from the dK/dV kernel); two runs give the same bits.
#[test]
fn dq_kernel_path_matches_float64_without_atomics_and_is_deterministic() {
    let dev = Device::cpu();
    let dm = dims(1, 4, 2, 37, 53, 24);
    for causal in [false, true] {
        let options = AttentionOptions {
            causal,
            block_m: 16,
            block_n: 16,
            dq_path: DqPath::Kernel,
            ..Default::default()
        };
        check_backward::<f32>(&dev, dm, options, Layout::Bhnd);
        check_backward::<f16>(&dev, dm, options, Layout::Bnhd);
        check_backward::<bf16>(&dev, dm, options, Layout::Bhnd);

        let rec = Device::recording(132);
        let q = rec.randn::<f16>(dm.q_shape()).unwrap();
        let k = rec.randn::<f16>(dm.kv_shape()).unwrap();
        let (o, lse) = attention::forward(&q, &k, &k, &options).unwrap();
        rec.take_recorded();
        attention::backward(&q, &k, &k, &o, &q, &lse, &options).unwrap();
        let launches = rec.take_recorded();
        assert!(launches
            .iter()
            .any(|l| l.kernel.to_string().contains("dot")));
        for l in &launches {
            assert!(!l.kernel.to_string().contains("atomic"), "{}", l.name);
        }
        // The default path does add dQ by atomics (or the check above proves nothing).
        let default = AttentionOptions {
            dq_path: DqPath::Auto,
            ..options
        };
        attention::backward(&q, &k, &k, &o, &q, &lse, &default).unwrap();
        assert!(rec
            .take_recorded()
            .iter()
            .any(|l| l.kernel.to_string().contains("atomic")));

        let q = dev.randn::<f16>(dm.q_shape()).unwrap();
        let k = dev.randn::<f16>(dm.kv_shape()).unwrap();
        let v = dev.randn::<f16>(dm.kv_shape()).unwrap();
        let d_o = dev.randn::<f16>(dm.q_shape()).unwrap();
        let (o, lse) = attention::forward(&q, &k, &v, &options).unwrap();
        let a = attention::backward(&q, &k, &v, &o, &d_o, &lse, &options).unwrap();
        let b = attention::backward(&q, &k, &v, &o, &d_o, &lse, &options).unwrap();
        assert_eq!(a.dq.to_vec().unwrap(), b.dq.to_vec().unwrap());
        assert_eq!(a.dk.to_vec().unwrap(), b.dk.to_vec().unwrap());
        assert_eq!(a.dv.to_vec().unwrap(), b.dv.to_vec().unwrap());
    }
}
