//! The device runtime: discovery, module loading with the two caches, launch, synchronisation
//! and event timing. Memory lives in `memory.rs`.

use crate::cache::{sha256, CubinKey, DiskCache};
use crate::error::{describe, drv, is_fault};
use crate::jit::{self, JitFailure, Module};
use crate::jit_log;
use crate::params::{
    check_params, entry_names, entry_params, KernelParam, PackedParams, ParamDecl,
};
use crate::CudaError;
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream, DriverError};
use std::collections::HashMap;
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Dynamic shared memory a kernel may use without opting in.
const DEFAULT_DYNAMIC_SHARED_LIMIT: u32 = 48 * 1024;

/// What the driver says about the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// (major, minor), e.g. (9, 0) for H100/H200.
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub total_memory_bytes: u64,
    /// `cuDriverGetVersion`: 1000 * major + 10 * minor, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    /// Shared memory a block may use after opting in (`..._PER_BLOCK_OPTIN`).
    pub max_shared_per_block_optin: u32,
    /// Shared memory a block gets without opting in (48 KB).
    pub max_shared_per_block: u32,
    pub max_shared_per_sm: u32,
    pub l2_cache_bytes: u32,
    pub warp_size: u32,
    pub max_threads_per_block: u32,
    pub max_registers_per_block: u32,
    /// Peak memory clock in kHz and bus width in bits, where the driver still reports them
    /// (used for a theoretical bandwidth figure).
    pub memory_clock_khz: Option<u32>,
    pub memory_bus_width_bits: Option<u32>,
}

impl DeviceInfo {
    /// `major * 10 + minor`, e.g. 90.
    pub fn sm(&self) -> u32 {
        self.compute_capability.0 * 10 + self.compute_capability.1
    }

    /// Theoretical DRAM bandwidth in bytes per second (double data rate), if known.
    pub fn peak_memory_bandwidth(&self) -> Option<f64> {
        Some(2.0 * self.memory_clock_khz? as f64 * 1e3 * self.memory_bus_width_bits? as f64 / 8.0)
    }
}

/// Per-kernel resource figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources {
    pub registers_per_thread: u32,
    /// Local memory per thread (spills, and arrays the compiler could not keep in registers).
    pub local_bytes_per_thread: u32,
    pub static_shared_bytes: u32,
    pub const_bytes: u32,
    /// The most threads a block of this kernel can have (limited by its register use).
    pub max_threads_per_block: u32,
    /// Most dynamic shared memory a launch may ask for (device opt-in limit minus static).
    pub max_dynamic_shared_bytes: u32,
    /// PTX ISA and binary versions, e.g. 80 and 90.
    pub ptx_version: u32,
    pub binary_version: u32,
    /// (stack frame, spill stores, spill loads) bytes from the JIT's info log, when it printed them.
    pub spill: Option<(u32, u32, u32)>,
}

/// A kernel ready to launch. Keeps its module loaded.
#[derive(Debug)]
pub struct LoadedKernel {
    name: Arc<str>,
    function: Function,
    module: Arc<Module>,
    resources: Resources,
    /// Parameters from the PTX signature, checked on every launch.
    params: Option<Vec<ParamDecl>>,
    /// Dynamic shared memory the function is currently allowed (raised on demand).
    dynamic_shared_limit: AtomicU32,
    raise_lock: Mutex<()>,
    source: ModuleSource,
    jit_info_log: Arc<str>,
}

/// Where a loaded kernel's module came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// The driver's JIT compiled the PTX.
    Jit,
    /// The disk cache held the cubin of an earlier JIT.
    DiskCache,
    /// A cubin assembled ahead of time ([`CudaRuntime::provide_cubin`]).
    AheadOfTime,
}

#[derive(Debug, Clone, Copy)]
struct Function(sys::CUfunction);
// SAFETY: a CUfunction is a handle into a module that the owning `LoadedKernel` keeps loaded;
// the driver API accepts it from any thread.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

impl LoadedKernel {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn resources(&self) -> Resources {
        self.resources.clone()
    }
    /// True when the module came from the disk cache rather than a fresh JIT.
    pub fn from_disk_cache(&self) -> bool {
        self.source == ModuleSource::DiskCache
    }
    /// Where the module came from.
    pub fn source(&self) -> ModuleSource {
        self.source
    }
    /// The JIT's verbose info log (ptxas resource lines), cached with the cubin.
    pub fn jit_info_log(&self) -> &str {
        &self.jit_info_log
    }
    /// The raw `CUfunction`, for callers that launch through cudarc themselves. Valid while `self` lives.
    pub fn cu_function(&self) -> sys::CUfunction {
        self.function.0
    }
}

/// Whether the driver library can be loaded. Asked once per process.
///
/// The probe is tegula's own, not cudarc's `is_culib_present`, which exists only when cudarc is
/// built with `dynamic-loading`: tegula asks cudarc for `fallback-dynamic-loading`, so a crate
/// beside it that asks for `dynamic-linking` (candle's `cuda` feature) gets a linked libcuda
/// and this probe must still compile. Under dynamic linking the library is already mapped (the
/// program would not have started without it) and the probe finds it; under dynamic loading it
/// dlopens the names cudarc's loader tries first. A library that loads but lacks a symbol
/// cudarc resolves is caught later (`device_count`'s `catch_unwind`).
pub fn driver_library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        DRIVER_LIBRARY_NAMES.iter().any(|&name| {
            // SAFETY: loading libcuda runs only its initialisers; the handle is closed again
            // when it drops at the end of this closure.
            unsafe { libloading::Library::new(name) }.is_ok()
        })
    })
}

/// The driver library's names, in the order cudarc's dynamic loader tries the common ones.
const DRIVER_LIBRARY_NAMES: &[&str] = if cfg!(windows) {
    &["nvcuda.dll", "cuda.dll"]
} else if cfg!(target_os = "macos") {
    &["libcuda.dylib"]
} else {
    &["libcuda.so", "libcuda.so.1"]
};

/// Makes the device's default memory pool keep the memory freed into it across
/// synchronisations (release threshold: unlimited). Buffers come from `cuMemAllocAsync` and go
/// back with `cuMemFreeAsync`; at the default threshold of 0 every synchronisation returns the
/// pool's free memory to the OS, and the next allocation maps it again, on the host, while the
/// GPU waits for the launch behind it. The attention backward's f32 dQ buffer (268 MB at
/// [4, 32, 4096, 128]) paid that on every call. Only for contexts tegula opens itself: a
/// stream lent by another library ([`CudaRuntime::with_stream`]) keeps that library's policy.
fn keep_freed_memory_pooled(ctx: &CudaContext) -> Result<(), CudaError> {
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer and `cu_device` a device of this driver.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
        .result()
        .map_err(drv("cuDeviceGetDefaultMemPool"))?;
    let mut threshold = u64::MAX;
    // SAFETY: the release threshold attribute takes a pointer to a u64 (cuuint64_t), which
    // `threshold` is, alive for the call; `pool` came from the driver just above.
    unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
    }
    .result()
    .map_err(drv("cuMemPoolSetAttribute"))
}

/// Number of CUDA devices; never panics.
pub fn device_count() -> Result<usize, CudaError> {
    if !driver_library_present() {
        return Err(CudaError::NoDriver);
    }
    // A libcuda without a symbol cudarc resolves makes cudarc panic; treat that as no driver.
    let counted = catch_unwind(|| -> Result<i32, DriverError> {
        result::init()?;
        result::device::get_count()
    });
    match counted {
        Err(_) => Err(CudaError::NoDriver),
        Ok(Err(e)) => Err(init_error(e)),
        Ok(Ok(n)) if n <= 0 => Err(CudaError::NoDevice),
        Ok(Ok(n)) => Ok(n as usize),
    }
}

/// Loads and initialises the driver (`cuInit`) for host-only calls that need no context, such as
/// encoding a tensor map. Never panics; the errors are `device_count`'s.
pub(crate) fn init_driver() -> Result<(), CudaError> {
    if !driver_library_present() {
        return Err(CudaError::NoDriver);
    }
    match catch_unwind(result::init) {
        Err(_) => Err(CudaError::NoDriver),
        Ok(Err(e)) => Err(init_error(e)),
        Ok(Ok(())) => Ok(()),
    }
}

/// A failed `cuInit` (or device count) as our error.
fn init_error(e: DriverError) -> CudaError {
    match e.0 {
        sys::CUresult::CUDA_ERROR_NO_DEVICE => CudaError::NoDevice,
        // The toolkit's stub libcuda.so answers every call with this.
        sys::CUresult::CUDA_ERROR_STUB_LIBRARY => CudaError::NoDriver,
        _ => CudaError::driver("cuInit", e),
    }
}

/// One device context and one stream, with the module caches. Cloning shares them.
#[derive(Clone, Debug)]
pub struct CudaRuntime {
    pub(crate) inner: Arc<Inner>,
}

/// A loaded module with its JIT info log and whether it came from the disk cache.
type ModuleEntry = (Arc<Module>, Arc<str>, ModuleSource);
/// A cubin offered for a PTX and ptxas's log of it.
type ProvidedCubin = (Arc<[u8]>, Arc<str>);
type KernelMap = HashMap<[u8; 32], HashMap<String, Arc<LoadedKernel>>>;

#[derive(Debug)]
pub(crate) struct Inner {
    kernels: Mutex<KernelMap>,
    modules: Mutex<HashMap<[u8; 32], ModuleEntry>>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) ctx: Arc<CudaContext>,
    info: DeviceInfo,
    disk: Mutex<Option<Arc<DiskCache>>>,
    /// Cubins assembled ahead of time for PTX not yet loaded, by the PTX's hash
    /// ([`CudaRuntime::provide_cubin`]).
    provided: Mutex<HashMap<[u8; 32], ProvidedCubin>>,
    /// The most recent launch since the last successful synchronisation, for naming async faults.
    last_launch: Mutex<Option<Arc<str>>>,
    launches_since_sync: AtomicU64,
    launch_blocking: AtomicBool,
}

impl CudaRuntime {
    /// True when the driver loads and reports at least one device. Never panics.
    pub fn is_available() -> bool {
        device_count().is_ok()
    }

    /// The primary context of device `ordinal`, working on its legacy default stream.
    pub fn new(ordinal: usize) -> Result<Self, CudaError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::InvalidOrdinal { ordinal, count });
        }
        let ctx = catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| CudaError::NoDriver)?
            .map_err(drv("cuDevicePrimaryCtxRetain"))?;
        keep_freed_memory_pooled(&ctx)?;
        let stream = ctx.default_stream();
        Self::with_stream(stream)
    }

    /// A runtime that launches on a cudarc stream owned by someone else (candle, for example),
    /// so tegula kernels order with that library's work without extra synchronisation.
    pub fn with_stream(stream: Arc<CudaStream>) -> Result<Self, CudaError> {
        let ctx = stream.context().clone();
        let info = query_device_info(&ctx)?;
        Ok(CudaRuntime {
            inner: Arc::new(Inner {
                kernels: Mutex::new(HashMap::new()),
                modules: Mutex::new(HashMap::new()),
                stream,
                ctx,
                info,
                disk: Mutex::new(None),
                provided: Mutex::new(HashMap::new()),
                last_launch: Mutex::new(None),
                launches_since_sync: AtomicU64::new(0),
                launch_blocking: AtomicBool::new(false),
            }),
        })
    }

    /// Replaces the disk cache (None disables it) for modules not yet loaded in memory. A new
    /// runtime has none; `tegula`'s GPU backend sets the one its settings name
    /// (`TEGULA_CACHE_DIR`).
    pub fn set_disk_cache(&self, disk: Option<DiskCache>) {
        *self.inner.disk.lock().unwrap_or_else(|p| p.into_inner()) = disk.map(Arc::new);
    }

    /// Offers `cubin`, assembled ahead of time (by ptxas, for this GPU's architecture), as the
    /// module of `ptx`, with ptxas's `-v` output `log` (read for spills as a JIT log is): the
    /// first load of that PTX tries it before the disk cache and the JIT, and compiles the
    /// PTX as usual if the driver refuses it (another architecture, a damaged image). A
    /// module already loaded is kept.
    pub fn provide_cubin(&self, ptx: &str, cubin: Arc<[u8]>, log: Arc<str>) {
        let hash = sha256(ptx.as_bytes());
        (self.inner.provided.lock())
            .unwrap_or_else(|p| p.into_inner())
            .insert(hash, (cubin, log));
    }

    /// Makes every launch wait for its kernel, so that a fault is reported by the launch that
    /// made it. Off in a new runtime; `tegula`'s GPU backend sets it from its settings
    /// (`TEGULA_LAUNCH_BLOCKING`).
    pub fn set_launch_blocking(&self, on: bool) {
        self.inner.launch_blocking.store(on, Ordering::Relaxed);
    }

    fn disk_cache(&self) -> Option<Arc<DiskCache>> {
        self.inner
            .disk
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn device_info(&self) -> DeviceInfo {
        self.inner.info.clone()
    }

    /// The cudarc context and stream, for interop with other cudarc users.
    pub fn cuda_context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }
    pub fn cuda_stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    /// Loads kernel `entry` of a PTX module: from memory if this runtime loaded the same PTX before,
    /// else from the disk cache of cubins, else by JIT (then stored on disk). `source_map` maps a
    /// 1-based PTX line to the kernel's source location, for JIT error messages.
    pub fn load(
        &self,
        ptx: &str,
        entry: &str,
        source_map: &dyn Fn(usize) -> Option<String>,
    ) -> Result<Arc<LoadedKernel>, CudaError> {
        let hash = sha256(ptx.as_bytes());
        if let Some(k) = self.lock_kernels().get(&hash).and_then(|m| m.get(entry)) {
            return Ok(k.clone());
        }
        let (module, info_log, source) = self.module_for(ptx, hash, entry, source_map)?;
        let Some(f) = module.function(entry)? else {
            return Err(CudaError::EntryNotFound {
                entry: entry.to_string(),
                available: entry_names(ptx),
            });
        };
        let resources = self.query_resources(f, entry, &info_log)?;
        let kernel = Arc::new(LoadedKernel {
            name: entry.into(),
            function: Function(f),
            module,
            resources,
            params: entry_params(ptx, entry),
            dynamic_shared_limit: AtomicU32::new(DEFAULT_DYNAMIC_SHARED_LIMIT),
            raise_lock: Mutex::new(()),
            source,
            jit_info_log: info_log,
        });
        let mut kernels = self.lock_kernels();
        let slot = kernels
            .entry(hash)
            .or_default()
            .entry(entry.to_string())
            .or_insert(kernel);
        Ok(slot.clone())
    }

    /// Compiles `ptx` through the driver's JIT as a first [`CudaRuntime::load`] does (the
    /// linker path, the same options), bypassing the in-memory and disk caches, and keeps
    /// nothing: for timing the JIT more than once (`tegula launch-cost`). The driver's own cache
    /// still applies unless `CUDA_CACHE_DISABLE=1` was set before the driver started.
    pub fn jit_uncached(&self, ptx: &str, entry: &str) -> Result<(), CudaError> {
        let rejected = |summary: String, log: String| {
            jit_log::jit_error(ptx, entry, &summary, &log, &|_| None)
        };
        match jit::compile_ptx(&self.inner.ctx, ptx) {
            Ok(_) => Ok(()),
            Err(JitFailure::Rejected { summary, log }) => Err(rejected(summary, log)),
            Err(JitFailure::Driver(e)) => Err(*e),
        }
    }

    fn lock_kernels(&self) -> std::sync::MutexGuard<'_, KernelMap> {
        self.inner.kernels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The module of this PTX: in memory, on disk, or freshly compiled. Returns it with the JIT
    /// info log and whether it came from disk.
    fn module_for(
        &self,
        ptx: &str,
        hash: [u8; 32],
        entry: &str,
        source_map: &dyn Fn(usize) -> Option<String>,
    ) -> Result<ModuleEntry, CudaError> {
        let modules = &self.inner.modules;
        if let Some(m) = modules.lock().unwrap_or_else(|p| p.into_inner()).get(&hash) {
            return Ok(m.clone());
        }
        let ctx = &self.inner.ctx;
        let info = &self.inner.info;
        let key = CubinKey {
            ptx_sha256: hash,
            device_name: info.name.clone(),
            compute_capability: info.compute_capability,
            driver_version: info.driver_version,
        };
        let disk = self.disk_cache();
        let mut loaded = None;
        let provided = (self.inner.provided.lock())
            .unwrap_or_else(|p| p.into_inner())
            .remove(&hash);
        if let Some((cubin, log)) = provided {
            // A refused image falls through to the disk cache and the JIT.
            if let Ok(m) = jit::load_cubin(ctx, &cubin) {
                loaded = Some((Arc::new(m), log, ModuleSource::AheadOfTime));
            }
        }
        if let Some(hit) = loaded
            .is_none()
            .then(|| disk.as_ref().and_then(|d| d.load(&key)))
            .flatten()
        {
            match jit::load_cubin(ctx, &hit.cubin) {
                Ok(m) => {
                    loaded = Some((
                        Arc::new(m),
                        Arc::from(hit.info_log),
                        ModuleSource::DiskCache,
                    ))
                }
                Err(e) => {
                    if let Some(d) = &disk {
                        d.report_unusable(&key, &e.to_string());
                    }
                }
            }
        }
        let loaded = match loaded {
            Some(l) => l,
            None => {
                let jit_error = |summary: String, log: String| {
                    jit_log::jit_error(ptx, entry, &summary, &log, source_map)
                };
                match jit::compile_ptx(ctx, ptx) {
                    Ok((cubin, info_log)) => {
                        let m = jit::load_cubin(ctx, &cubin)?;
                        if let Some(d) = &disk {
                            d.store(&key, &cubin, &info_log);
                        }
                        (Arc::new(m), Arc::from(info_log), ModuleSource::Jit)
                    }
                    Err(JitFailure::Rejected { summary, log }) => {
                        return Err(jit_error(summary, log))
                    }
                    // The linker failed without a log: let cuModuleLoadDataEx try (and explain).
                    Err(JitFailure::Driver(_)) => match jit::load_ptx(ctx, ptx) {
                        Ok((m, info_log)) => (Arc::new(m), Arc::from(info_log), ModuleSource::Jit),
                        Err(JitFailure::Rejected { summary, log }) => {
                            return Err(jit_error(summary, log))
                        }
                        Err(JitFailure::Driver(e)) => return Err(*e),
                    },
                }
            }
        };
        let mut map = modules.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map.entry(hash).or_insert(loaded).clone())
    }

    fn query_resources(
        &self,
        f: sys::CUfunction,
        entry: &str,
        info_log: &str,
    ) -> Result<Resources, CudaError> {
        use sys::CUfunction_attribute::*;
        let get = |attr: sys::CUfunction_attribute| -> Result<u32, CudaError> {
            let mut v: i32 = 0;
            // SAFETY: `f` is a live function of this runtime's context; `v` is a valid out-pointer.
            unsafe { sys::cuFuncGetAttribute(&mut v, attr, f) }
                .result()
                .map_err(drv("cuFuncGetAttribute"))?;
            Ok(v.max(0) as u32)
        };
        let static_shared = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?;
        Ok(Resources {
            registers_per_thread: get(CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            local_bytes_per_thread: get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            static_shared_bytes: static_shared,
            const_bytes: get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?,
            max_threads_per_block: get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_dynamic_shared_bytes: self
                .inner
                .info
                .max_shared_per_block_optin
                .saturating_sub(static_shared),
            ptx_version: get(CU_FUNC_ATTRIBUTE_PTX_VERSION)?,
            binary_version: get(CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
            spill: jit_log::spill_bytes(info_log, entry),
        })
    }

    /// Enqueues `kernel` on the runtime's stream. Arguments are checked against the PTX signature;
    /// dynamic shared memory beyond 48 KB is opted into on first use. Faults inside the kernel
    /// surface at the next synchronising call (`synchronize`, `dtoh`, timing), naming the kernel.
    pub fn launch(
        &self,
        kernel: &LoadedKernel,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        params: &[KernelParam],
    ) -> Result<(), CudaError> {
        let name = &kernel.name;
        if kernel.module.ctx.cu_ctx() != self.inner.ctx.cu_ctx() {
            return Err(CudaError::WrongContext { what: "kernel" });
        }
        if let Some(decls) = &kernel.params {
            check_params(name, decls, params)?;
        }
        let shape = check_launch_shape(name, grid, block, kernel.resources.max_threads_per_block)?;
        if shape == LaunchShape::Empty {
            return Ok(());
        }
        self.ensure_dynamic_shared(kernel, shared_bytes)?;
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(drv("cuCtxSetCurrent"))?;
        let mut packed = PackedParams::new(params);
        let mut pointers = packed.pointers();
        let params_ptr = if pointers.is_empty() {
            std::ptr::null_mut()
        } else {
            pointers.as_mut_ptr()
        };
        // SAFETY: the function belongs to the bound context (checked above) and its module is kept
        // loaded by `kernel`; `params_ptr` holds one pointer per PTX parameter (count, sizes and
        // tensor-map slots checked when the PTX signature is known), each to its value in `packed`
        // (an 8-byte slot, or a tensor map's 128 bytes at a 64-byte aligned address), which lives
        // until the call returns (the driver copies arguments at launch).
        let r = unsafe {
            sys::cuLaunchKernel(
                kernel.function.0,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_bytes,
                self.inner.stream.cu_stream(),
                params_ptr,
                std::ptr::null_mut(),
            )
        };
        drop(packed);
        if let Err(e) = r.result() {
            return Err(CudaError::Launch {
                kernel: name.to_string(),
                message: format!(
                    "launch failed: {} (grid {grid:?}, block {block:?}, {shared_bytes} bytes dynamic shared memory)",
                    describe(e)
                ),
            });
        }
        *self
            .inner
            .last_launch
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(name.clone());
        self.inner
            .launches_since_sync
            .fetch_add(1, Ordering::Relaxed);
        if self.inner.launch_blocking.load(Ordering::Relaxed) {
            self.synchronize()?;
        }
        Ok(())
    }

    fn ensure_dynamic_shared(&self, kernel: &LoadedKernel, bytes: u32) -> Result<(), CudaError> {
        if bytes <= kernel.dynamic_shared_limit.load(Ordering::Acquire) {
            return Ok(());
        }
        let r = &kernel.resources;
        if bytes > r.max_dynamic_shared_bytes {
            return Err(CudaError::SharedMemory {
                kernel: kernel.name.to_string(),
                requested: bytes,
                static_bytes: r.static_shared_bytes,
                limit: r.max_dynamic_shared_bytes,
            });
        }
        // Serialised so a smaller request never lowers a limit another thread just raised.
        let _guard = kernel.raise_lock.lock().unwrap_or_else(|p| p.into_inner());
        if bytes <= kernel.dynamic_shared_limit.load(Ordering::Acquire) {
            return Ok(());
        }
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(drv("cuCtxSetCurrent"))?;
        // SAFETY: live function of the bound context; the value is within the device's opt-in limit.
        unsafe {
            sys::cuFuncSetAttribute(
                kernel.function.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        }
        .result()
        .map_err(drv("cuFuncSetAttribute"))?;
        kernel.dynamic_shared_limit.store(bytes, Ordering::Release);
        Ok(())
    }

    /// Waits for all work on the stream. A fault in a kernel is reported naming the most recent
    /// kernel launched since the last synchronisation (exact with `TEGULA_LAUNCH_BLOCKING=1`).
    pub fn synchronize(&self) -> Result<(), CudaError> {
        let r = self.inner.stream.synchronize();
        self.after_sync("cuStreamSynchronize", r)
    }

    /// Turns the result of a synchronising call into ours, attributing device faults to kernels.
    pub(crate) fn after_sync<T>(
        &self,
        call: &'static str,
        r: Result<T, DriverError>,
    ) -> Result<T, CudaError> {
        let last = self
            .inner
            .last_launch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let launches = self.inner.launches_since_sync.swap(0, Ordering::Relaxed);
        match r {
            Ok(v) => Ok(v),
            Err(e) => match last {
                Some(kernel) if is_fault(&e) => Err(CudaError::Launch {
                    kernel: kernel.to_string(),
                    message: format!(
                        "asynchronous error {} in this kernel or one of the {} launched before it since the \
                         last synchronize (set TEGULA_LAUNCH_BLOCKING=1 to check each launch); the CUDA \
                         context cannot be used any more",
                        describe(e),
                        launches.saturating_sub(1)
                    ),
                }),
                _ => Err(CudaError::driver(call, e)),
            },
        }
    }

    /// A pair of timing events on this runtime's stream.
    pub fn event_timer(&self) -> Result<EventTimer, CudaError> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(EventTimer {
            start: self
                .inner
                .ctx
                .new_event(flags)
                .map_err(drv("cuEventCreate"))?,
            stop: self
                .inner
                .ctx
                .new_event(flags)
                .map_err(drv("cuEventCreate"))?,
            runtime: self.clone(),
        })
    }

    /// Device milliseconds taken by the work `launches` enqueues (events recorded around it).
    pub fn time(&self, launches: impl FnOnce() -> Result<(), CudaError>) -> Result<f32, CudaError> {
        let timer = self.event_timer()?;
        timer.start()?;
        launches()?;
        timer.stop()?;
        timer.elapsed_ms()
    }
}

/// What a checked launch shape asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LaunchShape {
    /// A grid with a zero along some axis: no programs. The launch runs nothing and succeeds
    /// (the arguments and the block are still checked), as on the interpreter and as Triton's
    /// launcher does; the driver, which would refuse it, is not called.
    Empty,
    /// Programs to run.
    Programs,
}

/// Launch shapes the driver would reject with a bare `CUDA_ERROR_INVALID_VALUE` are errors;
/// an empty grid is [`LaunchShape::Empty`].
fn check_launch_shape(
    kernel: &str,
    grid: [u32; 3],
    block: [u32; 3],
    max_threads: u32,
) -> Result<LaunchShape, CudaError> {
    let fail = |message: String| {
        Err(CudaError::Launch {
            kernel: kernel.to_string(),
            message,
        })
    };
    if block.contains(&0) {
        return fail(format!("empty block: {block:?}"));
    }
    // A grid with a zero axis is empty (the launch runs nothing), whatever the other axes.
    if !grid.contains(&0) && (grid[0] > i32::MAX as u32 || grid[1] > 65535 || grid[2] > 65535) {
        return fail(format!(
            "grid {grid:?} exceeds the limits [2^31-1, 65535, 65535]"
        ));
    }
    let threads = block.iter().map(|&b| b as u64).product::<u64>();
    if threads > max_threads as u64 || block[2] > 64 {
        return fail(format!(
            "block {block:?} has {threads} threads; this kernel allows at most {max_threads} per block (and z <= 64)"
        ));
    }
    Ok(if grid.contains(&0) {
        LaunchShape::Empty
    } else {
        LaunchShape::Programs
    })
}

/// Start/stop events on a runtime's stream; `elapsed_ms` waits for the stop event.
pub struct EventTimer {
    start: CudaEvent,
    stop: CudaEvent,
    runtime: CudaRuntime,
}

impl EventTimer {
    pub fn start(&self) -> Result<(), CudaError> {
        self.start
            .record(&self.runtime.inner.stream)
            .map_err(drv("cuEventRecord"))
    }
    pub fn stop(&self) -> Result<(), CudaError> {
        self.stop
            .record(&self.runtime.inner.stream)
            .map_err(drv("cuEventRecord"))
    }
    /// Milliseconds between the last `start` and `stop`; waits for the stop event.
    pub fn elapsed_ms(&self) -> Result<f32, CudaError> {
        let r = self.start.elapsed_ms(&self.stop);
        self.runtime.after_sync("cuEventSynchronize", r)
    }
}

fn query_device_info(ctx: &Arc<CudaContext>) -> Result<DeviceInfo, CudaError> {
    use sys::CUdevice_attribute::*;
    let attr = |a: sys::CUdevice_attribute| -> Result<u32, CudaError> {
        Ok(ctx
            .attribute(a)
            .map_err(drv("cuDeviceGetAttribute"))?
            .max(0) as u32)
    };
    let (major, minor) = ctx
        .compute_capability()
        .map_err(drv("cuDeviceGetAttribute"))?;
    let mut driver_version = 0;
    // SAFETY: valid out-pointer; the driver is initialised (a context exists).
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(drv("cuDriverGetVersion"))?;
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        name: ctx.name().map_err(drv("cuDeviceGetName"))?,
        compute_capability: (major.max(0) as u32, minor.max(0) as u32),
        sm_count: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        total_memory_bytes: ctx.total_mem().map_err(drv("cuDeviceTotalMem"))? as u64,
        driver_version,
        max_shared_per_block_optin: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        max_shared_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        max_shared_per_sm: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        l2_cache_bytes: attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        warp_size: attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        max_threads_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_registers_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        memory_clock_khz: attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
            .ok()
            .filter(|&v| v > 0),
        memory_bus_width_bits: attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
            .ok()
            .filter(|&v| v > 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_nothing_panics() {
        if driver_library_present() {
            // A machine with libcuda: availability must agree with device discovery.
            assert_eq!(CudaRuntime::is_available(), device_count().is_ok());
            return;
        }
        assert!(!CudaRuntime::is_available());
        assert!(matches!(device_count(), Err(CudaError::NoDriver)));
        let err = CudaRuntime::new(0).unwrap_err();
        assert!(matches!(err, CudaError::NoDriver), "{err:?}");
        assert!(err.to_string().contains("libcuda"));
        // Asking again gives the same answer (the probe result is cached, nothing was poisoned).
        assert!(matches!(CudaRuntime::new(3), Err(CudaError::NoDriver)));
        assert!(!CudaRuntime::is_available());
    }

    #[test]
    fn out_of_memory_is_told_apart() {
        let oom = CudaError::Driver {
            call: "cuMemAlloc",
            code: 2,
            message: "out of memory".into(),
        };
        assert!(oom.is_out_of_memory());
        let other = CudaError::Driver {
            call: "cuMemAlloc",
            code: 1,
            message: "invalid value".into(),
        };
        assert!(!other.is_out_of_memory());
    }

    #[test]
    fn launch_shapes_are_checked() {
        assert_eq!(
            check_launch_shape("k", [4, 1, 1], [128, 1, 1], 1024).ok(),
            Some(LaunchShape::Programs)
        );
        assert!(check_launch_shape("k", [1 << 31, 1, 1], [1, 1, 1], 1024).is_err());
        assert!(check_launch_shape("k", [(1 << 31) - 1, 65535, 65535], [32, 32, 1], 1024).is_ok());
        // An empty grid is no error: the launch runs nothing (the interpreter's rule too).
        for grid in [[4, 0, 1], [0, 1, 1], [1, 1, 0], [0, 70000, 1]] {
            assert_eq!(
                check_launch_shape("softmax", grid, [128, 1, 1], 1024).ok(),
                Some(LaunchShape::Empty),
                "{grid:?}"
            );
        }
        // An empty block is.
        let e = check_launch_shape("softmax", [0, 1, 1], [0, 1, 1], 1024).unwrap_err();
        assert!(
            e.to_string().starts_with("kernel `softmax`: empty block"),
            "{e}"
        );
        let e = check_launch_shape("k", [4, 1, 1], [256, 2, 1], 384).unwrap_err();
        assert!(
            e.to_string()
                .contains("512 threads; this kernel allows at most 384"),
            "{e}"
        );
        assert!(check_launch_shape("k", [1, 1, 1], [1, 1, 65], 1024).is_err());
    }

    #[test]
    fn device_info_derived_figures() {
        let info = DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            total_memory_bytes: 150_000_000_000,
            driver_version: 13000,
            max_shared_per_block_optin: 232_448,
            max_shared_per_block: 49_152,
            max_shared_per_sm: 233_472,
            l2_cache_bytes: 52_428_800,
            warp_size: 32,
            max_threads_per_block: 1024,
            max_registers_per_block: 65536,
            memory_clock_khz: Some(2_619_000),
            memory_bus_width_bits: Some(6144),
        };
        assert_eq!(info.sm(), 90);
        // 2 * 2.619 GHz * 768 bytes = 4.0228 TB/s.
        let bw = info.peak_memory_bandwidth().unwrap();
        assert!((bw - 4.022_784e12).abs() < 1e6, "{bw}");
        assert_eq!(
            DeviceInfo {
                memory_clock_khz: None,
                ..info
            }
            .peak_memory_bandwidth(),
            None
        );
    }
}
