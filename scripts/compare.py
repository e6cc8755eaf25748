#!/usr/bin/env python3
"""Join tegula's benchmark records with peers.py's measurements and write the report.

Runs on the GPU machine after scripts/compare.sh has run both (standard library only):

  python3 scripts/compare.py --tegula T1.jsonl T2.jsonl --peers peers.txt \
      --gpu "NVIDIA H200" --driver 580.159.04 --commit abc1234 --out OUTDIR

Inputs: tegula records are JSON lines from `tegula bench --json`; peer lines are `PEER {json}`
(other lines are ignored). Cases are joined by (op, dtype, shape, causal). Outputs in OUTDIR:
BENCHMARKS.md (tables: tegula, each peer, and the speed ratio) and latest.json (one record per
case). The ratio is peer ms / tegula ms: above 1 tegula is faster, below 1 slower. Times, not
rates, are compared, because peers count bytes slightly differently (e.g. cuBLAS GEMV writes a
16-bit y where tegula writes f32).
"""
import argparse
import datetime
import json
import os
import sys

# Ops in report order, with the rate each is judged by.
OPS = [
    ("copy", "TB/s", "Copy (device to device)"),
    ("gemv", "TB/s", "GEMV y = A x, A [M, N] row-major"),
    ("matmul", "TFLOP/s", "Matmul C = A B, [M, K] x [K, N]"),
    ("attention_fwd", "TFLOP/s", "Attention forward, [B, H, N, D], 4*B*H*N*N*D FLOPs (halved for causal)"),
    ("attention_bwd", "TFLOP/s", "Attention backward, [B, H, N, D], 2.5x forward FLOPs"),
    ("softmax", "TB/s", "Row softmax [M, N]"),
    ("layer_norm", "TB/s", "Layer norm forward [M, N]"),
    ("layer_norm_backward", "TB/s", "Layer norm backward [M, N] (the API call, allocations included)"),
    ("rms_norm", "TB/s", "RMS norm [M, N]"),
    ("vector_add", "TB/s", "Vector add [N]"),
    ("attention_fwd_f32_single_head", "TFLOP/s",
     "Single-head f32 attention: Q [M, D], K and V [N, D], within 2e-3 of float64 [M, N, D]"),
]
RATE_KEY = {"TB/s": "tbps", "TFLOP/s": "tflops"}


def read_json_lines(paths, prefix=None):
    out = []
    for path in paths:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as e:
            print(f"compare: cannot read {path}: {e}", file=sys.stderr)
            continue
        for line in lines:
            line = line.strip()
            if prefix is not None:
                if not line.startswith(prefix):
                    continue
                line = line[len(prefix):]
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                print(f"compare: skipping a malformed line in {path}: {line[:80]}", file=sys.stderr)
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


# tegula kernel names whose peers.py op differs.
KERNEL_OP = {"attention": "attention_fwd", "attention_backward": "attention_bwd"}


def case_key(rec):
    op = rec.get("op") or KERNEL_OP.get(rec.get("kernel"), rec.get("kernel"))
    causal = rec.get("causal")
    if op and op.startswith("attention"):
        causal = bool(causal)
    else:
        causal = None
    return (op, rec.get("dtype"), tuple(rec.get("shape") or ()), causal)


def rate(rec, unit):
    v = rec.get(RATE_KEY[unit]) if rec else None
    return v if isinstance(v, (int, float)) else None


def fmt(v, digits=3):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:.2f}"


def join(tegula, peers, meta):
    """One record per case, tegula's and each peer's figures side by side."""
    cases = {}
    order = []

    def slot(rec):
        k = case_key(rec)
        if k not in cases:
            cases[k] = {"tegula": None, "peers": {}}
            order.append(k)
        return cases[k]

    for r in tegula:
        if r.get("error"):
            slot(r)["tegula_error"] = r["error"]
        elif isinstance(r.get("ms"), (int, float)):
            slot(r)["tegula"] = r
    for p in peers:
        name = p.get("peer")
        if not name:
            continue
        s = slot(p)
        if p.get("error"):
            s["peers"][name] = {"error": p["error"]}
        elif isinstance(p.get("ms"), (int, float)):
            s["peers"][name] = p

    records = []
    for k in order:
        op, dtype, shape, causal = k
        c = cases[k]
        t = c["tegula"]
        rec = {
            "op": op,
            "dtype": dtype,
            "shape": list(shape),
            "causal": causal,
            "tegula": None,
            "peers": {},
            "ratios": {},
            "gpu": meta["gpu"],
            "driver": meta["driver"],
            "commit": meta["commit"],
            "date": meta["date"],
        }
        if t:
            rec["tegula"] = {
                key: t.get(key)
                for key in ("ms", "ms_min", "ms_max", "ms_q1", "ms_q3", "reps", "tflops", "tbps",
                            "pct_copy_bw", "pct_peak", "pct_roofline", "bound", "kernel",
                            "copy_same_bytes_tbps", "pct_copy_same_bytes", "batch_ms", "batch_tbps",
                            "copy_same_bytes_batch_tbps", "pct_copy_same_bytes_batch")
                if t.get(key) is not None
            }
        if c.get("tegula_error"):
            rec["tegula_error"] = c["tegula_error"]
        for name, p in sorted(c["peers"].items()):
            if "error" in p:
                rec["peers"][name] = {"error": p["error"]}
                continue
            rec["peers"][name] = {key: p[key] for key in ("ms", "tflops", "tbps") if key in p}
            if t and t["ms"] > 0:
                rec["ratios"][name] = p["ms"] / t["ms"]
        records.append(rec)
    return records


def shape_text(rec):
    s = "x".join(str(d) for d in rec["shape"]) if rec["op"] not in ("attention_fwd", "attention_bwd") \
        else ",".join(str(d) for d in rec["shape"])
    return s


def markdown(records, meta, ceilings):
    lines = [
        "# Benchmarks",
        "",
        "Written by `scripts/compare.sh` (GPU calls of `tegula bench` and `peers.py`, joined by "
        "`scripts/compare.py`). Do not edit by hand; what each kernel does and why its defaults "
        "are what they are is in `docs/performance.md`.",
        "",
        f"- date: {meta['date']}",
        f"- GPU: {meta['gpu']}",
        f"- driver: {meta['driver']}",
        f"- commit: {meta['commit']}",
    ]
    if meta.get("peers_versions"):
        lines.append(f"- peers: {meta['peers_versions']}")
    for note in meta.get("notes") or []:
        lines.append(f"- {note}")
    lines += [
        "",
        "Times are medians of CUDA-event timings after warm-up; memory-bound cases rotate input "
        "copies to defeat the 60 MB L2 (tegula and peers.py alike). **ratio = peer ms / tegula "
        "ms**: above 1 tegula is faster. `%roof` is tegula's time at the roofline floor over its "
        "measured time (the floor is the larger of bytes / copy bandwidth and FLOPs / matmul peak). "
        "`%copy@size` (memory-bound cases) is tegula's bandwidth over that of a device-to-device copy "
        "moving the same number of bytes, measured in the same call and timed the same way: the "
        "roof a case of that size can reach under this timing method. Each sample is queued behind "
        "an L2 clear (256 MB written, as `do_bench` does), which leaves the L2 full of dirty lines "
        "that the timed kernel's reads must first write back. `b2b` (back to back, memory-bound "
        "cases, tegula only) times the same rotating calls queued one after another after a "
        "single clear: the rate a stream of such calls sustains, beside a copy of the same bytes "
        "timed so. The peers and the ratios use the per-sample figure.",
        "",
        "Peers (measured by `peers.py`, which lives beside a checkout in `../shared/peers`): "
        "`cublas` (cuBLAS through `torch.mv` / `torch.matmul`), `cudnn` and `fa2` (PyTorch's "
        "`scaled_dot_product_attention` on its cuDNN and FlashAttention-2 backends), `triton` (a "
        "Hopper Triton FlashAttention forward with tensor descriptors, autotuned), `sdpa` "
        "(`scaled_dot_product_attention` in fp32), `seed-triton` (Triton kernels printed in the "
        "project's founding documents: a GEMV with one row per program and the single-head fp32 "
        "FlashAttention with 16 x 16 blocks) and `torch` (a device-to-device copy).",
        "",
        "Triton's own tutorials against tegula's ports of them (`scripts/tutorials_gpu.sh`, one "
        "call): [benchmarks/tutorials.md](benchmarks/tutorials.md). What tuning costs a first call "
        "at a new shape: [benchmarks/first-call.md](benchmarks/first-call.md).",
        "",
    ]
    if ceilings:
        lines += ["## Ceilings", ""]
        lines += [f"- {c}" for c in ceilings]
        lines.append("")

    for op, unit, title in OPS + [(o, None, o) for o in sorted({r["op"] for r in records} - {o[0] for o in OPS})]:
        rows = [r for r in records if r["op"] == op]
        if not rows:
            continue
        if unit is None:
            unit = "TFLOP/s" if any((r.get("tegula") or {}).get("bound") == "compute" for r in rows) else "TB/s"
        peer_names = sorted({n for r in rows for n in r["peers"]})
        has_causal = any(r["causal"] is not None for r in rows)
        lines += [f"## {title}", ""]
        same_size = unit == "TB/s" and any((r.get("tegula") or {}).get("pct_copy_same_bytes") is not None
                                           for r in rows)
        batch = same_size and any((r.get("tegula") or {}).get("batch_tbps") is not None for r in rows)
        extra = (["%copy@size"] if same_size else []) + (["b2b TB/s", "b2b %copy@size"] if batch else [])
        head = ["dtype", "shape"] + (["causal"] if has_causal else []) + \
            ["tegula ms", f"tegula {unit}", "%roof"] + extra
        for n in peer_names:
            head += [f"{n} {unit}", f"ratio vs {n}"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + " --- |" * len(head))
        for r in sorted(rows, key=lambda r: (r["dtype"] or "", r["shape"], bool(r["causal"]))):
            t = r["tegula"]
            cells = [r["dtype"] or "-", shape_text(r)]
            if has_causal:
                cells.append("yes" if r["causal"] else "no")
            if t:
                cells += [fmt(t["ms"], 4), fmt(rate(t, unit)), fmt(t.get("pct_roofline"))]
                if same_size:
                    cells.append(fmt(t.get("pct_copy_same_bytes")))
                if batch:
                    cells += [fmt(t.get("batch_tbps")), fmt(t.get("pct_copy_same_bytes_batch"))]
            elif r.get("tegula_error"):
                cells += ["failed", "-", "-"] + ["-"] * len(extra)
            else:
                cells += ["not run", "-", "-"] + ["-"] * len(extra)
            for n in peer_names:
                p = r["peers"].get(n)
                if p is None:
                    cells += ["-", "-"]
                elif "error" in p:
                    cells += [f"({p['error']})", "-"]
                else:
                    ratio = r["ratios"].get(n)
                    cells += [fmt(rate(p, unit)), f"{ratio:.2f}" if ratio is not None else "-"]
            lines.append("| " + " | ".join(cells) + " |")
        errors = [r for r in rows if r.get("tegula_error")]
        if errors:
            lines.append("")
            for r in errors:
                lines.append(f"- tegula failed on {r['dtype']} {shape_text(r)}: {r['tegula_error']}")
        lines.append("")
    return "\n".join(lines)


def ceiling_lines(tegula, peers):
    out = []
    # A 16-bit record, so that the peak quoted is the tensor-core one the matmul rows use.
    with_ceilings = [r for r in tegula if r.get("ceilings")]
    c = next((r["ceilings"] for r in with_ceilings if r.get("dtype") in ("bf16", "fp16")),
             with_ceilings[0]["ceilings"] if with_ceilings else None)
    if c:
        out.append(f"tegula copy bandwidth (cuMemcpyDtoD, measured in this call): {c['copy_tbps']:.2f} TB/s")
        if c.get("peak_source"):
            out.append(f"matmul peak used for %roof: {c.get('peak_tflops')} TFLOP/s ({c['peak_source']})")
    for p in peers:
        if p.get("op") == "copy" and isinstance(p.get("tbps"), (int, float)):
            out.append(f"torch copy (peers.py): {p['tbps']:.2f} TB/s")
    mm = [p for p in peers if p.get("op") == "matmul" and p.get("peer") == "cublas" and p.get("tflops")]
    for p in mm:
        out.append(f"cuBLAS {p['dtype']} matmul {'x'.join(map(str, p['shape']))}: {p['tflops']:.0f} TFLOP/s")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tegula", nargs="*", default=[], help="tegula bench --json files")
    ap.add_argument("--peers", nargs="*", default=[], help="files with PEER lines")
    ap.add_argument("--gpu", default=None)
    ap.add_argument("--driver", default=None)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--date", default=None, help="default: now (UTC)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    args = ap.parse_args(argv)

    tegula = read_json_lines(args.tegula)
    peer_files = read_json_lines(args.peers, prefix="PEER ")
    versions = []
    for path in args.peers:
        try:
            with open(path) as f:
                versions += [l[2:].strip() for l in f if l.startswith("# torch")]
        except OSError:
            pass
    first = next((r for r in tegula if r.get("gpu")), {})
    meta = {
        "gpu": args.gpu or first.get("gpu") or "unknown",
        "driver": args.driver or (str(first["driver"]) if first.get("driver") is not None else "unknown"),
        "commit": args.commit,
        "date": args.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "peers_versions": versions[0] if versions else None,
        "notes": args.note,
    }
    records = join(tegula, peer_files, meta)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "BENCHMARKS.md"), "w") as f:
        f.write(markdown(records, meta, ceiling_lines(tegula, peer_files)))
        # Sections measured by other calls (the candle example, the tuner's cost), kept across
        # regenerations.
        here = os.path.dirname(os.path.abspath(__file__))
        for name in ("interop.md", "tuning.md", "tma.md"):
            section = os.path.join(here, "..", "benchmarks", name)
            if os.path.exists(section):
                with open(section) as g:
                    f.write("\n" + g.read())
    joined = sum(1 for r in records if r["tegula"] and r["ratios"])
    print(f"compare: {len(tegula)} tegula records, {len(peer_files)} peer records, "
          f"{len(records)} cases, {joined} with both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
