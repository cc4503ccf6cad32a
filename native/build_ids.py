"""Build ids: which binary a measurement timed, beyond the kernel's name.

A kernel name names a config; its code can change under the same name (a new walk, constants compiled in),
and a time measured before the change does not describe the binary after it. A build id hashes, for each
program of the kernel, the Triton source key of its jit function (its source and, recursively, the jit
functions it calls and the constexpr globals it reads), the Triton version, the target, the signature,
every compile-time constant, the integer divisibility promises and the register budget (where a program has
any), warps and stages —
with Triton's line numbers left out (Triton keys a function by its starting line too, so any edit above it in its
file would change every id below it).

Computed in a fresh interpreter (``python -c``), which zeroes the line numbers of every jit function it
imported before Triton computes a key (the registry's own compile cache keeps Triton's line-sensitive keys);
``checkout`` may be another source tree (e.g. a git worktree of the commit a measurement names).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

KEY_SCRIPT = r"""
import hashlib, json, sys
import triton
from triton.runtime.jit import JITFunction
from tiledispatch.native.arch import get_arch
from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.launch import template_for

arch = sys.argv[1]
names = json.load(sys.stdin)
programs_of = {name: template_for(parse_kernel_name(name)).programs(parse_kernel_name(name)) for name in names}
for module in list(sys.modules.values()):  # every jit function is imported by now: drop its line number
    if getattr(module, "__name__", "").startswith("tiledispatch"):
        for value in list(vars(module).values()):
            if isinstance(value, JITFunction):
                value.starting_line_number = 0
                value.hash = None
out = {}
for name, programs in programs_of.items():
    keys = {}
    for program_name, program in programs.items():
        fixed = getattr(program, "fixed", {}) or {}
        signature = {n: ("constexpr" if n in program.constexprs or n in fixed else program.param_types[n])
                     for n in program.fn.arg_names}
        payload = {"source": program.fn.cache_key, "triton": triton.__version__, "target": get_arch(arch).arch,
                   "program": program_name, "signature": signature,
                   "constants": {k: repr(v) for k, v in sorted({**program.constexprs, **fixed}.items())},
                   "num_warps": program.num_warps, "num_stages": program.num_stages}
        divisible = getattr(program, "divisible", {}) or {}
        if divisible:  # (absent otherwise, so the ids of programs without the promise stay as they were)
            payload["divisible"] = {k: divisible[k] for k in sorted(divisible)}
        if getattr(program, "max_registers", None) is not None:  # (likewise)
            payload["max_registers"] = program.max_registers
        keys[program_name] = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    out[name] = hashlib.sha256(json.dumps(sorted(keys.items())).encode()).hexdigest()[:16]
print(json.dumps(out))
"""

#: Per measured folder: {"builds": {kernel: build id}} for rows written before they carried ``kernel_build``
#: (``python -m tiledispatch.models.builds record``).
BUILDS_FILE = "kernel_builds.json"


def folder_builds(directory: Path) -> dict[str, str]:
    """The folder's ``kernel_builds.json`` builds ({} without one)."""
    path = Path(directory) / BUILDS_FILE
    return json.loads(path.read_text())["builds"] if path.exists() else {}


#: How a source tree maps to the package (as pyproject.toml's package-dir does).
_PACKAGES = {"native": "native", "models": "models", "server": "server", "client": "client",
             "v1": "proto/tiledispatch/v1"}


def build_ids(names: Iterable[str], arch: str = "sm_90", checkout: Path | None = None) -> dict[str, str]:
    """{kernel name: build id} for ``names`` as this installation (``checkout`` None) or the source tree
    ``checkout`` (laid out like this repository) builds them. No compile, no GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # real jit functions: source keys
    cwd = None
    if checkout is None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    else:
        root = Path(tempfile.mkdtemp(prefix="tiledispatch-builds-"))
        package = root / "tiledispatch"
        package.mkdir()
        for item in (checkout / "tiledispatch").iterdir():
            if item.name not in _PACKAGES:
                os.symlink(item.resolve(), package / item.name)
        for name, folder in _PACKAGES.items():
            if (checkout / folder).exists():
                os.symlink((checkout / folder).resolve(), package / name)
        env["PYTHONPATH"] = str(root)
        cwd = root
    done = subprocess.run([sys.executable, "-c", KEY_SCRIPT, arch], input=json.dumps(sorted(set(names))),
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=1800)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
        raise RuntimeError(f"build ids ({checkout or 'this installation'}): {last}")
    return json.loads(done.stdout)
