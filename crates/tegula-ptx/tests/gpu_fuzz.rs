//! The differential fuzzer on a GPU: the random tile programs of `fuzz/mod.rs` (the generator,
//! seeds and inputs of `fuzz_interp_vs_sim.rs`) run on the interpreter (the reference) and,
//! compiled by `tegula_ptx::compile`, on the GPU through `tegula-cuda`, once per target: sm_80
//! (`mma.sync`, the code the simulator runs) and the GPU's own target
//! (`Target::for_compute_capability`: sm_90a on Hopper, with the compiler's choice of tensor-core
//! instructions, so `wgmma` where the plan places a dot on it). The results must agree by the
//! rule of `fuzz/mod.rs` ([`fuzz::agrees`]: bit for bit where the program is exact, within the
//! tolerance where it reduces, takes a dot or `exp2`), except where the GPU differs by design:
//!
//! - Contraction: the code is compiled with `fp_fusion` off (`.rn` on every float add, sub and
//!   mul). With it on, ptxas fuses a multiply and an add into one `fma`, rounded once where the
//!   interpreter rounds twice; that would make the exact programs inexact on the GPU alone (the
//!   simulator executes what the PTX says and never contracts).
//! - `exp2` lowers to `ex2.approx.ftz.f32`, good to 2 ulp (the PTX ISA's bound), where the
//!   interpreter rounds the f64 result once. The programs that take `exp2` are compared within
//!   the tolerance, which 2 ulp is far inside along arithmetic, reductions, sorts and moves (the
//!   operand is clamped to [-20, 20], so no result is subnormal and `.ftz` changes nothing). But
//!   through a comparison (`select` then takes its other operand) or a cast to f16 or bf16 (the
//!   neighbouring value, or inf), 2 ulp can change an element by anything. So the interpreter
//!   runs each such program again with `exp2`'s results moved by 2 ulp ([`SENSITIVITY`]: all up,
//!   all down, and by 0 to 2 either way after two hashes of the operand); an element whose
//!   reference moves beyond the rule is decided by `exp2`'s last bits and is not compared. The
//!   summary counts those elements; `exp2_within_two_ulp_passes` checks (without a GPU) that
//!   another model of a 2-ulp `exp2` passes.
//! - Tensor cores (`mma.sync`, `wgmma`) sum a dot's products in their own order and with their
//!   own internal rounding: within the tolerance, as on the simulator (no allowance of its own).
//!
//! Beyond the rule, on the GPU only: the inputs must come back unchanged, and 64 f32s of poison
//! before and after the output must stay (on the GPU a store to a wrong address lands in other
//! memory rather than being refused).
//!
//! Ignored without a GPU: `TEGULA_GPU_TESTS=1 cargo test --release -p tegula-ptx --test
//! gpu_fuzz -- --ignored --nocapture`, or `scripts/fuzz_gpu.sh`. Time-bounded: cases run for
//! about `TEGULA_FUZZ_SECONDS` seconds (default 60) from seed `TEGULA_FUZZ_SEED` (default 1, then
//! the next seeds), each seed's two programs on each target. `TEGULA_FUZZ_THREADS` threads
//! (default: the machine's parallelism) prepare cases at once (interpreter, compile, JIT); the
//! launches run one at a time, each synchronised, so a fault is its own case's. A failure
//! names its seed and target and prints the program's description and Tile IR; the run ends
//! with a line counting the programs that agreed on each target.

mod fuzz;

use fuzz::{agree_where, agrees, f32s, le_bytes, report, Arg, Case, Data, Exp2Model, POISON};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tegula_cuda::{CudaError, CudaRuntime, KernelParam, LoadedKernel};
use tegula_ptx::{compile, CompileOptions, Compiled, MmaChoice, ParamAbi, Target};

/// `exp2`'s results moved by 2 ulp, as a GPU's may be (see the module docs): an element is
/// compared only where the reference stays within the rule under each.
const SENSITIVITY: [Exp2Model; 4] = [
    Exp2Model::Fixed(2),
    Exp2Model::Fixed(-2),
    Exp2Model::Hashed(1),
    Exp2Model::Hashed(2),
];

/// Poisoned f32s before and after the output: 256 bytes, so that the output keeps the
/// alignment of the allocation.
const GUARD: usize = 64;

/// A target the cases are compiled for.
#[derive(Clone, Copy, Debug)]
struct Build {
    target: Target,
    mma: MmaChoice,
}

impl Build {
    fn options(&self) -> CompileOptions {
        CompileOptions {
            num_warps: 4,
            num_stages: 1,
            mma: self.mma,
            fp_fusion: false,
            tma: false,
        }
    }
}

/// sm_80 code on `mma.sync`, and the GPU's own target's (the compiler's choice of tensor-core
/// instructions) when it is another.
fn builds(compute_capability: (u32, u32)) -> Vec<Build> {
    let mut builds = vec![Build {
        target: Target { sm: 80 },
        mma: MmaChoice::Sync,
    }];
    let own = Target::for_compute_capability(compute_capability.0, compute_capability.1);
    if own.sm != 80 {
        builds.push(Build {
            target: own,
            mma: MmaChoice::Auto,
        });
    }
    builds
}

/// The interpreter's result for a case, and the elements a GPU's result must agree on.
struct Reference {
    want: Vec<f32>,
    scale: Vec<f64>,
    compared: Vec<bool>,
}

impl Reference {
    fn new(case: &Case, data: &Data) -> Result<Reference, String> {
        let want = data.interpret(case, &case.trace())?;
        let scale = data.scale(case, &want);
        let mut compared = vec![true; want.len()];
        if case.expr.has_exp2() {
            for model in SENSITIVITY {
                let moved = data.interpret(case, &case.trace_with(model))?;
                for (i, c) in compared.iter_mut().enumerate() {
                    *c &= agrees(case.exact(), want[i], moved[i], scale[i]);
                }
            }
        }
        Ok(Reference {
            want,
            scale,
            compared,
        })
    }

    /// Elements not compared.
    fn uncompared(&self) -> u64 {
        self.compared.iter().filter(|&&c| !c).count() as u64
    }

    fn check(&self, case: &Case, got: &[f32], side: &str) -> Result<(), String> {
        agree_where(case, &self.want, got, &self.scale, side, |i| {
            self.compared[i]
        })
    }
}

/// The bytes each buffer argument is sent as, by argument index: the output between its
/// guards.
fn sent(case: &Case, args: &[Arg]) -> Vec<(usize, Vec<u8>)> {
    let guard = le_bytes(&[POISON; GUARD]);
    args.iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            Arg::Buf(bytes) if i == case.out_arg() => {
                Some((i, [&guard[..], bytes, &guard].concat()))
            }
            Arg::Buf(bytes) => Some((i, bytes.clone())),
            Arg::I32(_) => None,
        })
        .collect()
}

/// The output, from the bytes the buffers of [`sent`] came back as; `Err` when an input or a
/// guard changed.
fn received(case: &Case, sent: &[(usize, Vec<u8>)], back: &[Vec<u8>]) -> Result<Vec<f32>, String> {
    let mut out = None;
    for ((i, before), after) in sent.iter().zip(back) {
        let changed =
            |a: &[u8], b: &[u8]| a.chunks(4).zip(b.chunks(4)).filter(|(x, y)| x != y).count();
        if *i == case.out_arg() {
            let g = GUARD * 4;
            let n = after.len() - 2 * g;
            let (low, high) = (
                changed(&before[..g], &after[..g]),
                changed(&before[g + n..], &after[g + n..]),
            );
            if low + high > 0 {
                return Err(format!(
                    "the GPU stored outside the output: {low} of the {GUARD} f32s before it changed, {high} of those after it"
                ));
            }
            out = Some(f32s(&after[g..g + n]));
        } else if before != after {
            return Err(format!(
                "the GPU changed input argument {i}: {} of its {} 4-byte words",
                changed(before, after),
                before.len() / 4
            ));
        }
    }
    out.ok_or_else(|| "no output argument".to_string())
}

/// Launches `kernel` (compiled as `compiled`) on `case`'s inputs and waits for it; the output,
/// checked by [`received`].
fn launch(
    rt: &CudaRuntime,
    kernel: &LoadedKernel,
    compiled: &Compiled,
    case: &Case,
    data: &Data,
) -> Result<Result<Vec<f32>, String>, CudaError> {
    let args = data.args();
    let sent = sent(case, &args);
    let mut bufs = Vec::new();
    for (_, bytes) in &sent {
        let buf = rt.alloc_uninit(bytes.len())?;
        rt.htod(&buf, bytes)?;
        bufs.push(buf);
    }
    assert_eq!(args.len(), compiled.params.len(), "the kernel's parameters");
    let mut params = Vec::new();
    let mut buf = bufs.iter();
    for (i, (arg, abi)) in args.iter().zip(&compiled.params).enumerate() {
        params.push(match (arg, abi) {
            (Arg::Buf(_), ParamAbi::Pointer { .. }) => {
                let at = if i == case.out_arg() { GUARD * 4 } else { 0 };
                let buf = buf.next().expect("a buffer for each pointer");
                buf.param_at(at).expect("inside the buffer")
            }
            (Arg::I32(v), ParamAbi::Scalar { bytes: 4, .. }) => KernelParam::I32(*v),
            _ => panic!("argument {i} does not match the kernel's parameter {abi:?}"),
        });
    }
    rt.launch(
        kernel,
        [case.programs, 1, 1],
        [compiled.num_threads, 1, 1],
        compiled.shared_bytes,
        &params,
    )?;
    rt.synchronize()?;
    let mut back = Vec::new();
    for buf in &bufs {
        let mut bytes = vec![0u8; buf.len()];
        rt.dtoh(buf, &mut bytes)?;
        back.push(bytes);
    }
    Ok(received(case, &sent, &back))
}

/// A case that did not agree.
struct Failure {
    case: Box<Case>,
    target: Option<String>,
    why: String,
    /// The kernel faulted: the context is unusable after it.
    fault: bool,
    /// The launch's place in the order of launches, when the launch or its wait failed.
    launch: Option<u64>,
}

/// What the threads share.
struct Gpu {
    rt: CudaRuntime,
    builds: Vec<Build>,
    /// The launches so far; held through each launch and its wait.
    launches: Mutex<u64>,
    /// Programs that agreed, per build.
    agreed: Vec<AtomicU64>,
    uncompared: AtomicU64,
    /// Programs with elements left uncompared.
    partly: AtomicU64,
}

impl Gpu {
    /// Runs `case` on every build; `Err` at the first that does not agree.
    fn run(&self, case: &Case) -> Result<(), Failure> {
        let fail = |target: Option<&Build>, why: String| Failure {
            case: Box::new(case.clone()),
            target: target.map(|b| b.target.target_name()),
            why,
            fault: false,
            launch: None,
        };
        let data = case.data();
        let reference = Reference::new(case, &data).map_err(|why| fail(None, why))?;
        let kernel = case.trace();
        for (b, build) in self.builds.iter().enumerate() {
            let compiled = compile(&kernel, &build.target, &build.options())
                .map_err(|e| fail(Some(build), format!("the backend refused it: {e}")))?;
            let loaded = self
                .rt
                .load(&compiled.ptx, &compiled.entry, &|_| None)
                .map_err(|e| Failure {
                    fault: e.is_kernel_fault(),
                    ..fail(Some(build), format!("the driver refused its PTX: {e}"))
                })?;
            let got = {
                let mut launches = self.launches.lock().unwrap_or_else(|p| p.into_inner());
                *launches += 1;
                launch(&self.rt, &loaded, &compiled, case, &data).map_err(|e| Failure {
                    fault: e.is_kernel_fault(),
                    launch: Some(*launches),
                    ..fail(Some(build), format!("the GPU: {e}"))
                })?
            };
            let side = format!("GPU ({})", build.target.target_name());
            got.and_then(|got| reference.check(case, &got, &side))
                .map_err(|why| fail(Some(build), why))?;
            self.agreed[b].fetch_add(1, Ordering::Relaxed);
        }
        let uncompared = reference.uncompared();
        if uncompared > 0 {
            self.uncompared.fetch_add(uncompared, Ordering::Relaxed);
            self.partly.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Runs `run` on the two programs of each seed from `first` on, on `threads` threads, until
/// about `seconds` have passed (and at least 5 seeds ran) or a program failed. Returns how many
/// seeds were handed out and the failures, the one to blame first ([`blame`]).
fn on_threads(
    threads: usize,
    seconds: f64,
    first: u64,
    run: &(dyn Fn(&Case) -> Result<(), Failure> + Sync),
) -> (u64, Vec<Failure>) {
    let start = Instant::now();
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    let work = || {
        while !stop.load(Ordering::Relaxed) {
            // Seeds are handed out in order and a thread finishes the seed it holds, so every
            // seed below a failing one is checked.
            if start.elapsed().as_secs_f64() > seconds && next.load(Ordering::Relaxed) >= 5 {
                break;
            }
            let seed = first + next.fetch_add(1, Ordering::Relaxed);
            for case in Case::pair(seed) {
                if let Err(f) = run(&case) {
                    stop.store(true, Ordering::Relaxed);
                    failures.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                    break;
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(work);
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    blame(&mut failures);
    (next.into_inner(), failures)
}

/// Puts first the failure to report: the first launch that faulted (a fault leaves the context
/// unusable, so the calls after it fail too), else the lowest seed.
fn blame(failures: &mut [Failure]) {
    failures.sort_by_key(|f| {
        let faulted = f.launch.filter(|_| f.fault);
        (faulted.is_none(), faulted, f.case.seed)
    });
}

/// The GPU's runtime, after checking that the GPU tests were asked for (`TEGULA_GPU_TESTS=1`)
/// and that there is a GPU: otherwise the test fails, saying which.
fn gpu() -> CudaRuntime {
    let asked = std::env::var("TEGULA_GPU_TESTS").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "on" | "yes"
        )
    });
    assert!(
        asked,
        "GPU tests run with TEGULA_GPU_TESTS=1 on a machine with a GPU: \
         TEGULA_GPU_TESTS=1 cargo test -- --ignored"
    );
    CudaRuntime::new(0).unwrap_or_else(|e| panic!("TEGULA_GPU_TESTS=1, but no GPU: {e}"))
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn random_programs_agree_on_the_interpreter_and_the_gpu() {
    let rt = gpu();
    let info = rt.device_info();
    let builds = builds(info.compute_capability);
    let (seconds, first) = fuzz::settings(60.0);
    let threads = std::env::var("TEGULA_FUZZ_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let shared = Gpu {
        rt,
        agreed: builds.iter().map(|_| AtomicU64::new(0)).collect(),
        builds,
        launches: Mutex::new(0),
        uncompared: AtomicU64::new(0),
        partly: AtomicU64::new(0),
    };
    let start = Instant::now();
    let (seeds, failures) = on_threads(threads, seconds, first, &|case| shared.run(case));
    let agreed: Vec<String> = shared
        .builds
        .iter()
        .zip(&shared.agreed)
        .map(|(b, n)| format!("{} {}", b.target.target_name(), n.load(Ordering::Relaxed)))
        .collect();
    eprintln!(
        "gpu fuzz: programs that agreed: {} (seeds {first}..={}, two programs each) on {} (sm_{}) in {:.1} s, {threads} threads; {} elements of {} programs not compared (decided by exp2's last bits)",
        agreed.join(", "),
        first + seeds.max(1) - 1,
        info.name,
        info.sm(),
        start.elapsed().as_secs_f64(),
        shared.uncompared.load(Ordering::Relaxed),
        shared.partly.load(Ordering::Relaxed),
    );
    if let Some(f) = failures.first() {
        let others: Vec<String> = failures[1..]
            .iter()
            .map(|f| f.case.seed.to_string())
            .collect();
        panic!(
            "{}{}{}",
            report(&f.case, &f.why),
            f.target
                .as_ref()
                .map_or(String::new(), |t| format!("\ntarget: {t}")),
            if others.is_empty() {
                String::new()
            } else {
                format!(
                    "\nother failing seeds (stopped at the first): {}",
                    others.join(", ")
                )
            }
        );
    }
}

// --- the allowances and the checks, without a GPU ------------------------------------------

/// An `exp2` off by up to 2 ulp in a pattern [`SENSITIVITY`] does not hold (a hash of the
/// operand with other salts) passes the GPU's comparison.
#[test]
fn exp2_within_two_ulp_passes() {
    let (mut programs, mut uncompared) = (0, 0);
    for seed in 1..=150 {
        for case in Case::pair(seed) {
            if !case.expr.has_exp2() {
                continue;
            }
            let data = case.data();
            let reference = Reference::new(&case, &data).unwrap();
            let model = Exp2Model::Hashed(1_000_003 + seed as i64);
            let got = data.interpret(&case, &case.trace_with(model)).unwrap();
            if let Err(why) = reference.check(&case, &got, "model of a 2-ulp exp2") {
                panic!("{}", report(&case, &why));
            }
            programs += 1;
            uncompared += reference.uncompared();
        }
    }
    assert!(programs > 20, "only {programs} programs take exp2");
    eprintln!("{programs} programs with exp2 passed, {uncompared} elements not compared");
}

/// The GPU's comparison reports a result one ulp off in an exact program, and an inexact one
/// off by more than the tolerance.
#[test]
fn a_wrong_result_is_reported() {
    let mut seen = [false; 2];
    for seed in 1.. {
        let case = Case::random(seed);
        let exact = case.exact();
        if seen[exact as usize] || case.expr.has_exp2() {
            continue;
        }
        let data = case.data();
        let reference = Reference::new(&case, &data).unwrap();
        let mut got = reference.want.clone();
        reference.check(&case, &got, "copy").unwrap();
        // An element the kernel stored: the first finite one that is not the poison.
        let i = got
            .iter()
            .position(|&v| v != POISON && v.is_finite())
            .unwrap();
        got[i] = if exact {
            f32::from_bits(got[i].to_bits() + 1)
        } else {
            got[i] + 1e-3 * reference.scale[i] as f32
        };
        assert!(
            reference.check(&case, &got, "GPU").is_err(),
            "seed {seed}: a wrong element {i} passed"
        );
        seen[exact as usize] = true;
        if seen == [true; 2] {
            break;
        }
    }
}

/// A changed input or guard word is reported.
#[test]
fn a_store_outside_the_output_is_reported() {
    let case = Case::random(1);
    let args = case.data().args();
    let sent = sent(&case, &args);
    let back: Vec<Vec<u8>> = sent.iter().map(|(_, b)| b.clone()).collect();
    let out = received(&case, &sent, &back).unwrap();
    assert_eq!(out.len(), case.numel());
    assert!(out.iter().all(|&v| v == POISON));
    let j = sent.iter().position(|(i, _)| *i == case.out_arg()).unwrap();
    for at in [0, sent[j].1.len() - 1] {
        let mut wrong = back.clone();
        wrong[j][at] ^= 1;
        let why = received(&case, &sent, &wrong).unwrap_err();
        assert!(why.contains("outside the output"), "{why}");
    }
    let mut wrong = back.clone();
    wrong[0][0] ^= 1;
    assert!(received(&case, &sent, &wrong)
        .unwrap_err()
        .contains("input argument 0"));
}

/// The threads stop at a failure and report the lowest failing seed, or after the time with at
/// least 5 seeds; a fault is blamed on the first launch that faulted.
#[test]
fn the_first_failure_is_blamed() {
    let failure = |seed: u64, fault: bool, launch: Option<u64>| Failure {
        case: Box::new(Case::random(seed)),
        target: None,
        why: "wrong".into(),
        fault,
        launch,
    };
    let (seeds, failures) = on_threads(4, 0.0, 1, &|_| Ok(()));
    assert!(seeds >= 5 && failures.is_empty());
    let (seeds, failures) = on_threads(4, 1e9, 1, &|case| match case.seed {
        17.. => Err(failure(case.seed, false, None)),
        _ => Ok(()),
    });
    assert!(seeds >= 17);
    assert_eq!(failures[0].case.seed, 17);
    let mut failures = vec![
        failure(3, false, None),
        failure(9, true, Some(12)),
        failure(5, true, None),
        failure(7, true, Some(11)),
        failure(2, false, Some(4)),
    ];
    blame(&mut failures);
    let order: Vec<u64> = failures.iter().map(|f| f.case.seed).collect();
    assert_eq!(order, [7, 9, 2, 3, 5]);
}
