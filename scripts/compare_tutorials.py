#!/usr/bin/env python3
"""Join the Triton tutorials harness's timings with tegula's ports into a markdown table.

  python3 scripts/compare_tutorials.py --triton triton.log --tegula tegula.log [--out table.md]
      [--json benchmarks/latest.json --gpu NAME --driver VERSION --commit C --date D]

Inputs (standard library only; other lines are ignored):
- the harness (`.peers/triton_tutorials.py`, from ../shared/peers/triton_tutorials): lines
  `TRITON <tutorial> <shape> <ms>`, `TRITON-CHECK <tutorial> PASS|FAIL ..` and
  `TRITON-ERROR <tutorial> <message>`;
- `tegula bench tutorials` (or named tutorials): lines `TEGULA <tutorial> <shape> <ms>` and
  `TEGULA-ERROR <tutorial> <shape> <message>`.

Both time the same way (do_bench's budget: the median of CUDA-event timings, an L2 clear
before each sample). Rows are joined by (tutorial, shape); ratio = triton ms / tegula ms, so
above 1 tegula is faster. The geometric mean is over the rows both measured.

`--json FILE` merges the joined rows into FILE (a list of benchmark records, as
benchmarks/latest.json): one record a row both measured, `op` = `tutorial-<tutorial>`, the
harness's shape string, tegula's median under `tegula`, Triton's under `peers.triton`, the ratio
under `ratios.triton`; records of the same op and shape are replaced, the others kept.
"""
import json
import argparse
import math
import sys


def read_lines(paths):
    for path in paths:
        try:
            with open(path) as f:
                yield from f.read().splitlines()
        except OSError as e:
            print(f"compare_tutorials: cannot read {path}: {e}", file=sys.stderr)


def parse(paths, tag):
    """{(tutorial, shape): ms}, in order, and {tutorial: error} for `tag` lines."""
    times, errors, checks = {}, {}, {}
    for line in read_lines(paths):
        parts = line.split()
        if len(parts) >= 4 and parts[0] == tag:
            try:
                times[(parts[1], parts[2])] = float(parts[3])
            except ValueError:
                pass
        elif len(parts) >= 2 and parts[0] == f"{tag}-ERROR":
            errors[parts[1]] = " ".join(parts[2:])
        elif len(parts) >= 3 and parts[0] == f"{tag}-CHECK":
            checks[parts[1]] = parts[2]
    return times, errors, checks


def fmt_ms(v):
    return "-" if v is None else f"{v:.4f}"


def table(triton, tegula):
    t_times, t_errors, t_checks = triton
    g_times, g_errors, _ = tegula
    keys = list(t_times) + [k for k in g_times if k not in t_times]
    lines = [
        "| tutorial | shape | triton ms | tegula ms | ratio (triton / tegula) |",
        "| --- | --- | --- | --- | --- |",
    ]
    ratios = []
    for name, shape in keys:
        t, g = t_times.get((name, shape)), g_times.get((name, shape))
        if t is not None and g is not None and g > 0:
            ratio = t / g
            ratios.append(ratio)
            ratio_text = f"{ratio:.2f}"
        elif g is None and name in g_errors:
            ratio_text = f"tegula failed: {g_errors[name][:80]}"
        elif g is None:
            ratio_text = "not timed by tegula (no port, or the run stopped)"
        else:
            ratio_text = "-"
        label = name if t_checks.get(name, "PASS") == "PASS" else f"{name} (Triton check FAILED)"
        lines.append(f"| {label} | {shape} | {fmt_ms(t)} | {fmt_ms(g)} | {ratio_text} |")
    for name, message in t_errors.items():
        lines.append(f"| {name} | - | Triton failed: {message[:80]} | - | - |")
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        lines += ["", f"Geometric mean of the ratios over {len(ratios)} rows: **{geomean:.2f}** "
                      "(above 1 tegula is faster)."]
    else:
        lines += ["", "No row has both timings."]
    return "\n".join(lines) + "\n", ratios


def merge_json(path, triton, tegula, meta):
    """Replaces FILE's records of the joined rows (see the module doc)."""
    t_times, _, _ = triton
    g_times, _, _ = tegula
    try:
        with open(path) as f:
            records = json.load(f)
    except FileNotFoundError:
        records = []
    new = []
    for (name, shape), t in t_times.items():
        g = g_times.get((name, shape))
        if g is None or g <= 0:
            continue
        new.append({"op": f"tutorial-{name}", "shape": shape, "tegula": {"ms": g},
                    "peers": {"triton": {"ms": t}}, "ratios": {"triton": t / g}, **meta})
    replaced = {(r["op"], r["shape"]) for r in new}
    kept = [r for r in records if (r.get("op"), str(r.get("shape"))) not in replaced]
    with open(path, "w") as f:
        json.dump(kept + new, f, indent=1)
        f.write("\n")
    return len(new)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triton", nargs="+", required=True, help="logs with TRITON lines")
    ap.add_argument("--tegula", nargs="+", required=True, help="logs with TEGULA lines")
    ap.add_argument("--out", help="also write the table here")
    ap.add_argument("--json", help="merge the joined rows into this list of records")
    for key in ("gpu", "driver", "commit", "date"):
        ap.add_argument(f"--{key}", default="", help=f"the records' {key}")
    args = ap.parse_args(argv)
    triton, tegula = parse(args.triton, "TRITON"), parse(args.tegula, "TEGULA")
    text, _ = table(triton, tegula)
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        meta = {k: getattr(args, k) for k in ("gpu", "driver", "commit", "date")}
        n = merge_json(args.json, triton, tegula, meta)
        print(f"compare_tutorials: {n} records into {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
