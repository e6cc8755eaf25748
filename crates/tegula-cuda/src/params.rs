//! Kernel arguments: their packing for `cuLaunchKernel`, and the PTX entry signatures they are
//! checked against before launch (the driver itself would read whatever bytes it is given).

use crate::CudaError;

/// One kernel argument. f16/bf16 scalars travel as their bits in `U16`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelParam {
    /// A device pointer (`.param .u64`).
    Ptr(u64),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl KernelParam {
    /// Size in bytes as the kernel reads it.
    pub fn size(&self) -> usize {
        match self {
            KernelParam::I8(_) | KernelParam::U8(_) => 1,
            KernelParam::I16(_) | KernelParam::U16(_) => 2,
            KernelParam::I32(_) | KernelParam::U32(_) | KernelParam::F32(_) => 4,
            KernelParam::Ptr(_)
            | KernelParam::I64(_)
            | KernelParam::U64(_)
            | KernelParam::F64(_) => 8,
        }
    }

    /// The argument as an 8-byte slot: its little-endian bytes first, zeros after. The driver reads
    /// the first `size()` bytes, and never more than 8 for the types above, so a slot is always
    /// large enough even if the kernel's parameter were wider than the argument.
    pub fn slot(&self) -> u64 {
        match *self {
            KernelParam::Ptr(v) | KernelParam::U64(v) => v,
            KernelParam::I8(v) => v as u8 as u64,
            KernelParam::U8(v) => v as u64,
            KernelParam::I16(v) => v as u16 as u64,
            KernelParam::U16(v) => v as u64,
            KernelParam::I32(v) => v as u32 as u64,
            KernelParam::U32(v) => v as u64,
            KernelParam::I64(v) => v as u64,
            KernelParam::F32(v) => v.to_bits() as u64,
            KernelParam::F64(v) => v.to_bits(),
        }
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for KernelParam {
            fn from(x: $t) -> Self { KernelParam::$v(x) }
        }
    )*};
}
from_scalar!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// Arguments laid out for `cuLaunchKernel`'s `kernelParams`: one 8-byte slot per argument and an
/// array of pointers to the slots. The pointers point into `slots`, so the pack must not move
/// between `pointers()` and the launch (it is used within one function call).
pub(crate) struct PackedParams {
    slots: Vec<u64>,
}

impl PackedParams {
    pub(crate) fn new(params: &[KernelParam]) -> Self {
        PackedParams {
            slots: params.iter().map(KernelParam::slot).collect(),
        }
    }

    /// The `void**` array the driver reads; valid while `self` is alive and unmoved.
    pub(crate) fn pointers(&mut self) -> Vec<*mut std::ffi::c_void> {
        self.slots
            .iter_mut()
            .map(|s| s as *mut u64 as *mut std::ffi::c_void)
            .collect()
    }

    #[cfg(test)]
    fn slot_bytes(&self, i: usize) -> [u8; 8] {
        self.slots[i].to_ne_bytes()
    }
}

/// Sizes in bytes of each parameter of `.entry <entry>` in `ptx`, or None when the text has no
/// such entry (then the driver's lookup decides).
pub fn entry_param_sizes(ptx: &str, entry: &str) -> Option<Vec<u32>> {
    let open = find_entry(ptx, entry)?;
    let rest = &ptx[open..];
    let close = rest.find(')')?;
    rest[..close]
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(param_size)
        .collect()
}

/// Names of all `.entry` functions in `ptx`.
pub fn entry_names(ptx: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry") {
        let after = &rest[at + ".entry".len()..];
        let name: String = after
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%'))
            .collect();
        if !name.is_empty() && after.starts_with(char::is_whitespace) {
            names.push(name);
        }
        rest = after;
    }
    names
}

/// Byte offset just past the `(` that opens `entry`'s parameter list.
fn find_entry(ptx: &str, entry: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = ptx[from..].find(".entry") {
        let start = from + at + ".entry".len();
        let after = ptx[start..].trim_start();
        if let Some(tail) = after.strip_prefix(entry) {
            let tail_trim = tail.trim_start();
            if tail_trim.starts_with('(') {
                return Some(ptx.len() - tail_trim.len() + 1);
            }
        }
        from = start;
    }
    None
}

/// Size of one `.param` declaration, e.g. `.param .u64 .ptr .global .align 16 k_param_0` or
/// `.param .align 8 .b8 k_param_1[16]`.
fn param_size(decl: &str) -> Option<u32> {
    let mut elem = None;
    let mut count = 1;
    for tok in decl.split_whitespace() {
        if let Some(bits) = tok
            .strip_prefix(".u")
            .or_else(|| tok.strip_prefix(".s"))
            .or_else(|| tok.strip_prefix(".b"))
            .or_else(|| tok.strip_prefix(".f"))
            .and_then(|b| b.parse::<u32>().ok())
        {
            elem = Some(bits / 8);
        } else if !tok.starts_with('.') {
            // The name, possibly an array: `name[16]`.
            if let Some(open) = tok.find('[') {
                count = tok[open + 1..].trim_end_matches(']').parse().ok()?;
            }
        }
    }
    Some(elem? * count)
}

/// Checks arguments against the kernel's PTX parameter sizes.
pub(crate) fn check_params(
    kernel: &str,
    expected: &[u32],
    params: &[KernelParam],
) -> Result<(), CudaError> {
    if expected.len() != params.len() {
        return Err(CudaError::Params {
            kernel: kernel.to_string(),
            message: format!(
                "takes {} argument(s), {} given",
                expected.len(),
                params.len()
            ),
        });
    }
    for (i, (want, got)) in expected.iter().zip(params).enumerate() {
        if *want as usize != got.size() {
            return Err(CudaError::Params {
                kernel: kernel.to_string(),
                message: format!(
                    "argument {i} is {want} bytes in the PTX, but {got:?} is {} bytes",
                    got.size()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = r#"
.version 8.0
.target sm_90a
.address_size 64

	// .globl	add_kernel
.visible .entry add_kernel(
	.param .u64 .ptr .global .align 16 add_kernel_param_0,
	.param .u64 add_kernel_param_1,
	.param .u32 add_kernel_param_2,
	.param .f32 add_kernel_param_3,
	.param .b16 add_kernel_param_4,
	.param .align 8 .b8 add_kernel_param_5[24]
)
.maxntid 128, 1, 1
{
	ret;
}
.visible .entry add(
)
{
	ret;
}
"#;

    #[test]
    fn parses_entry_signatures() {
        assert_eq!(
            entry_param_sizes(PTX, "add_kernel"),
            Some(vec![8, 8, 4, 4, 2, 24])
        );
        // `add` is a prefix of `add_kernel` but its own entry, with no parameters.
        assert_eq!(entry_param_sizes(PTX, "add"), Some(vec![]));
        assert_eq!(entry_param_sizes(PTX, "mul"), None);
        assert_eq!(
            entry_names(PTX),
            vec!["add_kernel".to_string(), "add".to_string()]
        );
    }

    #[test]
    fn slots_hold_little_endian_values() {
        let params = [
            KernelParam::Ptr(0x7f00_1234_5678_9abc),
            KernelParam::I32(-2),
            KernelParam::F32(1.5),
            KernelParam::U16(0x3c00), // f16 1.0
            KernelParam::I8(-1),
            KernelParam::F64(-0.1),
            KernelParam::I64(-3),
        ];
        let mut pack = PackedParams::new(&params);
        let ptrs = pack.pointers();
        assert_eq!(ptrs.len(), params.len());
        let expect: [&[u8]; 7] = [
            &0x7f00_1234_5678_9abcu64.to_le_bytes(),
            &(-2i32).to_le_bytes(),
            &1.5f32.to_le_bytes(),
            &[0x00, 0x3c],
            &[0xff],
            &(-0.1f64).to_le_bytes(),
            &(-3i64).to_le_bytes(),
        ];
        for (i, (p, want)) in params.iter().zip(expect).enumerate() {
            assert_eq!(p.size(), want.len(), "param {i}");
            let bytes = pack.slot_bytes(i);
            assert_eq!(&bytes[..want.len()], want, "param {i}");
            assert!(
                bytes[want.len()..].iter().all(|&b| b == 0),
                "param {i} padding"
            );
            // The pointer the driver gets reads the same bytes.
            // SAFETY: ptrs[i] points at pack.slots[i], 8 valid bytes, and pack is alive and unmoved.
            let via_ptr = unsafe { std::slice::from_raw_parts(ptrs[i] as *const u8, want.len()) };
            assert_eq!(via_ptr, want, "param {i} via pointer");
        }
        assert_eq!(KernelParam::from(7u16), KernelParam::U16(7));
        assert_eq!(KernelParam::from(-7i64).slot(), (-7i64) as u64);
    }

    #[test]
    fn checks_count_and_sizes() {
        let sizes = entry_param_sizes(PTX, "add_kernel").unwrap();
        let mut args = vec![
            KernelParam::Ptr(16),
            KernelParam::Ptr(32),
            KernelParam::U32(3),
            KernelParam::F32(0.5),
            KernelParam::U16(1),
        ];
        let err = check_params("add_kernel", &sizes, &args).unwrap_err();
        assert!(
            err.to_string().contains("takes 6 argument(s), 5 given"),
            "{err}"
        );
        args.push(KernelParam::U64(1));
        let err = check_params("add_kernel", &sizes, &args).unwrap_err();
        assert!(err.to_string().contains("argument 5 is 24 bytes"), "{err}");
        args[5] = KernelParam::U8(0);
        args[2] = KernelParam::I64(3);
        let err = check_params("add_kernel", &sizes, &args).unwrap_err();
        assert!(err.to_string().contains("argument 2 is 4 bytes"), "{err}");
        args[2] = KernelParam::I32(3);
        check_params("add_kernel", &sizes[..5], &args[..5]).unwrap();
    }
}
