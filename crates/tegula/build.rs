//! Makes `TEGULA_COMPILER_ID`, the compiler's part of the autotune cache key
//! (`tegula::autotune::COMPILER`): the version plus a hash of the sources that decide what a
//! traced kernel compiles to — the tracer and IR passes (`tegula-ir/src`), the PTX lowering
//! (`tegula-ptx/src`) and the specialization (`tegula/src/gpu.rs`). Any edit there makes a new
//! id, so configs tuned by another compiler are not reused. When those sources are not next
//! to this crate (a packaged build), the id is the version alone, and says so.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let crates = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
    let roots = [
        crates.join("tegula-ptx").join("src"),
        crates.join("tegula-ir").join("src"),
        manifest.join("src").join("gpu.rs"),
    ];
    let mut paths = Vec::new();
    for r in &roots {
        println!("cargo:rerun-if-changed={}", r.display());
        if r.is_dir() {
            files(r, &mut paths);
        } else if r.is_file() {
            paths.push(r.clone());
        }
    }
    paths.sort();
    // tegula-ptx takes the workspace's version, as this crate does.
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let id = if paths.is_empty() {
        format!("tegula-ptx {version}+src.unhashed")
    } else {
        // FNV-1a over each file's path (relative to `crates/`) and bytes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for p in &paths {
            let rel = p.strip_prefix(&crates).unwrap_or(p);
            eat(rel.to_string_lossy().as_bytes());
            eat(&[0]);
            eat(&std::fs::read(p).unwrap_or_default());
            eat(&[0]);
        }
        format!("tegula-ptx {version}+src.{h:016x}")
    };
    println!("cargo:rustc-env=TEGULA_COMPILER_ID={id}");
}
