//! `Device`: where tensors live and kernels run, with the cache of traced specializations.

use crate::error::{Error, Result};
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
}

/// Memory of one tensor, shared by its views.
#[derive(Clone, Debug)]
pub enum Storage {
    Host(Arc<Buffer>),
}

impl Storage {
    pub(crate) fn same_buffer(&self, other: &Storage) -> bool {
        match (self, other) {
            (Storage::Host(a), Storage::Host(b)) => Arc::ptr_eq(a, b),
        }
    }

    pub(crate) fn read_all<T: Element>(&self) -> Result<Vec<T>> {
        match self {
            Storage::Host(b) => Ok(b.to_vec::<T>()?),
        }
    }

    pub(crate) fn write_all<T: Element>(&self, data: &[T]) -> Result<()> {
        match self {
            Storage::Host(b) => {
                for (i, &v) in data.iter().enumerate() {
                    b.write_bits(i, v.to_bits());
                }
                Ok(())
            }
        }
    }
}

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

struct Inner {
    id: u64,
    backend: Backend,
    /// Traced specializations by `name|key|argument types`.
    kernels: Mutex<HashMap<String, Arc<Kernel>>>,
    check_races: AtomicBool,
    /// Seeds `randn`/`rand` so every call draws fresh numbers.
    seed: AtomicU64,
}

/// A device: the interpreter now, the GPU when the CUDA backend is present. Cloning shares it.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

impl Device {
    /// The CPU interpreter.
    pub fn cpu() -> Device {
        Device::with_backend(Backend::Interpreter)
    }

    fn with_backend(backend: Backend) -> Device {
        let check = std::env::var("TEGULA_CHECK_RACES").is_ok_and(|v| v == "1");
        Device {
            inner: Arc::new(Inner {
                id: NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed),
                backend,
                kernels: Mutex::new(HashMap::new()),
                check_races: AtomicBool::new(check),
                seed: AtomicU64::new(rand::random()),
            }),
        }
    }

    /// The GPU when there is one, else the interpreter; `TEGULA_DEVICE=cpu|cuda[:N]` chooses.
    ///
    /// This build has no CUDA backend yet, so `cuda` is an error and the default is the
    /// interpreter.
    #[allow(clippy::should_implement_trait)] // returns a Result, unlike `Default::default`
    pub fn default() -> Result<Device> {
        match std::env::var("TEGULA_DEVICE").ok().as_deref() {
            None | Some("") | Some("cpu") => Ok(Device::cpu()),
            Some(other) => Err(Error::Invalid {
                op: "Device::default".into(),
                message: format!(
                    "TEGULA_DEVICE={other}: this build runs kernels on the interpreter only \
                     (TEGULA_DEVICE=cpu)"
                ),
            }),
        }
    }

    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// A unique id, to tell devices apart in argument checks.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// A short description for messages: `cpu (interpreter, 2 threads)`.
    pub fn name(&self) -> String {
        match self.inner.backend {
            Backend::Interpreter => format!(
                "cpu (interpreter, {} threads)",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        }
    }

    /// Turns on the interpreter's write-write race check between programs (also
    /// `TEGULA_CHECK_RACES=1`).
    pub fn set_check_races(&self, on: bool) {
        self.inner.check_races.store(on, Ordering::Relaxed);
    }

    fn alloc<T: Element>(&self, shape: Vec<usize>) -> Result<Tensor<T>> {
        let n: usize = shape.iter().product();
        let storage = match self.inner.backend {
            Backend::Interpreter => Storage::Host(Arc::new(Buffer::zeroed(T::DTYPE, n))),
        };
        Ok(Tensor::from_storage(self.clone(), storage, shape))
    }

    /// A tensor of zeros.
    pub fn zeros<T: Element>(&self, shape: impl Into<Vec<usize>>) -> Result<Tensor<T>> {
        self.alloc(shape.into())
    }

    /// A tensor whose contents do not matter (zeros on the interpreter).
    pub fn empty<T: Element>(&self, shape: impl Into<Vec<usize>>) -> Result<Tensor<T>> {
        self.alloc(shape.into())
    }

    /// A tensor filled with `value`.
    pub fn full<T: Element>(&self, shape: impl Into<Vec<usize>>, value: T) -> Result<Tensor<T>> {
        let t = self.alloc::<T>(shape.into())?;
        t.copy_from_slice(&vec![value; t.numel()])?;
        Ok(t)
    }

    /// A contiguous tensor holding `data` (row-major) with `shape`.
    pub fn from_slice<T: Element>(
        &self,
        data: &[T],
        shape: impl Into<Vec<usize>>,
    ) -> Result<Tensor<T>> {
        let shape = shape.into();
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::Shape {
                op: "from_slice".into(),
                message: format!("{} values for shape {shape:?} ({n} elements)", data.len()),
            });
        }
        let storage = match self.inner.backend {
            Backend::Interpreter => Storage::Host(Arc::new(Buffer::from_slice(data))),
        };
        Ok(Tensor::from_storage(self.clone(), storage, shape))
    }

    fn next_seed(&self) -> u64 {
        self.inner.seed.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
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
        let data: Vec<T> = (0..shape.iter().product::<usize>())
            .map(|_| T::from_f64(StandardNormal.sample(&mut rng)))
            .collect();
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
        let data: Vec<T> = (0..shape.iter().product::<usize>())
            .map(|_| T::from_f64(rng.gen_range(lo..hi)))
            .collect();
        self.from_slice(&data, shape)
    }

    /// The traced kernel for this launch's specialization, tracing it on first use.
    pub fn specialize(&self, launch: &Launch<'_>) -> Result<Arc<Kernel>> {
        let arg_types: Vec<String> = launch.args.iter().map(KernelArg::describe).collect();
        let key = format!("{}|{}|{}", launch.name, launch.key, arg_types.join(","));
        if let Some(k) = self.cache().get(&key) {
            return Ok(k.clone());
        }
        let kernel = Arc::new((launch.trace)()?);
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
    pub fn launch(&self, launch: Launch<'_>) -> Result<()> {
        let kernel = self.specialize(&launch)?;
        for arg in &launch.args {
            if let KernelArg::Tensor { device, .. } = arg {
                if *device != self.id() {
                    return Err(Error::Device {
                        op: format!("launch of `{}`", launch.name),
                        first: format!("device #{device}"),
                        second: self.name(),
                    });
                }
            }
        }
        match self.inner.backend {
            Backend::Interpreter => {
                let args: Vec<Arg> = launch
                    .args
                    .iter()
                    .map(|a| match a {
                        KernelArg::Tensor {
                            storage: Storage::Host(b),
                            offset,
                            ..
                        } => Arg::Ptr {
                            buffer: b.clone(),
                            offset: *offset,
                        },
                        KernelArg::Int { value, .. } => Arg::Int(*value),
                        KernelArg::Float { value, .. } => Arg::Float(*value),
                    })
                    .collect();
                let options = tegula_interp::Options {
                    check_races: self.inner.check_races.load(Ordering::Relaxed),
                    ..Default::default()
                };
                tegula_interp::run(&kernel, launch.grid.0, &args, &options)?;
                Ok(())
            }
        }
    }
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
