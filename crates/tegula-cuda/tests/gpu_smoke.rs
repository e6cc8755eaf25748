//! GPU test of tegula-cuda on a real device: the driver paths that only a GPU can exercise
//! (device info, JIT + cubin disk cache, checked launch, an empty grid that launches nothing,
//! dynamic shared memory past 48 KB, fills/copies, cudarc interop on a second stream, event
//! timing, a JIT error mapped to source, and, last (it breaks the context), a faulting kernel
//! named at synchronize). One test, since the checks share a context and the last one breaks
//! it; it fails at the first failed check.
//!
//! Ignored without a GPU (CI has none): `TEGULA_GPU_TESTS=1 cargo test --release -p tegula-cuda
//! --test gpu_smoke -- --ignored` runs it (see the README's tests section). Asked to run
//! without `TEGULA_GPU_TESTS=1` or without a GPU, it fails, saying which.

use std::sync::Arc;
use tegula_cuda::cudarc::driver::{sys, CudaContext, CudaSlice};
use tegula_cuda::{CudaError, CudaRuntime, DiskCache, KernelParam};

/// out[i] = alpha * x[i] + y[i] over f32, for i < n.
const SAXPY: &str = r#".version 8.0
.target sm_80
.address_size 64

.visible .entry saxpy(
	.param .u64 saxpy_param_0,
	.param .u64 saxpy_param_1,
	.param .u64 saxpy_param_2,
	.param .u32 saxpy_param_3,
	.param .f32 saxpy_param_4
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<5>;
	.reg .b64 %rd<11>;

	ld.param.u64 %rd1, [saxpy_param_0];
	ld.param.u64 %rd2, [saxpy_param_1];
	ld.param.u64 %rd3, [saxpy_param_2];
	ld.param.u32 %r1, [saxpy_param_3];
	ld.param.f32 %f1, [saxpy_param_4];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd4, %rd1;
	cvta.to.global.u64 %rd5, %rd2;
	cvta.to.global.u64 %rd6, %rd3;
	mul.wide.u32 %rd7, %r5, 4;
	add.s64 %rd8, %rd4, %rd7;
	add.s64 %rd9, %rd5, %rd7;
	add.s64 %rd10, %rd6, %rd7;
	ld.global.f32 %f2, [%rd8];
	ld.global.f32 %f3, [%rd9];
	fma.rn.f32 %f4, %f1, %f2, %f3;
	st.global.f32 [%rd10], %f4;
DONE:
	ret;
}

// Dynamic shared memory: declared at module scope, sized by the launch.
.extern .shared .align 16 .b8 dyn_smem[];

// Each thread writes tid*3 at the far end of `bytes` of dynamic shared memory, then reads its
// mirror thread's value: out[tid] = (ntid-1-tid)*3.
.visible .entry smem_mirror(
	.param .u64 smem_mirror_param_0,
	.param .u32 smem_mirror_param_1
)
{
	.reg .b32 %r<12>;
	.reg .b64 %rd<4>;

	ld.param.u64 %rd1, [smem_mirror_param_0];
	ld.param.u32 %r1, [smem_mirror_param_1];
	mov.u32 %r2, %tid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, dyn_smem;
	add.s32 %r4, %r4, %r1;
	sub.s32 %r4, %r4, 4;
	shl.b32 %r5, %r2, 2;
	sub.s32 %r6, %r4, %r5;
	mul.lo.s32 %r7, %r2, 3;
	st.shared.u32 [%r6], %r7;
	bar.sync 0;
	sub.s32 %r8, %r3, 1;
	sub.s32 %r8, %r8, %r2;
	shl.b32 %r9, %r8, 2;
	sub.s32 %r10, %r4, %r9;
	ld.shared.u32 %r11, [%r10];
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r2, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2], %r11;
	ret;
}

// Stores through the pointer it is given: with a bad pointer, an asynchronous fault.
.visible .entry poke(
	.param .u64 poke_param_0
)
{
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [poke_param_0];
	st.global.u32 [%rd1], 7;
	ret;
}
"#;

/// Line 9 uses an undeclared register; `// loc` comments carry source locations.
const BROKEN: &str = ".version 8.0
.target sm_80
.address_size 64
.visible .entry broken(.param .u64 broken_param_0)
{
	.reg .f32 %f<3>;
	// loc kernels/broken.rs:7:13
	mov.f32 %f1, 0f3F800000;
	add.f32 %f2, %f1, %f9;
	ret;
}
";

fn check(cond: bool, what: &str) -> Result<(), Box<dyn std::error::Error>> {
    if cond {
        println!("ok    {what}");
        Ok(())
    } else {
        Err(format!("FAILED {what}").into())
    }
}

/// Deterministic values in [-1, 1) (an LCG), so runs compare.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn loc_map(ptx: &str) -> impl Fn(usize) -> Option<String> + '_ {
    move |line| {
        let text = ptx.lines().nth(line.checked_sub(1)?)?;
        text.trim().strip_prefix("// loc ").map(str::to_string)
    }
}

/// Fails unless the GPU tests were asked for (`TEGULA_GPU_TESTS=1`) and a GPU is there.
fn require_gpu() {
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
    assert!(
        CudaRuntime::is_available(),
        "TEGULA_GPU_TESTS=1, but no CUDA driver and GPU are available"
    );
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn driver_paths_work_on_the_gpu() -> Result<(), Box<dyn std::error::Error>> {
    require_gpu();
    check(CudaRuntime::is_available(), "is_available")?;
    let rt = CudaRuntime::new(0)?;
    let info = rt.device_info();
    println!("{info:#?}");
    println!(
        "peak DRAM bandwidth (clock x bus): {:?} GB/s",
        info.peak_memory_bandwidth().map(|b| b / 1e9)
    );

    // JIT, then the disk cache in a fresh runtime, then a corrupt cache file.
    let cache_dir = std::env::temp_dir().join(format!("tegula-smoke-{}", std::process::id()));
    rt.set_disk_cache(Some(DiskCache::new(&cache_dir)));
    let t = std::time::Instant::now();
    let saxpy = rt.load(SAXPY, "saxpy", &|_| None)?;
    println!("first load (JIT) {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
    check(!saxpy.from_disk_cache(), "first load is a JIT")?;
    println!("saxpy resources: {:?}", saxpy.resources());
    println!("JIT info log:\n{}", saxpy.jit_info_log());
    // ptxas's spill lines appear only when ptxas ran (not on a hit in the driver's own JIT cache).
    let r = saxpy.resources();
    check(
        r.local_bytes_per_thread == 0 && r.spill.is_none_or(|s| s == (0, 0, 0)),
        "no spills reported",
    )?;
    check(
        Arc::ptr_eq(&saxpy, &rt.load(SAXPY, "saxpy", &|_| None)?),
        "in-memory cache hit",
    )?;
    let rt2 = CudaRuntime::new(0)?;
    rt2.set_disk_cache(Some(DiskCache::new(&cache_dir)));
    let t = std::time::Instant::now();
    let cached = rt2.load(SAXPY, "saxpy", &|_| None)?;
    println!(
        "load from disk cache {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    check(
        cached.from_disk_cache(),
        "second runtime loads the cubin from disk",
    )?;
    check(
        cached.resources() == saxpy.resources(),
        "same resources from the cached cubin",
    )?;
    for entry in std::fs::read_dir(&cache_dir)? {
        let path = entry?.path();
        let mut bytes = std::fs::read(&path)?;
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, bytes)?;
    }
    let rt3 = CudaRuntime::new(0)?;
    rt3.set_disk_cache(Some(DiskCache::new(&cache_dir)));
    check(
        !rt3.load(SAXPY, "saxpy", &|_| None)?.from_disk_cache(),
        "corrupt cache file ignored, JIT again",
    )?;
    drop((rt2, rt3, cached));

    // saxpy on an odd size against a host f64 reference.
    let n = 1_000_003usize;
    let (x, y) = (values(n, 1), values(n, 2));
    let alpha = 1.7f32;
    let dx = rt.alloc(n * 4)?;
    let dy = rt.alloc(n * 4)?;
    let dout = rt.alloc_uninit(n * 4)?;
    rt.htod(&dx, &bytes_of(&x))?;
    rt.htod(&dy, &bytes_of(&y))?;
    rt.fill_u32(&dout, 0x7fc0_0000)?; // NaN poison
    let grid = [n.div_ceil(256) as u32, 1, 1];
    let args = [
        dx.param(),
        dy.param(),
        dout.param(),
        KernelParam::U32(n as u32),
        KernelParam::F32(alpha),
    ];
    rt.launch(&saxpy, grid, [256, 1, 1], 0, &args)?;
    rt.synchronize()?;
    let mut out = vec![0u8; n * 4];
    rt.dtoh(&dout, &mut out)?;
    let out = f32s(&out);
    let max_err = (0..n)
        .map(|i| (out[i] as f64 - (alpha as f64 * x[i] as f64 + y[i] as f64)).abs())
        .fold(0.0, f64::max);
    println!("saxpy max abs error vs f64: {max_err:e}");
    check(
        max_err < 1e-6 && out.iter().all(|v| v.is_finite()),
        "saxpy matches the f64 reference",
    )?;

    // An empty grid launches nothing and succeeds (the interpreter's rule too).
    rt.fill_u32(&dout, 0x7fc0_0000)?;
    for empty in [[0, 1, 1], [4, 0, 1], [1, 1, 0]] {
        rt.launch(&saxpy, empty, [256, 1, 1], 0, &args)?;
    }
    rt.synchronize()?;
    let mut untouched = vec![0u8; n * 4];
    rt.dtoh(&dout, &mut untouched)?;
    check(
        f32s(&untouched).iter().all(|v| v.is_nan()),
        "an empty grid launches nothing",
    )?;

    // Argument checks before the driver sees them.
    let e = rt
        .launch(&saxpy, grid, [256, 1, 1], 0, &args[..4])
        .unwrap_err();
    check(
        matches!(e, CudaError::Params { .. }),
        &format!("missing argument refused: {e}"),
    )?;
    let e = rt.launch(&saxpy, grid, [2048, 1, 1], 0, &args).unwrap_err();
    check(
        matches!(e, CudaError::Launch { .. }),
        &format!("oversized block refused: {e}"),
    )?;

    // memset and dtod.
    let small = rt.alloc(10)?;
    rt.memset_d8(&small, 0xab)?;
    let copy = rt.alloc(10)?;
    rt.dtod(&copy, &small)?;
    let mut host = [0u8; 10];
    rt.dtoh(&copy, &mut host)?;
    check(host == [0xab; 10], "memset_d8 + dtod")?;
    let half = rt.alloc(6)?;
    rt.fill_u16(&half, 0x7e00)?;
    let mut h = [0u8; 6];
    rt.dtoh(&half, &mut h)?;
    check(h == [0x00, 0x7e, 0x00, 0x7e, 0x00, 0x7e], "fill_u16")?;
    let mut zero = vec![1u8; 4096];
    rt.dtoh(&rt.alloc(4096)?, &mut zero)?;
    check(zero.iter().all(|&b| b == 0), "alloc is zeroed")?;

    // Dynamic shared memory past 48 KB.
    let mirror = rt.load(SAXPY, "smem_mirror", &|_| None)?;
    let smem = 160 * 1024u32;
    let threads = 1024u32;
    let dm = rt.alloc_uninit(threads as usize * 4)?;
    rt.launch(
        &mirror,
        [1, 1, 1],
        [threads, 1, 1],
        smem,
        &[dm.param(), KernelParam::U32(smem)],
    )?;
    let mut m = vec![0u8; threads as usize * 4];
    rt.dtoh(&dm, &mut m)?;
    let want: Vec<u8> = (0..threads)
        .flat_map(|t| ((threads - 1 - t) * 3).to_le_bytes())
        .collect();
    check(m == want, "160 KB of dynamic shared memory")?;
    let too_much = info.max_shared_per_block_optin + 1;
    let e = rt
        .launch(
            &mirror,
            [1, 1, 1],
            [32, 1, 1],
            too_much,
            &[dm.param(), KernelParam::U32(too_much)],
        )
        .unwrap_err();
    check(
        matches!(e, CudaError::SharedMemory { .. }),
        &format!("too much shared memory refused: {e}"),
    )?;

    // Timing and host launch overhead.
    let ms = rt.time(|| {
        for _ in 0..20 {
            rt.launch(&saxpy, grid, [256, 1, 1], 0, &args)?;
        }
        Ok(())
    })?;
    println!(
        "saxpy: {:.1} us per launch, {:.0} GB/s",
        ms * 1e3 / 20.0,
        20.0 * 12.0 * n as f64 / (ms as f64 * 1e-3) / 1e9
    );
    check(ms > 0.0, "event timing")?;
    let tiny = [
        dx.param(),
        dy.param(),
        dout.param(),
        KernelParam::U32(1),
        KernelParam::F32(alpha),
    ];
    rt.synchronize()?;
    // Host cost of launch() over a bare cuLaunchKernel of the same function, in batches short
    // enough not to fill the launch queue (a full queue would time the GPU, not the host).
    let (batch, rounds) = (500, 20);
    let (mut ours, mut raw) = (f64::MAX, f64::MAX);
    let mut slots: Vec<u64> = vec![
        dx.device_ptr(),
        dy.device_ptr(),
        dout.device_ptr(),
        1,
        alpha.to_bits() as u64,
    ];
    for _ in 0..rounds {
        let t = std::time::Instant::now();
        for _ in 0..batch {
            rt.launch(&saxpy, [1, 1, 1], [32, 1, 1], 0, &tiny)?;
        }
        ours = ours.min(t.elapsed().as_secs_f64() * 1e6 / batch as f64);
        rt.synchronize()?;
        let mut ptrs: Vec<*mut std::ffi::c_void> =
            slots.iter_mut().map(|s| s as *mut u64 as *mut _).collect();
        let t = std::time::Instant::now();
        for _ in 0..batch {
            // SAFETY: the function is loaded in the current context (bound by the launches above),
            // and `ptrs` points at five 8-byte argument slots matching saxpy's signature.
            let r = unsafe {
                sys::cuLaunchKernel(
                    saxpy.cu_function(),
                    1,
                    1,
                    1,
                    32,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            r.result()?;
        }
        raw = raw.min(t.elapsed().as_secs_f64() * 1e6 / batch as f64);
        rt.synchronize()?;
    }
    println!(
        "host time per launch: tegula {ours:.2} us, raw cuLaunchKernel {raw:.2} us, added {:.2} us",
        ours - raw
    );
    check(ours - raw < 5.0, "launch() adds under 5 us of host time")?;

    // cudarc interop on a second stream (multi-stream mode: cudarc's events are live).
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let rts = CudaRuntime::with_stream(stream.clone())?;
    let kx: CudaSlice<f32> = stream.clone_htod(&x)?;
    let ky: CudaSlice<f32> = stream.clone_htod(&y)?;
    let mut kout: CudaSlice<f32> = stream.alloc_zeros(n)?;
    let k = rts.load(SAXPY, "saxpy", &|_| None)?;
    {
        let (bx, by) = (rts.borrow_slice(&kx)?, rts.borrow_slice(&ky)?);
        let bo = rts.borrow_slice_mut(&mut kout)?;
        let a = [
            bx.param(),
            by.param(),
            bo.param(),
            KernelParam::U32(n as u32),
            KernelParam::F32(2.0),
        ];
        rts.launch(&k, grid, [256, 1, 1], 0, &a)?;
    }
    let back = stream.clone_dtoh(&kout)?;
    check(
        (0..n).all(|i| back[i] == 2.0f32.mul_add(x[i], y[i])),
        "borrowed cudarc slices, results read by cudarc",
    )?;
    // Adopt -> launch -> hand back; and an owned buffer handed to cudarc typed.
    let adopted = rts.adopt(kout).map_err(|_| "adopt refused")?;
    let a = [
        adopted.param(),
        adopted.param(),
        adopted.param(),
        KernelParam::U32(n as u32),
        KernelParam::F32(1.0),
    ];
    rts.launch(&k, grid, [256, 1, 1], 0, &a)?; // out = 2 * out
    let kout: CudaSlice<f32> = adopted.into_cuda_slice().map_err(|_| "hand back refused")?;
    let back2 = stream.clone_dtoh(&kout)?;
    check(
        (0..n).all(|i| back2[i] == 2.0 * back[i]),
        "adopted slice handed back with the kernel's writes",
    )?;
    let owned = rts.alloc(12)?;
    rts.htod(&owned, &bytes_of(&[1.0, 2.0, 3.0]))?;
    let typed: CudaSlice<f32> = owned
        .into_cuda_slice()
        .map_err(|_| "owned buffer refused")?;
    check(
        stream.clone_dtoh(&typed)? == vec![1.0, 2.0, 3.0],
        "owned buffer as CudaSlice<f32>",
    )?;
    drop((kx, ky, kout, typed, k, rts));

    // JIT error mapped to PTX line and source.
    let e = rt.load(BROKEN, "broken", &loc_map(BROKEN)).unwrap_err();
    println!("{e}");
    match &e {
        CudaError::Jit(j) => {
            check(j.ptx_line == Some(9), "JIT error blames PTX line 9")?;
            check(
                j.source_loc.as_deref() == Some("kernels/broken.rs:7:13"),
                "JIT error maps to the source line",
            )?;
        }
        other => return Err(format!("expected a JIT error, got {other:?}").into()),
    }
    let e = rt.load(SAXPY, "nope", &|_| None).unwrap_err();
    check(
        matches!(e, CudaError::EntryNotFound { .. }),
        &format!("unknown entry: {e}"),
    )?;

    // Last: a fault, named at synchronize.
    let poke = rt.load(SAXPY, "poke", &|_| None)?;
    rt.launch(&saxpy, grid, [256, 1, 1], 0, &args)?;
    rt.launch(&poke, [1, 1, 1], [1, 1, 1], 0, &[KernelParam::Ptr(8)])?;
    let e = rt.synchronize().unwrap_err();
    println!("{e}");
    check(
        matches!(&e, CudaError::Launch { kernel, .. } if kernel == "poke"),
        "fault named at synchronize",
    )?;
    let _ = std::fs::remove_dir_all(&cache_dir);
    println!("all GPU checks passed");
    Ok(())
}
