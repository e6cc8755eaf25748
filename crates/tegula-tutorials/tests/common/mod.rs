//! What the tutorials' tests share.

/// The launches `name`'s host function makes at `shape` for a GPU of 132 SMs (the untuned
/// first config), compiled for sm_90: their plans.
pub fn plans(
    name: &str,
    shape: &[usize],
) -> tegula::Result<Vec<(tegula::RecordedLaunch, tegula::Report)>> {
    let t = tegula_tutorials::find(name).expect("registered");
    let target = tegula::compiler::Target::for_compute_capability(9, 0);
    t.record(shape, t.dtypes[0], None, 132)?
        .into_iter()
        .map(|l| {
            let report = l.compile(&target)?.report;
            Ok((l, report))
        })
        .collect()
}
