"""One line per Nsight Compute text report of ``bench/gpu/profiles.sh`` (``--set full``): duration, SM and memory
throughput, issue slots, registers, grid, shared memory, occupancy, waves, cycles with no eligible warp, cycles per
issued instruction, instructions issued, L2 hit rate, and the report's warp-stall findings. For a report of several
launches (a cuDNN entry), the first launch.

    python bench/gpu/ncu_summary.py bench/results/<session>/ncu_call2 > .../ncu_call2/summary.txt
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

#: ncu metric name -> the short column name printed.
METRICS = {"Duration": "duration", "Compute (SM) Throughput": "sm%", "Memory Throughput": "mem%",
           "DRAM Throughput": "dram%", "Executed Ipc Active": "ipc", "Issue Slots Busy": "issue%",
           "Registers Per Thread": "regs", "Grid Size": "grid", "Block Size": "block",
           "Dynamic Shared Memory Per Block": "dyn_smem_kb", "Theoretical Occupancy": "theoretical_occ%",
           "Achieved Occupancy": "achieved_occ%", "Waves Per SM": "waves", "No Eligible": "no_eligible%",
           "Warp Cycles Per Issued Instruction": "cycles_per_issue", "Issued Instructions": "issued",
           "L2 Hit Rate": "l2_hit%"}


def summarize(text: str) -> tuple[dict[str, str], list[str]]:
    """(metric values, warp-stall findings) of the report's first launch."""
    first = text.split("Section: Source Counters")[0]
    values: dict[str, str] = {}
    for line in first.splitlines():
        stripped = line.strip()
        for name, short in METRICS.items():
            if short not in values and stripped.startswith(name + " "):
                parts = stripped.split()
                # "Duration  us  23.42": keep the unit with the value
                values[short] = parts[-1] + parts[-2] if name == "Duration" else parts[-1]
    flat = re.sub(r"\s+", " ", first)
    stalls = [f"{m.group(1)} cycles stalled {m.group(2)}"
              for m in re.finditer(r"each warp of this workload spends ([\d.]+) cycles being stalled (.*?)\.", flat)]
    return values, stalls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of profiles.sh reports (*.txt)")
    args = parser.parse_args(argv)
    for report in sorted(args.folder.glob("*.txt")):
        if report.name == "summary.txt":
            continue
        values, stalls = summarize(report.read_text(errors="replace"))
        print(report.stem + ": " + " ".join(f"{k}={values.get(k, '-')}" for k in METRICS.values()))
        for stall in stalls:
            print("    " + stall)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
