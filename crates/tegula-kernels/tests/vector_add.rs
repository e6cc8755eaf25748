//! Vector add against float64 sums on fresh random inputs, and its contract errors.

use half::{bf16, f16};
use rand::Rng;
use tegula::ir::{DType, Element};
use tegula::{Device, Error};
use tegula_kernels::vector_add::{vector_add, vector_add_into};

fn check_sizes<T: Element>(dev: &Device, sizes: &[usize]) {
    for &n in sizes {
        let x = dev.randn::<T>([n]).unwrap();
        let y = dev.randn::<T>([n]).unwrap();
        let out = vector_add(&x, &y).unwrap();
        let (xv, yv, ov) = (
            x.to_vec().unwrap(),
            y.to_vec().unwrap(),
            out.to_vec().unwrap(),
        );
        for i in 0..n {
            // The kernel rounds the exact sum once to T, as the host does here.
            let want = T::from_f64(xv[i].to_f64() + yv[i].to_f64());
            assert_eq!(ov[i], want, "{} element {i} of {n}", T::DTYPE);
        }
    }
}

#[test]
fn matches_reference_for_every_dtype_and_ragged_sizes() {
    let dev = Device::cpu();
    let mut sizes = vec![1usize, 2, 31, 1023, 1024, 1025, 4099];
    let mut rng = rand::thread_rng();
    sizes.extend((0..3).map(|_| rng.gen_range(1..6000)));
    check_sizes::<f32>(&dev, &sizes);
    check_sizes::<f16>(&dev, &sizes);
    check_sizes::<bf16>(&dev, &sizes);
    check_sizes::<f64>(&dev, &sizes);
}

#[test]
fn integers_wrap() {
    let dev = Device::cpu();
    let x = dev.from_slice(&[i32::MAX, 5, -7], [3]).unwrap();
    let y = dev.from_slice(&[1, 6, -8], [3]).unwrap();
    assert_eq!(
        vector_add(&x, &y).unwrap().to_vec().unwrap(),
        vec![i32::MIN, 11, -15]
    );
}

#[test]
fn works_on_matrices_and_empty_tensors() {
    let dev = Device::cpu();
    let x = dev.randn::<f32>([13, 17]).unwrap();
    let y = dev.randn::<f32>([13, 17]).unwrap();
    let out = vector_add(&x, &y).unwrap();
    assert_eq!(out.shape(), &[13, 17]);
    let (xv, yv) = (x.to_vec().unwrap(), y.to_vec().unwrap());
    let want: Vec<f32> = xv.iter().zip(&yv).map(|(a, b)| a + b).collect();
    assert_eq!(out.to_vec().unwrap(), want);
    let e = dev.zeros::<f32>([0]).unwrap();
    assert_eq!(vector_add(&e, &e).unwrap().numel(), 0);
}

#[test]
fn contract_errors_are_typed() {
    let dev = Device::cpu();
    let x = dev.randn::<f32>([8, 4]).unwrap();
    let y = dev.randn::<f32>([8, 4]).unwrap();
    // Wrong shape.
    let short = dev.randn::<f32>([8, 3]).unwrap();
    assert!(matches!(vector_add(&x, &short), Err(Error::Shape { .. })));
    // Wrong strides: a transposed view.
    let xt = dev.randn::<f32>([4, 8]).unwrap().transpose(0, 1).unwrap();
    assert!(matches!(vector_add(&xt, &y), Err(Error::Stride { .. })));
    // Output aliasing an input.
    assert!(matches!(
        vector_add_into(&x, &y, &x),
        Err(Error::Aliasing { .. })
    ));
    assert!(matches!(
        vector_add_into(&x, &y, &y),
        Err(Error::Aliasing { .. })
    ));
    // Different devices.
    let other = Device::cpu().randn::<f32>([8, 4]).unwrap();
    assert!(matches!(vector_add(&x, &other), Err(Error::Device { .. })));
    let out = Device::cpu().zeros::<f32>([8, 4]).unwrap();
    assert!(matches!(
        vector_add_into(&x, &y, &out),
        Err(Error::Device { .. })
    ));
}

#[test]
fn library_entry_checks_and_traces() {
    let dev = Device::cpu();
    let k = tegula_kernels::vector_add::entry();
    for &dt in k.dtypes {
        let r = (k.check)(&dev, &[3001], dt).unwrap();
        assert!(r.passed(), "{r:?}");
        assert!((k.trace)(&[3001], dt).unwrap().to_string().contains("load"));
    }
    assert_eq!(DType::F32, k.dtypes[0]);
}
