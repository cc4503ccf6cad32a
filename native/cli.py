"""Local commands: ``kernels list``, ``registry build``, ``bench`` (argv[0] is the command name)."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from tiledispatch.native.configs import Family
from tiledispatch.native.problem import ConvProblem, Direction, DType, ProblemError
from tiledispatch.native.rules import RULE_SETS, rule_set_configs
from tiledispatch.native.support import is_supported

DEFAULT_CACHE = Path(os.environ.get("TILEDISPATCH_REGISTRY_DIR",
                                    Path(os.environ.get("TILEDISPATCH_HOME", Path.home() / ".cache" / "tiledispatch"))
                                    / "registry"))


def _csv(values: str | None) -> list[str] | None:
    return [v.strip() for v in values.split(",") if v.strip()] if values else None


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rule-set", default="default", choices=RULE_SETS)
    parser.add_argument("--arch", default="sm_90", help="compute target or device (sm_80, sm_89, sm_90, h200, ...)")
    parser.add_argument("--direction", help="comma list of fwd, bwd_data, bwd_weight (default: all)")
    parser.add_argument("--dtype", help="comma list of bf16, fp16, fp32 (default: all)")
    parser.add_argument("--ndim", help="comma list of 2, 3 (default: both)")
    parser.add_argument("--family", help=f"comma list of {', '.join(f.value for f in Family)}")


def _selected(args: argparse.Namespace):
    ndims = [int(n) for n in _csv(args.ndim) or ["2", "3"]]
    configs = rule_set_configs(args.rule_set, args.arch, directions=_csv(args.direction), dtypes=_csv(args.dtype),
                               ndims=ndims)
    families = set(_csv(args.family) or [])
    return [c for c in configs if not families or c.family.value in families]


def kernels_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tiledispatch kernels", description="List the kernels of a rule set.")
    parser.add_argument("action", choices=["list"])
    _add_selection(parser)
    parser.add_argument("--problem-json", help="only kernels that support this problem (JSON object)")
    parser.add_argument("--why-not", action="store_true", help="with --problem-json: also list the refused ones")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configs = _selected(args)
    refused = []
    if args.problem_json:
        try:
            problem = ConvProblem.from_json(args.problem_json)
        except ProblemError as error:
            print(f"tiledispatch kernels: invalid problem: {error}", file=sys.stderr)
            return 2
        verdicts = [(c, is_supported(problem, c)) for c in configs]
        configs = [c for c, v in verdicts if v]
        refused = [(c, v.reason) for c, v in verdicts if not v]
    if args.json:
        print(json.dumps({"kernels": [c.name for c in configs],
                          "refused": {c.name: r for c, r in refused} if args.why_not else {}}, indent=1))
        return 0
    for config in configs:
        print(config.name)
    if args.why_not:
        for config, reason in refused:
            print(f"# no: {config.name}: {reason}")
    print(f"# {len(configs)} kernels ({args.rule_set}, {args.arch})", file=sys.stderr)
    return 0


def registry_main(argv: list[str]) -> int:
    from tiledispatch.native.registry import build

    parser = argparse.ArgumentParser(prog="tiledispatch registry",
                                     description="Compile a rule set ahead of time into an artifact cache.")
    parser.add_argument("action", choices=["build"])
    _add_selection(parser)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--allow-failures", action="store_true",
                        help="exit 0 even if a kernel fails, spills registers or exceeds shared memory")
    args = parser.parse_args(argv)
    configs = _selected(args)
    started = time.time()
    print(f"registry: building {len(configs)} kernels ({args.rule_set}, {args.arch}) with {args.workers} workers "
          f"into {args.cache_dir}", flush=True)
    step = max(1, len(configs) // 20)

    def progress(done: int, total: int, result) -> None:
        if not result.usable:
            print(f"  [{done}/{total}] {result.status}: {result.kernel} {result.error[:300]}"
                  f" (smem {result.shared_bytes} B, local {result.local_bytes} B)", flush=True)
        elif done % step == 0 or done == total:
            print(f"  [{done}/{total}] {time.time() - started:.0f}s", flush=True)

    results = build(configs, arch=args.arch, cache_dir=args.cache_dir, workers=args.workers,
                    rule_set=args.rule_set, progress=progress)
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    worst_smem = max((r.shared_bytes for r in results), default=0)
    worst_regs = max((r.registers for r in results), default=0)
    print(f"registry: {len(results)} kernels in {time.time() - started:.1f}s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
          + f"; max shared memory {worst_smem} B, max registers {worst_regs}", flush=True)
    failed = [r for r in results if not r.usable]
    return 1 if failed and not args.allow_failures else 0


def _shard(text: str) -> tuple[int, int]:
    """``I/N`` with 0 <= I < N: this process's share of the problem list."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not int(match[1]) < int(match[2]):
        raise argparse.ArgumentTypeError(f"--shard: must be I/N with 0 <= I < N (e.g. 0/2), got {text!r}")
    return int(match[1]), int(match[2])


def bench_main(argv: list[str]) -> int:
    from tiledispatch.native.bench import BenchSettings, load_problems, run_sweep
    from tiledispatch.native.sampler import sample_problems

    parser = argparse.ArgumentParser(prog="tiledispatch bench",
                                     description="Measure every applicable kernel of a registry and cuDNN.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--problems", type=Path, help="JSON: dev-suite format or a list of problem objects")
    source.add_argument("--synthetic", type=int, metavar="COUNT", help="COUNT problems from the seeded sampler")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--direction", default="fwd,bwd_data,bwd_weight")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--rule-set", default="default", choices=RULE_SETS)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, required=True, help="output directory (parquet shards + manifest)")
    parser.add_argument("--oracle-only", action="store_true", help="skip full timing of clearly slow kernels")
    parser.add_argument("--max-kernels", type=int, default=0, help="seeded sample of at most this many kernels")
    parser.add_argument("--no-cudnn", action="store_true")
    parser.add_argument("--limit", type=int, default=0, help="measure at most this many problems this sitting")
    parser.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                        help="after --limit, keep every N-th problem starting at the I-th (one process per GPU)")
    parser.add_argument("--training", action="store_true",
                        help="training-data timing: CUDA-graph replay only, about 5 ms of device time per kernel")
    parser.add_argument("--complete", type=Path, nargs="+", default=[], metavar="DIR",
                        help="completion sweep: for the problems measured in these folders, measure only the "
                             "applicable kernels they lack (added to the rule set since), without cuDNN, into "
                             "--out (a folder of its own)")
    parser.add_argument("--refresh", type=Path, nargs="+", default=[], metavar="DIR",
                        help="refresh sweep: for the problems measured in these folders, measure the applicable "
                             "kernels with no row of the build in use (changed or added since), without cuDNN, into "
                             "--out (a folder of its own, whose rows replace theirs in training)")
    parser.add_argument("--refresh-within", type=float, default=0.0, metavar="FACTOR",
                        help="with --refresh: re-measure only the changed kernels whose earlier time was within "
                             "FACTOR x the problem's earlier best (e.g. 1.25); none never measured there (default 0: "
                             "every stale kernel, including the applicable ones never measured)")
    parser.add_argument("--families", default="", metavar="F1,F2",
                        help="measure only these kernel families (e.g. dwroll: a completion sweep of a new family)")
    parser.add_argument("--kernels", default="", metavar="REGEX",
                        help="measure only kernels whose name REGEX matches (re.search; e.g. '_sk(?!1_)' for the "
                             "split-K kernels)")
    args = parser.parse_args(argv)
    families = tuple(_csv(args.families) or ())
    unknown = sorted(set(families) - {f.value for f in Family})
    if unknown:
        parser.error(f"--families: unknown {unknown}; families: {[f.value for f in Family]}")
    try:
        re.compile(args.kernels)
    except re.error as error:
        parser.error(f"--kernels: not a regular expression ({error}): {args.kernels!r}")
    if args.complete and (args.max_kernels or args.oracle_only):
        parser.error("--complete measures every missing kernel fully: drop --max-kernels and --oracle-only")
    if args.refresh and (args.max_kernels or args.oracle_only or args.complete):
        parser.error("--refresh measures every stale kernel fully: drop --max-kernels, --oracle-only and --complete")
    if args.refresh_within and not args.refresh:
        parser.error("--refresh-within: only with --refresh")
    if args.refresh_within and args.refresh_within < 1:
        parser.error(f"--refresh-within: must be >= 1 (a factor of the earlier best time), got {args.refresh_within}")
    directions = [Direction.parse(d).value for d in _csv(args.direction) or []]
    dtype = DType.parse(args.dtype).value
    if args.problems:
        problems = load_problems(args.problems, directions, dtype)
    else:
        base = sample_problems(args.synthetic, seed=args.seed)
        problems = [p.with_direction(d).with_dtype(dtype) for p in base for d in directions]
    if args.limit:
        problems = problems[: args.limit]
    index, count = args.shard
    problems = problems[index::count]
    settings = BenchSettings(cache_dir=str(args.cache_dir), arch=args.arch, rule_set=args.rule_set,
                             oracle_only=args.oracle_only,
                             include_cudnn=not (args.no_cudnn or args.complete or args.refresh),
                             max_kernels=args.max_kernels, seed=args.seed, families=families, kernels=args.kernels,
                             refresh_within=args.refresh_within,
                             **(dict(event_timing=False, budget_us=5_000.0, graph_replays=3) if args.training else {}))
    # SIGTERM (e.g. `timeout` ending a sitting) unwinds like an exception, so the sweep's `finally`
    # writes the rows measured since the last shard instead of losing them.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    manifest = run_sweep(problems, settings, args.out, complete=args.complete, refresh=args.refresh)
    print(f"bench: manifest {manifest}")
    return 0


def main(argv: list[str]) -> int:
    command, rest = argv[0], argv[1:]
    return {"kernels": kernels_main, "registry": registry_main, "bench": bench_main}[command](rest)
