"""Registers against occupancy: each kernel's programs as ptxas compiles them and at a register budget (no GPU).

For every selected kernel of a rule set, compiles each program that holds its tiles (``main``, backward-weight's
``flat``, the depthwise ``run``) for ``--arch`` with the registry's compiler: as ptxas chooses (Triton's options
without ``maxnreg``), then at each budget below that. Without ``--budgets``, the one budget that lets as many CTAs
share an SM as the program's measured shared memory allows (⌊65,536 / (threads · CTAs by shared memory)⌋ rounded down
to 8; 228 KiB an SM, 1 KiB reserved a CTA, at most 2,048 threads); with ``--budgets 160,128,…`` (programs without
shared memory, e.g. ``dwrun``), each listed budget that would fit more CTAs an SM. Writes one CSV row per program and
budget: registers, shared bytes, CTAs an SM by shared memory and by registers, the budget, registers and spilled bytes
at the budget (or the compile error), and the budget the registry builds the program with (``register_cap``:
``Program.max_registers``). The resource report behind ``native.kernels.base.register_cap``'s rule and
``native.kernels.dwrun.run_register_budget``'s table (which tiles compile spill-free at a budget, and gain CTAs), not a
timing.

    python bench/register_budget.py --direction bwd_data --families igemm,gmerge,gemm1x1 --dtype bf16 \\
        --out survey.csv --workers 2
    python bench/register_budget.py --families dwrun --ndim 2 --budgets 160,128,112,96,80,64,56,48 --out dwrun.csv
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from tiledispatch.native.kernels.base import SM_REGISTERS, ctas_by_shared_memory, occupancy_budget

FIELDS = ("kernel", "program", "registers", "spill_bytes", "shared_bytes", "ctas_by_shared", "ctas_by_registers",
          "budget", "budget_registers", "budget_spill_bytes", "budget_error", "register_cap")
PROGRAMS = ("main", "flat", "run")


def _compile(program, arch: str, maxnreg: int | None) -> tuple[int, int, int]:
    """(registers, spilled bytes, shared bytes) of ``program`` compiled for ``arch``."""
    import triton

    from tiledispatch.native.registry import _resource_usage, _source, target_for

    options = dataclasses.replace(program, max_registers=maxnreg).compile_options()
    compiled = triton.compile(_source(program), target=target_for(arch), options=options)
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        registers, stack, local = _resource_usage(cubin)
    return registers, stack + local, compiled.metadata.shared


def ctas_by_registers(registers: int, threads: int) -> int:
    return SM_REGISTERS // (-(-registers // 8) * 8 * threads)


def survey(name: str, arch: str, budgets: tuple[int, ...] = ()) -> list[dict]:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # never a CUDA context in a worker
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.launch import template_for

    config = parse_kernel_name(name)
    rows = []
    for program_name, program in template_for(config).programs(config).items():
        if program_name not in PROGRAMS:
            continue
        registers, spill, shared = _compile(program, arch, None)
        threads = 32 * program.num_warps
        by_shared = ctas_by_shared_memory(shared, threads)
        row = {"kernel": name, "program": program_name, "registers": registers, "spill_bytes": spill,
               "shared_bytes": shared, "ctas_by_shared": by_shared,
               "ctas_by_registers": ctas_by_registers(registers, threads), "register_cap": program.max_registers}
        # Below what ptxas chose, and (listed budgets) where more CTAs would fit: does the program, unspilled?
        tried = [b for b in budgets if b < registers and min(ctas_by_registers(b, threads), by_shared)
                 > min(ctas_by_registers(registers, threads), by_shared)] if budgets else \
            [b for b in (occupancy_budget(threads, by_shared),) if b < registers]
        for budget in tried:
            at = dict(row, budget=budget)
            try:
                at["budget_registers"], at["budget_spill_bytes"], _ = _compile(program, arch, budget)
            except Exception as error:  # ptxas: "Insufficient registers …": the budget cannot hold the tile
                at["budget_error"] = str(error).split("ptxas fatal")[-1].strip(" :")[:120]
            rows.append(at)
        if not tried:
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    from tiledispatch.native.rules import rule_set_configs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule-set", default="default")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--direction", action="append", help="fwd, bwd_data, bwd_weight (repeatable; default all)")
    parser.add_argument("--families", default="igemm,gmerge,gemm1x1")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--ndim", type=int, action="append", help="2 or 3 (repeatable; default both)")
    parser.add_argument("--kernel", action="append", help="a kernel name (repeatable): these instead of a selection")
    parser.add_argument("--budgets", default="", help="comma-separated budgets to try (default: the shared-memory one)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    families = set(args.families.split(","))
    budgets = tuple(sorted((int(b) for b in args.budgets.split(",") if b), reverse=True))
    names = sorted(args.kernel or (c.name for c in rule_set_configs(args.rule_set, args.arch)
                                   if c.family.value in families and c.dtype.value == args.dtype
                                   and (not args.direction or c.direction.value in args.direction)
                                   and (not args.ndim or c.ndim in args.ndim)))
    if not names:
        parser.error("no kernel of the rule set matches the selection")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("spawn")) as pool, \
            args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS)
        writer.writeheader()
        for index, rows in enumerate(pool.map(survey, names, [args.arch] * len(names), [budgets] * len(names)), 1):
            writer.writerows(rows)
            print(f"[{index}/{len(names)}] {names[index - 1]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
