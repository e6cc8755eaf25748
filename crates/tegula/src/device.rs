//! `Device`: where tensors live and kernels run, with the cache of traced specializations.

use crate::compiler;
use crate::error::{Error, Result};
use crate::gpu::{self, Gpu, GpuBuffer};
use crate::launch::{KernelArg, Launch};
use crate::tensor::Tensor;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tegula_interp::{Arg, Buffer};
use tegula_ir::{Element, Kernel};

/// Which machine runs the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The CPU interpreter: every program of the grid, every access checked.
    Interpreter,
    /// An NVIDIA GPU through the CUDA driver, by ordinal.
    Cuda(usize),
}

/// Memory of one tensor, shared by its views.
#[derive(Clone)]
pub enum Storage {
    Host(Arc<Buffer>),
    Cuda {
        buffer: GpuBuffer,
        runtime: tegula_cuda::CudaRuntime,
    },
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Host(b) => write!(f, "Host({} x {})", b.len(), b.dtype()),
            Storage::Cuda { buffer, .. } => write!(
                f,
                "Cuda({:#x}, {} bytes)",
                buffer.device_ptr(),
                buffer.len()
            ),
        }
    }
}

impl Storage {
    pub(crate) fn same_buffer(&self, other: &Storage) -> bool {
        match (self, other) {
            (Storage::Host(a), Storage::Host(b)) => Arc::ptr_eq(a, b),
            (Storage::Cuda { buffer: a, .. }, Storage::Cuda { buffer: b, .. }) => {
                a.device_ptr() == b.device_ptr()
            }
            _ => false,
        }
    }

    /// The device address of element 0, for GPU memory.
    pub(crate) fn device_address(&self) -> Option<u64> {
        match self {
            Storage::Host(_) => None,
            Storage::Cuda { buffer, .. } => Some(buffer.device_ptr()),
        }
    }

    /// Every element of the buffer, copied to the host (host memory allocated fallibly).
    pub(crate) fn read_all<T: Element>(&self) -> Result<Vec<T>> {
        match self {
            Storage::Host(b) => {
                let mut out = host_vec(b.len(), "to_vec")?;
                out.extend((0..b.len()).map(|i| T::from_bits(b.read_bits(i))));
                Ok(out)
            }
            Storage::Cuda { buffer, runtime } => {
                let mut bytes = host_vec::<u8>(buffer.len(), "to_vec")?;
                bytes.resize(buffer.len(), 0);
                runtime.dtoh(buffer, &mut bytes)?;
                let size = T::DTYPE.size_bytes();
                let mut out = host_vec(bytes.len() / size, "to_vec")?;
                out.extend(bytes.chunks_exact(size).map(|c| {
                    let mut b = [0u8; 8];
                    b[..size].copy_from_slice(c);
                    T::from_bits(u64::from_le_bytes(b))
                }));
                Ok(out)
            }
        }
    }

    /// Overwrites the first `data.len()` elements of the buffer.
    pub(crate) fn write_all<T: Element>(&self, data: &[T]) -> Result<()> {
        match self {
            Storage::Host(b) => {
                for (i, &v) in data.iter().enumerate() {
                    b.write_bits(i, v.to_bits());
                }
                Ok(())
            }
            Storage::Cuda { buffer, runtime } => {
                let size = T::DTYPE.size_bytes();
                let mut bytes = host_vec::<u8>(data.len().saturating_mul(size), "copy to the GPU")?;
                for v in data {
                    bytes.extend_from_slice(&v.to_bits().to_le_bytes()[..size]);
                }
                Ok(runtime.htod(buffer, &bytes)?)
            }
        }
    }
}

/// An empty host vector with room for `n` elements, or [`Error::OutOfMemory`] (the
/// allocation is fallible: a request the host cannot meet is an error, never an abort).
pub(crate) fn host_vec<T>(n: usize, op: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        op: op.to_string(),
        device: "the host".into(),
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    Ok(v)
}

/// The elements of `shape`, or [`Error::TooLarge`] when the product overflows `usize`.
pub(crate) fn checked_numel(op: &str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::TooLarge {
            op: op.to_string(),
            message: format!("shape {shape:?} has more than usize::MAX elements"),
        })
}

/// The bytes of `n` elements of `T`, or [`Error::TooLarge`].
fn checked_bytes<T: Element>(op: &str, shape: &[usize], n: usize) -> Result<usize> {
    n.checked_mul(T::DTYPE.size_bytes())
        .ok_or_else(|| Error::TooLarge {
            op: op.to_string(),
            message: format!(
                "shape {shape:?} of {} has more than usize::MAX bytes",
                T::DTYPE
            ),
        })
}

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// What a launch does instead of running, while [`Device::plans`] or [`Device::prepare`]
/// runs on this thread.
enum Capture {
    /// Planned: its report kept.
    Plans(Vec<compiler::Report>),
    /// Compiled (and loaded on a GPU), for a launch to come.
    Prepare,
}

/// [`Capture`] without its contents.
#[derive(Clone, Copy)]
enum CaptureKind {
    Plans,
    Prepare,
}

thread_local! {
    /// The device whose launches are captured on this thread, and how.
    static CAPTURE: std::cell::RefCell<Option<(u64, Capture)>> =
        const { std::cell::RefCell::new(None) };
}

struct Inner {
    id: u64,
    /// What [`Device::name`] says, made once.
    name: Arc<str>,
    backend: Backend,
    gpu: Option<Gpu>,
    /// Traced specializations by `name|key|argument types`.
    kernels: Mutex<HashMap<String, Arc<Kernel>>>,
    check_races: AtomicBool,
    /// Whether [`Device::empty`] fills GPU tensors with all bits set.
    poison_empty: AtomicBool,
    /// On a recording device ([`Device::recording`]): the launches made, none of them run.
    recorded: Option<Mutex<Vec<RecordedLaunch>>>,
    /// The SM count a recording device stands for.
    recorded_sms: usize,
    /// The GPU a recording device made by [`Device::recording_as`] stands for.
    stand_in: Option<StandIn>,
    /// Seeds `randn`/`rand` so every call draws fresh numbers.
    seed: AtomicU64,
    /// Tensors allocated so far (see [`Device::allocations`]).
    allocations: AtomicU64,
}

/// The GPU a recording device stands for ([`Device::recording_as`]): what the library's
/// wrappers ask of a device before they launch (its SMs, whether it has `wgmma`, which tuned
/// configs are its own), so that the recorded launches are the ones that GPU would make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandIn {
    /// [`Device::sm_count`] of the GPU.
    pub sm_count: usize,
    /// The target its kernels are compiled for ([`Device::target`]; [`Device::has_wgmma`]
    /// from sm 90 on).
    pub target: compiler::Target,
    /// The tuner's name for the GPU ([`crate::autotune::Target`], as `Target::of` reads it
    /// on that GPU, `tunable` ignored): a tuned wrapper looks its config up in the tuner's
    /// cache under this target, and takes its default where the cache has none (a recording
    /// device times nothing).
    pub tuned_as: crate::autotune::Target,
}

/// A launch that a recording device ([`Device::recording`]) kept instead of running: what a
/// GPU launch of the same call would specialize and compile.
#[derive(Clone)]
pub struct RecordedLaunch {
    pub name: &'static str,
    pub key: String,
    /// Traced and canonicalized, before the argument facts (see [`crate::specialize`]).
    pub kernel: Arc<Kernel>,
    pub args: Vec<KernelArg>,
    pub grid: crate::Grid,
    pub config: crate::LaunchConfig,
    /// Milliseconds `Device::launch` spent specializing it: tracing and canonicalizing on the
    /// device's first launch of it, a cache lookup after.
    pub trace_ms: f64,
}

impl RecordedLaunch {
    /// The PTX a GPU launch with these arguments and this config compiles for `target`
    /// (tensors of a recording device count as fresh, 256-byte aligned GPU allocations).
    pub fn compile(&self, target: &compiler::Target) -> Result<compiler::Compiled> {
        compiler::compile_launch(&self.kernel, &self.args, self.config, target)
    }

    /// The key a GPU launch of the same call finds its compiled kernel by: the launch's name
    /// and constexpr key, the argument facts ([`compiler::fact_bits`]) and the config.
    pub fn specialization_key(&self) -> String {
        gpu::specialization_key(self.name, &self.key, &self.args, self.config)
    }
}

/// A device: the CPU interpreter, or a GPU through the CUDA backend. Cloning shares it.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

impl Device {
    /// The CPU interpreter.
    pub fn cpu() -> Device {
        Device::with_backend(Backend::Interpreter, None, None, None)
    }

    /// A device that records launches instead of running them (see
    /// [`Device::take_recorded`]): host tensors that are never computed on, the interpreter's
    /// (untuned) configs. For seeing what a library call would compile at a shape too large to
    /// interpret, without a GPU. `sm_count` is the GPU's the calls should size their grids
    /// for (132 on an H100 or H200; see [`Device::sm_count`]).
    pub fn recording(sm_count: usize) -> Device {
        Device::with_backend(Backend::Interpreter, None, Some(sm_count), None)
    }

    /// A recording device ([`Device::recording`]) that stands for one GPU: it reports that
    /// GPU's SMs, target and `wgmma`, and the tuned wrappers launch the configs the tuner's
    /// cache holds for it ([`StandIn::tuned_as`]; [`crate::aot::Bundle::record_as`] records a
    /// program's tuned launches so).
    pub fn recording_as(stand_in: StandIn) -> Device {
        let sms = stand_in.sm_count;
        Device::with_backend(Backend::Interpreter, None, Some(sms), Some(stand_in))
    }

    /// The GPU a recording device stands for, when made by [`Device::recording_as`].
    pub fn stand_in(&self) -> Option<&StandIn> {
        self.inner.stand_in.as_ref()
    }

    /// The streaming multiprocessors of the GPU, or the one a recording device stands for;
    /// `None` on the interpreter.
    pub fn sm_count(&self) -> Option<usize> {
        match (&self.inner.gpu, &self.inner.recorded) {
            (Some(gpu), _) => Some(gpu.runtime.device_info().sm_count as usize),
            (None, Some(_)) => Some(self.inner.recorded_sms),
            (None, None) => None,
        }
    }

    /// Whether kernels compiled for this device may run `dot` on Hopper's `wgmma` (a GPU of
    /// compute capability 9.0 or newer, compiled for sm_90a); false on the interpreter.
    pub fn has_wgmma(&self) -> bool {
        match (&self.inner.gpu, &self.inner.stand_in) {
            (Some(gpu), _) => gpu.target.sm >= 90,
            (None, Some(stand_in)) => stand_in.target.sm >= 90,
            (None, None) => false,
        }
    }

    /// The launches recorded since the last call, oldest first (none unless
    /// [`Device::recording`]).
    pub fn take_recorded(&self) -> Vec<RecordedLaunch> {
        self.inner.recorded.as_ref().map_or_else(Vec::new, |r| {
            std::mem::take(&mut *r.lock().unwrap_or_else(|p| p.into_inner()))
        })
    }

    /// The GPU with this ordinal.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        let gpu = Gpu::new(ordinal)?;
        Ok(Device::with_backend(
            Backend::Cuda(ordinal),
            Some(gpu),
            None,
            None,
        ))
    }

    /// A GPU device that launches on a cudarc stream someone else owns (candle's, or the
    /// caller's own), so tegula's kernels are ordered with that library's work on the stream
    /// without extra synchronisation. The stream's memory-pool policy is left as it is.
    pub fn from_cuda_stream(
        stream: Arc<tegula_cuda::cudarc::driver::CudaStream>,
    ) -> Result<Device> {
        let ordinal = stream.context().ordinal();
        let runtime = tegula_cuda::CudaRuntime::with_stream(stream)?;
        Ok(Device::with_backend(
            Backend::Cuda(ordinal),
            Some(Gpu::with_runtime(runtime)),
            None,
            None,
        ))
    }

    /// `recording_sms`: record launches (for a GPU of that many SMs) instead of running them,
    /// standing for `stand_in` when given.
    fn with_backend(
        backend: Backend,
        gpu: Option<Gpu>,
        recording_sms: Option<usize>,
        stand_in: Option<StandIn>,
    ) -> Device {
        let settings = crate::env::Settings::global();
        let (check, poison) = (settings.check_races, settings.poison_empty);
        let id = NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed);
        let name = match (backend, &gpu, recording_sms) {
            (Backend::Cuda(ordinal), gpu, _) => format!(
                "cuda:{ordinal}#{id} ({})",
                gpu.as_ref()
                    .map(|g| g.runtime.device_info().name.clone())
                    .unwrap_or_default()
            ),
            (Backend::Interpreter, _, Some(sms)) => match &stand_in {
                Some(s) => format!(
                    "recording#{id} (records launches for {}, sm_{}, {sms} SMs)",
                    s.tuned_as.device, s.target.sm
                ),
                None => format!("recording#{id} (records launches for a GPU of {sms} SMs)"),
            },
            (Backend::Interpreter, _, None) => format!(
                "cpu#{id} (interpreter, {} threads)",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        };
        Device {
            inner: Arc::new(Inner {
                id,
                name: name.into(),
                backend,
                gpu,
                kernels: Mutex::new(HashMap::new()),
                check_races: AtomicBool::new(check),
                poison_empty: AtomicBool::new(poison),
                recorded: recording_sms.map(|_| Mutex::new(Vec::new())),
                recorded_sms: recording_sms.unwrap_or(0),
                stand_in,
                seed: AtomicU64::new(rand::random()),
                allocations: AtomicU64::new(0),
            }),
        }
    }

    /// The GPU when there is one, else the interpreter, and says which on stderr.
    /// `TEGULA_DEVICE=cpu|cuda|cuda:N` chooses.
    #[allow(clippy::should_implement_trait)] // returns a Result, unlike `Default::default`
    pub fn default() -> Result<Device> {
        use crate::env::DeviceChoice;
        let dev = match &crate::env::Settings::global().device {
            DeviceChoice::Cpu => Device::cpu(),
            DeviceChoice::Cuda(ordinal) => Device::cuda(*ordinal)?,
            DeviceChoice::Auto if tegula_cuda::CudaRuntime::is_available() => Device::cuda(0)?,
            DeviceChoice::Auto => Device::cpu(),
            DeviceChoice::Invalid(other) => {
                return Err(Error::Invalid {
                    op: "Device::default".into(),
                    message: format!("TEGULA_DEVICE={other}: expected cpu, cuda or cuda:N"),
                })
            }
        };
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| eprintln!("tegula: running on {}", dev.name()));
        Ok(dev)
    }

    /// The CUDA runtime, on a GPU device.
    pub fn cuda_runtime(&self) -> Option<&tegula_cuda::CudaRuntime> {
        self.inner.gpu.as_ref().map(|g| &g.runtime)
    }

    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// A unique id, to tell devices apart in argument checks.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// A short description for messages, with the device's [`id`](Device::id) after `#` so
    /// that two devices of one kind read apart: `cpu#2 (interpreter, 2 threads)`,
    /// `cuda:0#1 (NVIDIA H200)`, `recording#3 (records launches for a GPU of 132 SMs)`.
    pub fn name(&self) -> String {
        self.inner.name.to_string()
    }

    /// [`Device::name`] shared, for kernel arguments to carry.
    pub(crate) fn name_shared(&self) -> Arc<str> {
        self.inner.name.clone()
    }

    /// How many tensors this device has allocated (views and clones share their tensor's
    /// memory and do not count). For tests and diagnostics: a host wrapper that refuses its
    /// arguments allocates nothing.
    pub fn allocations(&self) -> u64 {
        self.inner.allocations.load(Ordering::Relaxed)
    }

    /// Turns on the interpreter's write-write race check between programs (also
    /// `TEGULA_CHECK_RACES=1`, or `true`/`on`/`yes`: see [`crate::env::parse_bool`]).
    pub fn set_check_races(&self, on: bool) {
        self.inner.check_races.store(on, Ordering::Relaxed);
    }

    /// Makes [`Device::empty`] fill GPU tensors with all bits set (NaN for floats, -1 for
    /// integers), so that a kernel that leaves part of its output unwritten shows it (also
    /// `TEGULA_POISON_EMPTY=1`; `tegula check` turns it on). Off by default: the fill is a
    /// write of the whole tensor, as long as the kernel's own for an elementwise op.
    pub fn set_poison_empty(&self, on: bool) {
        self.inner.poison_empty.store(on, Ordering::Relaxed);
    }

    /// A new tensor: zeros on the interpreter; on the GPU zeros when `zeroed`, else bytes the
    /// caller overwrites at once (a memset of hundreds of MB is not free).
    ///
    /// The element and byte counts are checked ([`Error::TooLarge`]) and every allocation is
    /// fallible: memory the host or the GPU cannot give is [`Error::OutOfMemory`].
    fn alloc<T: Element>(&self, op: &str, shape: Vec<usize>, zeroed: bool) -> Result<Tensor<T>> {
        let n = checked_numel(op, &shape)?;
        let bytes = checked_bytes::<T>(op, &shape, n)?;
        let out_of_memory = || Error::OutOfMemory {
            op: op.to_string(),
            device: self.name(),
            bytes: bytes as u64,
        };
        let storage = match &self.inner.gpu {
            None => Storage::Host(Arc::new(
                Buffer::try_zeroed(T::DTYPE, n).map_err(|_| out_of_memory())?,
            )),
            Some(gpu) => {
                let buffer = if zeroed {
                    gpu.runtime.alloc(bytes)
                } else {
                    gpu.runtime.alloc_uninit(bytes)
                };
                let buffer = buffer.map_err(|e| {
                    if e.is_out_of_memory() {
                        out_of_memory()
                    } else {
                        Error::Cuda(e)
                    }
                })?;
                Storage::Cuda {
                    buffer: Arc::new(buffer),
                    runtime: gpu.runtime.clone(),
                }
            }
        };
        self.inner.allocations.fetch_add(1, Ordering::Relaxed);
        Ok(Tensor::from_storage(self.clone(), storage, shape))
    }

    /// A tensor of zeros.
    pub fn zeros<T: Element>(&self, shape: impl Into<Vec<usize>>) -> Result<Tensor<T>> {
        self.alloc("zeros", shape.into(), true)
    }

    /// A tensor whose contents do not matter (as `torch.empty`): zeros on the interpreter,
    /// unspecified on the GPU, or all bits set there (NaN for floats, -1 for integers) under
    /// [`Device::set_poison_empty`], so that a kernel that forgets to write shows it.
    pub fn empty<T: Element>(&self, shape: impl Into<Vec<usize>>) -> Result<Tensor<T>> {
        let t = self.alloc::<T>("empty", shape.into(), false)?;
        if let Storage::Cuda { buffer, runtime } = &t.storage {
            if self.inner.poison_empty.load(Ordering::Relaxed) {
                runtime.memset_d8(buffer, 0xff)?;
            }
        }
        Ok(t)
    }

    /// A tensor filled with `value`.
    pub fn full<T: Element>(&self, shape: impl Into<Vec<usize>>, value: T) -> Result<Tensor<T>> {
        let t = self.alloc::<T>("full", shape.into(), false)?;
        match &t.storage {
            Storage::Host(b) => (0..b.len()).for_each(|i| b.write_bits(i, value.to_bits())),
            Storage::Cuda { .. } => {
                let mut data = host_vec(t.numel(), "full")?;
                data.resize(t.numel(), value);
                t.storage.write_all(&data)?;
            }
        }
        Ok(t)
    }

    /// A contiguous tensor holding `data` (row-major) with `shape`.
    pub fn from_slice<T: Element>(
        &self,
        data: &[T],
        shape: impl Into<Vec<usize>>,
    ) -> Result<Tensor<T>> {
        let shape = shape.into();
        let n = checked_numel("from_slice", &shape)?;
        if n != data.len() {
            return Err(Error::Shape {
                op: "from_slice".into(),
                message: format!("{} values for shape {shape:?} ({n} elements)", data.len()),
            });
        }
        let t = self.alloc::<T>("from_slice", shape, false)?;
        t.storage.write_all(data)?;
        Ok(t)
    }

    fn next_seed(&self) -> u64 {
        self.inner
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
    }

    /// Standard-normal random values (fresh on every call).
    pub fn randn<T: Element>(&self, shape: impl Into<Vec<usize>>) -> Result<Tensor<T>> {
        self.randn_seeded(shape, self.next_seed())
    }

    /// Standard-normal random values from `seed`.
    pub fn randn_seeded<T: Element>(
        &self,
        shape: impl Into<Vec<usize>>,
        seed: u64,
    ) -> Result<Tensor<T>> {
        let shape = shape.into();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let n = checked_numel("randn", &shape)?;
        let mut data = host_vec(n, "randn")?;
        data.extend((0..n).map(|_| T::from_f64(StandardNormal.sample(&mut rng))));
        self.from_slice(&data, shape)
    }

    /// Uniform random values in `[lo, hi)` (fresh on every call).
    pub fn rand_uniform<T: Element>(
        &self,
        shape: impl Into<Vec<usize>>,
        lo: f64,
        hi: f64,
    ) -> Result<Tensor<T>> {
        let shape = shape.into();
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.next_seed());
        let n = checked_numel("rand_uniform", &shape)?;
        let mut data = host_vec(n, "rand_uniform")?;
        data.extend((0..n).map(|_| T::from_f64(rng.gen_range(lo..hi))));
        self.from_slice(&data, shape)
    }

    /// The traced kernel for this launch's specialization, tracing it on first use.
    pub fn specialize(&self, launch: &Launch<'_>) -> Result<Arc<Kernel>> {
        let arg_types: Vec<String> = launch.args.iter().map(KernelArg::describe).collect();
        let key = format!("{}|{}|{}", launch.name, launch.key, arg_types.join(","));
        if let Some(k) = self.cache().get(&key) {
            return Ok(k.clone());
        }
        let mut kernel = (launch.trace)()?;
        tegula_ir::passes::canonicalize(&mut kernel);
        let kernel = Arc::new(kernel);
        check_arguments(&kernel, &launch.args, self)?;
        self.cache().insert(key, kernel.clone());
        Ok(kernel)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Kernel>>> {
        // A panic while holding this lock cannot leave the map half-updated.
        self.inner
            .kernels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many specializations have been traced on this device.
    pub fn traced_kernels(&self) -> usize {
        self.cache().len()
    }

    /// Runs a kernel over a grid (what `#[tegula::kernel]` launchers call).
    ///
    /// On a GPU the launch first looks its specialization up by key (the launch's name and
    /// constexpr key, the argument facts and the config, none of which needs a trace): a
    /// kernel loaded before, compiled before or installed from a bundle
    /// ([`Device::install_bundle`]) launches without tracing, after its arguments are checked
    /// against the compiled signature. Anything else is traced, compiled and loaded.
    pub fn launch(&self, launch: Launch<'_>) -> Result<()> {
        if let Some((gpu, k)) = self.untraced_kernel(&launch)? {
            return gpu.launch(&k, launch.grid.0, &launch.args);
        }
        let start = std::time::Instant::now();
        let kernel = self.specialize(&launch)?;
        let trace_ms = start.elapsed().as_secs_f64() * 1e3;
        check_devices(&kernel, &launch, self)?;
        match self.capturing() {
            Some(CaptureKind::Plans) => {
                let report = self.plan_specialized(&kernel, &launch)?;
                CAPTURE.with(|c| {
                    if let Some((_, Capture::Plans(reports))) = c.borrow_mut().as_mut() {
                        reports.push(report);
                    }
                });
                return Ok(());
            }
            Some(CaptureKind::Prepare) => return self.prepare_specialized(&kernel, &launch),
            None => {}
        }
        if let Some(recorded) = &self.inner.recorded {
            let r = RecordedLaunch {
                name: launch.name,
                key: launch.key,
                kernel,
                args: launch.args,
                grid: launch.grid,
                config: launch.config,
                trace_ms,
            };
            recorded.lock().unwrap_or_else(|p| p.into_inner()).push(r);
            return Ok(());
        }
        match &self.inner.gpu {
            Some(gpu) => {
                let k = gpu.kernel(
                    launch.name,
                    &launch.key,
                    &kernel,
                    &launch.args,
                    launch.config,
                )?;
                gpu.launch(&k, launch.grid.0, &launch.args)
            }
            None => {
                let args = interpreter_args(&kernel, &launch, self)?;
                let options = tegula_interp::Options {
                    check_races: self.inner.check_races.load(Ordering::Relaxed),
                    ..Default::default()
                };
                tegula_interp::run(&kernel, launch.grid.0, &args, &options)?;
                Ok(())
            }
        }
    }

    /// A plain GPU launch's kernel found by its specialization key, without tracing, when the
    /// GPU has compiled or installed it and the arguments fit it: every tensor on this
    /// device, the arguments the compiled signature's in number, kind and dtype. `None` for
    /// the path that traces: no GPU, a capture ([`Device::plans`], [`Device::prepare`]), a
    /// specialization not compiled yet, or arguments that do not fit (the traced path then
    /// reports them, naming the parameters).
    fn untraced_kernel(&self, launch: &Launch<'_>) -> Result<Option<(&Gpu, Arc<gpu::GpuKernel>)>> {
        let Some(gpu) = &self.inner.gpu else {
            return Ok(None);
        };
        if self.capturing().is_some() {
            return Ok(None);
        }
        let on_device = launch.args.iter().all(|a| match a {
            KernelArg::Tensor { device, .. } => *device == self.id(),
            _ => true,
        });
        if !on_device {
            return Ok(None);
        }
        let key = gpu::specialization_key(launch.name, &launch.key, &launch.args, launch.config);
        match gpu.cached(&key)? {
            Some(k) if gpu::arguments_fit(&k.compiled.params, &launch.args) => Ok(Some((gpu, k))),
            _ => Ok(None),
        }
    }

    /// Makes a bundle's specializations for this device's target launchable without tracing
    /// or compiling: on a GPU each entry compiled for its target (`sm`) goes into the GPU's
    /// cache of compiled PTX under its specialization key, and the first launch with that key
    /// loads it (its cubin when the bundle was assembled, else the PTX through the driver's
    /// JIT); entries for other targets are skipped. The bundle's tuned configs for a GPU of
    /// this one's name become the tuner's answers in this process ([`Bundle::tuned`]), so a
    /// tuned wrapper launches the bundled config without tuning. On the interpreter and on a
    /// recording device nothing is compiled, so nothing is installed.
    ///
    /// A bundle of another compiler or format is refused ([`crate::aot::BundleError`]), as
    /// is an entry whose signature or cubin does not parse.
    ///
    /// [`Bundle::tuned`]: crate::aot::Bundle::tuned
    pub fn install_bundle(&self, bundle: &crate::aot::Bundle) -> Result<crate::aot::Installed> {
        bundle.check_version()?;
        let mut installed = crate::aot::Installed::default();
        let Some(gpu) = &self.inner.gpu else {
            return Ok(installed);
        };
        for entry in bundle.entries.iter().filter(|e| e.sm == gpu.target.sm) {
            let compiled = entry.to_compiled()?;
            let cubin = entry.cubin_bytes()?;
            if !gpu.install(&entry.key, Arc::new(compiled)) {
                continue;
            }
            installed.entries += 1;
            if let (Some(image), Some(c)) = (cubin, &entry.cubin) {
                gpu.runtime
                    .provide_cubin(&entry.ptx, image.into(), c.log.as_str().into());
                installed.cubins += 1;
            }
        }
        let target = crate::autotune::Target::of(self);
        let tuner = crate::Autotuner::global();
        installed.tuned = bundle
            .tuned
            .iter()
            .filter(|choice| tuner.remember(&target, choice))
            .count();
        Ok(installed)
    }

    /// Milliseconds the work enqueued by `work` takes on the device: CUDA events around it on
    /// the GPU, wall-clock time on the interpreter (which runs launches synchronously).
    pub fn time(&self, work: impl FnOnce() -> Result<()>) -> Result<f64> {
        match &self.inner.gpu {
            Some(gpu) => {
                let timer = gpu.runtime.event_timer()?;
                timer.start()?;
                work()?;
                timer.stop()?;
                Ok(timer.elapsed_ms()? as f64)
            }
            None => {
                let start = std::time::Instant::now();
                work()?;
                Ok(start.elapsed().as_secs_f64() * 1e3)
            }
        }
    }

    /// Milliseconds of each of `n` runs of the work `work` enqueues, each run preceded by the
    /// untimed work of `before` (an L2 clear). On the GPU every run is enqueued between its
    /// events before any is read, as `do_bench` does, so the host's reading leaves no idle
    /// gap between runs; on the interpreter, wall-clock time per run.
    pub fn time_each(
        &self,
        n: usize,
        mut before: impl FnMut() -> Result<()>,
        mut work: impl FnMut() -> Result<()>,
    ) -> Result<Vec<f64>> {
        match &self.inner.gpu {
            Some(gpu) => {
                let mut timers = Vec::with_capacity(n);
                for _ in 0..n {
                    before()?;
                    let timer = gpu.runtime.event_timer()?;
                    timer.start()?;
                    work()?;
                    timer.stop()?;
                    timers.push(timer);
                }
                timers.iter().map(|t| Ok(t.elapsed_ms()? as f64)).collect()
            }
            None => (0..n)
                .map(|_| {
                    before()?;
                    self.time(&mut work)
                })
                .collect(),
        }
    }

    /// Clears the GPU's L2 with a 256 MB write and leaves that work queued (a no-op on the
    /// interpreter); benchmarks call it before each timed sample, as `do_bench` does.
    pub fn clear_l2(&self) -> Result<()> {
        match &self.inner.gpu {
            Some(gpu) => gpu.clear_l2(),
            None => Ok(()),
        }
    }

    /// Waits for the device's queued work; on the GPU, reports a fault of an earlier launch.
    pub fn synchronize(&self) -> Result<()> {
        if let Some(gpu) = &self.inner.gpu {
            gpu.runtime.synchronize()?;
        }
        Ok(())
    }

    /// What the compiler decides for a launch, without running it: the [`compiler::Report`]
    /// of its specialization (per loop its pipeline stages and why fewer than asked, per dot
    /// its instructions, shared memory and occupancy), compiled for the device's
    /// [`Device::target`] (sm_90a where there is none) without loading a module.
    pub fn plan(&self, launch: &Launch<'_>) -> Result<compiler::Report> {
        let kernel = self.specialize(launch)?;
        self.plan_specialized(&kernel, launch)
    }

    /// The reports of every launch `work` makes on this device (from this thread), in order,
    /// none of them run: what a host call compiles, without a GPU's time (allocations and
    /// copies `work` makes still happen).
    pub fn plans(&self, work: impl FnOnce() -> Result<()>) -> Result<Vec<compiler::Report>> {
        let (result, captured) = self.capture(Capture::Plans(Vec::new()), work);
        result?;
        match captured {
            Some((_, Capture::Plans(reports))) => Ok(reports),
            _ => Ok(Vec::new()),
        }
    }

    /// Compiles every launch `work` makes on this device (from this thread), none of them
    /// run: on a GPU each specialization is compiled and loaded, so the same launch later
    /// starts at once; on a recording device it is compiled; on the interpreter nothing
    /// happens. Allocations and copies `work` makes still happen. The autotuner prepares its
    /// candidates so on several threads before it times them one by one
    /// ([`crate::autotune::Tuning::prepare_with`]).
    pub fn prepare(&self, work: impl FnOnce() -> Result<()>) -> Result<()> {
        self.capture(Capture::Prepare, work).0
    }

    /// Runs `work` with this device's launches captured as `how` on this thread; the result
    /// and what was captured. An enclosing capture (of any device) is restored afterwards.
    fn capture(
        &self,
        how: Capture,
        work: impl FnOnce() -> Result<()>,
    ) -> (Result<()>, Option<(u64, Capture)>) {
        let outer = CAPTURE.with(|c| c.borrow_mut().replace((self.id(), how)));
        let result = work();
        let captured = CAPTURE.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer));
        (result, captured)
    }

    fn capturing(&self) -> Option<CaptureKind> {
        CAPTURE.with(|c| match c.borrow().as_ref() {
            Some((id, Capture::Plans(_))) if *id == self.id() => Some(CaptureKind::Plans),
            Some((id, Capture::Prepare)) if *id == self.id() => Some(CaptureKind::Prepare),
            _ => None,
        })
    }

    /// [`Device::prepare`]'s work for one launch.
    fn prepare_specialized(&self, kernel: &Kernel, launch: &Launch<'_>) -> Result<()> {
        match (&self.inner.gpu, &self.inner.recorded) {
            (Some(gpu), _) => {
                gpu.kernel(
                    launch.name,
                    &launch.key,
                    kernel,
                    &launch.args,
                    launch.config,
                )?;
            }
            (None, Some(_)) => {
                self.plan_specialized(kernel, launch)?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// The GPU target this device's kernels are compiled for: the GPU's, or for a recording
    /// device the one it stands for (sm_90a, an H200, unless [`Device::recording_as`] says
    /// otherwise); `None` on the interpreter.
    pub fn target(&self) -> Option<compiler::Target> {
        match (&self.inner.gpu, &self.inner.recorded) {
            (Some(gpu), _) => Some(gpu.target),
            (None, Some(_)) => Some(
                self.inner
                    .stand_in
                    .as_ref()
                    .map_or(compiler::DEFAULT_TARGET, |s| s.target),
            ),
            (None, None) => None,
        }
    }

    /// The report of a specialization's compilation; on a GPU the compiled PTX is kept, so
    /// that the launch that follows (a tuner's candidate planned, then timed) loads it
    /// without compiling again.
    fn plan_specialized(&self, kernel: &Kernel, launch: &Launch<'_>) -> Result<compiler::Report> {
        if let Some(gpu) = &self.inner.gpu {
            let compiled = gpu.compile(
                launch.name,
                &launch.key,
                kernel,
                &launch.args,
                launch.config,
            )?;
            return Ok(compiled.report.clone());
        }
        let target = self.target().unwrap_or(compiler::DEFAULT_TARGET);
        let compiled = compiler::compile_launch(kernel, &launch.args, launch.config, &target)?;
        Ok(compiled.report)
    }

    /// The compiled PTX and resource report of a launch's specialization (GPU devices only).
    pub fn compiled(&self, launch: &Launch<'_>) -> Result<Arc<gpu::GpuKernel>> {
        let kernel = self.specialize(launch)?;
        let gpu = self.inner.gpu.as_ref().ok_or_else(|| Error::Invalid {
            op: "compiled".into(),
            message: format!("{} compiles no PTX", self.name()),
        })?;
        gpu.kernel(
            launch.name,
            &launch.key,
            &kernel,
            &launch.args,
            launch.config,
        )
    }
}

/// Every tensor argument must be on `dev`; the error names the parameter and both devices.
fn check_devices(kernel: &Kernel, launch: &Launch<'_>, dev: &Device) -> Result<()> {
    for (i, arg) in launch.args.iter().enumerate() {
        if let KernelArg::Tensor {
            device,
            device_name,
            ..
        } = arg
        {
            if *device != dev.id() {
                return Err(Error::Device {
                    op: format!("launch of `{}`", launch.name),
                    message: format!(
                        "argument `{}` is on {device_name}, the launch is on {}",
                        param_name(kernel, i),
                        dev.name()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The name of parameter `i` of `kernel`, or `#i` past its parameters.
fn param_name(kernel: &Kernel, i: usize) -> String {
    kernel
        .params
        .get(i)
        .map_or_else(|| format!("#{i}"), |p| p.name.clone())
}

/// The interpreter's arguments for a launch on `dev`: each tensor a view of its buffer that
/// reaches the elements the tensor's view spans ([`Tensor::extent`]), no further.
fn interpreter_args(kernel: &Kernel, launch: &Launch<'_>, dev: &Device) -> Result<Vec<Arg>> {
    launch
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            KernelArg::Tensor {
                storage: Storage::Host(b),
                offset,
                extent,
                ..
            } => Ok(Arg::view(b, *offset, *extent)),
            KernelArg::Tensor { device_name, .. } => Err(Error::Device {
                op: format!("launch of `{}`", launch.name),
                message: format!(
                    "argument `{}` is GPU memory of {device_name}, the launch is on {}",
                    param_name(kernel, i),
                    dev.name()
                ),
            }),
            KernelArg::Int { value, .. } => Ok(Arg::Int(*value)),
            KernelArg::Float { value, .. } => Ok(Arg::Float(*value)),
        })
        .collect()
}

/// Arguments must match the traced parameters in number, kind and dtype.
fn check_arguments(kernel: &Kernel, args: &[KernelArg], dev: &Device) -> Result<()> {
    let err = |message: String| Error::Arguments {
        kernel: kernel.name.clone(),
        message,
    };
    if kernel.params.len() != args.len() {
        return Err(err(format!(
            "{} parameters, {} arguments",
            kernel.params.len(),
            args.len()
        )));
    }
    for (p, a) in kernel.params.iter().zip(args) {
        let ok = match a {
            KernelArg::Tensor { dtype, .. } => p.ty.is_ptr() && p.ty.dtype() == *dtype,
            KernelArg::Int { dtype, .. } | KernelArg::Float { dtype, .. } => {
                !p.ty.is_ptr() && p.ty.dtype() == *dtype
            }
        };
        if !ok {
            return Err(err(format!(
                "parameter `{}` is {}, the argument is {} (on {})",
                p.name,
                p.ty,
                a.describe(),
                dev.name()
            )));
        }
    }
    Ok(())
}
