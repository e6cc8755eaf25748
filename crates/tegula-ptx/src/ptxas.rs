//! Running NVIDIA's `ptxas` on emitted PTX, for resource reports and for CI's assembly check.
//! Nothing at run time needs it: the driver JIT compiles PTX on a GPU machine.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/ptxas.sh` installs ptxas, relative to the repository root.
const LOCAL: &str = ".tools/nvcc/nvidia/cuda_nvcc/bin/ptxas";

/// ptxas from `$TEGULA_PTXAS`, else `.tools/nvcc` in the current folder or one above it (the
/// repository's, from any crate), else `PATH`.
pub fn find() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TEGULA_PTXAS") {
        return Some(p.into());
    }
    let cwd = std::env::current_dir().ok()?;
    if let Some(local) = cwd.ancestors().map(|d| d.join(LOCAL)).find(|p| p.exists()) {
        return Some(local);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("ptxas"))
            .find(|p| p.exists())
    })
}

/// What `ptxas -v` said about one kernel.
#[derive(Clone, Debug)]
pub struct Assembled {
    pub registers: u32,
    pub spill_stores: u32,
    /// ptxas's whole output (`-v` lines and warnings).
    pub log: String,
}

/// ptxas's `--gpu-name` for `sm`: `sm_90a` for 90 (the kernels may use wgmma and
/// setmaxnreg), else `sm_<sm>`.
pub fn gpu_name(sm: u32) -> String {
    if sm == 90 {
        "sm_90a".to_string()
    } else {
        format!("sm_{sm}")
    }
}

/// Assembles `ptx` for `sm` (90 means `sm_90a`) with `ptxas -v`, writing `<stem>.ptx` and
/// `<stem>.cubin` into `dir`. An assembly error returns the first lines of ptxas's output.
pub fn assemble(
    ptxas: &Path,
    ptx: &str,
    sm: u32,
    dir: &Path,
    stem: &str,
) -> Result<Assembled, String> {
    let file = dir.join(format!("{stem}.ptx"));
    std::fs::write(&file, ptx).map_err(|e| format!("writing {}: {e}", file.display()))?;
    let gpu = gpu_name(sm);
    let out = Command::new(ptxas)
        .args(["--gpu-name", &gpu, "-v", "-o"])
        .arg(file.with_extension("cubin"))
        .arg(&file)
        .output()
        .map_err(|e| format!("running {}: {e}", ptxas.display()))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        let head: Vec<&str> = log.lines().take(8).collect();
        return Err(format!(
            "ptxas failed on {}:\n{}",
            file.display(),
            head.join("\n")
        ));
    }
    // "... 0 bytes spill stores ..." and "Used 32 registers".
    let spill_stores = log
        .find("bytes spill stores")
        .and_then(|i| log[..i].split_whitespace().last()?.parse().ok())
        .unwrap_or(0);
    let registers = log
        .find("Used ")
        .and_then(|i| log[i + 5..].split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Ok(Assembled {
        registers,
        spill_stores,
        log,
    })
}
