//! Kernel arguments: their packing for `cuLaunchKernel`, and the PTX entry signatures they are
//! checked against before launch (the driver itself would read whatever bytes it is given).

use crate::{CudaError, TensorMap};

/// One kernel argument. f16/bf16 scalars travel as their bits in `U16`. (The `TensorMap` variant
/// makes the enum 192 bytes, 64-byte aligned; arguments are few, and it stays `Copy`.)
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
    /// A TMA tensor map passed by value, as its 128 bytes (`.param .align 64 .b8 NAME[128]`).
    TensorMap(TensorMap),
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
            KernelParam::TensorMap(_) => crate::tensor_map::TENSOR_MAP_BYTES,
        }
    }

    /// A scalar or pointer argument as an 8-byte slot: its little-endian bytes first, zeros after.
    /// The driver reads the first `size()` bytes, never more than 8 for these, so a slot is
    /// large enough. None for a `TensorMap`, which is passed as its own 128 bytes.
    pub fn slot(&self) -> Option<u64> {
        Some(match *self {
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
            KernelParam::TensorMap(_) => return None,
        })
    }
}

impl From<TensorMap> for KernelParam {
    fn from(m: TensorMap) -> Self {
        KernelParam::TensorMap(m)
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

/// Arguments laid out for `cuLaunchKernel`'s `kernelParams`, which holds one pointer per argument
/// to its value: an 8-byte slot in `slots` for a scalar or pointer, the map's 128 bytes in `maps`
/// for a tensor map (64-byte aligned: `TensorMap`'s alignment, which `Vec` keeps).
///
/// Pointer validity: the pointers from `pointers()` point into the heap buffers of `slots` and
/// `maps`, which are filled once in `new` and never resized, so they stay valid while the pack
/// is alive (moving the pack moves only the vectors' headers). Launch uses it within one call.
pub(crate) struct PackedParams {
    slots: Vec<u64>,
    maps: Vec<TensorMap>,
    /// Per argument, in order: where its value is.
    order: Vec<Packed>,
}

#[derive(Clone, Copy, Debug)]
enum Packed {
    Slot(usize),
    Map(usize),
}

impl PackedParams {
    pub(crate) fn new(params: &[KernelParam]) -> Self {
        let mut pack = PackedParams {
            slots: Vec::with_capacity(params.len()),
            maps: Vec::new(),
            order: Vec::with_capacity(params.len()),
        };
        for p in params {
            let at = match *p {
                KernelParam::TensorMap(m) => {
                    pack.maps.push(m);
                    Packed::Map(pack.maps.len() - 1)
                }
                // Every other argument has a slot (`slot` is None only for a tensor map).
                _ => {
                    pack.slots.push(p.slot().unwrap_or_default());
                    Packed::Slot(pack.slots.len() - 1)
                }
            };
            pack.order.push(at);
        }
        pack
    }

    /// The `void**` array the driver reads, one pointer per argument; valid while `self` is
    /// alive (see the type's docs).
    pub(crate) fn pointers(&mut self) -> Vec<*mut std::ffi::c_void> {
        let (slots, maps) = (&mut self.slots, &mut self.maps);
        self.order
            .iter()
            .map(|at| match *at {
                Packed::Slot(i) => (&mut slots[i] as *mut u64).cast(),
                Packed::Map(i) => (&mut maps[i] as *mut TensorMap).cast(),
            })
            .collect()
    }
}

/// Sizes in bytes of each parameter of `.entry <entry>` in `ptx`, or None when the text has no
/// such entry (then the driver's lookup decides).
pub fn entry_param_sizes(ptx: &str, entry: &str) -> Option<Vec<u32>> {
    Some(entry_params(ptx, entry)?.iter().map(|p| p.size).collect())
}

/// One `.param` of a PTX entry, as far as the launch check needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamDecl {
    /// Bytes the kernel reads.
    pub(crate) size: u32,
    /// The declared `.align`, if any.
    pub(crate) align: Option<u32>,
    /// A byte array, `.b8 NAME[N]` (a struct by value, or a tensor map).
    pub(crate) byte_array: bool,
}

impl ParamDecl {
    /// Declared as a tensor map is: `.param .align 64 .b8 NAME[128]` (a larger alignment, as
    /// CUDA 13's 128-byte aligned `CUtensorMap` may give, also holds one).
    pub(crate) fn is_tensor_map(&self) -> bool {
        self.byte_array
            && self.size as usize == crate::tensor_map::TENSOR_MAP_BYTES
            && self.align.is_some_and(|a| a >= 64)
    }
}

/// The parameters of `.entry <entry>` in `ptx`, or None when the text has no such entry or a
/// declaration it cannot read (then nothing is checked).
pub(crate) fn entry_params(ptx: &str, entry: &str) -> Option<Vec<ParamDecl>> {
    let open = find_entry(ptx, entry)?;
    let rest = &ptx[open..];
    let close = rest.find(')')?;
    rest[..close]
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(param_decl)
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

/// One `.param` declaration, e.g. `.param .u64 .ptr .global .align 16 k_param_0` or
/// `.param .align 8 .b8 k_param_1[16]`.
fn param_decl(decl: &str) -> Option<ParamDecl> {
    let mut elem = None;
    let mut count = 1;
    let mut align = None;
    let mut array = false;
    let mut toks = decl.split_whitespace();
    while let Some(tok) = toks.next() {
        if tok == ".align" {
            align = toks.next().and_then(|a| a.parse().ok());
        } else if let Some(bits) = tok
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
                array = true;
            }
        }
    }
    let elem: u32 = elem?;
    Some(ParamDecl {
        size: elem.checked_mul(count)?,
        align,
        byte_array: array && elem == 1,
    })
}

/// Checks arguments against the kernel's PTX parameters: their number, each one's size, and
/// that tensor maps go exactly to parameters declared as tensor maps.
pub(crate) fn check_params(
    kernel: &str,
    expected: &[ParamDecl],
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
        let size = want.size;
        let message = match (want.is_tensor_map(), got) {
            (true, KernelParam::TensorMap(_)) => continue,
            (true, _) => format!(
                "argument {i} is a tensor map in the PTX (`.param .align {} .b8 NAME[128]`), \
                 but {got:?} is {} bytes",
                want.align.unwrap_or(64),
                got.size()
            ),
            (false, KernelParam::TensorMap(_)) => {
                let align = want
                    .align
                    .map(|a| format!(", aligned to {a},"))
                    .unwrap_or_default();
                format!(
                    "argument {i} is {size} bytes{align} in the PTX, but a tensor map is given \
                     (128 bytes, which need `.param .align 64 .b8 NAME[128]`)"
                )
            }
            (false, _) if size as usize != got.size() => format!(
                "argument {i} is {size} bytes in the PTX, but {got:?} is {} bytes",
                got.size()
            ),
            (false, _) => continue,
        };
        return Err(CudaError::Params {
            kernel: kernel.to_string(),
            message,
        });
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

    /// A kernel taking a pointer, an i32, a tensor map (as tegula-ptx declares one), and a
    /// 128-byte struct by value that is not 64-byte aligned.
    const TMA_PTX: &str = r#"
.version 8.0
.target sm_90a
.address_size 64

.visible .entry copy_tile(
	.param .u64 .ptr .global .align 16 copy_tile_param_0,
	.param .u32 copy_tile_param_1,
	.param .align 64 .b8 copy_tile_tmap_0[128],
	.param .align 8 .b8 copy_tile_param_2[128]
)
{
	ret;
}
"#;

    /// A tensor map whose bytes are recognisable: byte i is `seed + i`.
    fn map(seed: u8) -> TensorMap {
        let mut bytes = [0u8; 128];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        TensorMap::from_bytes(bytes)
    }

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
        let decls = entry_params(PTX, "add_kernel").unwrap();
        assert_eq!(decls[0].align, Some(16));
        assert!(!decls[0].byte_array);
        assert_eq!(decls[5].align, Some(8));
        assert!(decls[5].byte_array);
        assert!(decls.iter().all(|d| !d.is_tensor_map()));
    }

    #[test]
    fn parses_tensor_map_params() {
        assert_eq!(
            entry_param_sizes(TMA_PTX, "copy_tile"),
            Some(vec![8, 4, 128, 128])
        );
        let decls = entry_params(TMA_PTX, "copy_tile").unwrap();
        let maps: Vec<bool> = decls.iter().map(ParamDecl::is_tensor_map).collect();
        assert_eq!(maps, [false, false, true, false]);
        assert_eq!(
            decls[2],
            ParamDecl {
                size: 128,
                align: Some(64),
                byte_array: true
            }
        );
        // CUDA 13 aligns CUtensorMap to 128; a 16-bit array of 64 is no tensor map.
        let decl = |d: &str| param_decl(d).unwrap();
        assert!(decl(".param .align 128 .b8 m[128]").is_tensor_map());
        assert!(!decl(".param .align 64 .b16 m[64]").is_tensor_map());
        assert!(!decl(".param .align 64 .b8 m[64]").is_tensor_map());
        assert!(!decl(".param .b8 m[128]").is_tensor_map());
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
            // SAFETY: ptrs[i] points at an 8-byte slot of `pack`, which is alive.
            let slot = unsafe { std::slice::from_raw_parts(ptrs[i] as *const u8, 8) };
            assert_eq!(&slot[..want.len()], want, "param {i}");
            assert!(
                slot[want.len()..].iter().all(|&b| b == 0),
                "param {i} padding"
            );
            assert_eq!(
                p.slot().map(u64::to_le_bytes).as_ref(),
                Some(&slot.try_into().unwrap())
            );
        }
        assert_eq!(KernelParam::from(7u16), KernelParam::U16(7));
        assert_eq!(KernelParam::from(-7i64).slot(), Some((-7i64) as u64));
    }

    #[test]
    fn tensor_maps_are_packed_as_their_128_bytes() {
        let (m0, m1) = (map(0x10), map(0xa0));
        let params = [
            KernelParam::U64(0x0102_0304_0506_0708),
            KernelParam::TensorMap(m0),
            KernelParam::I32(-5),
            KernelParam::F32(2.25),
            KernelParam::from(m1),
            KernelParam::Ptr(0xdead_beef_0000),
        ];
        assert_eq!(params[1].size(), 128);
        assert_eq!(params[1].slot(), None);
        let mut pack = PackedParams::new(&params);
        // Moving the pack keeps the pointers' targets (they are in the vectors' heap buffers).
        let ptrs = pack.pointers();
        let pack = std::hint::black_box(pack);
        assert_eq!(ptrs.len(), params.len());
        let scalars: [(usize, &[u8]); 4] = [
            (0, &0x0102_0304_0506_0708u64.to_le_bytes()),
            (2, &(-5i32).to_le_bytes()),
            (3, &2.25f32.to_le_bytes()),
            (5, &0xdead_beef_0000u64.to_le_bytes()),
        ];
        for (i, want) in scalars {
            // SAFETY: ptrs[i] points at an 8-byte slot of `pack`, which is alive.
            let got = unsafe { std::slice::from_raw_parts(ptrs[i] as *const u8, want.len()) };
            assert_eq!(got, want, "param {i}");
        }
        for (i, m) in [(1, m0), (4, m1)] {
            assert_eq!(ptrs[i] as usize % 64, 0, "param {i} is not 64-byte aligned");
            // SAFETY: ptrs[i] points at a TensorMap (128 bytes) in `pack`, which is alive.
            let got = unsafe { std::slice::from_raw_parts(ptrs[i] as *const u8, 128) };
            assert_eq!(got, m.as_bytes(), "param {i}");
        }
        drop(pack);
        // No arguments: no pointers.
        assert!(PackedParams::new(&[]).pointers().is_empty());
    }

    #[test]
    fn checks_count_and_sizes() {
        let decls = entry_params(PTX, "add_kernel").unwrap();
        let mut args = vec![
            KernelParam::Ptr(16),
            KernelParam::Ptr(32),
            KernelParam::U32(3),
            KernelParam::F32(0.5),
            KernelParam::U16(1),
        ];
        let err = check_params("add_kernel", &decls, &args).unwrap_err();
        assert!(
            err.to_string().contains("takes 6 argument(s), 5 given"),
            "{err}"
        );
        args.push(KernelParam::U64(1));
        let err = check_params("add_kernel", &decls, &args).unwrap_err();
        assert!(err.to_string().contains("argument 5 is 24 bytes"), "{err}");
        args[5] = KernelParam::U8(0);
        args[2] = KernelParam::I64(3);
        let err = check_params("add_kernel", &decls, &args).unwrap_err();
        assert!(err.to_string().contains("argument 2 is 4 bytes"), "{err}");
        args[2] = KernelParam::I32(3);
        check_params("add_kernel", &decls[..5], &args[..5]).unwrap();
    }

    #[test]
    fn checks_tensor_map_params() {
        let decls = entry_params(TMA_PTX, "copy_tile").unwrap();
        let good = [
            KernelParam::Ptr(0x1000),
            KernelParam::U32(7),
            KernelParam::TensorMap(map(0)),
            // A 128-byte struct by value is no tensor map, and a scalar is not 128 bytes: nothing
            // fits it here, so the accepted list stops before it.
        ];
        check_params("copy_tile", &decls[..3], &good).unwrap();

        let message = |args: &[KernelParam], decls: &[ParamDecl]| {
            let err = check_params("copy_tile", decls, args).unwrap_err();
            assert!(matches!(err, CudaError::Params { .. }), "{err:?}");
            err.to_string()
        };
        // A pointer where the tensor map goes.
        let mut args = good;
        args[2] = KernelParam::Ptr(0x2000);
        let msg = message(&args, &decls[..3]);
        assert!(
            msg.starts_with("kernel `copy_tile`: argument 2 is a tensor map in the PTX"),
            "{msg}"
        );
        assert!(msg.contains(".param .align 64 .b8 NAME[128]"), "{msg}");
        assert!(msg.contains("Ptr(8192) is 8 bytes"), "{msg}");

        // A tensor map where a pointer or a scalar goes.
        let mut args = good;
        args[0] = KernelParam::TensorMap(map(1));
        let msg = message(&args, &decls[..3]);
        assert!(
            msg.contains(
                "argument 0 is 8 bytes, aligned to 16, in the PTX, but a tensor map is given"
            ),
            "{msg}"
        );
        let mut args = good;
        args[1] = KernelParam::TensorMap(map(1));
        let msg = message(&args, &decls[..3]);
        assert!(
            msg.contains("argument 1 is 4 bytes in the PTX, but a tensor map is given"),
            "{msg}"
        );

        // A tensor map for a 128-byte parameter that is not aligned as one.
        let args = [
            KernelParam::Ptr(0x1000),
            KernelParam::U32(7),
            KernelParam::TensorMap(map(0)),
            KernelParam::TensorMap(map(2)),
        ];
        let msg = message(&args, &decls);
        assert!(
            msg.contains(
                "argument 3 is 128 bytes, aligned to 8, in the PTX, but a tensor map is given"
            ),
            "{msg}"
        );
        assert!(
            msg.contains("need `.param .align 64 .b8 NAME[128]`"),
            "{msg}"
        );
        // The count is checked first.
        let msg = message(&good[..2], &decls[..3]);
        assert!(msg.contains("takes 3 argument(s), 2 given"), "{msg}");
    }
}
