//! Disk cache of JIT-compiled cubins, so a PTX module is compiled once per device and driver.
//!
//! One file per module: `<dir>/<sha256 of the key>.cubin`. The key names the PTX (by its
//! sha256), the device name, the compute capability, the driver version and the JIT options,
//! since a cubin from another driver or GPU may be wrong or refused. Files are written to a
//! temporary name and renamed into place, so a reader never sees half a file; a file that fails
//! any check (magic, lengths, checksum, key) is reported once on stderr and treated as a miss.
//!
//! File layout (integers little-endian):
//! `MAGIC | key_len u32 | key | info_log_len u32 | info_log | cubin_len u64 | cubin | sha256(all before)`.

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const MAGIC: &[u8; 16] = b"tegula-cubin-v1\n";
/// Bumped when the JIT options or anything else that changes the cubin for the same PTX changes.
const JIT_OPTIONS_TAG: &str = "jit:O4,verbose";

/// What a cubin depends on besides its PTX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CubinKey {
    pub ptx_sha256: [u8; 32],
    pub device_name: String,
    pub compute_capability: (u32, u32),
    pub driver_version: i32,
}

impl CubinKey {
    pub fn new(
        ptx: &str,
        device_name: &str,
        compute_capability: (u32, u32),
        driver_version: i32,
    ) -> Self {
        CubinKey {
            ptx_sha256: sha256(ptx.as_bytes()),
            device_name: device_name.to_string(),
            compute_capability,
            driver_version,
        }
    }

    /// The human-readable key stored inside the file and checked on read.
    pub fn describe(&self) -> String {
        let (major, minor) = self.compute_capability;
        format!(
            "ptx={} device={} sm_{major}{minor} driver={} {JIT_OPTIONS_TAG}",
            hex(&self.ptx_sha256),
            self.device_name,
            self.driver_version
        )
    }

    /// The cache file's name: the hash of the description.
    pub fn file_name(&self) -> String {
        format!("{}.cubin", hex(&sha256(self.describe().as_bytes())))
    }
}

/// A cache hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedCubin {
    pub cubin: Vec<u8>,
    /// The JIT's info log from when the cubin was made (resource figures per kernel).
    pub info_log: String,
}

/// A directory of cached cubins.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    /// Files already reported as unusable, so each is reported once per process.
    reported: Mutex<HashSet<PathBuf>>,
}

impl DiskCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskCache {
            dir: dir.into(),
            reported: Mutex::new(HashSet::new()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_for(&self, key: &CubinKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The cached cubin for `key`, or None on a miss. An unreadable or corrupt file is reported
    /// (once) and is a miss.
    pub fn load(&self, key: &CubinKey) -> Option<CachedCubin> {
        let path = self.path_for(key);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.report(&path, &format!("cannot read: {e}"));
                return None;
            }
        };
        match decode(&bytes, &key.describe()) {
            Ok(hit) => Some(hit),
            Err(why) => {
                self.report(&path, &format!("ignored ({why})"));
                None
            }
        }
    }

    /// Stores a cubin atomically. Failures are reported and otherwise ignored: the cache is an
    /// optimisation, never a reason to fail a launch.
    pub fn store(&self, key: &CubinKey, cubin: &[u8], info_log: &str) {
        let path = self.path_for(key);
        if let Err(e) = self.write_atomically(&path, &encode(&key.describe(), info_log, cubin)) {
            self.report(&path, &format!("cannot write: {e}"));
        }
    }

    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        // Unique per process and call, so concurrent writers never share a temporary file.
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            path.file_name().and_then(|n| n.to_str()).unwrap_or("cubin")
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Reports a cached cubin the driver refused to load; the caller then compiles afresh.
    pub fn report_unusable(&self, key: &CubinKey, why: &str) {
        self.report(
            &self.path_for(key),
            &format!("ignored (the driver refused it: {why})"),
        );
    }

    fn report(&self, path: &Path, what: &str) {
        let first_time = self
            .reported
            .lock()
            .map(|mut r| r.insert(path.to_path_buf()))
            .unwrap_or(true);
        if first_time {
            eprintln!("tegula: cubin cache file {}: {what}", path.display());
        }
    }

    /// The files reported so far (for tests and diagnostics).
    pub fn reported_files(&self) -> Vec<PathBuf> {
        self.reported
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }
}

fn encode(key: &str, info_log: &str, cubin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + key.len() + info_log.len() + cubin.len() + 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(info_log.len() as u32).to_le_bytes());
    out.extend_from_slice(info_log.as_bytes());
    out.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    out.extend_from_slice(cubin);
    let digest = sha256(&out);
    out.extend_from_slice(&digest);
    out
}

fn decode(bytes: &[u8], expected_key: &str) -> Result<CachedCubin, &'static str> {
    if bytes.len() < MAGIC.len() + 32 || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a tegula cubin file");
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if sha256(body) != digest {
        return Err("checksum mismatch");
    }
    let mut rest = &body[MAGIC.len()..];
    let mut take = |n: usize| -> Result<&[u8], &'static str> {
        if rest.len() < n {
            return Err("truncated");
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let key_len = u32::from_le_bytes(take(4)?.try_into().unwrap_or_default()) as usize;
    let key = take(key_len)?;
    if key != expected_key.as_bytes() {
        return Err("key mismatch");
    }
    let log_len = u32::from_le_bytes(take(4)?.try_into().unwrap_or_default()) as usize;
    let info_log = String::from_utf8_lossy(take(log_len)?).into_owned();
    let cubin_len = u64::from_le_bytes(take(8)?.try_into().unwrap_or_default());
    let cubin = take(usize::try_from(cubin_len).map_err(|_| "truncated")?)?.to_vec();
    if !rest.is_empty() {
        return Err("trailing bytes");
    }
    if cubin.is_empty() {
        return Err("empty cubin");
    }
    Ok(CachedCubin { cubin, info_log })
}

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn key(ptx: &str) -> CubinKey {
        CubinKey::new(ptx, "NVIDIA H200", (9, 0), 13000)
    }

    /// Bytes that look like an ELF cubin, different per seed.
    fn fake_cubin(seed: u8, len: usize) -> Vec<u8> {
        let mut v = b"\x7fELF".to_vec();
        v.extend((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
        v
    }

    #[test]
    fn key_depends_on_every_part() {
        let base = key(".version 8.0\n.target sm_90a\n");
        let names: HashSet<String> = [
            base.clone(),
            key(".version 8.0\n.target sm_90a\n\n"),
            CubinKey {
                device_name: "NVIDIA H100".into(),
                ..base.clone()
            },
            CubinKey {
                compute_capability: (8, 0),
                ..base.clone()
            },
            CubinKey {
                driver_version: 12080,
                ..base.clone()
            },
        ]
        .iter()
        .map(CubinKey::file_name)
        .collect();
        assert_eq!(names.len(), 5);
        assert_eq!(
            base.file_name(),
            key(".version 8.0\n.target sm_90a\n").file_name()
        );
        assert!(
            base.describe().contains("sm_90 driver=13000"),
            "{}",
            base.describe()
        );
        // sha256("abc"), the FIPS 180-2 test vector.
        assert_eq!(
            hex(&key("abc").ptx_sha256),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn store_then_load_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path().join("nested/cubins"));
        let k = key("ptx one");
        assert_eq!(cache.load(&k), None);
        let cubin = fake_cubin(3, 1001);
        cache.store(&k, &cubin, "ptxas info    : Used 8 registers");
        let hit = cache.load(&k).expect("hit after store");
        assert_eq!(hit.cubin, cubin);
        assert_eq!(hit.info_log, "ptxas info    : Used 8 registers");
        // Another PTX is another file.
        assert_eq!(cache.load(&key("ptx two")), None);
        // No temporary files left behind.
        let names: Vec<String> = std::fs::read_dir(cache.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![k.file_name()]);
        assert!(cache.reported_files().is_empty());
    }

    #[test]
    fn corrupt_files_are_reported_once_and_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path());
        let k = key("ptx");
        let good = encode(&k.describe(), "log", &fake_cubin(1, 300));
        let mut flipped = good.clone();
        flipped[MAGIC.len() + 40] ^= 0x10;
        let other_key = encode(&key("other ptx").describe(), "log", &fake_cubin(1, 300));
        let corruptions: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            (
                "garbage",
                b"this is not a cubin at all, not even close............".to_vec(),
            ),
            ("truncated", good[..good.len() / 2].to_vec()),
            ("bit flip", flipped),
            ("foreign key", other_key),
        ];
        for (what, bytes) in corruptions {
            std::fs::write(cache.path_for(&k), &bytes).unwrap();
            assert_eq!(cache.load(&k), None, "{what}");
            assert_eq!(cache.reported_files(), vec![cache.path_for(&k)], "{what}");
        }
        // A fresh store repairs the entry.
        cache.store(&k, &fake_cubin(9, 64), "");
        assert_eq!(cache.load(&k).map(|h| h.cubin), Some(fake_cubin(9, 64)));
    }

    #[test]
    fn decode_names_the_problem() {
        let k = key("p");
        let good = encode(&k.describe(), "", &fake_cubin(0, 10));
        assert!(decode(&good, &k.describe()).is_ok());
        assert_eq!(decode(&good, &key("q").describe()), Err("key mismatch"));
        assert_eq!(
            decode(&good[1..], &k.describe()),
            Err("not a tegula cubin file")
        );
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert_eq!(decode(&bad, &k.describe()), Err("checksum mismatch"));
        // Consistent checksum over a lying length field: still refused.
        let mut body = good[..good.len() - 32].to_vec();
        body[MAGIC.len()] = 0xff;
        let digest = sha256(&body);
        body.extend_from_slice(&digest);
        assert_eq!(decode(&body, &k.describe()), Err("truncated"));
    }

    #[test]
    fn replacement_is_atomic_rename_not_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path());
        let k = key("ptx");
        let first = fake_cubin(1, 5000);
        cache.store(&k, &first, "first");
        // A reader that opened the old file keeps reading the complete old content,
        // which holds only if the new file replaced it by rename.
        let mut reader = std::fs::File::open(cache.path_for(&k)).unwrap();
        cache.store(&k, &fake_cubin(2, 7000), "second");
        let mut old = Vec::new();
        reader.read_to_end(&mut old).unwrap();
        assert_eq!(decode(&old, &k.describe()).unwrap().cubin, first);
        assert_eq!(cache.load(&k).unwrap().info_log, "second");
    }

    #[test]
    fn unwritable_dir_is_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"x").unwrap();
        // The cache dir would have to be created inside a regular file.
        let cache = DiskCache::new(blocker.join("cubins"));
        let k = key("ptx");
        cache.store(&k, &fake_cubin(0, 10), "");
        assert_eq!(cache.load(&k), None);
        assert_eq!(cache.reported_files(), vec![cache.path_for(&k)]);
    }

    #[test]
    fn stale_temp_files_are_not_entries() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path());
        let k = key("ptx");
        // What a writer killed before its rename leaves behind.
        let partial = encode(&k.describe(), "", &fake_cubin(0, 100));
        std::fs::write(
            dir.path().join(format!(".tmp-1-0-{}", k.file_name())),
            &partial[..50],
        )
        .unwrap();
        assert_eq!(cache.load(&k), None);
        assert!(cache.reported_files().is_empty());
    }
}
