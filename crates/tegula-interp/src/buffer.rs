//! [`Buffer`]: typed device memory for the interpreter.
//!
//! Programs of a grid run in parallel and write the same buffers, so every element is an atomic
//! of the dtype's natural width. Plain loads and stores use `Relaxed` ordering (plain moves on
//! x86 and ARM); atomics use compare-exchange loops. No locks; the one unsafe constructor,
//! [`Buffer::from_foreign`], wraps memory another owner lends (a DLPack tensor) in place.

use crate::round::{float_from_bits, float_to_bits, int_from_bits, int_to_bits, round_to};
use crate::InterpError;
use std::any::Any;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use tegula_ir::{DType, Element};

/// One element's storage: an atomic integer holding the element's bits.
pub(crate) trait Word: Send + Sync + Sized {
    /// `len` zero words, or `None` when the host cannot allocate them.
    fn try_zeroed(len: usize) -> Option<Box<[Self]>>;
    fn get(&self) -> u64;
    fn set(&self, bits: u64);
    /// Replaces the bits with `f(old)` atomically and returns the old bits.
    fn read_modify_write(&self, f: impl Fn(u64) -> u64) -> u64;
    /// Stores `new` where the bits equal `expected`; returns the old bits.
    fn compare_swap(&self, expected: u64, new: u64) -> u64;
}

macro_rules! word {
    ($atomic:ty, $prim:ty) => {
        impl Word for $atomic {
            fn try_zeroed(len: usize) -> Option<Box<[Self]>> {
                let mut v = Vec::new();
                v.try_reserve_exact(len).ok()?;
                v.extend((0..len).map(|_| <$atomic>::new(0)));
                Some(v.into_boxed_slice())
            }
            #[inline(always)]
            fn get(&self) -> u64 {
                self.load(Ordering::Relaxed) as u64
            }
            #[inline(always)]
            fn set(&self, bits: u64) {
                self.store(bits as $prim, Ordering::Relaxed)
            }
            fn read_modify_write(&self, f: impl Fn(u64) -> u64) -> u64 {
                let mut cur = self.load(Ordering::Relaxed);
                loop {
                    let new = f(cur as u64) as $prim;
                    match self.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed)
                    {
                        Ok(old) => return old as u64,
                        Err(now) => cur = now,
                    }
                }
            }
            fn compare_swap(&self, expected: u64, new: u64) -> u64 {
                match self.compare_exchange(
                    expected as $prim,
                    new as $prim,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(old) | Err(old) => old as u64,
                }
            }
        }
    };
}
word!(AtomicU8, u8);
word!(AtomicU16, u16);
word!(AtomicU32, u32);
word!(AtomicU64, u64);

/// The element storage of a buffer, by width (i1 is one byte).
pub(crate) enum Words {
    W8(Slab<AtomicU8>),
    W16(Slab<AtomicU16>),
    W32(Slab<AtomicU32>),
    W64(Slab<AtomicU64>),
}

/// The words of a buffer: allocated here, or memory another owner lends, read and written in
/// place and kept alive by `_owner` for as long as the slab lives. Dereferences to the words.
pub(crate) enum Slab<W: 'static> {
    Owned(Box<[W]>),
    Foreign {
        /// Not really `'static`: valid while `_owner` lives, which is as long as `self`; the
        /// slice is only ever handed out through `Deref`, borrowed from `self`.
        words: &'static [W],
        _owner: Box<dyn Any + Send + Sync>,
    },
}

impl<W> std::ops::Deref for Slab<W> {
    type Target = [W];
    #[inline(always)]
    fn deref(&self) -> &[W] {
        match self {
            Slab::Owned(words) => words,
            Slab::Foreign { words, .. } => words,
        }
    }
}

/// Runs `$body` with `$w` bound to the word slice of `$words`, whatever its width.
macro_rules! with_words {
    ($words:expr, |$w:ident| $body:expr) => {
        match $words {
            $crate::buffer::Words::W8($w) => $body,
            $crate::buffer::Words::W16($w) => $body,
            $crate::buffer::Words::W32($w) => $body,
            $crate::buffer::Words::W64($w) => $body,
        }
    };
}
pub(crate) use with_words;

/// A typed stand-in for device memory: `len` elements of `dtype`, shared between host code and
/// the programs of a grid (`Send + Sync`, written through `&self`).
pub struct Buffer {
    dtype: DType,
    words: Words,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer<{}>[{}]", self.dtype, self.len())
    }
}

/// A host vector of `len` elements' capacity, or [`InterpError::OutOfMemory`] naming `what`
/// (fallible allocation: a request the host cannot meet is an error, not an abort).
pub(crate) fn try_vec<T>(len: usize, what: &str) -> Result<Vec<T>, InterpError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| InterpError::OutOfMemory {
            what: what.to_string(),
            bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        })?;
    Ok(v)
}

impl Buffer {
    /// `len` zero elements of `dtype`.
    ///
    /// # Panics
    /// When the host cannot allocate them (see [`Buffer::try_zeroed`]).
    pub fn zeroed(dtype: DType, len: usize) -> Buffer {
        match Buffer::try_zeroed(dtype, len) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    /// `len` zero elements of `dtype`, or [`InterpError::OutOfMemory`] when the host cannot
    /// allocate them (the allocation is fallible: no abort, no "capacity overflow" panic).
    /// On a host that overcommits memory, a request it grants may still run out when the
    /// zeros are written.
    pub fn try_zeroed(dtype: DType, len: usize) -> Result<Buffer, InterpError> {
        let words = match dtype.size_bytes() {
            1 => Word::try_zeroed(len).map(|w| Words::W8(Slab::Owned(w))),
            2 => Word::try_zeroed(len).map(|w| Words::W16(Slab::Owned(w))),
            4 => Word::try_zeroed(len).map(|w| Words::W32(Slab::Owned(w))),
            _ => Word::try_zeroed(len).map(|w| Words::W64(Slab::Owned(w))),
        };
        let words = words.ok_or_else(|| InterpError::OutOfMemory {
            what: format!("a buffer of {len} {dtype}"),
            bytes: (len as u64).saturating_mul(dtype.size_bytes() as u64),
        })?;
        Ok(Buffer { dtype, words })
    }

    /// A buffer over `len` elements of `dtype` at `ptr`, memory that another owner lends (a
    /// DLPack tensor's): programs read and write it in place, and `owner` is dropped (and with
    /// it, say, the producer's deleter called) when the buffer is. A `len` of 0 touches nothing.
    ///
    /// # Safety
    /// For `len > 0`: `ptr` is non-null and aligned to `dtype.size_bytes()`, and valid for reads
    /// and writes of `len * dtype.size_bytes()` bytes for as long as `owner` lives; while the
    /// buffer is in use nothing else writes that memory, or reads what programs write, except
    /// through this buffer (the usual contract of memory shared through DLPack). Every bit
    /// pattern is a valid element, so the memory may hold anything.
    pub unsafe fn from_foreign(
        dtype: DType,
        ptr: *mut u8,
        len: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Buffer {
        if len == 0 {
            drop(owner);
            return Buffer::zeroed(dtype, 0);
        }
        fn slab<W: 'static>(
            ptr: *mut u8,
            len: usize,
            owner: Box<dyn Any + Send + Sync>,
        ) -> Slab<W> {
            // SAFETY (the caller's contract): `ptr` is aligned and valid for `len` words for as
            // long as `owner`, which the slab holds; atomics have the size, alignment and bit
            // validity of the integers of their width, so the bytes may be viewed as them.
            let words = unsafe { std::slice::from_raw_parts(ptr.cast::<W>(), len) };
            Slab::Foreign {
                words,
                _owner: owner,
            }
        }
        let words = match dtype.size_bytes() {
            1 => Words::W8(slab(ptr, len, owner)),
            2 => Words::W16(slab(ptr, len, owner)),
            4 => Words::W32(slab(ptr, len, owner)),
            _ => Words::W64(slab(ptr, len, owner)),
        };
        Buffer { dtype, words }
    }

    /// The address of element 0, to lend the memory in place (DLPack export). Elements are
    /// little-endian integers of the dtype's width (i1 one byte, 0 or 1); whoever writes
    /// through the pointer must not race with programs running on the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        with_words!(&self.words, |w| w.as_ptr() as *mut u8)
    }

    /// Whether the memory is lent by another owner ([`Buffer::from_foreign`]).
    pub fn is_foreign(&self) -> bool {
        with_words!(&self.words, |w| matches!(w, Slab::Foreign { .. }))
    }

    /// A buffer holding a copy of `data`.
    ///
    /// # Panics
    /// When the host cannot allocate it (see [`Buffer::try_from_slice`]).
    pub fn from_slice<T: Element>(data: &[T]) -> Buffer {
        match Buffer::try_from_slice(data) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    /// A buffer holding a copy of `data`, or [`InterpError::OutOfMemory`].
    pub fn try_from_slice<T: Element>(data: &[T]) -> Result<Buffer, InterpError> {
        let b = Buffer::try_zeroed(T::DTYPE, data.len())?;
        for (i, x) in data.iter().enumerate() {
            b.write_bits(i, x.to_bits());
        }
        Ok(b)
    }

    /// A buffer of `dtype` from f64 values: floats round to nearest even (exactly, including
    /// sticky bits), integers truncate toward zero and saturate, NaN becomes 0, i1 is `x != 0`
    /// with NaN false (the rules of `Element::from_f64`).
    pub fn from_f64(dtype: DType, data: &[f64]) -> Buffer {
        let b = Buffer::zeroed(dtype, data.len());
        for (i, &x) in data.iter().enumerate() {
            let bits = if dtype.is_float() {
                float_to_bits(dtype, round_to(dtype, x))
            } else if dtype == DType::I1 {
                (x != 0.0 && !x.is_nan()) as u64
            } else {
                int_to_bits(dtype, crate::round::float_to_int(dtype, x))
            };
            b.write_bits(i, bits);
        }
        b
    }

    /// The elements as `T`, which must be the buffer's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, InterpError> {
        if T::DTYPE != self.dtype {
            return Err(InterpError::DTypeMismatch {
                buffer: self.dtype,
                requested: T::DTYPE,
            });
        }
        let mut out = try_vec(self.len(), &format!("a copy of a buffer of {}", self.dtype))?;
        out.extend((0..self.len()).map(|i| T::from_bits(self.read_bits(i))));
        Ok(out)
    }

    /// The elements as f64 (exact for every dtype but 64-bit integers beyond 2^53).
    pub fn to_f64(&self) -> Vec<f64> {
        let d = self.dtype;
        (0..self.len())
            .map(|i| {
                let bits = self.read_bits(i);
                if d.is_float() {
                    float_from_bits(d, bits)
                } else if d.is_unsigned_int() {
                    bits as f64
                } else {
                    int_from_bits(d, bits) as f64
                }
            })
            .collect()
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn len(&self) -> usize {
        with_words!(&self.words, |w| w.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bits of element `index`, zero-extended.
    ///
    /// # Panics
    /// When `index >= self.len()`, like slice indexing.
    pub fn read_bits(&self, index: usize) -> u64 {
        with_words!(&self.words, |w| w[index].get())
    }

    /// Overwrites element `index` with the low bits of `bits`.
    ///
    /// # Panics
    /// When `index >= self.len()`, like slice indexing.
    pub fn write_bits(&self, index: usize, bits: u64) {
        with_words!(&self.words, |w| w[index].set(bits))
    }

    /// Copies every element of `other`, which must have the same dtype and length.
    pub fn copy_from(&self, other: &Buffer) -> Result<(), InterpError> {
        if other.dtype != self.dtype || other.len() != self.len() {
            return Err(InterpError::CopyMismatch {
                dst: format!("{}[{}]", self.dtype, self.len()),
                src: format!("{}[{}]", other.dtype, other.len()),
            });
        }
        for i in 0..self.len() {
            self.write_bits(i, other.read_bits(i));
        }
        Ok(())
    }

    pub(crate) fn words(&self) -> &Words {
        &self.words
    }
}
