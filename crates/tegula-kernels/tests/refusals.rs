//! Every allocating wrapper checks its inputs before it allocates its outputs: a call it
//! refuses allocates nothing (they allocated first before, and a refused call of an input too
//! large could run the device out of memory on the way to its error).

use tegula::{Device, Error, Result, Tensor};
use tegula_kernels::attention::{self, AttentionOptions};
use tegula_kernels::{gemv, matmul, norm, softmax, vector_add};

/// `call` fails with an error `ok_error` accepts, and `dev` allocates nothing meanwhile.
fn refuses_without_allocating<T>(
    dev: &Device,
    what: &str,
    call: impl FnOnce() -> Result<T>,
    ok_error: impl Fn(&Error) -> bool,
) {
    let before = dev.allocations();
    match call() {
        Ok(_) => panic!("{what}: accepted"),
        Err(e) => assert!(ok_error(&e), "{what}: {e}"),
    }
    assert_eq!(
        dev.allocations(),
        before,
        "{what}: allocated before refusing"
    );
}

fn shape_error(e: &Error) -> bool {
    matches!(e, Error::Shape { .. })
}

#[test]
fn allocating_wrappers_check_before_they_allocate() {
    let dev = Device::cpu();
    let other = Device::cpu();
    let x = dev.randn::<f32>([4, 32]).unwrap();
    let x3: Tensor<f32> = dev.zeros([2, 4, 32]).unwrap();
    let wrong = dev.zeros::<f32>([5]).unwrap();
    let elsewhere = other.zeros::<f32>([4, 32]).unwrap();

    refuses_without_allocating(
        &dev,
        "vector_add shape",
        || vector_add::vector_add(&x, &wrong),
        shape_error,
    );
    refuses_without_allocating(
        &dev,
        "vector_add device",
        || vector_add::vector_add(&x, &elsewhere),
        |e| matches!(e, Error::Device { .. }),
    );
    refuses_without_allocating(
        &dev,
        "vector_add strides",
        || vector_add::vector_add(&x.transpose(0, 1).unwrap(), &x.reshape([32, 4]).unwrap()),
        |e| matches!(e, Error::Stride { .. }),
    );
    refuses_without_allocating(&dev, "softmax rank", || softmax::softmax(&x3), shape_error);
    refuses_without_allocating(
        &dev,
        "softmax strides",
        || softmax::softmax(&x.transpose(0, 1).unwrap()),
        |e| matches!(e, Error::Stride { .. }),
    );
    refuses_without_allocating(&dev, "gemv x", || gemv::gemv(&x, &wrong), shape_error);
    refuses_without_allocating(&dev, "gemv rank", || gemv::gemv(&x3, &wrong), shape_error);
    refuses_without_allocating(&dev, "matmul b", || matmul::matmul(&x, &x), shape_error);
    let w = dev.zeros::<f32>([32]).unwrap();
    refuses_without_allocating(
        &dev,
        "layer_norm b",
        || norm::layer_norm(&x, &w, &wrong, 1e-5),
        shape_error,
    );
    refuses_without_allocating(
        &dev,
        "layer_norm eps",
        || norm::layer_norm(&x, &w, &w, f32::NAN),
        |e| matches!(e, Error::Invalid { .. }),
    );
    refuses_without_allocating(
        &dev,
        "rms_norm w",
        || norm::rms_norm(&x, &wrong, 1e-5),
        shape_error,
    );
    let mean = dev.zeros::<f32>([4]).unwrap();
    refuses_without_allocating(
        &dev,
        "layer_norm_backward mean",
        || norm::layer_norm_backward(&x, &x, &w, &wrong, &mean),
        shape_error,
    );

    // Attention: q [B, H, N, D].
    let q = dev.randn::<f32>([1, 2, 16, 16]).unwrap();
    let bad_options = AttentionOptions {
        block_m: 24,
        ..Default::default()
    };
    refuses_without_allocating(
        &dev,
        "attention options",
        || attention::forward(&q, &q, &q, &bad_options),
        |e| matches!(e, Error::Invalid { .. }),
    );
    let kv_wrong = dev.randn::<f32>([1, 2, 16, 8]).unwrap();
    refuses_without_allocating(
        &dev,
        "attention k",
        || attention::forward(&q, &kv_wrong, &q, &AttentionOptions::default()),
        shape_error,
    );
    let lse_wrong = dev.zeros::<f32>([1, 2, 15]).unwrap();
    refuses_without_allocating(
        &dev,
        "attention backward lse",
        || attention::backward(&q, &q, &q, &q, &q, &lse_wrong, &AttentionOptions::default()),
        shape_error,
    );
    let lse = dev.zeros::<f32>([1, 2, 16]).unwrap();
    refuses_without_allocating(
        &dev,
        "attention backward options",
        || attention::backward(&q, &q, &q, &q, &q, &lse, &bad_options),
        |e| matches!(e, Error::Invalid { .. }),
    );
    let m = dev.randn::<f32>([16, 16]).unwrap();
    let m_wrong = dev.randn::<f32>([16, 8]).unwrap();
    refuses_without_allocating(
        &dev,
        "seed attention v",
        || attention::single_head_f32_basic(&m, &m, &m_wrong),
        shape_error,
    );
    refuses_without_allocating(
        &dev,
        "seed attention fast k",
        || attention::single_head_f32(&m, &m_wrong, &m),
        shape_error,
    );
}
