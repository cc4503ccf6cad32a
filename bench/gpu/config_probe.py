"""Probe: kernel configs (in ``default`` or not) timed beside cuDNN, as built and with their copies cached in L1.

Two uses. *Configs*: any kernel names (e.g. the pipeline-depth siblings of the best tensor-core kernels,
``--kernels stages_probe_kernels.json --variants cg``) are compiled on the spot and timed on the problems
their list names. *L1*:

Triton 3.6 lowers every 16-byte pipelined load to ``cp.async.cg`` (cache in L2 only) and ignores a
``cache_modifier`` on it. An implicit-GEMM program re-reads the same input rows once per filter tap
(a 3×3 forward loads each X row nine times, shifted by one position a tap), so every re-read goes to
L2. ``cp.async.ca`` is the same copy cached in L1 too: the shifted re-reads of one program could hit
there instead. This probe compiles each kernel twice — as the registry does, and with the PTX's
``cp.async.cg.shared.global`` rewritten to ``cp.async.ca.shared.global`` (a compiler-stage hook) —
and times both, with cuDNN, on the same problems in one run, with the tile engine's timing and
correctness check (``variant_probe.Probe``).

Kernel lists: ``l1_probe_kernels.json`` (per non-depthwise dev-suite problem and direction, the three
fastest pipelined igemm / gmerge / gemm1x1 kernels of session 15's dev suite, H200);
``stages_probe_kernels.json`` (the same kernels at 2–5 pipeline stages); ``regcap_probe_kernels.json`` (per
non-depthwise dev-suite backward-data problem, session 23's fastest tensor-core kernels and those with a
register budget, for ``--variants cg,cap``: each compiled as ptxas chooses and under its budget);
``neighbor_probe_kernels.json`` (``neighbor_probe_kernels.py``: the ``full`` neighbours of the best tensor-core kernels
on the 2D grouped layers under 1.5× cuDNN, for ``--variants cap``: as the registry builds them);
``loss_probe_kernels.json`` (the same script, ``--below 1.0 --classes 2d_grouped,3d_grouped`` on session 39's synthetic
run: the grouped layer-directions where cuDNN is faster, all three directions, for ``--variants cap``);
``dev_long_split_probe_kernels.json`` (the same script's ``--long-splits only``); ``dwrun7_probe_kernels.json``,
``dwrun3_w1_probe_kernels.json``, ``dwrun7_w1_weight_probe_kernels.json`` (``dwrun7_probe_kernels.py``: depthwise
``dwrun`` tiles outside ``default``); ``warp_twin_probe_kernels.json`` (``warp_twin_probe_kernels.py``: the
lowest-roofline layers' CUDA-core kernels at 1-8 warps). ``--kernels`` repeats: several lists in one run.

Usage (GPU machine): ``python bench/gpu/config_probe.py --out DIR [--kernels FILE] [--variants cg,ca]
[--workers N]``; writes ``DIR/probe.csv``
(one row per problem × kernel × variant), ``DIR/probe.json`` (environment) and ``DIR/ptx.json`` (per
kernel and variant: the copies' PTX opcodes, registers).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Triton's own copies (L2 only), the same copies cached in L1 too, and Triton's copies under the program's
# register budget (``Program.max_registers``, as the registry builds it); cg and ca leave registers to ptxas.
VARIANTS = ("cg", "ca", "cap")
_COPY_RE = re.compile(r"cp\.async\.c[ag]\.shared\.global")


def _rewrite_copies_hook(backend, stages, options, language, capability):
    make_ptx = stages["ptx"]
    stages["ptx"] = lambda src, metadata: make_ptx(src, metadata).replace(
        "cp.async.cg.shared.global", "cp.async.ca.shared.global")


def _compile(kernel_name: str, variant: str, root: str) -> dict:
    """Compile every program of one kernel in a worker that sees no GPU; write Triton's metadata and cubin."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import triton
    from triton import knobs

    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.launch import template_for
    from tiledispatch.native.registry import _json_default, _resource_usage, _source, target_for

    knobs.compilation.always_compile = True  # the two variants share a source key: never reuse Triton's cache
    knobs.runtime.add_stages_inspection_hook = _rewrite_copies_hook if variant == "ca" else None
    config = parse_kernel_name(kernel_name)
    out = {"kernel": kernel_name, "variant": variant, "programs": {}}
    for program_name, program in template_for(config).programs(config).items():
        if variant != "cap":  # cg and ca: the registers ptxas chooses
            program = dataclasses.replace(program, max_registers=None)
        options = program.compile_options()
        compiled = triton.compile(_source(program), target=target_for("sm_90"), options=options)
        folder = Path(root) / variant / kernel_name / program_name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "kernel.json").write_text(json.dumps(compiled.metadata._asdict(), default=_json_default))
        (folder / "kernel.cubin").write_bytes(compiled.asm["cubin"])
        registers, stack, local = _resource_usage(folder / "kernel.cubin")
        out["programs"][program_name] = {"max_registers": options.get("maxnreg"),
            "copies": dict(collections.Counter(_COPY_RE.findall(compiled.asm["ptx"]))),
            "registers": registers, "spill_bytes": stack + local, "shared_bytes": compiled.metadata.shared}
    return out


def _loader(root: Path, variant: str):
    from triton.compiler.compiler import CompiledKernel

    from tiledispatch.native.launch import template_for
    from tiledispatch.native.registry import _source

    loaded: dict[str, dict] = {}

    def binaries(config):
        if config.name not in loaded:
            loaded[config.name] = {
                name: CompiledKernel(_source(program), {
                    "kernel.json": str(root / variant / config.name / name / "kernel.json"),
                    "kernel.cubin": str(root / variant / config.name / name / "kernel.cubin")},
                    f"{variant}-{config.name}-{name}")
                for name, program in template_for(config).programs(config).items()}
        return loaded[config.name]
    return binaries


def _kernel_call(problem, setup, config, loader):
    from tiledispatch.native import launch

    def call(i):
        return launch.run(problem, config, setup.first[i], setup.second[i], setup.out[i], backend="compiled",
                          loader=loader, check_support=False)
    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--binaries", type=Path, default=Path("/tmp/l1_probe_bin"))
    parser.add_argument("--kernels", type=Path, action="append",
                        help="a kernel list (JSON: problems -> [[kernel, null], ...]); repeat to probe several in one "
                             "run (default l1_probe_kernels.json)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"a subset of {','.join(VARIANTS)}")
    args = parser.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    if not variants or set(variants) - set(VARIANTS):
        parser.error(f"--variants: a non-empty subset of {VARIANTS}, got {args.variants!r}")

    sys.path.insert(0, str(HERE))
    from variant_probe import Probe

    from tiledispatch.native.bench import environment_manifest, new_setup
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.problem import ConvProblem

    problems: dict[str, list] = {}
    for path in args.kernels or [HERE / "l1_probe_kernels.json"]:
        for key, kernels in json.loads(path.read_text())["problems"].items():
            problems.setdefault(key, []).extend(kernels)
    names = sorted({name for rows in problems.values() for name, _ in rows})
    started = time.time()
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_compile, name, variant, str(args.binaries)) for name in names for variant in variants]
        built = [f.result() for f in futures]
    print(f"compiled {len(names)} kernels x {len(variants)} variants in {time.time() - started:.0f}s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ptx.json").write_text(json.dumps(built, indent=1))

    probe = Probe(args.out, args.workers, args.binaries)
    (args.out / "probe.json").write_text(json.dumps(environment_manifest(probe.settings, probe.ceilings), indent=2,
                                                    default=str))
    loaders = {variant: _loader(args.binaries, variant) for variant in variants}
    for key, rows in problems.items():
        problem = ConvProblem.from_key(key)
        print(problem.key, flush=True)
        setup = new_setup(problem, probe.settings)
        probe.cudnn("configs", problem, setup)
        for name, _ in rows:
            config = parse_kernel_name(name)
            for variant in variants:
                probe.measure("configs", problem, setup, f"{name}:{variant}",
                              _kernel_call(problem, setup, config, loaders[variant]))
        del setup
    return 0


if __name__ == "__main__":
    sys.exit(main())
