"""One probe measurement per row, shared by the kernel probes (``walk_probe.py``, ``held_probe.py``,
``dwrow_probe.py``, ``dwrun_probe.py``, ``dwrun_data_probe.py``): the variant's output poisoned with NaN, checked
against the float64 reference (DESIGN §4 limits), timed as the tile engine times (``native.bench._time_callable``:
rotated input sets, CUDA-graph replay, median of 5), and the rows so far rewritten atomically (temp file +
``os.replace``) after each one, so a stopped probe keeps them; and the probes' shared command line, compiled-kernel
call and build-then-time run.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tiledispatch.native import launch
from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.bench import BenchSettings, Ceilings, _grouped_result, _time_callable
from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.problem import ConvProblem


class ProbeRows:
    """Rows ``problem, variant, <columns>, status, error, us, bound_us, message`` written to ``path``."""

    def __init__(self, path: Path, settings: BenchSettings, ceilings: Ceilings):
        self.path, self.settings, self.ceilings = path, settings, ceilings
        self.rows: list[dict] = []

    def record(self, problem: ConvProblem, setup, variant: str, call, *, cudnn: bool = False, **columns) -> dict:
        """Check and time ``call(i)`` (set ``i`` of ``setup``); ``cudnn``: its result is PyTorch's tensor."""
        row = {"problem": problem.key, "variant": variant, **columns, "status": "ok", "error": math.nan,
               "us": math.nan, "bound_us": self.ceilings.bound_us(problem), "message": ""}
        try:
            setup.out[0].fill_(float("nan"))
            result = call(0)
            torch.cuda.synchronize()
            row["error"] = setup.relative_error(_grouped_result(problem, result) if cudnn else setup.out[0])
            if not row["error"] <= RELATIVE_ERROR_LIMIT[problem.dtype]:
                row["status"] = "wrong"
            else:
                row["us"] = _time_callable(call, setup.sets, self.settings, 50.0)[2]
        except Exception as exc:  # recorded; the probe goes on
            row["status"], row["message"] = "error", f"{type(exc).__name__}: {str(exc)[:300]}"
        self.rows.append(row)
        print(f"  {variant:66s} {row['status']:6s} {row['us']:9.2f} us  err {row['error']:.2e} "
              f"{row['message'][:100]}", flush=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(self.rows[0]))
            writer.writeheader()
            writer.writerows(self.rows)
        tmp.replace(self.path)
        return row


def compiled_call(problem: ConvProblem, config: KernelConfig, setup, loader) -> Callable[[int], object]:
    """``call(i)`` for :meth:`ProbeRows.record`: ``config``'s registry binaries on input set ``i`` of ``setup``."""
    def call(i: int):
        return launch.run(problem, config, setup.first[i], setup.second[i], setup.out[i], backend="compiled",
                          loader=loader, check_support=False)
    return call


def start_probe(configs, cache: Path, workers: int, out: Path, stem: str):
    """Build ``configs`` with the registry's own build into ``cache`` (worker processes, no CUDA context), print
    what it built, measure the ceilings and write ``out/<stem>.json`` (environment): ``(build results by kernel
    name, the loaded registry, the timing settings, the rows writer of out/<stem>.csv)``."""
    import json

    from tiledispatch.native.bench import BenchSettings, environment_manifest, measure_ceilings
    from tiledispatch.native.registry import Registry, build

    out.mkdir(parents=True, exist_ok=True)
    wanted = sorted(set(configs), key=lambda c: c.name)
    started = time.time()
    results = build(wanted, arch="sm_90", cache_dir=cache, workers=workers, rule_set="probe")
    print(f"built {len(wanted)} kernels in {time.time() - started:.0f}s "
          f"({sum(not r.usable for r in results)} unusable: {sorted({r.status for r in results})})", flush=True)
    settings = BenchSettings(cache_dir=str(cache), event_timing=False)
    ceilings = measure_ceilings()
    (out / f"{stem}.json").write_text(json.dumps(environment_manifest(settings, ceilings), indent=2, default=str))
    return ({r.kernel: r for r in results}, Registry.load(cache, "sm_90"), settings,
            ProbeRows(out / f"{stem}.csv", settings, ceilings))


def probe_main(description: str, name: str, run: Callable[[Path, int], int], argv: list[str] | None = None) -> int:
    """The probes' command line: ``--out DIR`` and ``--workers N`` (build processes) into ``run(out, workers)``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args(argv)
    started = time.time()
    code = run(args.out, args.workers)
    print(f"{name} probe done in {time.time() - started:.0f}s", flush=True)
    return code


def default_kernels(problem: ConvProblem, family) -> list[KernelConfig]:
    """``default``'s kernels of ``family`` that run ``problem``: a probe's baseline."""
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import is_supported

    return [c for c in rule_set_configs("default", "sm_90", directions=[problem.direction], dtypes=[problem.dtype],
                                        ndims=[problem.ndim])
            if c.family is family and is_supported(problem, c)]


def probe_kernels_and_cudnn(problems, plan, cache: Path, workers: int, out: Path, stem: str) -> int:
    """The kernel probes' whole run: build every config of ``plan`` (problem key → (new configs, baseline
    configs)) into ``cache``, then per problem time cuDNN (``cudnn.benchmark=True``), the baseline configs and
    the new ones into ``out/<stem>.csv`` (a config whose build failed or spilled is printed with its status, not
    timed)."""
    from tiledispatch.native.bench import _cudnn_call, new_setup

    built, registry, settings, probe = start_probe([c for new, base in plan.values() for c in new + base],
                                                   cache, workers, out, stem)
    loader = registry.loader()
    for problem in problems:
        print(problem.key, flush=True)
        setup = new_setup(problem, settings)
        torch.backends.cudnn.benchmark = True
        probe.record(problem, setup, "cudnn", _cudnn_call(problem, setup), cudnn=True, registers=0, stack_bytes=0)
        new, base = plan[problem.key]
        for config in base + new:
            result = built.get(config.name)
            if config.name not in registry.entries:
                if result is not None:
                    print(f"  {config.name:66s} {result.status} ({result.registers} registers, "
                          f"{result.stack_bytes} stack bytes)", flush=True)
                continue
            call = compiled_call(problem, config, setup, loader)
            probe.record(problem, setup, config.name, call, registers=result.registers if result else 0,
                         stack_bytes=result.stack_bytes if result else 0)
        del setup
    return 0
