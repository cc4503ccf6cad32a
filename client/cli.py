"""Client commands of ``tiledispatch``: ``select``, ``run``, ``bench``, ``kernels``, ``models``, ``info``,
``lift-quarantine``.

The problem is given as flags (``--direction fwd --dtype bf16 --n 32 --g 32 --c 128 --k 128
--input 56,56 --filter 3,3 --stride 1,1 --pad 1,1 --dilation 1,1``; ``--pad-begin``/``--pad-end``
for asymmetric padding) or as JSON (``--problem-json '{...}'`` or ``--problem-json @file.json``).
Output is a readable table, or JSON with ``--json``. The server is ``--target`` (default
``$TILEDISPATCH_TARGET`` or 127.0.0.1:50051). Security: ``--token`` (``$TILEDISPATCH_TOKEN``),
``--tls`` with ``--ca-cert``, and ``--client-cert``/``--client-key`` for mutual TLS (each also from
``$TILEDISPATCH_TLS_CA``, ``$TILEDISPATCH_TLS_CLIENT_CERT``, ``$TILEDISPATCH_TLS_CLIENT_KEY``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from .client import BenchmarkSummary, Client, Measurement
from .credentials import Tls
from .errors import TileDispatchError
from .problem import Problem

COMMANDS = ("select", "run", "bench", "kernels", "models", "info", "lift-quarantine")


def _dims(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 3,3 or 3x3, got {text!r}") from None


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None,
                        help="server address, or several comma-separated (default $TILEDISPATCH_TARGET or "
                             "127.0.0.1:50051)")
    parser.add_argument("--timeout", type=float, default=None, help="deadline per call, seconds")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    env = os.environ.get
    parser.add_argument("--token", default=env("TILEDISPATCH_TOKEN"),
                        help="bearer token (default $TILEDISPATCH_TOKEN)")
    parser.add_argument("--tls", action="store_true", help="connect with TLS (implied by the options below)")
    parser.add_argument("--ca-cert", default=env("TILEDISPATCH_TLS_CA"),
                        help="PEM CA of the server's certificate (default $TILEDISPATCH_TLS_CA; else system roots)")
    parser.add_argument("--client-cert", default=env("TILEDISPATCH_TLS_CLIENT_CERT"),
                        help="PEM client certificate for mutual TLS (default $TILEDISPATCH_TLS_CLIENT_CERT)")
    parser.add_argument("--client-key", default=env("TILEDISPATCH_TLS_CLIENT_KEY"),
                        help="PEM key of --client-cert (default $TILEDISPATCH_TLS_CLIENT_KEY)")
    parser.add_argument("--server-name", default="", help="name to check the server's certificate against")


def tls_from_args(args: argparse.Namespace) -> Tls | None:
    """The TLS settings the flags ask for; ``None``: plaintext."""
    if not (args.tls or args.ca_cert or args.client_cert or args.client_key or args.server_name):
        return None
    return Tls(ca_cert=args.ca_cert, client_cert=args.client_cert, client_key=args.client_key,
               server_name=args.server_name)


def _add_problem(parser: argparse.ArgumentParser, required: bool = True) -> None:
    group = parser.add_argument_group("problem" + ("" if required else " (optional: keep kernels that support it)"))
    group.add_argument("--problem-json", help="the problem as JSON, or @path to a JSON file")
    group.add_argument("--direction", help="fwd, bwd_data or bwd_weight" + (" (default fwd)" if required else ""))
    group.add_argument("--dtype", help="bf16, fp16 or fp32" + (" (default bf16)" if required else ""))
    group.add_argument("--n", type=int, help="batch")
    group.add_argument("--g", type=int, help="groups (default 1)")
    group.add_argument("--c", type=int, help="input channels, all groups")
    group.add_argument("--k", type=int, help="output channels, all groups")
    group.add_argument("--input", type=_dims, help="spatial input size, e.g. 56,56 or 8,56,56")
    group.add_argument("--filter", type=_dims, help="filter size, e.g. 3,3")
    group.add_argument("--stride", type=_dims, help="default 1 per dim")
    group.add_argument("--dilation", type=_dims, help="default 1 per dim")
    group.add_argument("--pad", type=_dims, help="padding on both sides, default 0")
    group.add_argument("--pad-begin", type=_dims, help="padding before (asymmetric)")
    group.add_argument("--pad-end", type=_dims, help="padding after (asymmetric)")


def _has_problem(args: argparse.Namespace) -> bool:
    return bool(args.problem_json) or any(getattr(args, name) is not None
                                          for name in ("n", "c", "k", "input", "filter"))


def problem_from_args(args: argparse.Namespace) -> Problem:
    """The problem the flags describe; fields left out stay empty for the server to name."""
    if args.problem_json:
        text = args.problem_json
        if text.startswith("@"):
            with open(text[1:]) as handle:
                text = handle.read()
        return Problem.from_dict(json.loads(text))
    pad = args.pad or ()
    return Problem(direction=args.direction or "fwd", dtype=args.dtype or "bf16", batch=args.n or 0,
                   groups=args.g or 1, in_channels=args.c or 0, out_channels=args.k or 0,
                   input_size=args.input or (), filter_size=args.filter or (), stride=args.stride or (),
                   dilation=args.dilation or (), pad_begin=args.pad_begin or pad, pad_end=args.pad_end or pad)


def _families(values: list[str] | None) -> list[str]:
    return [f for value in values or () for f in value.split(",") if f]


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"tiledispatch {command}")
    _add_common(parser)
    if command == "select":
        parser.description = "Rank the kernels for a problem."
        _add_problem(parser)
        parser.add_argument("--policy", default="default",
                            choices=["default", "tuning_db_only", "model_only", "analytic_only", "autotune"])
        parser.add_argument("--top-k", type=int, default=5)
        parser.add_argument("--family", action="append", help="only these families (repeat or comma-separate)")
        parser.add_argument("--model", help="pin a model: name or name/version")
    elif command == "run":
        parser.description = "Run a problem on the server (GPU, or its CPU reference without one)."
        _add_problem(parser)
        parser.add_argument("--kernel", default="", help="kernel to run (default: the server selects)")
        parser.add_argument("--inputs", help="two .npy files, first,second (default: generated inputs)")
        parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
        parser.add_argument("--output", help="save the output to this .npy file")
    elif command == "bench":
        parser.description = "Measure kernels on the server's GPU (streams one line per kernel)."
        _add_problem(parser)
        parser.add_argument("--kernels", help="comma-separated kernel names (default: the selection's top-k)")
        parser.add_argument("--top-k", type=int, default=5, help="0 measures every supported kernel")
        parser.add_argument("--family", action="append")
        parser.add_argument("--repeats", type=int, default=0)
    elif command == "kernels":
        parser.description = "List the server's kernels, optionally those that support a problem."
        parser.add_argument("--ndim", type=int, default=0)
        parser.add_argument("--family", action="append")
        parser.add_argument("--all", action="store_true", help="with a problem: also unsupported ones, with reasons")
        _add_problem(parser, required=False)
    elif command == "models":
        parser.description = "List the models the server ranks with."
    elif command == "info":
        parser.description = "Show the server's GPU, versions, registry and models."
    elif command == "lift-quarantine":
        parser.description = "Admin: return a quarantined kernel to selection (needs an admin token)."
        parser.add_argument("kernel", help="canonical kernel name")
    return parser


# ---- output --------------------------------------------------------------------------------------
def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    raise TypeError(type(value).__name__)


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


# ---- commands ------------------------------------------------------------------------------------
def _select(client: Client, args: argparse.Namespace) -> None:
    model = tuple(args.model.split("/", 1)) if args.model and "/" in args.model else args.model
    selection = client.select(problem_from_args(args), policy=args.policy, top_k=args.top_k,
                              families=_families(args.family), model=model)
    if args.json:
        _print_json(asdict(selection))
        return
    print(f"problem  {selection.problem_key}")
    print(f"source   {selection.source}  model {selection.model[0]}/{selection.model[1]}  "
          f"({selection.candidates_considered} kernels ranked{', cached' if selection.cached else ''})")
    rows = [[i + 1, c.kernel, c.family, _us(c.predicted_us), _us(c.measured_us)]
            for i, c in enumerate(selection.candidates)]
    print(_table(rows, ["#", "kernel", "family", "predicted_us", "measured_us"]))


def _run(client: Client, args: argparse.Namespace) -> None:
    problem = problem_from_args(args)
    inputs = None
    if args.inputs:
        paths = args.inputs.split(",")
        if len(paths) != 2:
            raise SystemExit("tiledispatch run: --inputs needs two .npy files: first,second")
        inputs = (np.load(paths[0]), np.load(paths[1]))
    result = client.run(problem, inputs, kernel=args.kernel, seed=args.seed)
    if args.output:
        np.save(args.output, result.output)
    out = result.output.astype(np.float64)
    summary = {"kernel": result.kernel, "executed_on": result.executed_on, "elapsed_us": result.elapsed_us,
               "selection_source": result.selection_source, "output_shape": list(result.output.shape),
               "output_mean": float(out.mean()), "output_std": float(out.std()),
               "output_abs_max": float(np.abs(out).max()), "output_file": args.output or ""}
    if args.json:
        _print_json(summary)
        return
    for key, value in summary.items():
        print(f"{key:<17}{value}")


def _bench(client: Client, args: argparse.Namespace) -> None:
    kernels = [k for k in (args.kernels or "").split(",") if k]
    events = client.benchmark(problem_from_args(args), kernels=kernels, top_k=args.top_k,
                              families=_families(args.family), repeats=args.repeats)
    for event in events:
        if args.json:
            print(json.dumps({"measurement" if isinstance(event, Measurement) else "summary": asdict(event)},
                             default=_json_default), flush=True)
        elif isinstance(event, Measurement):
            note = f"  ({event.message})" if event.message else ""
            print(f"[{event.index + 1}/{event.total}] {event.kernel}  {event.status}  graph {_us(event.graph_us)} us"
                  f"  median {_us(event.median_us)} us  min {_us(event.min_us)} us"
                  f"  predicted {_us(event.predicted_us)} us  rel.err {event.relative_error:.2e}{note}", flush=True)
        elif isinstance(event, BenchmarkSummary):
            print(f"oracle    {event.oracle_kernel}  {_us(event.oracle_us)} us")
            print(f"selected  {event.selected_kernel}  {_us(event.selected_us)} us  ({event.selection_source}, "
                  f"{event.model[0]}/{event.model[1]})")
            print(f"efficiency {event.selection_efficiency:.3f}  measured {event.measured}  failed {event.failed}"
                  f"  on {event.gpu_name}")


def _kernels(client: Client, args: argparse.Namespace) -> None:
    problem = problem_from_args(args) if _has_problem(args) else None
    kernels = client.list_kernels(direction=None if problem else args.direction,
                                  dtype=None if problem else args.dtype, ndim=args.ndim,
                                  families=_families(args.family), problem=problem,
                                  include_unsupported=bool(args.all and problem))
    if args.json:
        _print_json(kernels)
        return
    rows = [[k["name"], k["family"], "yes" if k["supported"] else "no", "yes" if k["quarantined"] else "",
             k["reason"]] for k in kernels]
    print(_table(rows, ["kernel", "family", "supported", "quarantined", "reason"]))
    print(f"{len(kernels)} kernels")


def _models(client: Client, args: argparse.Namespace) -> None:
    models = client.list_models()
    if args.json:
        _print_json(models)
        return
    rows = [[m["name"], m["version"], m["kind"], m["arch"], ",".join(m["dtypes"]), ",".join(m["directions"]),
             m["description"]] for m in models]
    print(_table(rows, ["name", "version", "kind", "arch", "dtypes", "directions", "description"]))


def _info(client: Client, args: argparse.Namespace) -> None:
    info = client.info()
    if args.json:
        _print_json(info)
        return
    for key, value in info.items():
        if key == "models":
            value = ", ".join(f"{m['name']}/{m['version']}" for m in value)
        print(f"{key:<22}{value}")


def _lift_quarantine(client: Client, args: argparse.Namespace) -> None:
    answer = client.lift_quarantine(args.kernel)
    if args.json:
        _print_json(answer)
        return
    if answer["was_quarantined"]:
        print(f"lifted the quarantine of {args.kernel} (was: {answer['reason']})")
    else:
        print(f"{args.kernel} was not quarantined")
    print(f"quarantined kernels: {answer['quarantined_kernels']}")


_HANDLERS = {"select": _select, "run": _run, "bench": _bench, "kernels": _kernels, "models": _models, "info": _info,
             "lift-quarantine": _lift_quarantine}


def main(argv: Sequence[str] | None = None) -> int:
    """``argv[0]`` is the command (as ``tiledispatch.cli`` passes it)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0] not in COMMANDS:
        print(f"usage: tiledispatch {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)
        return 2
    command = args_list[0]
    args = build_parser(command).parse_args(args_list[1:])
    try:
        with Client(args.target, timeout=args.timeout, tls=tls_from_args(args), token=args.token) as client:
            _HANDLERS[command](client, args)
    except TileDispatchError as error:
        field = f" [field {error.field}]" if error.field else ""
        print(f"tiledispatch {command}: {error.code.name}: {error.message}{field}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"tiledispatch {command}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
