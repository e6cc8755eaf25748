//! What a launch carries: the grid, the config, and the arguments in parameter order.
//!
//! `#[tegula::kernel]` generates launchers that fill a [`Launch`] and hand it to
//! [`crate::Device::launch`].

use crate::device::Storage;
use crate::tensor::Tensor;
use std::marker::PhantomData;
use tegula_ir::{DType, Element, Kernel, TraceError};
pub use tegula_ptx::MmaChoice;

/// Names a pointer parameter in a kernel signature: `x: Ptr<f32>`. Inside the body the
/// parameter is a pointer tile; the launcher takes a `&Tensor<f32>`.
pub struct Ptr<T: Element>(PhantomData<T>);

/// The number of programs along each grid axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid(pub [u32; 3]);

impl Grid {
    pub fn num_programs(&self) -> u64 {
        self.0.iter().map(|&n| n as u64).product()
    }
}

impl From<u32> for Grid {
    fn from(x: u32) -> Grid {
        Grid([x, 1, 1])
    }
}
impl From<usize> for Grid {
    fn from(x: usize) -> Grid {
        Grid([u32::try_from(x).unwrap_or(u32::MAX), 1, 1])
    }
}
impl From<[u32; 1]> for Grid {
    fn from(x: [u32; 1]) -> Grid {
        Grid([x[0], 1, 1])
    }
}
impl From<[u32; 2]> for Grid {
    fn from(x: [u32; 2]) -> Grid {
        Grid([x[0], x[1], 1])
    }
}
impl From<[u32; 3]> for Grid {
    fn from(x: [u32; 3]) -> Grid {
        Grid(x)
    }
}
impl From<(u32, u32)> for Grid {
    fn from((x, y): (u32, u32)) -> Grid {
        Grid([x, y, 1])
    }
}
impl From<(u32, u32, u32)> for Grid {
    fn from((x, y, z): (u32, u32, u32)) -> Grid {
        Grid([x, y, z])
    }
}

/// How the GPU runs each program: warps per program, software-pipelining depth and the
/// tensor-core instructions its dots may use, and whether float multiplies and adds may fuse.
/// The interpreter ignores them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    pub num_warps: u32,
    pub num_stages: u32,
    /// [`MmaChoice::Auto`]: the compiler's (Hopper's `wgmma` where its plan can place a dot).
    pub mma: MmaChoice,
    /// Float multiplies and adds may fuse into one `fma` on the GPU (Triton's
    /// `enable_fp_fusion`, on by default); off, each rounds on its own, as on the interpreter
    /// (`CompileOptions::fp_fusion`).
    pub fp_fusion: bool,
    /// Tensor-descriptor accesses outside loops may move on the tensor memory accelerator
    /// (sm_90) where the compiler's rule allows (`CompileOptions::tma`); off by default. A
    /// descriptor load a loop's pipeline streams moves on TMA either way.
    pub tma: bool,
}

impl LaunchConfig {
    /// `num_warps` warps and `num_stages` stages, the compiler's choice of tensor-core
    /// instructions.
    pub const fn new(num_warps: u32, num_stages: u32) -> LaunchConfig {
        LaunchConfig {
            num_warps,
            num_stages,
            mma: MmaChoice::Auto,
            fp_fusion: true,
            tma: false,
        }
    }

    /// The same config with tensor-core instructions `mma`.
    pub const fn with_mma(self, mma: MmaChoice) -> LaunchConfig {
        LaunchConfig { mma, ..self }
    }

    /// The same config with float multiply-add fusion on or off.
    pub const fn with_fp_fusion(self, fp_fusion: bool) -> LaunchConfig {
        LaunchConfig { fp_fusion, ..self }
    }

    /// The same config with tensor-descriptor accesses outside loops on TMA where the
    /// compiler's rule allows (`tma`), or never.
    pub const fn with_tma(self, tma: bool) -> LaunchConfig {
        LaunchConfig { tma, ..self }
    }
}

impl Default for LaunchConfig {
    /// 4 warps, 3 stages, the compiler's choice of tensor-core instructions.
    fn default() -> Self {
        LaunchConfig::new(4, 3)
    }
}

/// One kernel argument, as the device sees it.
#[derive(Clone, Debug)]
pub enum KernelArg {
    /// A pointer to the first element of a tensor view.
    Tensor {
        dtype: DType,
        storage: Storage,
        offset: usize,
        /// The elements from `offset` the view spans ([`Tensor::extent`]): what the kernel
        /// may reach through this argument (the interpreter checks it).
        extent: usize,
        /// The tensor's [`crate::Device::id`] and name.
        device: u64,
        device_name: std::sync::Arc<str>,
    },
    Int {
        dtype: DType,
        value: i64,
    },
    Float {
        dtype: DType,
        value: f64,
    },
}

impl KernelArg {
    /// The dtype of the scalar, or of the tensor's elements.
    pub fn dtype(&self) -> DType {
        match self {
            KernelArg::Tensor { dtype, .. }
            | KernelArg::Int { dtype, .. }
            | KernelArg::Float { dtype, .. } => *dtype,
        }
    }

    /// `ptr<f16>` or `i32`, as the IR prints parameter types.
    pub fn describe(&self) -> String {
        match self {
            KernelArg::Tensor { dtype, .. } => format!("ptr<{dtype}>"),
            other => other.dtype().to_string(),
        }
    }
}

/// A launcher argument that is a tensor of `T` (`&Tensor<T>` or `&mut Tensor<T>`).
pub trait TensorArg<T: Element> {
    fn kernel_arg(&self) -> KernelArg;
}

impl<T: Element> TensorArg<T> for &Tensor<T> {
    fn kernel_arg(&self) -> KernelArg {
        KernelArg::Tensor {
            dtype: T::DTYPE,
            storage: self.storage.clone(),
            offset: self.offset(),
            extent: self.extent(),
            device: self.device.id(),
            device_name: self.device.name_shared(),
        }
    }
}

impl<T: Element> TensorArg<T> for &mut Tensor<T> {
    fn kernel_arg(&self) -> KernelArg {
        (&**self).kernel_arg()
    }
}

/// A launcher argument that is a scalar.
pub trait ScalarArg: Copy {
    const DTYPE: DType;
    fn kernel_arg(self) -> KernelArg;
}

macro_rules! int_scalar_arg {
    ($($t:ty),*) => {$(
        impl ScalarArg for $t {
            const DTYPE: DType = <$t as Element>::DTYPE;
            fn kernel_arg(self) -> KernelArg {
                KernelArg::Int { dtype: <$t as ScalarArg>::DTYPE, value: Element::to_bits(self) as i64 }
            }
        }
    )*};
}
int_scalar_arg!(bool, i8, i16, u8, u16, u32, u64);

// Signed integers keep their value (sign-extended), not their zero-extended bits.
macro_rules! signed_scalar_arg {
    ($($t:ty),*) => {$(
        impl ScalarArg for $t {
            const DTYPE: DType = <$t as Element>::DTYPE;
            fn kernel_arg(self) -> KernelArg {
                KernelArg::Int { dtype: <$t as ScalarArg>::DTYPE, value: self as i64 }
            }
        }
    )*};
}
signed_scalar_arg!(i32, i64);

macro_rules! float_scalar_arg {
    ($($t:ty),*) => {$(
        impl ScalarArg for $t {
            const DTYPE: DType = <$t as Element>::DTYPE;
            fn kernel_arg(self) -> KernelArg {
                KernelArg::Float { dtype: <$t as ScalarArg>::DTYPE, value: Element::to_f64(self) }
            }
        }
    )*};
}
float_scalar_arg!(f32, f64, half::f16, half::bf16);

/// A request to run a kernel: how to trace it, which specialization, where, and with what.
pub struct Launch<'a> {
    /// The kernel's name, for messages and the cache key.
    pub name: &'static str,
    /// Everything the trace depends on besides argument dtypes (constexpr values, type
    /// parameters).
    pub key: String,
    pub trace: &'a dyn Fn() -> Result<Kernel, TraceError>,
    pub grid: Grid,
    pub config: LaunchConfig,
    /// In kernel parameter order; constexprs are not arguments.
    pub args: Vec<KernelArg>,
}
