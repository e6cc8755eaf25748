//! `#[tegula::func]` helpers: run-time loops carrying `let mut` values, tile `if`s and calls
//! between helpers, traced into the kernels that call them; and constexpr `usize` bounds of
//! `arange`.

use tegula::prelude::*;

/// The sum of `x[row, 0..n]` in blocks: a run-time loop in a helper, carrying `acc`.
#[tegula::func]
fn row_sum(x: Tile, row: Tile, n: Tile, block: usize) -> Tile {
    let offs = arange(0, block);
    let mut acc = zeros::<f32>([block]);
    for start in range(0, n, block) {
        let cols = start + offs;
        acc += load(x + row * n + cols, cols.lt(n), 0.0);
    }
    sum(acc, 0)
}

/// A tile `if` with a result, and a call to another helper.
#[tegula::func]
fn clipped_row_sum(x: Tile, row: Tile, n: Tile, limit: f32, block: usize) -> Tile {
    let s = row_sum(x, row, n, block);
    let mut out = s;
    if s.gt(limit) {
        out = full::<f32>([], limit);
    }
    // A Rust bool parameter-like condition stays plain Rust.
    if block > 1 {
        out += 0.0;
    }
    out
}

/// A `while` on a tile in a helper: the smallest power of two >= v (v >= 1).
#[tegula::func]
fn next_pow2(v: Tile) -> Tile {
    let mut p = full::<i32>([], 1);
    while p.lt(v) {
        p *= 2;
    }
    p
}

#[tegula::kernel]
fn sums(x: Ptr<f32>, y: Ptr<f32>, p: Ptr<i32>, n: i32, limit: f32, #[constexpr] block: usize) {
    let row = program_id(0);
    store_unmasked(y + row, clipped_row_sum(x, row, n, 1e9, block));
    store_unmasked(
        y + 8 + row,
        clipped_row_sum(x, row, n, 50.0, block) + limit * 0.0,
    );
    store_unmasked(p + row, next_pow2(row + 3));
}

#[test]
fn helpers_with_runtime_loops_and_branches() -> tegula::Result<()> {
    let dev = Device::cpu();
    let (m, n) = (8usize, 37usize);
    let xs: Vec<f32> = (0..m * n).map(|i| (i % 7) as f32).collect();
    let x = dev.from_slice(&xs, [m, n])?;
    let y = dev.zeros::<f32>([16])?;
    let p = dev.zeros::<i32>([8])?;
    sums::launch(&dev, m, &x, &y, &p, n as i32, 1.0, 16)?;
    let y = y.to_vec()?;
    for r in 0..m {
        let want: f32 = xs[r * n..(r + 1) * n].iter().sum();
        assert_eq!(y[r], want, "row {r}");
        assert_eq!(y[8 + r], want.min(50.0), "row {r} clipped");
    }
    let p = p.to_vec()?;
    assert_eq!(p, vec![4, 4, 8, 8, 8, 8, 16, 16]);
    // The helper's loop is one IR loop in the kernel, not unrolled.
    let k = sums::trace(16).expect("traces");
    let count = |op: tegula::ir::Op| k.insts.iter().filter(|(_, d)| d.op == op).count();
    assert_eq!(
        count(tegula::ir::Op::For { num_stages: None }),
        2,
        "one loop per call of row_sum"
    );
    assert_eq!(count(tegula::ir::Op::While), 1);
    assert_eq!(
        count(tegula::ir::Op::If),
        2,
        "one tile `if` per call of clipped_row_sum"
    );
    Ok(())
}

#[tegula::kernel]
fn usize_bounds(y: Ptr<i32>, #[constexpr] block: usize, #[constexpr] lo: u32) {
    let o = arange(0, block);
    let shifted = arange(lo, lo + block as u32);
    store_unmasked(y + o, shifted - o);
}

#[test]
fn arange_takes_constexpr_integers_of_any_type() -> tegula::Result<()> {
    let dev = Device::cpu();
    let y = dev.zeros::<i32>([32])?;
    usize_bounds::launch(&dev, 1u32, &y, 32, 5)?;
    assert_eq!(y.to_vec()?, vec![5; 32]);
    Ok(())
}
