//! Hash maps for the compiler's own keys (values, instructions, layouts): a multiply-rotate
//! hash in place of the standard library's SipHash, which resists crafted keys but costs
//! several times more per word. Lowering a kernel hashes tens of thousands of such keys; none
//! of them comes from outside the compiler. The maps' iteration order is fixed by their
//! contents (no per-process seed); nothing the compiler emits may depend on it anyway.

use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`WordHasher`]; create it with `HashMap::default()`.
pub type HashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<WordHasher>>;
/// A `HashSet` with [`WordHasher`]; create it with `HashSet::default()`.
pub type HashSet<K> = std::collections::HashSet<K, BuildHasherDefault<WordHasher>>;

/// Folds each word into the state with a rotate, an xor and a multiplication by an odd
/// constant (the golden ratio's bits); the multiplication carries every bit of the word into
/// the high bits, which the hash table reads.
#[derive(Default, Clone, Copy)]
pub struct WordHasher {
    state: u64,
}

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.state = (self.state.rotate_left(5) ^ word).wrapping_mul(MULTIPLIER);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length keeps a short tail apart from the same bytes followed by zeros.
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash_of(v: impl Hash) -> u64 {
        BuildHasherDefault::<WordHasher>::default().hash_one(v)
    }

    #[test]
    fn distinct_keys_hash_apart_and_equal_keys_alike() {
        assert_eq!(
            hash_of((3u32, vec![1u32, 2])),
            hash_of((3u32, vec![1u32, 2]))
        );
        // Order, length and short byte tails all reach the hash.
        assert_ne!(hash_of(vec![1u32, 2]), hash_of(vec![2u32, 1]));
        assert_ne!(hash_of(vec![0u32]), hash_of(vec![0u32, 0]));
        assert_ne!(hash_of("ab"), hash_of("ab\0"));
        // Small consecutive integers (value and instruction ids) land in distinct buckets of a
        // small table: their hashes differ in the high bits the table reads.
        let top: std::collections::HashSet<u64> = (0u32..64).map(|i| hash_of(i) >> 57).collect();
        assert!(top.len() > 32, "{} distinct top-7-bit groups", top.len());
        let mut map: HashMap<(u32, u32), usize> = HashMap::default();
        for i in 0..1000 {
            map.insert((i % 37, i / 37), i as usize);
        }
        assert_eq!(map.len(), 1000);
        assert_eq!(map[&(5, 20)], 20 * 37 + 5);
    }
}
