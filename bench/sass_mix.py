"""Instruction mix of kernels' innermost loops, from the SASS of the registry's own binaries (no GPU needed).

Builds the named kernels for ``--arch`` into ``--cache-dir`` exactly as ``tiledispatch registry build`` does
(same compiler, same binaries as the GPU machine's build of that commit), disassembles each program's cubin
with the ``cuobjdump`` Triton ships, and for every innermost loop (a backward branch whose range holds no other
loop; a kernel may have several, e.g. an index loop before its main loop) prints its length in SASS instructions
and the count per opcode, longest first; with the registers and stack bytes ptxas reported and the programs
of that size an SM can hold (65,536 registers). A resource report of the kind issue 3 asks for, not a timing.

    python bench/sass_mix.py gconv_bwd_weight_bf16_2d_dwrow_64x16x7_w4_s1_gm1_sk16_mg1_v8_i32 --out report.md
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.registry import build

_LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z0-9_]+)(?:\.[A-Z0-9_.]+)?\s*([^;]*);")
REGISTERS_PER_SM = 65_536


def cuobjdump() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def instructions(cubin: Path) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of every SASS instruction in ``cubin``."""
    text = subprocess.run([str(cuobjdump()), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(_LINE.match, text.splitlines()) if m]


def loops(code: list[tuple[int, str, str]]) -> list[tuple[int, int, collections.Counter]]:
    """(start, end, opcode counts) of every loop: a branch to an earlier address closes one."""
    out = []
    for address, opcode, operands in code:
        target = re.match(r"\s*(0x[0-9a-f]+)", operands)
        if opcode == "BRA" and target and int(target.group(1), 16) < address:
            start = int(target.group(1), 16)
            out.append((start, address, collections.Counter(op for a, op, _ in code if start <= a <= address)))
    return out


def innermost_loops(found: list[tuple[int, int, collections.Counter]]) -> list[tuple[int, int, collections.Counter]]:
    """The loops of ``found`` whose address range holds no other loop, longest (most instructions) first."""
    inner = [(a, b, c) for a, b, c in found
             if not any(a <= a2 and b2 <= b and (a2, b2) != (a, b) for a2, b2, _ in found)]
    return sorted(inner, key=lambda loop: -sum(loop[2].values()))


def report(names: list[str], arch: str, cache: Path) -> str:
    results = build([parse_kernel_name(n) for n in names], arch=arch, cache_dir=cache, workers=1, rule_set="probe")
    lines = [f"# SASS instruction mix of the innermost loops ({arch}, `bench/sass_mix.py`)", ""]
    for result in sorted(results, key=lambda r: names.index(r.kernel)):
        config = parse_kernel_name(result.kernel)
        threads = 32 * config.num_warps
        per_sm = REGISTERS_PER_SM // max(1, result.registers * threads)
        lines += [f"## `{result.kernel}`", "",
                  f"{result.status}: {result.registers} registers, {result.stack_bytes} stack bytes per thread; "
                  f"{per_sm} programs of {config.num_warps} warps per SM by registers", ""]
        for program, key in sorted(result.programs.items()):
            for start, end, counts in innermost_loops(loops(instructions(cache / "artifacts" / key / "kernel.cubin"))):
                mix = ", ".join(f"{op} {n}" for op, n in counts.most_common())
                lines += [f"* `{program}`: innermost loop 0x{start:x}–0x{end:x}, {sum(counts.values())} instructions "
                          f"an iteration: {mix}"]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="+", help="canonical kernel names")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/sass_mix_registry"))
    parser.add_argument("--out", type=Path, help="write the markdown here (default: stdout only)")
    args = parser.parse_args(argv)
    text = report(args.kernels, args.arch, args.cache_dir)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
