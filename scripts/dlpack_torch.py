#!/usr/bin/env python3
"""DLPack round trips between PyTorch and tegula, zero-copy, on the GPU and on the CPU.

Drives the shared library of crates/tegula/examples/dlpack_torch.rs through ctypes:
torch tensor -> torch.utils.dlpack.to_dlpack -> tegula kernel -> tegula tensor exported ->
torch.utils.dlpack.from_dlpack, and back. Checks values, that no copy was made (data pointers
and writes in place), strided and offset views, typed errors, and that every tegula export's
deleter ran.

On the GPU machine (PyTorch with CUDA there; the library built here, x86-64, and carried):

    cargo build --release -p tegula --example dlpack_torch
    mkdir -p .tools/dlpack && cp target/release/examples/libdlpack_torch.so .tools/dlpack/
    # device call (.tools/ is ignored, so it travels only when carried): command
    #   python3 scripts/dlpack_torch.py --lib .tools/dlpack/libdlpack_torch.so
    # carry [".tools/dlpack"]; benchmarks/dlpack-torch.txt is one such run's output

Without PyTorch (here, CPU only): `--framework numpy` runs the CPU cases through NumPy's
DLPack instead. The last line is `N passed, M failed`; the exit code is 1 when any failed.
"""
import argparse
import ctypes
import gc
import os
import sys


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


api = ctypes.pythonapi
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def take_capsule(capsule):
    """The DLManagedTensor* of a "dltensor" capsule, ownership taken (the capsule is renamed
    "used_dltensor", so its destructor no longer calls the deleter)."""
    ptr = api.PyCapsule_GetPointer(capsule, b"dltensor")
    api.PyCapsule_SetName(capsule, b"used_dltensor")
    return ptr


def make_capsule(ptr):
    """A "dltensor" capsule over a DLManagedTensor* tegula exported (the consumer deletes it)."""
    return api.PyCapsule_New(ptr, b"dltensor", None)


def data_ptr(managed_ptr):
    t = ctypes.cast(managed_ptr, ctypes.POINTER(DLManagedTensor)).contents.dl_tensor
    return (t.data or 0) + t.byte_offset


class Lib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.tegula_affine.restype = ctypes.c_void_p
        self.lib.tegula_affine.argtypes = [ctypes.c_void_p]
        self.lib.tegula_triple_in_place.restype = ctypes.c_int
        self.lib.tegula_triple_in_place.argtypes = [ctypes.c_void_p]
        self.lib.tegula_live_exports.restype = ctypes.c_size_t
        self.lib.tegula_last_error.restype = ctypes.c_size_t
        self.lib.tegula_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def error(self):
        buf = ctypes.create_string_buffer(4096)
        n = self.lib.tegula_last_error(buf, 4096)
        return buf.raw[:n].decode()

    def affine(self, capsule):
        """(capsule of 2 x + 1, its data pointer), or raises with tegula's message."""
        out = self.lib.tegula_affine(take_capsule(capsule))
        if not out:
            raise RuntimeError(self.error())
        return make_capsule(out), data_ptr(out)

    def triple_in_place(self, capsule):
        if self.lib.tegula_triple_in_place(take_capsule(capsule)) != 0:
            raise RuntimeError(self.error())

    def live_exports(self):
        return self.lib.tegula_live_exports()


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok    {name} {detail}")
        else:
            self.failed += 1
            print(f"FAIL  {name} {detail}")


def run_torch(lib, r):
    import torch
    from torch.utils.dlpack import from_dlpack, to_dlpack

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}, devices {devices}"
          + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
    dtypes = [torch.float32, torch.float16, torch.bfloat16]
    for dev in devices:
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        for dt in dtypes:
            base = torch.randn(300, 1000, device=dev).to(dt)
            views = {
                "contiguous [37, 1000]": base[:37],
                "transposed [1000, 37]": torch.randn(37, 1000, device=dev).to(dt).t(),
                "offset [300, 497]": base[:, 3:500],
                "rank 1 [4099]": torch.randn(4099, device=dev).to(dt),
            }
            for vname, x in views.items():
                name = f"{dev} {str(dt).split('.')[-1]} {vname}"
                expect = (x.float() * 2 + 1).to(dt)
                sync()
                cap, ptr = lib.affine(to_dlpack(x))
                y = from_dlpack(cap)
                r.check(f"{name}: affine values", torch.equal(y, expect),
                        f"max err {(y.float() - expect.float()).abs().max().item():.3g}")
                r.check(f"{name}: export is zero-copy", y.data_ptr() == ptr,
                        f"(torch {y.data_ptr():#x}, tegula {ptr:#x})")
                r.check(f"{name}: export device", y.device.type == dev and y.shape == x.shape)
                # In place through an import: torch's own memory, written by tegula.
                z = x.clone() if vname.startswith("contiguous") else x
                before = z.clone()
                sync()
                lib.triple_in_place(to_dlpack(z))
                r.check(f"{name}: import writes in place",
                        torch.equal(z, (before.float() * 3).to(dt)))
                # tegula's memory, through torch, back into tegula.
                y_before = y.clone()
                sync()
                lib.triple_in_place(to_dlpack(y))
                r.check(f"{name}: re-import of an export",
                        torch.equal(y, (y_before.float() * 3).to(dt)))
                del y, cap
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    r.check("every export's deleter ran", lib.live_exports() == 0,
            f"({lib.live_exports()} live)")
    for dev in devices:
        try:
            lib.affine(to_dlpack(torch.zeros(4, dtype=torch.complex64, device=dev)))
            r.check(f"{dev} complex64 refused", False)
        except RuntimeError as e:
            r.check(f"{dev} complex64 refused", "no tegula dtype" in str(e), f"({e})")
    if torch.cuda.is_available():
        # Timing of the zero-copy hand-off (one import, kernel, export), for the record.
        import time
        x = torch.randn(4096, 4096, device="cuda")
        for _ in range(3):
            from_dlpack(lib.affine(to_dlpack(x))[0])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = 50
        for _ in range(n):
            from_dlpack(lib.affine(to_dlpack(x))[0])
        torch.cuda.synchronize()
        dt_ms = (time.perf_counter() - t0) / n * 1e3
        gbs = 2 * x.numel() * 4 / (dt_ms * 1e-3) / 1e9
        print(f"time  cuda f32 [4096, 4096] import + affine + export + synchronize: "
              f"{dt_ms:.3f} ms a call ({gbs:.0f} GB/s of kernel traffic, host round trip included)")


class NumpyCapsule:
    """Hands NumPy a tegula capsule through the __dlpack__ protocol."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def run_numpy(lib, r):
    import numpy as np

    print(f"numpy {np.__version__}, cpu only")
    rng = np.random.default_rng(0)
    for dt in [np.float32, np.float64, np.float16]:
        base = rng.standard_normal((50, 60)).astype(dt)
        views = {"contiguous": base, "transposed": base.T, "offset": base[:, 5:40]}
        for vname, x in views.items():
            name = f"cpu {np.dtype(dt).name} {vname}"
            cap, ptr = lib.affine(x.__dlpack__())
            y = np.from_dlpack(NumpyCapsule(cap))
            expect = (x.astype(np.float32) * 2 + 1).astype(dt)
            r.check(f"{name}: affine values", np.array_equal(y, expect))
            r.check(f"{name}: export is zero-copy", y.ctypes.data == ptr)
            z = x.copy()
            before = z.copy()
            lib.triple_in_place(z.__dlpack__())
            r.check(f"{name}: import writes in place",
                    np.array_equal(z, (before.astype(np.float32) * 3).astype(dt)))
            del y, cap
    gc.collect()
    r.check("every export's deleter ran", lib.live_exports() == 0,
            f"({lib.live_exports()} live)")
    try:
        lib.affine(np.zeros(3, dtype=np.complex64).__dlpack__())
        r.check("complex64 refused", False)
    except RuntimeError as e:
        r.check("complex64 refused", "no tegula dtype" in str(e), f"({e})")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(
        here, "..", "target", "release", "examples", "libdlpack_torch.so"))
    ap.add_argument("--framework", choices=["torch", "numpy"], default="torch")
    args = ap.parse_args()
    lib = Lib(args.lib)
    r = Results()
    (run_torch if args.framework == "torch" else run_numpy)(lib, r)
    print(f"{r.passed} passed, {r.failed} failed")
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
