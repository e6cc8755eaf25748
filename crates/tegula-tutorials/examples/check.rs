//! Checks every ported tutorial (or those whose name contains the first argument) against
//! float64 on the default device (the GPU if there is one), at each entry's small default
//! shape, or at `--shape 4,32,1024,64`.
//!
//!     cargo run --release -p tegula-tutorials --example check [-- 06 --shape 2,4,256,64]

use tegula::prelude::*;

fn main() -> tegula::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape: Option<Vec<usize>> = args
        .iter()
        .position(|a| a == "--shape")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').filter_map(|d| d.trim().parse().ok()).collect());
    let filter = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_default();
    let dev = Device::default()?;
    let mut failed = 0;
    for t in tegula_tutorials::tutorials() {
        if !t.name.contains(&filter) {
            continue;
        }
        let shape = shape.clone().unwrap_or_else(|| t.default_shape.to_vec());
        for &dtype in t.dtypes {
            let start = std::time::Instant::now();
            match (t.check)(&dev, &shape, dtype) {
                Ok(r) => {
                    failed += usize::from(!r.passed());
                    println!(
                        "{:<42} {:<5} {:<50} err/tol {:>7.3} max err {:.2e} {:>6.2}s {}",
                        t.name,
                        dtype.name(),
                        r.shape,
                        r.worst_ratio,
                        r.max_abs_err,
                        start.elapsed().as_secs_f64(),
                        if r.passed() { "PASS" } else { "FAIL" }
                    );
                }
                Err(e) => {
                    failed += 1;
                    println!("{:<42} {:<5} ERROR {e}", t.name, dtype.name());
                }
            }
        }
    }
    if failed > 0 {
        eprintln!("{failed} failed");
        std::process::exit(1);
    }
    Ok(())
}
