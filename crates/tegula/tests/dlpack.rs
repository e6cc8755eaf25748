//! DLPack on the interpreter (host memory): round trips through tegula's own export, a foreign
//! producer's tensor used in place, and the typed errors. The GPU round trip with PyTorch is
//! `scripts/dlpack_torch.py` (run on a GPU machine; see its header).

use half::{bf16, f16};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tegula::dlpack::{
    self, device_type, DLDataType, DLDevice, DLManagedTensor, DLTensor, DlpackError, ManagedTensor,
};
use tegula::prelude::*;
use tegula::Error;

/// Tests that count live exports or foreign deletions run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[tegula::kernel]
fn double_in_place(x: Ptr<f32>, n: i32, #[constexpr] block: usize) {
    let offs = program_id(0) * block + arange(0, block as i64);
    let mask = offs.lt(n);
    store(x + offs, load(x + offs, mask, 0.0) * 2.0, mask);
}

#[test]
fn export_import_round_trip_shares_memory() {
    let _g = serial();
    let before = dlpack::live_exports();
    let dev = Device::cpu();
    let x = dev.from_slice(&[1.0f32, 2.0, 3.0, 4.0], [4]).unwrap();
    let managed = x.to_dlpack().unwrap();
    assert_eq!(dlpack::live_exports(), before + 1);
    assert_eq!(managed.shape(), &[4]);
    assert_eq!(managed.strides(), Some(&[1i64][..]));
    assert_eq!(
        managed.device(),
        DLDevice {
            device_type: device_type::CPU,
            device_id: 0
        }
    );
    assert_eq!(managed.dtype(), Ok(DType::F32));
    let y = Tensor::<f32>::from_dlpack(&dev, managed).unwrap();
    double_in_place::launch(&dev, 1u32, &y, 4, 128).unwrap();
    // The kernel wrote through the imported view into x's memory.
    assert_eq!(x.to_vec().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    drop(x);
    // y keeps the export (and through it x's storage) alive.
    assert_eq!(y.to_vec().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(dlpack::live_exports(), before + 1);
    drop(y);
    assert_eq!(dlpack::live_exports(), before, "the deleter ran once");
}

#[test]
fn views_keep_shape_strides_and_offset() {
    let _g = serial();
    let dev = Device::cpu();
    let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let x = dev.from_slice(&data, [4, 6]).unwrap();
    // A transposed, narrowed view: shape [3, 4], strides [1, 6], offset 2.
    let v = x.transpose(0, 1).unwrap().narrow(0, 2, 3).unwrap();
    let managed = v.to_dlpack().unwrap();
    assert_eq!(managed.shape(), &[3, 4]);
    assert_eq!(managed.strides(), Some(&[1i64, 6][..]));
    assert_eq!(managed.dl_tensor().byte_offset, 0);
    let back = Tensor::<f32>::from_dlpack(&dev, managed).unwrap();
    assert_eq!(back.shape(), &[3, 4]);
    assert_eq!(back.strides(), &[1, 6]);
    assert_eq!(back.to_vec().unwrap(), v.to_vec().unwrap());
    assert!(!back.is_contiguous());
}

fn round_trip<T: Element + PartialEq + std::fmt::Debug>(values: &[T]) {
    let dev = Device::cpu();
    let x = dev.from_slice(values, [values.len()]).unwrap();
    let managed = x.to_dlpack().unwrap();
    assert_eq!(managed.dtype(), Ok(T::DTYPE));
    let back = Tensor::<T>::from_dlpack(&dev, managed).unwrap();
    assert_eq!(back.to_vec().unwrap(), values, "{}", T::DTYPE);
}

#[test]
fn every_dtype_round_trips() {
    let _g = serial();
    round_trip(&[f16::from_f32(1.5), f16::from_f32(-2.25), f16::INFINITY]);
    round_trip(&[bf16::from_f32(1.5), bf16::from_f32(-3.0e38), bf16::ONE]);
    round_trip(&[1.0f64, -0.0, 1e300]);
    round_trip(&[true, false, true]);
    round_trip(&[-1i8, 127, -128]);
    round_trip(&[-1i16, 32767]);
    round_trip(&[-1i32, i32::MAX]);
    round_trip(&[i64::MIN, 3]);
    round_trip(&[255u8, 0]);
    round_trip(&[65535u16, 1]);
    round_trip(&[u32::MAX, 7]);
    round_trip(&[u64::MAX, 9]);
}

#[test]
fn scalars_and_empty_tensors() {
    let _g = serial();
    let dev = Device::cpu();
    let s = dev.from_slice(&[42i32], Vec::<usize>::new()).unwrap();
    let m = s.to_dlpack().unwrap();
    assert_eq!(m.ndim(), 0);
    assert_eq!(m.shape(), &[] as &[i64]);
    let back = Tensor::<i32>::from_dlpack(&dev, m).unwrap();
    assert_eq!(back.to_vec().unwrap(), vec![42]);

    let e = dev.zeros::<f32>([0, 5]).unwrap();
    let back = Tensor::<f32>::from_dlpack(&dev, e.to_dlpack().unwrap()).unwrap();
    assert_eq!(back.shape(), &[0, 5]);
    assert!(back.to_vec().unwrap().is_empty());
}

/// A producer outside tegula (what NumPy or PyTorch hands over): memory the test owns, a
/// `DLManagedTensor` built by hand, a deleter that counts its calls.
struct Foreign {
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
}

static FOREIGN_DELETED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn foreign_deleter(managed: *mut DLManagedTensor) {
    // SAFETY: made by `foreign()` with Box::into_raw, the manager_ctx a Box<Foreign>.
    unsafe {
        let m = Box::from_raw(managed);
        drop(Box::from_raw(m.manager_ctx.cast::<Foreign>()));
    }
    FOREIGN_DELETED.fetch_add(1, Ordering::SeqCst);
}

/// A managed tensor over `data` (which must outlive every tegula view of it).
fn foreign(
    data: *mut u8,
    dtype: DLDataType,
    device: DLDevice,
    shape: &[i64],
    strides: Option<&[i64]>,
) -> ManagedTensor {
    let mut ctx = Box::new(Foreign {
        shape: shape.to_vec(),
        strides: strides.map(<[i64]>::to_vec),
    });
    let managed = Box::new(DLManagedTensor {
        dl_tensor: DLTensor {
            data: data.cast::<c_void>(),
            device,
            ndim: shape.len() as i32,
            dtype,
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx
                .strides
                .as_mut()
                .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
            byte_offset: 0,
        },
        manager_ctx: Box::into_raw(ctx).cast(),
        deleter: Some(foreign_deleter),
    });
    // SAFETY: valid and owned; `data` is valid for the view (the callers' arrays).
    unsafe { ManagedTensor::from_raw(Box::into_raw(managed)) }.unwrap()
}

const CPU: DLDevice = DLDevice {
    device_type: device_type::CPU,
    device_id: 0,
};

fn f32_dl() -> DLDataType {
    dlpack::dl_dtype(DType::F32)
}

#[test]
fn foreign_host_memory_is_used_in_place() {
    let _g = serial();
    let dev = Device::cpu();
    let deleted = FOREIGN_DELETED.load(Ordering::SeqCst);
    let mut data: Vec<f32> = (0..6).map(|i| i as f32).collect();
    // Row-major [2, 3] without strides (DLPack's compact form).
    let m = foreign(data.as_mut_ptr().cast(), f32_dl(), CPU, &[2, 3], None);
    let t = Tensor::<f32>::from_dlpack(&dev, m).unwrap();
    assert_eq!(t.strides(), &[3, 1]);
    double_in_place::launch(&dev, 1u32, &t, 6, 64).unwrap();
    assert_eq!(FOREIGN_DELETED.load(Ordering::SeqCst), deleted);
    drop(t);
    assert_eq!(FOREIGN_DELETED.load(Ordering::SeqCst), deleted + 1);
    assert_eq!(data, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);

    // Column-major [3, 2] (strides [1, 3]) over the same memory, read in logical order; a
    // size-1 axis with a negative stride is fine (its stride never matters).
    let m = foreign(
        data.as_mut_ptr().cast(),
        f32_dl(),
        CPU,
        &[3, 1, 2],
        Some(&[1, -7, 3]),
    );
    let t = Tensor::<f32>::from_dlpack(&dev, m).unwrap();
    assert_eq!(t.to_vec().unwrap(), vec![0.0, 6.0, 2.0, 8.0, 4.0, 10.0]);
    drop(t);
    assert_eq!(FOREIGN_DELETED.load(Ordering::SeqCst), deleted + 2);
}

#[test]
fn what_tegula_cannot_take_is_a_typed_error_and_is_let_go() {
    let _g = serial();
    let dev = Device::cpu();
    let deleted = FOREIGN_DELETED.load(Ordering::SeqCst);
    let mut data = vec![0f32; 8];
    let p = data.as_mut_ptr().cast::<u8>();
    let dlpack_err = |r: tegula::Result<Tensor<f32>>| match r {
        Err(Error::Dlpack(e)) => e,
        Err(e) => panic!("not a DLPack error: {e}"),
        Ok(t) => panic!("imported {t:?}"),
    };

    let e = dlpack_err(Tensor::from_dlpack(
        &dev,
        foreign(p, f32_dl(), CPU, &[2, 2], Some(&[2, -1])),
    ));
    assert_eq!(
        e,
        DlpackError::NegativeStride {
            axis: 1,
            stride: -1
        }
    );
    assert!(e.to_string().contains("copy the tensor first"), "{e}");

    let e = Tensor::<f16>::from_dlpack(&dev, foreign(p, f32_dl(), CPU, &[4], None)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Dlpack(DlpackError::DTypeMismatch {
                expected: DType::F16,
                got: DType::F32
            })
        ),
        "{e}"
    );

    let complex = DLDataType {
        code: dlpack::type_code::COMPLEX,
        bits: 64,
        lanes: 1,
    };
    let e = dlpack_err(Tensor::from_dlpack(
        &dev,
        foreign(p, complex, CPU, &[2], None),
    ));
    assert!(matches!(e, DlpackError::UnsupportedDType { .. }), "{e}");

    let rocm = DLDevice {
        device_type: 10,
        device_id: 0,
    };
    let e = dlpack_err(Tensor::from_dlpack(
        &dev,
        foreign(p, f32_dl(), rocm, &[2], None),
    ));
    assert!(
        matches!(
            e,
            DlpackError::UnsupportedDevice {
                device_type: 10,
                ..
            }
        ),
        "{e}"
    );

    // A GPU tensor on the interpreter: refused before its memory is touched.
    let cuda = DLDevice {
        device_type: device_type::CUDA,
        device_id: 0,
    };
    let e = dlpack_err(Tensor::from_dlpack(
        &dev,
        foreign(0x7f00_0000_0000 as *mut u8, f32_dl(), cuda, &[2], None),
    ));
    assert!(matches!(e, DlpackError::DeviceMismatch { .. }), "{e}");
    assert!(e.to_string().contains("cuda:0"), "{e}");

    let e = dlpack_err(Tensor::from_dlpack(
        &dev,
        foreign(p.wrapping_add(1), f32_dl(), CPU, &[2], None),
    ));
    assert!(matches!(e, DlpackError::Misaligned { align: 4, .. }), "{e}");

    let e = dlpack_err(Tensor::from_dlpack(
        &dev,
        foreign(std::ptr::null_mut(), f32_dl(), CPU, &[2], None),
    ));
    assert_eq!(e, DlpackError::NullData { numel: 2 });

    let e = dlpack_err(Tensor::from_dlpack(
        &dev,
        foreign(p, f32_dl(), CPU, &[-2], None),
    ));
    assert!(matches!(e, DlpackError::InvalidShape { .. }), "{e}");

    // Every refused tensor was handed back to its producer.
    assert_eq!(FOREIGN_DELETED.load(Ordering::SeqCst), deleted + 8);
    drop(data);
}

#[test]
fn a_managed_tensor_dropped_unused_calls_its_deleter() {
    let _g = serial();
    let before = dlpack::live_exports();
    let dev = Device::cpu();
    let x = dev.zeros::<f32>([3]).unwrap();
    let m = x.to_dlpack().unwrap();
    assert_eq!(dlpack::live_exports(), before + 1);
    drop(m);
    assert_eq!(dlpack::live_exports(), before);
    // into_raw hands the duty on: from_raw takes it back.
    let raw = x.to_dlpack().unwrap().into_raw();
    assert_eq!(dlpack::live_exports(), before + 1);
    // SAFETY: the pointer came from into_raw just above, owned by nobody else.
    drop(unsafe { ManagedTensor::from_raw(raw) });
    assert_eq!(dlpack::live_exports(), before);
}

#[test]
fn from_parts_wraps_a_buffer_and_drops_its_owner() {
    let _g = serial();
    let dev = Device::cpu();
    // The owner is the memory itself: a boxed slice that the deleter drops.
    let mut data: Box<[f32]> = (0..8).map(|i| i as f32).collect();
    let ptr = data.as_mut_ptr();
    #[allow(dead_code)] // held for their drops
    struct Owned(Box<[f32]>, Arc<()>);
    let alive = Arc::new(());
    // SAFETY: `data` moves into the owner, which lives until the deleter runs.
    let m = unsafe {
        ManagedTensor::from_parts(
            ptr.cast(),
            CPU,
            DType::F32,
            &[2, 2],
            Some(&[4, 2]),
            Box::new(Owned(data, alive.clone())),
        )
    };
    let t = Tensor::<f32>::from_dlpack(&dev, m).unwrap();
    assert_eq!(t.to_vec().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
    assert_eq!(Arc::strong_count(&alive), 2);
    drop(t);
    assert_eq!(Arc::strong_count(&alive), 1, "the owner was dropped");
}
