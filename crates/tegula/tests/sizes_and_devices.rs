//! Bad sizes, memory the host cannot give, views and kernels that overrun them, tensors on
//! the wrong device, and empty grids: typed errors (or a documented no-op), never a panic.

use tegula::prelude::*;
use tegula::Error;
use tegula_interp::InterpError;

/// Sizes whose element or byte count overflows `usize` are refused (the product wrapped to 0
/// before, and `zeros([2^32, 2^32])` returned an empty tensor).
#[test]
fn shapes_whose_sizes_overflow_are_refused() {
    let dev = Device::cpu();
    for shape in [
        vec![1usize << 32, 1 << 32],
        vec![usize::MAX, 2],
        vec![3, usize::MAX / 2],
    ] {
        let e = dev.zeros::<f32>(shape.clone()).unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{shape:?}: {e}");
        assert!(
            e.to_string().contains("more than usize::MAX elements"),
            "{e}"
        );
        assert!(matches!(
            dev.empty::<u8>(shape.clone()),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            dev.full::<u8>(shape.clone(), 1),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            dev.randn::<f32>(shape.clone()),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            dev.from_slice::<f32>(&[], shape.clone()),
            Err(Error::TooLarge { .. })
        ));
    }
    // The elements fit, the bytes do not.
    let e = dev.zeros::<f64>([usize::MAX / 4]).unwrap_err();
    assert!(e.to_string().contains("more than usize::MAX bytes"), "{e}");
    // A shape of zero elements is fine, whatever its other axes.
    assert_eq!(dev.zeros::<f32>([0, 1 << 40]).unwrap().numel(), 0);
}

/// Memory the host cannot give is `Error::OutOfMemory`, not an abort.
#[test]
fn allocations_the_host_cannot_meet_are_typed_errors() {
    let dev = Device::cpu();
    let e = dev.zeros::<f32>([1usize << 44]).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("zeros: out of memory on cpu#"), "{msg}");
    assert!(msg.contains(&(1u64 << 46).to_string()), "{msg}");
    let e = dev.empty::<u8>([1usize << 46]).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
}

#[test]
fn views_check_their_arithmetic() {
    let dev = Device::cpu();
    let t = dev.from_slice(&[0.0f32, 1.0, 2.0, 3.0], [4]).unwrap();
    // `start + len` overflowed before, and the view panicked when read.
    let e = t.narrow(0, usize::MAX, 2).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    assert!(t.narrow(0, 2, usize::MAX).is_err());
    assert!(t.narrow(0, 4, 1).is_err());
    assert_eq!(t.narrow(0, 4, 0).unwrap().numel(), 0);
    assert_eq!(t.narrow(0, 1, 2).unwrap().to_vec().unwrap(), vec![1.0, 2.0]);
    // A shape whose product wraps to 4 (2^63 * 2^1 * 4 = 2^66 + ...) is not 4 elements.
    assert!(t.reshape([1usize << 63, 2, 4]).is_err());
    assert!(matches!(
        t.reshape([1usize << 32, 1 << 32, 4]),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn extents_are_what_the_views_span() {
    let dev = Device::cpu();
    let t = dev.zeros::<f32>([10, 10]).unwrap();
    assert_eq!(t.extent(), 100);
    assert_eq!(t.narrow(0, 3, 2).unwrap().extent(), 20);
    // Columns 2..5 of rows 0..10: the rows' gaps are inside the span.
    assert_eq!(t.narrow(1, 2, 3).unwrap().extent(), 9 * 10 + 3);
    assert_eq!(t.transpose(0, 1).unwrap().extent(), 100);
    assert_eq!(t.narrow(0, 3, 0).unwrap().extent(), 0);
}

/// Writes 16 ones from `out`, unmasked.
#[tegula::kernel]
fn fill16(out: Ptr<f32>) {
    store_unmasked(out + arange(0, 16), 1.0);
}

/// The interpreter checks each tensor argument against its view: an unmasked store through
/// a 10-element view of a 100-element tensor is an error naming the argument, the index in
/// the view, the line and the program (it overwrote elements 10..16 of the neighbour before).
#[test]
fn kernels_stay_inside_the_views_they_are_given() {
    let dev = Device::cpu();
    let buf = dev.zeros::<f32>([100]).unwrap();
    let view = buf.narrow(0, 30, 10).unwrap();
    let e = fill16::launch(&dev, 1u32, &view).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("element 10 of argument `out`, a view of 10 elements"),
        "{msg}"
    );
    assert!(msg.contains("sizes_and_devices.rs:"), "{msg}");
    assert!(msg.contains("program (0, 0, 0)"), "{msg}");
    assert!(
        matches!(
            &e,
            Error::Interp(InterpError::OutOfBounds { arg, index: 10, len: 10, .. }) if arg == "out"
        ),
        "{e:?}"
    );
    assert!(buf.to_vec().unwrap()[40..].iter().all(|&v| v == 0.0));
    // The same kernel through a view that reaches 16 elements runs.
    fill16::launch(&dev, 1u32, &buf.narrow(0, 84, 16).unwrap()).unwrap();
    assert_eq!(buf.to_vec().unwrap()[84..].to_vec(), vec![1.0; 16]);
    // A strided view reaches its span: rows 0..2 of columns 0..6 of a [2, 10] view span 16.
    let grid = dev.zeros::<f32>([2, 10]).unwrap();
    fill16::launch(&dev, 1u32, &grid.narrow(1, 0, 6).unwrap()).unwrap();
}

#[tegula::kernel]
fn copy(x: Ptr<f32>, y: Ptr<f32>, n: i32) {
    let offs = arange(0, 16);
    let mask = offs.lt(n);
    store(y + offs, load(x + offs, mask, 0.0), mask);
}

/// Two interpreters read apart: names carry the device id, and a launch's device error
/// names the argument ("cpu (interpreter, 2 threads) and cpu (interpreter, 2 threads)"
/// before).
#[test]
fn device_errors_name_the_argument_and_tell_devices_apart() {
    let (a, b) = (Device::cpu(), Device::cpu());
    assert_ne!(a.name(), b.name());
    assert!(
        a.name()
            .starts_with(&format!("cpu#{} (interpreter", a.id())),
        "{}",
        a.name()
    );
    assert!(Device::recording(132).name().starts_with("recording#"));
    let x = a.zeros::<f32>([16]).unwrap();
    let y = b.zeros::<f32>([16]).unwrap();
    let e = copy::launch(&a, 1u32, &x, &y, 16).unwrap_err();
    assert!(matches!(e, Error::Device { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "launch of `copy`: argument `y` is on {}, the launch is on {}",
            b.name(),
            a.name()
        )
    );
}

/// A grid with no programs runs nothing on every device, once the arguments are checked.
#[test]
fn empty_grids_run_nothing_after_the_arguments_are_checked() {
    let dev = Device::cpu();
    let x = dev.full::<f32>([16], 2.0).unwrap();
    let y = dev.zeros::<f32>([16]).unwrap();
    for grid in [[0u32, 1, 1], [1, 0, 1], [4, 4, 0]] {
        copy::launch(&dev, grid, &x, &y, 16).unwrap();
    }
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 0.0));
    // Arguments are still checked.
    let other = Device::cpu().zeros::<f32>([16]).unwrap();
    assert!(matches!(
        copy::launch(&dev, [0u32, 1, 1], &x, &other, 16),
        Err(Error::Device { .. })
    ));
    // A recording device records it (a GPU launch of it would run nothing either).
    let rec = Device::recording(132);
    let (x, y) = (
        rec.zeros::<f32>([16]).unwrap(),
        rec.zeros::<f32>([16]).unwrap(),
    );
    copy::launch(&rec, [0u32, 1, 1], &x, &y, 16).unwrap();
    assert_eq!(rec.take_recorded().len(), 1);
}
