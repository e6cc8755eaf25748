//! Built-in scans of a 1-D tile shorter than the program's threads (the scan layout repeats
//! it across the remaining lanes and warps), forward and reversed, on the PTX simulator
//! against the interpreter: the copies must scan as the lanes they repeat, since every copy
//! writes its value where a reversed scan flips its result back.

mod sim;

use sim::{agree, A};
use tegula_ir::prelude::*;

#[test]
fn scans_shorter_than_the_threads_agree_with_the_interpreter() {
    for (n, warps) in [
        (16usize, 1u32),
        (8, 1),
        (64, 4),
        (32, 8),
        (128, 8),
        (1024, 4),
    ] {
        for reverse in [false, true] {
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                let k = trace("scan", |p| {
                    let (x, y) = (p.ptr("x", DType::I32), p.ptr("y", DType::I32));
                    let o = arange(0, n as i64);
                    let v = load_unmasked(x + o);
                    store_unmasked(y + o, scan(v, op, 0, reverse));
                })
                .unwrap();
                let x: Vec<u64> = (0..n).map(|i| (i * 7 % 13) as u64 + 1).collect();
                let args = vec![A::Buf(DType::I32, x), A::Buf(DType::I32, vec![0; n])];
                let what = format!("{op:?} scan of {n} (reverse {reverse})");
                agree(&what, &k, [1, 1, 1], &args, 80, warps);
            }
        }
    }
}
