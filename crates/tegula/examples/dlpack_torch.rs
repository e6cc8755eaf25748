//! The Rust half of `scripts/dlpack_torch.py`: a C ABI over tegula's DLPack import and export,
//! built as a shared library and loaded by Python with ctypes, so PyTorch (or NumPy) tensors
//! cross into tegula kernels and back without a copy.
//!
//!     cargo build --release -p tegula --example dlpack_torch   # target/release/examples/libdlpack_torch.so
//!     python3 scripts/dlpack_torch.py                           # on a GPU machine with PyTorch
//!
//! Every function takes ownership of the `DLManagedTensor*` it is given (the Python side renames
//! the capsule `used_dltensor`, as DLPack consumers do) and calls its deleter when done.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tegula::dlpack::{device_type, DLManagedTensor, ManagedTensor};
use tegula::prelude::*;

/// `y[r, c] = 2 x[r, c] + 1`, computed in f32; `x` by strides, `y` row-major.
#[tegula::kernel]
fn affine_2d<T: Element>(
    x: Ptr<T>,
    y: Ptr<T>,
    cols: i32,
    x_row: i32,
    x_col: i32,
    #[constexpr] block: usize,
) {
    let row = program_id(0);
    let offs = program_id(1) * block + arange(0, block as i64);
    let mask = offs.lt(cols);
    let v = load(x + row * x_row + offs * x_col, mask, 0).to::<f32>();
    store(y + row * cols + offs, v * 2.0 + 1.0, mask);
}

/// `x[r, c] *= 3` in place, by strides.
#[tegula::kernel]
fn triple_2d<T: Element>(x: Ptr<T>, cols: i32, x_row: i32, x_col: i32, #[constexpr] block: usize) {
    let row = program_id(0);
    let offs = program_id(1) * block + arange(0, block as i64);
    let mask = offs.lt(cols);
    let at = x + row * x_row + offs * x_col;
    store(at, load(at, mask, 0).to::<f32>() * 3.0, mask);
}

const BLOCK: usize = 256;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// One tegula device per DLPack device, made on first use.
fn device_for(m: &ManagedTensor) -> tegula::Result<Device> {
    static DEVICES: OnceLock<Mutex<HashMap<(i32, i32), Device>>> = OnceLock::new();
    let d = m.device();
    let mut map = DEVICES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(dev) = map.get(&(d.device_type, d.device_id)) {
        return Ok(dev.clone());
    }
    let dev = match d.device_type {
        device_type::CPU => Device::cpu(),
        _ => Device::cuda(d.device_id.max(0) as usize)?,
    };
    map.insert((d.device_type, d.device_id), dev.clone());
    Ok(dev)
}

/// A rank-1 or rank-2 view as (rows, cols, row stride, col stride).
fn as_2d<T: Element>(t: &Tensor<T>) -> tegula::Result<(usize, usize, usize, usize)> {
    match (t.shape(), t.strides()) {
        ([n], [s]) => Ok((1, *n, 0, *s)),
        ([r, c], [sr, sc]) => Ok((*r, *c, *sr, *sc)),
        (shape, _) => Err(tegula::Error::Shape {
            op: "dlpack_torch".into(),
            message: format!("rank 1 or 2 expected, got shape {shape:?}"),
        }),
    }
}

fn affine<T: Element>(m: ManagedTensor) -> tegula::Result<ManagedTensor> {
    let dev = device_for(&m)?;
    let x = Tensor::<T>::from_dlpack(&dev, m)?;
    let (rows, cols, sr, sc) = as_2d(&x)?;
    let y = dev.empty::<T>(x.shape())?;
    let grid = [rows as u32, cols.div_ceil(BLOCK) as u32];
    affine_2d::launch::<T>(&dev, grid, &x, &y, cols as i32, sr as i32, sc as i32, BLOCK)?;
    y.to_dlpack() // synchronizes: x's memory may go back to its owner once this returns
}

fn triple<T: Element>(m: ManagedTensor) -> tegula::Result<()> {
    let dev = device_for(&m)?;
    let x = Tensor::<T>::from_dlpack(&dev, m)?;
    let (rows, cols, sr, sc) = as_2d(&x)?;
    let grid = [rows as u32, cols.div_ceil(BLOCK) as u32];
    triple_2d::launch::<T>(&dev, grid, &x, cols as i32, sr as i32, sc as i32, BLOCK)?;
    dev.synchronize()
}

fn take(input: *mut DLManagedTensor) -> tegula::Result<ManagedTensor> {
    // SAFETY: the Python side passes a capsule's DLManagedTensor* and renames the capsule, so
    // ownership is ours; it synchronizes its stream first and does not touch the tensor until
    // this call returns.
    unsafe { ManagedTensor::from_raw(input) }.ok_or_else(|| tegula::Error::Invalid {
        op: "dlpack_torch".into(),
        message: "null DLManagedTensor".into(),
    })
}

fn fail(e: tegula::Error) {
    LAST_ERROR.with(|s| *s.borrow_mut() = e.to_string());
}

/// `2 x + 1` in a new tensor of tegula's, exported; null on error (see `tegula_last_error`).
#[no_mangle]
pub extern "C" fn tegula_affine(input: *mut DLManagedTensor) -> *mut DLManagedTensor {
    let run = || -> tegula::Result<ManagedTensor> {
        let m = take(input)?;
        match m.dtype()? {
            DType::F32 => affine::<f32>(m),
            DType::F16 => affine::<half::f16>(m),
            DType::BF16 => affine::<half::bf16>(m),
            DType::F64 => affine::<f64>(m),
            d => Err(tegula::Error::Invalid {
                op: "tegula_affine".into(),
                message: format!("{d} is not a float dtype"),
            }),
        }
    };
    match run() {
        Ok(m) => m.into_raw(),
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    }
}

/// `x *= 3` in place; 0 on success, -1 on error.
#[no_mangle]
pub extern "C" fn tegula_triple_in_place(input: *mut DLManagedTensor) -> i32 {
    let run = || -> tegula::Result<()> {
        let m = take(input)?;
        match m.dtype()? {
            DType::F32 => triple::<f32>(m),
            DType::F16 => triple::<half::f16>(m),
            DType::BF16 => triple::<half::bf16>(m),
            DType::F64 => triple::<f64>(m),
            d => Err(tegula::Error::Invalid {
                op: "tegula_triple_in_place".into(),
                message: format!("{d} is not a float dtype"),
            }),
        }
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            fail(e);
            -1
        }
    }
}

/// Tensors tegula exported whose deleter has not run.
#[no_mangle]
pub extern "C" fn tegula_live_exports() -> usize {
    tegula::dlpack::live_exports()
}

/// Copies the last error's message (UTF-8, truncated to `len`) into `buf`; returns its length.
///
/// # Safety
/// `buf` is valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tegula_last_error(buf: *mut u8, len: usize) -> usize {
    LAST_ERROR.with(|s| {
        let s = s.borrow();
        let n = s.len().min(len);
        // SAFETY: the caller's contract; `n <= len`.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), buf, n) };
        n
    })
}
