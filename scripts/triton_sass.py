#!/usr/bin/env python3
"""Compile one kernel of Triton's tutorials for sm_90a on a machine without a GPU, to read its
PTX and SASS beside tegula's port (`tegula ptx <entry> --config ..`).

  python3 scripts/triton_sass.py TUT KERNEL SIGNATURE CONSTANTS OPTIONS OUT [--div I,J,..]

- TUT: a source of the peer harness (`.peers/triton_tutorials.py`, from
  ../shared/peers/triton_tutorials), `tut03` .. `tut11`;
- KERNEL: the `@triton.jit` function (autotuned or not), e.g. `matmul_kernel`;
- SIGNATURE: JSON, parameter name -> Triton type (`*fp16`, `i32`, `fp32`,
  `tensordesc<fp16[64,64]>`, `constexpr`);
- CONSTANTS: JSON, the constexpr values (including parameters specialized to 1);
- OPTIONS: JSON, e.g. `{"num_warps": 8, "num_stages": 3}`;
- OUT: writes OUT.ptx, OUT.cubin and OUT.ttgir;
- `--div`: the parameter indices Triton's launcher would mark divisible by 16.

Needs Triton (`python3 -m venv v && v/bin/pip install triton==3.6.0`; the wheel carries its
own ptxas) and no torch: the tutorial's module-level device queries are answered as on an
H200 (capability 9.0) and the host wrappers below the kernels are not loaded. Example, tutorial
03 at its H200 pick:

  v/bin/python scripts/triton_sass.py tut03 matmul_kernel \\
    '{"a_ptr":"*fp16","b_ptr":"*fp16","c_ptr":"*fp16","M":"i32","N":"i32","K":"i32",
      "stride_am":"i32","stride_ak":"constexpr","stride_bk":"i32","stride_bn":"constexpr",
      "stride_cm":"i32","stride_cn":"constexpr","BLOCK_SIZE_M":"constexpr",
      "BLOCK_SIZE_N":"constexpr","BLOCK_SIZE_K":"constexpr","GROUP_SIZE_M":"constexpr",
      "ACTIVATION":"constexpr"}' \\
    '{"stride_ak":1,"stride_bn":1,"stride_cn":1,"BLOCK_SIZE_M":128,"BLOCK_SIZE_N":256,
      "BLOCK_SIZE_K":64,"GROUP_SIZE_M":8,"ACTIVATION":""}' \\
    '{"num_warps":8,"num_stages":3}' /tmp/t03 --div 0,1,2,3,4,5,6,8,10
  cuobjdump -sass /tmp/t03.cubin > /tmp/t03.sass && python3 scripts/sass_loops.py /tmp/t03.sass
"""
import importlib
import json
import os
import re
import sys
import types

HARNESS = os.path.join(os.path.dirname(__file__), "..", ".peers", "triton_tutorials.py")


def tutorial_source(tut):
    """The verbatim source of tutorial `tut` from the harness, with its device queries fixed."""
    text = open(HARNESS).read()
    start = text.index("SOURCES = {}")
    end = text.index("\n'''\n", text.rindex("SOURCES['")) + 5
    ns = {}
    exec(text[start:end], ns)
    src = ns["SOURCES"][tut]
    src = re.sub(r"DEVICE = .*\n", "DEVICE = None\n", src)
    src = re.sub(r"def is_hip\(\):\n    return .*\n", "def is_hip():\n    return False\n", src)
    src = re.sub(r"def is_cuda\(\):\n    return .*\n", "def is_cuda():\n    return True\n", src)
    # The kernels come first; the host wrappers (which need torch on a GPU) are not loaded.
    for cut in ("class _attention", "def matmul(", "\nif __name__"):
        if cut in src:
            src = src[: src.index(cut)]
    return src


def stub_torch():
    """A `torch` answering what the tutorials ask at import time, as on an H200."""
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(get_device_capability=lambda *a: (9, 0))
    torch.autograd = types.SimpleNamespace(Function=object)
    for name in ("float16", "bfloat16", "float32", "float8_e5m2", "float8_e4m3fn"):
        setattr(torch, name, name)
    sys.modules["torch"] = torch


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    tut, kernel, sig, consts, opts, out = sys.argv[1:7]
    div = []
    if "--div" in sys.argv:
        div = [int(x) for x in sys.argv[sys.argv.index("--div") + 1].split(",") if x]
    stub_torch()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = f"{out}_{tut}_src.py"
    open(path, "w").write(tutorial_source(tut))
    spec = importlib.util.spec_from_file_location(f"{tut}_src", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, kernel)
    while not isinstance(fn, triton.runtime.jit.JITFunction):
        fn = fn.fn  # an autotuner or heuristics wrapper
    attrs = {(i,): [["tt.divisibility", 16]] for i in div}
    k = triton.compile(
        ASTSource(fn, json.loads(sig), json.loads(consts), attrs),
        target=GPUTarget("cuda", 90, 32),
        options=json.loads(opts),
    )
    open(f"{out}.ptx", "w").write(k.asm["ptx"])
    open(f"{out}.ttgir", "w").write(k.asm["ttgir"])
    open(f"{out}.cubin", "wb").write(k.asm["cubin"])
    print(f"{out}.cubin: {k.metadata.shared} bytes of shared memory")


if __name__ == "__main__":
    main()
