"""Does the tile engine's timing depend on how it is called? The same kernels timed three ways in one run on one
GPU, to explain why the 4-warp 64×128 / 128×64 split-K backward-weight tiles measured 10-15 % faster in session
18's flat probe (``probe_rows``: in-process, no event timing, a 50 µs sizing estimate) than in every dev-suite
run (``td bench``: a worker subprocess, event timing, then the graph; session 17 and 18), while cuDNN and the
other tiles agreed within 2 %.

Per problem (the dev suite's dense 28×28 and G = 2 backward-weight layers, bf16) and focus kernel, in rounds:

* ``sweep``: ``native.bench.measure_kernel`` in this process, as the dev-suite worker calls it;
* ``probe``: ``probe_rows``' call (``_time_callable`` without event timing, estimate 50 µs);
* ``cudnn``: ``native.bench.measure_cudnn`` (autotuned).

``td bench`` on the same two problems and kernels (the whole harness: worker subprocess, the registry this script
built) runs after it in ``call.sh harness``. Writes ``DIR/harness.csv`` and ``DIR/harness.json`` (environment, and the
GPU's clocks and power before and after, from nvidia-smi).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

PROBLEMS = ("bwd_weight|bf16|2d|n32|g1|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
            "bwd_weight|bf16|2d|n32|g2|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1")
KERNELS = tuple(f"gconv_bwd_weight_bf16_2d_igemm_{tile}_gm8_sk{split}_mg1_v8_i32" for tile, split in (
    ("64x128x64_w4_s3", 8), ("64x128x64_w4_s3", 16), ("128x64x64_w4_s3", 8), ("64x64x64_w4_s3", 8),
    ("128x128x64_w8_s3", 16)))
ROUNDS = 3


def gpu_state() -> str:
    query = "clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True,
                          text=True).stdout.strip()


def run(out: Path, workers: int) -> int:
    import torch
    from probe_rows import compiled_call

    from tiledispatch.native.bench import (
        BenchSettings,
        _time_callable,
        environment_manifest,
        measure_ceilings,
        measure_cudnn,
        measure_kernel,
        new_setup,
    )
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.problem import ConvProblem
    from tiledispatch.native.registry import Registry, build

    out.mkdir(parents=True, exist_ok=True)
    cache = Path("/tmp/harness_registry")
    configs = [parse_kernel_name(name) for name in KERNELS]
    build(configs, arch="sm_90", cache_dir=cache, workers=workers, rule_set="probe")
    loader = Registry.load(cache, "sm_90").loader()
    settings = BenchSettings(cache_dir=str(cache))
    quiet = BenchSettings(cache_dir=str(cache), event_timing=False)
    ceilings = measure_ceilings()
    state = {"before": gpu_state()}
    rows = []
    for round_index in range(ROUNDS):
        for key in PROBLEMS:
            problem = ConvProblem.from_key(key)
            setup = new_setup(problem, settings)
            torch.backends.cudnn.benchmark = True
            cudnn = measure_cudnn(setup, ceilings, settings)
            rows.append({"round": round_index, "problem": key, "kernel": "cudnn", "method": "sweep",
                         "us": cudnn["graph_us"], "event_us": cudnn["event_median_us"]})
            for config in configs:
                swept = measure_kernel(setup, config, loader, ceilings, settings)
                rows.append({"round": round_index, "problem": key, "kernel": config.name, "method": "sweep",
                             "us": swept["graph_us"], "event_us": swept["event_median_us"]})
                call = compiled_call(problem, config, setup, loader)
                probed = _time_callable(call, setup.sets, quiet, 50.0)[2]
                rows.append({"round": round_index, "problem": key, "kernel": config.name, "method": "probe",
                             "us": probed, "event_us": float("nan")})
                print(f"{round_index} {key[:60]} {config.name:70s} sweep {swept['graph_us']:7.2f} "
                      f"probe {probed:7.2f}", flush=True)
            del setup
            torch.cuda.empty_cache()
    state["after"] = gpu_state()
    with (out / "harness.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "harness.json").write_text(json.dumps({**environment_manifest(settings, ceilings), "gpu_state": state},
                                                 indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--write-problems", type=Path, help="write the problems as a bench problem file and stop")
    args = parser.parse_args(argv)
    if args.write_problems:
        from tiledispatch.native.problem import ConvProblem

        args.write_problems.write_text(json.dumps([ConvProblem.from_key(k).to_dict() for k in PROBLEMS]) + "\n")
        return 0
    started = time.time()
    code = run(args.out, args.workers)
    print(f"harness check done in {time.time() - started:.0f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
