//! The registry the command reads: the library's kernels, the copy baseline and the ports of
//! Triton's tutorials ([`tegula::registry`]).

use tegula::registry::Entry;
use tegula::{Error, Result};

/// Every entry: the library's kernels, `copy`, then the tutorials.
pub fn all() -> Vec<Entry> {
    let mut all = tegula_kernels::library();
    all.push(crate::copy::entry());
    all.extend(tegula_tutorials::tutorials());
    all
}

/// The entry `name` names (a tutorial also by its harness name, `03-matmul`), or an error
/// listing the names.
pub fn find(name: &str) -> Result<Entry> {
    let all = all();
    tegula::registry::find(&all, name)
        .copied()
        .ok_or_else(|| Error::Invalid {
            op: "tegula".into(),
            message: format!(
                "no kernel `{name}`; the registry has: {}",
                all.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
            ),
        })
}
