//! Atomics at every ordering (`sem`) and scope lower to `atom`/`red` with exactly those
//! qualifiers, `red` only where PTX's `red` has the ordering (relaxed, release), and every
//! combination assembles with ptxas for sm_80 and sm_90a. ptxas comes from $TEGULA_PTXAS,
//! `.tools/nvcc` (scripts/ptxas.sh) or PATH; without one the test fails rather than passing
//! silently.

mod common;

use common::aligned;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

const SEMS: [MemSem; 4] = [
    MemSem::Relaxed,
    MemSem::Acquire,
    MemSem::Release,
    MemSem::AcqRel,
];
const SCOPES: [MemScope; 3] = [MemScope::Cta, MemScope::Gpu, MemScope::Sys];

/// 512 elements over 4 warps: 4 contiguous elements a thread. Every atomic form the lowering
/// has: `atom` with its result used (f32, f16 and i32 add, i32 max), the same with the result
/// unused (`red` where the ordering allows), a compare-and-swap, and a float max (a CAS loop).
fn kernel(sem: MemSem, scope: MemScope) -> Kernel {
    aligned(
        trace("ordered", |p| {
            let f = p.ptr("f", DType::F32);
            let h = p.ptr("h", DType::F16);
            let i = p.ptr("i", DType::I32);
            let acc = p.ptr("acc", DType::F32);
            let hacc = p.ptr("hacc", DType::F16);
            let iacc = p.ptr("iacc", DType::I32);
            let out = p.ptr("out", DType::F32);
            let n = p.scalar("n", DType::I32);
            let offs = arange(0, 512);
            let m = Some(offs.lt(n));
            let x = offs.to::<f32>();
            let used = atomic_with(AtomicOp::Add, f + offs, x, m, sem, scope)
                + atomic_with(AtomicOp::Add, h + offs, x, m, sem, scope).to::<f32>()
                + atomic_with(AtomicOp::Add, i + offs, offs, m, sem, scope).to::<f32>()
                + atomic_with(AtomicOp::Max, i + offs, offs, m, sem, scope).to::<f32>()
                + atomic_cas_with(i + offs, 0, offs, sem, scope).to::<f32>()
                + atomic_with(AtomicOp::Max, f + offs, x, m, sem, scope);
            store_unmasked(out + offs, used);
            let _ = atomic_with(AtomicOp::Add, acc + offs, x, m, sem, scope);
            let _ = atomic_with(AtomicOp::Add, hacc + offs, x, m, sem, scope);
            let _ = atomic_with(AtomicOp::Max, iacc + offs, offs, m, sem, scope);
        })
        .unwrap(),
    )
}

fn ptx(k: &Kernel, sm: u32) -> String {
    let opts = CompileOptions {
        num_warps: 4,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm }, &opts).unwrap().ptx
}

/// The opcodes of the `atom` and `red` instructions of `ptx`, predicates dropped.
fn atomics(ptx: &str) -> Vec<String> {
    ptx.lines()
        .map(str::trim)
        .map(|l| match l.strip_prefix('@') {
            Some(rest) => rest.split_once(' ').map_or("", |(_, op)| op),
            None => l,
        })
        .filter_map(|l| l.split_whitespace().next())
        .filter(|op| op.starts_with("atom.") || op.starts_with("red."))
        .map(String::from)
        .collect()
}

fn count(ops: &[String], op: &str) -> usize {
    ops.iter().filter(|o| *o == op).count()
}

#[test]
fn every_ordering_and_scope_lowers_to_its_qualifiers() {
    for sem in SEMS {
        for scope in SCOPES {
            let k = kernel(sem, scope);
            let red = matches!(sem, MemSem::Relaxed | MemSem::Release);
            let q = format!(".{}.{}.global", sem.name(), scope.name());
            for sm in [80, 90] {
                let p = ptx(&k, sm);
                let ops = atomics(&p);
                let what = format!("sem {} scope {} sm_{sm}", sem.name(), scope.name());
                // Every atomic carries this ordering and scope and no other.
                assert!(!ops.is_empty(), "{what}");
                for op in &ops {
                    let order = op.split_once('.').unwrap().1;
                    assert!(order.starts_with(&q[1..]), "{what}: {op}\n{p}");
                }
                // A thread's 4 elements: one atom each for the used results (the CAS loop of
                // the float max is one `atom.cas` inside its loop).
                assert_eq!(
                    count(&ops, &format!("atom{q}.add.noftz.f16")),
                    if red { 4 } else { 8 },
                    "{what}"
                );
                assert_eq!(count(&ops, &format!("atom{q}.add.u32")), 4, "{what}");
                assert_eq!(
                    count(&ops, &format!("atom{q}.max.s32")),
                    if red { 4 } else { 8 },
                    "{what}"
                );
                assert_eq!(count(&ops, &format!("atom{q}.cas.b32")), 8, "{what}");
                // Results unused: `red` for relaxed and release (4-wide f32 on sm_90), else the
                // `atom` with its result dropped; never a `red` with acquire.
                let f32_atoms = count(&ops, &format!("atom{q}.add.f32"));
                let f32_reds = count(&ops, &format!("red{q}.add.f32"));
                let f32_vec = count(&ops, &format!("red{q}.add.v4.f32"));
                match (red, sm) {
                    (true, 80) => assert_eq!((f32_atoms, f32_reds, f32_vec), (4, 4, 0), "{what}"),
                    (true, _) => assert_eq!((f32_atoms, f32_reds, f32_vec), (4, 0, 1), "{what}"),
                    (false, _) => assert_eq!((f32_atoms, f32_reds, f32_vec), (8, 0, 0), "{what}"),
                }
                let reds = ops.iter().filter(|o| o.starts_with("red.")).count();
                let expect = if !red {
                    0
                } else if sm == 80 {
                    12
                } else {
                    9
                };
                assert_eq!(reds, expect, "{what}: {ops:?}");
                if red {
                    assert_eq!(count(&ops, &format!("red{q}.add.noftz.f16")), 4, "{what}");
                    assert_eq!(count(&ops, &format!("red{q}.max.s32")), 4, "{what}");
                }
            }
        }
    }
}

/// The defaults (`atomic_add`, `atomic_cas`) are Triton's: acq_rel at gpu scope.
#[test]
fn default_atomics_are_acq_rel_at_gpu_scope() {
    let k = trace("defaults", |p| {
        let (f, i, out) = (
            p.ptr("f", DType::F32),
            p.ptr("i", DType::I32),
            p.ptr("out", DType::F32),
        );
        let offs = arange(0, 128);
        let _ = atomic_add(f + offs, 1.0, None);
        let old = atomic_cas(i + offs, 0, 1);
        store_unmasked(out + offs, old.to::<f32>());
    })
    .unwrap();
    let ops = atomics(&ptx(&k, 80));
    assert_eq!(
        ops,
        [
            "atom.acq_rel.gpu.global.add.f32",
            "atom.acq_rel.gpu.global.cas.b32"
        ],
        "{ops:?}"
    );
}

#[test]
fn every_ordering_and_scope_assembles() {
    let ptxas = tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test");
    let dir = std::env::temp_dir().join(format!("tegula-atomic-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for sem in SEMS {
        for scope in SCOPES {
            let k = kernel(sem, scope);
            for sm in [80, 90] {
                let name = format!("ordered_{}_{}_sm{sm}", sem.name(), scope.name());
                tegula_ptx::ptxas::assemble(&ptxas, &ptx(&k, sm), sm, &dir, &name)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
    // ptxas holds PTX to the rule the lowering follows: a `red` with acquire does not assemble.
    let p = ptx(&kernel(MemSem::Relaxed, MemScope::Gpu), 80);
    assert!(p.contains("red.relaxed.gpu.global"), "{p}");
    let wrong = p.replace("red.relaxed.gpu.global", "red.acquire.gpu.global");
    assert!(
        tegula_ptx::ptxas::assemble(&ptxas, &wrong, 80, &dir, "red_acquire").is_err(),
        "ptxas took a red.acquire"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
