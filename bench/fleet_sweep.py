"""A benchmark sweep sharded over a fleet of replicas through the Benchmark RPC (DESIGN section 9).

    python bench/fleet_sweep.py --targets 10.0.0.1:50051,10.0.0.2:50051 \
        --problems ../shared/bench/dev_suite.json --directions fwd,bwd_data --top-k 8 --out sweep.jsonl

One worker thread per replica, each with its own connection, takes the next problem from a shared
queue, so faster replicas take more problems. A replica that fails with UNAVAILABLE (gone or
restarting) hands its problem back and leaves the sweep; the others finish it. A stream cut after
some measurements is measured again in full elsewhere (measurements are not replayed half-way).
Other errors (a problem no kernel supports, say) are recorded for that problem. Each result line
is one problem: the replica that measured it, every measurement and the summary (oracle kernel,
the selection's efficiency). Needs only the client (grpcio, protobuf, numpy).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc

from tiledispatch.client import BenchmarkSummary, Client, Measurement, TileDispatchError


@dataclasses.dataclass
class ProblemResult:
    index: int
    problem: Any
    replica: str = ""
    measurements: list[dict] = dataclasses.field(default_factory=list)
    summary: dict | None = None
    error: str = ""
    attempts: int = 0

    def to_json(self) -> dict:
        problem = self.problem.to_dict() if hasattr(self.problem, "to_dict") else self.problem
        return {**dataclasses.asdict(self), "problem": problem}


def _measure(client: Client, problem: Any, top_k: int, repeats: int, timeout: float) -> tuple[list, dict]:
    measurements, summary = [], None
    for event in client.benchmark(problem, top_k=top_k, repeats=repeats, timeout=timeout):
        if isinstance(event, Measurement):
            measurements.append(dataclasses.asdict(event))
        elif isinstance(event, BenchmarkSummary):
            summary = dataclasses.asdict(event)
    if summary is None:
        raise TileDispatchError(grpc.StatusCode.UNAVAILABLE, "stream ended without a summary")
    return measurements, summary


def sweep(targets: Sequence[str], problems: Iterable[Any], *, top_k: int = 5, repeats: int = 0,
          timeout: float = 600.0, client_factory: Callable[[str], Client] | None = None,
          on_result: Callable[[ProblemResult], None] | None = None) -> list[ProblemResult]:
    """Benchmark every problem on some replica; returns the results in the problems' order.

    ``targets`` are single replicas (``host:port``). A problem left when every replica has gone
    comes back with ``error`` set."""
    factory = client_factory or (lambda target: Client(target, retries=1, backoff_s=0.05))
    results = [ProblemResult(i, p) for i, p in enumerate(problems)]
    todo: queue.Queue[ProblemResult] = queue.Queue()
    for result in results:
        todo.put(result)
    remaining = [len(results)]
    lock = threading.Lock()
    alive = [len(targets)]

    def finish(result: ProblemResult) -> None:
        with lock:
            remaining[0] -= 1
        if on_result:
            on_result(result)

    def worker(target: str) -> None:
        with factory(target) as client:
            while True:
                with lock:
                    if remaining[0] == 0:
                        return
                try:
                    result = todo.get(timeout=0.05)
                except queue.Empty:
                    continue
                result.attempts += 1
                try:
                    result.measurements, result.summary = _measure(client, result.problem, top_k, repeats, timeout)
                    result.replica, result.error = target, ""
                except TileDispatchError as error:
                    if error.code == grpc.StatusCode.UNAVAILABLE:
                        todo.put(result)  # another replica takes it; this one leaves
                        return
                    result.replica, result.error = target, str(error)
                finish(result)

    def run(target: str) -> None:
        try:
            worker(target)
        finally:
            with lock:
                alive[0] -= 1

    threads = [threading.Thread(target=run, args=(t,), name=f"sweep-{t}", daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        for thread in threads:
            thread.join(0.1)
    while not todo.empty():  # every replica left
        result = todo.get()
        result.error = result.error or "no replica left to measure it"
        if on_result:
            on_result(result)
    return results


def _load(path: str, directions: list[str], dtype: str) -> list[dict]:
    from tiledispatch.native.bench import load_problems  # the dev-suite format as `tiledispatch bench` reads it

    return [p.to_dict() for p in load_problems(path, directions, dtype)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", required=True, help="comma-separated host:port of every replica")
    parser.add_argument("--problems", required=True, help="dev-suite JSON, or a JSON list of problem dicts")
    parser.add_argument("--directions", default="fwd", help="comma-separated: fwd,bwd_data,bwd_weight")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--top-k", type=int, default=5, help="measure the selection's top k (0: every kernel)")
    parser.add_argument("--repeats", type=int, default=0, help="timed repeats (0: the server's default)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per problem")
    parser.add_argument("--out", required=True, help="JSON lines, one problem each")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    problems = _load(args.problems, args.directions.split(","), args.dtype)
    started = time.monotonic()
    with open(args.out, "w") as out:
        def write(result: ProblemResult) -> None:
            out.write(json.dumps(result.to_json()) + "\n")
            out.flush()

        results = sweep(targets, problems, top_k=args.top_k, repeats=args.repeats, timeout=args.timeout,
                        on_result=write)
    failed = [r for r in results if r.error]
    per_replica = {t: sum(r.replica == t for r in results) for t in targets}
    print(json.dumps({"problems": len(results), "failed": len(failed), "per_replica": per_replica,
                      "seconds": round(time.monotonic() - started, 3)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
