#!/usr/bin/env python3
"""The loops of a SASS listing: each backward branch's span, its size and its opcodes.

  python3 scripts/sass_loops.py KERNEL.sass [--list START END]

KERNEL.sass is `cuobjdump -sass` of a cubin (`ptxas -arch=sm_90a x.ptx -o x.cubin`; cuobjdump
and nvdisasm come in the `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` wheels, so no GPU is
needed). Every backward branch over more than 40 instructions is reported as a loop: its first
and last instruction index, its instruction count and its 16 most frequent opcodes (guards and
modifiers stripped). A branch back to an earlier loop's header reports the enclosing span too,
so nested and sibling loops both appear. `--list START END` prints those instructions, indexed,
for reading a loop beside another compiler's.

Standard library only.
"""
import re
import sys
from collections import Counter


def instructions(path):
    """(address, text) of each instruction, and the instruction index of each label."""
    ins, labels = [], {}
    for line in open(path).read().splitlines():
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    return ins, labels


def opcode(text):
    text = re.sub(r"^@!?U?P\w+\s+", "", text)
    return text.split()[0].split(".")[0]


def loops(ins, labels):
    """(first, last) index of every backward branch spanning more than 40 instructions."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for i, (_, text) in enumerate(ins):
        if "BRA" not in text:
            continue
        target = None
        m = re.search(r"\((\.L_x_\d+)\)", text)
        if m and m.group(1) in labels:
            target = labels[m.group(1)]
        m = re.search(r"BRA\s+(?:U?P\w+,\s*)?(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) in at:
            target = at[int(m.group(1), 16)]
        if target is not None and target < i and i - target > 40:
            out.append((target, i))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ins, labels = instructions(sys.argv[1])
    if "--list" in sys.argv:
        k = sys.argv.index("--list")
        start, end = int(sys.argv[k + 1]), int(sys.argv[k + 2])
        for i in range(start, min(end + 1, len(ins))):
            print(i, ins[i][1])
        return
    print(f"  {len(ins)} instructions")
    for first, last in loops(ins, labels):
        kinds = Counter(opcode(t) for _, t in ins[first : last + 1])
        print(f"  loop {first}..{last}: {last - first + 1} instructions; {kinds.most_common(16)}")


if __name__ == "__main__":
    main()
