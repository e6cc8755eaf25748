//! Raw driver calls that turn PTX or a cubin into a loaded module: the only places that need
//! `cudarc::driver::sys`, because cudarc has no safe wrapper that keeps the JIT logs.

use crate::error::{describe, drv};
use crate::CudaError;
use cudarc::driver::{sys, CudaContext};
use std::ffi::{c_void, CString};
use std::ptr::null_mut;
use std::sync::Arc;

/// Bytes reserved for each JIT log; the driver truncates longer logs.
const LOG_BYTES: usize = 1 << 16;

/// A loaded `CUmodule`, unloaded on drop.
#[derive(Debug)]
pub(crate) struct Module {
    raw: sys::CUmodule,
    pub(crate) ctx: Arc<CudaContext>,
}

// SAFETY: a CUmodule handle may be used from any thread of the process (the driver API is
// thread-safe); `ctx` keeps its context alive and is bound before each use.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // Errors here (for example a context already broken by a faulting kernel) have nowhere to go.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `raw` came from a successful load in `ctx` and is unloaded exactly once;
            // functions taken from it are only reachable through an `Arc<Module>` being dropped.
            let _ = unsafe { sys::cuModuleUnload(self.raw) };
        }
    }
}

impl Module {
    /// The `CUfunction` named `entry`, or None when the module has no such kernel.
    pub(crate) fn function(&self, entry: &str) -> Result<Option<sys::CUfunction>, CudaError> {
        let Ok(name) = CString::new(entry) else {
            return Ok(None);
        };
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let mut f: sys::CUfunction = null_mut();
        // SAFETY: `raw` is a live module of the bound context; `name` is NUL-terminated and
        // outlives the call; `f` is a valid out-pointer.
        let r = unsafe { sys::cuModuleGetFunction(&mut f, self.raw, name.as_ptr()) };
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(Some(f)),
            sys::CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
            e => Err(CudaError::driver(
                "cuModuleGetFunction",
                e.result().unwrap_err(),
            )),
        }
    }
}

/// Loads a cubin (ELF) image into `ctx`.
pub(crate) fn load_cubin(ctx: &Arc<CudaContext>, cubin: &[u8]) -> Result<Module, CudaError> {
    // The driver reads the ELF headers in place; give it 8-byte alignment, which a Vec<u8> lacks.
    let mut aligned = vec![0u64; cubin.len().div_ceil(8)];
    // SAFETY: `aligned` has at least `cubin.len()` bytes; u64 has no invalid bit patterns.
    unsafe {
        std::ptr::copy_nonoverlapping(cubin.as_ptr(), aligned.as_mut_ptr() as *mut u8, cubin.len())
    };
    ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
    let mut raw: sys::CUmodule = null_mut();
    // SAFETY: `aligned` holds the whole image and outlives the call; `raw` is a valid out-pointer.
    unsafe { sys::cuModuleLoadData(&mut raw, aligned.as_ptr() as *const c_void) }
        .result()
        .map_err(drv("cuModuleLoadData"))?;
    Ok(Module {
        raw,
        ctx: ctx.clone(),
    })
}

/// Why a JIT produced no module.
pub(crate) enum JitFailure {
    /// The PTX was rejected: the driver's summary and the error log.
    Rejected { summary: String, log: String },
    /// A driver failure with nothing in the error log (the linker path may be unusable here).
    Driver(Box<CudaError>),
}

/// The JIT log buffers and the option arrays that point at them. Both arrays must stay alive
/// (and unmoved) until the driver is done with them, so they live together.
struct JitOptions {
    info: Vec<u8>,
    error: Vec<u8>,
    keys: [sys::CUjit_option; 5],
    values: [*mut c_void; 5],
}

impl JitOptions {
    fn new() -> Box<Self> {
        use sys::CUjit_option::*;
        let mut o = Box::new(JitOptions {
            info: vec![0; LOG_BYTES],
            error: vec![0; LOG_BYTES],
            keys: [
                CU_JIT_INFO_LOG_BUFFER,
                CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                CU_JIT_ERROR_LOG_BUFFER,
                CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                CU_JIT_LOG_VERBOSE,
            ],
            values: [null_mut(); 5],
        });
        // Scalar option values travel in the pointer itself, as the driver API specifies.
        o.values = [
            o.info.as_mut_ptr() as *mut c_void,
            LOG_BYTES as *mut c_void,
            o.error.as_mut_ptr() as *mut c_void,
            LOG_BYTES as *mut c_void,
            // CU_JIT_LOG_VERBOSE = 1, passed by value in the pointer.
            std::ptr::without_provenance_mut(1),
        ];
        o
    }

    fn info_log(&self) -> String {
        c_text(&self.info)
    }

    fn error_log(&self) -> String {
        c_text(&self.error)
    }

    fn failure(&self, err: cudarc::driver::DriverError, call: &'static str) -> JitFailure {
        let log = self.error_log();
        if log.trim().is_empty() {
            JitFailure::Driver(Box::new(CudaError::driver(call, err)))
        } else {
            JitFailure::Rejected {
                summary: describe(err),
                log,
            }
        }
    }
}

/// Text up to the first NUL.
fn c_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn ptx_cstring(ptx: &str) -> Result<CString, JitFailure> {
    CString::new(ptx).map_err(|e| JitFailure::Rejected {
        summary: "invalid PTX text".into(),
        log: format!("the PTX contains a NUL byte at offset {}", e.nul_position()),
    })
}

/// JIT-compiles PTX through the driver's linker, which hands back the cubin (for the disk cache)
/// as well as the logs. Returns (cubin, info log).
pub(crate) fn compile_ptx(
    ctx: &Arc<CudaContext>,
    ptx: &str,
) -> Result<(Vec<u8>, String), JitFailure> {
    let src = ptx_cstring(ptx)?;
    let mut opts = JitOptions::new();
    ctx.bind_to_thread()
        .map_err(|e| JitFailure::Driver(Box::new(CudaError::driver("cuCtxSetCurrent", e))))?;

    /// Destroys the link state on every path out.
    struct Link(sys::CUlinkState);
    impl Drop for Link {
        fn drop(&mut self) {
            if !self.0.is_null() {
                // SAFETY: the state came from cuLinkCreate and is destroyed once, here.
                let _ = unsafe { sys::cuLinkDestroy(self.0) };
            }
        }
    }

    let mut link = Link(null_mut());
    // SAFETY: `opts` keys/values are 5-element arrays that, like the log buffers they point to,
    // live in a Box that outlives the link state (`link` is declared after `opts`, so it is
    // dropped first).
    unsafe {
        sys::cuLinkCreate_v2(
            5,
            opts.keys.as_mut_ptr(),
            opts.values.as_mut_ptr(),
            &mut link.0,
        )
    }
    .result()
    .map_err(|e| opts.failure(e, "cuLinkCreate"))?;
    let name = c"tegula.ptx";
    // SAFETY: `src` is NUL-terminated PTX and its length includes the NUL, as the driver expects
    // for PTX input; no per-input options are passed.
    unsafe {
        sys::cuLinkAddData_v2(
            link.0,
            sys::CUjitInputType::CU_JIT_INPUT_PTX,
            src.as_ptr() as *mut c_void,
            src.as_bytes_with_nul().len(),
            name.as_ptr(),
            0,
            null_mut(),
            null_mut(),
        )
    }
    .result()
    .map_err(|e| opts.failure(e, "cuLinkAddData"))?;
    let mut cubin_ptr: *mut c_void = null_mut();
    let mut cubin_len: usize = 0;
    // SAFETY: valid state and out-pointers; the cubin stays owned by the link state.
    unsafe { sys::cuLinkComplete(link.0, &mut cubin_ptr, &mut cubin_len) }
        .result()
        .map_err(|e| opts.failure(e, "cuLinkComplete"))?;
    if cubin_ptr.is_null() || cubin_len == 0 {
        return Err(JitFailure::Driver(Box::new(CudaError::Driver {
            call: "cuLinkComplete",
            code: 0,
            message: "the driver returned an empty cubin".into(),
        })));
    }
    // SAFETY: the driver guarantees `cubin_len` readable bytes at `cubin_ptr` until cuLinkDestroy,
    // which runs only when `link` drops, after this copy.
    let cubin = unsafe { std::slice::from_raw_parts(cubin_ptr as *const u8, cubin_len) }.to_vec();
    let info = opts.info_log();
    drop(link);
    drop(opts);
    Ok((cubin, info))
}

/// Loads PTX with `cuModuleLoadDataEx`: the fallback when the linker path fails with an empty
/// log. Yields no cubin, so such modules are not cached on disk. Returns (module, info log).
pub(crate) fn load_ptx(ctx: &Arc<CudaContext>, ptx: &str) -> Result<(Module, String), JitFailure> {
    let src = ptx_cstring(ptx)?;
    let mut opts = JitOptions::new();
    ctx.bind_to_thread()
        .map_err(|e| JitFailure::Driver(Box::new(CudaError::driver("cuCtxSetCurrent", e))))?;
    let mut raw: sys::CUmodule = null_mut();
    // SAFETY: `src` is NUL-terminated PTX; the option arrays and log buffers in `opts` outlive
    // the call; `raw` is a valid out-pointer.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            &mut raw,
            src.as_ptr() as *const c_void,
            5,
            opts.keys.as_mut_ptr(),
            opts.values.as_mut_ptr(),
        )
    };
    match r.result() {
        Ok(()) => Ok((
            Module {
                raw,
                ctx: ctx.clone(),
            },
            opts.info_log(),
        )),
        // A PTX module that does not load is a JIT failure even when the log is empty.
        Err(e) => Err(JitFailure::Rejected {
            summary: describe(e),
            log: opts.error_log(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn c_text_stops_at_nul() {
        assert_eq!(super::c_text(b"ptxas error\0garbage"), "ptxas error");
        assert_eq!(super::c_text(b"no nul"), "no nul");
        assert_eq!(super::c_text(&[0; 8]), "");
    }
}
