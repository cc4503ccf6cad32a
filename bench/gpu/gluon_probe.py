"""What the Gluon kernel probes (``halo_probe.py``, ``halo_weight_probe.py``) share: compiling a variant for sm_90
without a GPU and reading its resources, and the command line that runs a probe section on the GPU machine."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def compile_for_sm90(fn, pointers: dict[str, str], ints: tuple[str, ...], constants: dict,
                     aligned: tuple[str, ...], max_registers: int | None = None) -> dict:
    """Compile Gluon ``fn`` for sm_90 on the CPU: ``pointers`` (name → pointer type), ``ints`` (i32 sizes),
    ``constants`` (constexprs, ``num_warps`` among them), ``aligned`` (parameters promised divisible by 16),
    ``max_registers`` (ptxas's budget, ``maxnreg``). Returns shared bytes, registers, stack and local bytes
    (ptxas), compile seconds."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from tiledispatch.native.registry import _resource_usage

    started = time.time()
    signature = {**pointers, **{name: "i32" for name in ints}, **{name: "constexpr" for name in constants}}
    divisible = {(index,): [["tt.divisibility", 16]] for index, name in enumerate(signature) if name in aligned}
    compiled = triton.compile(GluonASTSource(fn, signature, constants, divisible), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": constants["num_warps"],
                                       **({"maxnreg": max_registers} if max_registers else {})})
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        registers, stack, local = _resource_usage(cubin)
    return {"shared": compiled.metadata.shared, "registers": registers, "stack": stack, "local": local,
            "seconds": time.time() - started}


def probe_main(doc: str, name: str, section: Callable, compile_only: Callable[[], int],
               emulate: Callable[[], int] | None = None, argv: list[str] | None = None) -> int:
    """``--out DIR`` runs ``section(probe)`` (``variant_probe.Probe``: the registry's timing and check) on the GPU
    and writes ``DIR/probe.json`` (the environment) beside its ``probe.csv``; ``--compile-only`` (and
    ``--emulate`` where given) run on a machine without one."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/probe_registry"))
    parser.add_argument("--compile-only", action="store_true", help="compile for sm_90 on the CPU and stop")
    if emulate is not None:
        parser.add_argument("--emulate", action="store_true", help="check the walk in NumPy on the CPU and stop")
    args = parser.parse_args(argv)
    if args.compile_only:
        return compile_only()
    if emulate is not None and args.emulate:
        return emulate()
    if args.out is None:
        parser.error("--out: the folder for probe.csv and probe.json (or --compile-only)")
    from variant_probe import Probe

    from tiledispatch.native.bench import environment_manifest

    probe = Probe(args.out, args.workers, args.cache_dir)
    (args.out / "probe.json").write_text(json.dumps(environment_manifest(probe.settings, probe.ceilings), indent=2,
                                                    default=str))
    started = time.time()
    section(probe)
    print(f"== {name} done in {time.time() - started:.0f}s", flush=True)
    return 0


def baselines(probe, section: str, problem, best: str):
    """cuDNN and the registry's kernel ``best`` (a kernel name) on ``problem``; returns the inputs the probe's
    variants are then timed on (``native.bench.new_setup``)."""
    from tiledispatch.native.bench import new_setup
    from tiledispatch.native.configs import parse_kernel_name

    print(problem.key, flush=True)
    setup = new_setup(problem, probe.settings)
    probe.cudnn(section, problem, setup)
    config = parse_kernel_name(best)
    probe.measure(section, problem, setup, config.name, probe.config_call(problem, setup, config))
    return setup
