"""The compiled registry: ahead-of-time builds of a rule set, an on-disk artifact cache, a manifest.

Build (``tiledispatch registry build``): every kernel instance of a rule set is compiled with
``triton.compile`` for an explicit ``GPUTarget`` in *spawned* worker processes that hide every GPU
(``CUDA_VISIBLE_DEVICES=""``), so no CUDA context exists while compiling (the seed's fork + GPU
context faults cannot happen). Each binary is stored under its artifact key, a hash of

    (kernel source hash incl. its dependencies, Triton version, target arch, kernel name,
     program name, signature, constexprs, warps, stages)

in ``<cache>/artifacts/<key>/`` (Triton's metadata JSON and the cubin), written into a temporary
directory and moved into place with ``os.replace``; an existing key is never rebuilt, so a second
build does nothing. Problem sizes are run-time arguments: an instance compiles once, never per shape.
The manifest ``<cache>/manifest-<arch>.json`` (also replaced atomically) lists every kernel with its
artifact keys, shared memory, registers, stack and local (spill) bytes, compile time and status.

Load (:class:`Registry`): read the manifest, recompute each artifact key from the *current* kernel
source, and refuse (``RegistryError``) binaries built from other source, so a server never runs a
stale kernel and never compiles on a request.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tiledispatch.native.arch import get_arch
from tiledispatch.native.configs import KernelConfig, parse_kernel_name

MANIFEST_VERSION = 1


class RegistryError(RuntimeError):
    """The registry cannot serve a kernel; the message says which and what to do."""


@dataclass(frozen=True)
class BuildResult:
    kernel: str
    status: str                       # ok | cached | over_smem | spills | error
    programs: dict[str, str] = field(default_factory=dict)   # program name -> artifact key
    shared_bytes: int = 0
    registers: int = 0
    stack_bytes: int = 0
    local_bytes: int = 0
    compile_s: float = 0.0
    error: str = ""
    build: str = ""                   # native.build_ids: which binary, beyond the name (measurements record it)

    @property
    def usable(self) -> bool:
        return self.status in ("ok", "cached")


# ---- keys and targets ------------------------------------------------------------------------
def target_for(arch: str):
    from triton.backends.compiler import GPUTarget

    spec = get_arch(arch)
    return GPUTarget("cuda", spec.compute_capability, 32)


def _source(program: Any) -> Any:
    from triton.compiler import ASTSource

    signature = program.signature()
    # Pointers are promised 16-byte aligned (the launcher checks); integers only as the program declares
    # (``Program.divisible``, guaranteed by the config's support check), so one binary serves every size.
    divisible = getattr(program, "divisible", {}) or {}
    attrs = {(index,): [["tt.divisibility", 16]] for index, kind in enumerate(signature.values())
             if kind.startswith("*")}
    attrs.update({(index,): [["tt.divisibility", divisible[name]]] for index, name in enumerate(signature)
                  if name in divisible})
    from triton.experimental.gluon._runtime import GluonJITFunction

    if isinstance(program.fn, GluonJITFunction):  # (halo: explicit shared memory and wgmma)
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(program.fn, signature, program.compile_constants(), attrs)
    return ASTSource(program.fn, signature, program.compile_constants(), attrs)


def artifact_key(config: KernelConfig, program_name: str, program: Any, arch: str) -> str:
    import triton

    payload = {
        "source": program.fn.cache_key,
        "triton": triton.__version__,
        "target": get_arch(arch).arch,
        "kernel": config.name,
        "program": program_name,
        "signature": program.signature(),
        "constexprs": {k: repr(v) for k, v in sorted(program.compile_constants().items())},
        "num_warps": program.num_warps,
        "num_stages": program.num_stages,
    }
    if getattr(program, "max_registers", None) is not None:  # absent otherwise: other keys stay as they were
        payload["max_registers"] = program.max_registers
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


# ---- building ---------------------------------------------------------------------------------
def _cuobjdump() -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


_USAGE_RE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def _resource_usage(cubin_path: Path) -> tuple[int, int, int]:
    """(registers, stack bytes, local bytes) per thread, from cuobjdump. Triton kernels make no
    calls, so a stack frame or local memory means registers were spilled."""
    text = subprocess.run([_cuobjdump(), "--dump-resource-usage", str(cubin_path)], capture_output=True,
                          text=True, check=True).stdout
    match = _USAGE_RE.search(text)
    if not match:
        raise RegistryError(f"cuobjdump printed no resource usage for {cubin_path}")
    registers, stack, _shared, local = (int(v) for v in match.groups())
    return registers, stack, local


def _build_kernel(kernel_name: str, arch: str, cache_dir: str) -> BuildResult:
    """Compile every program of one kernel instance (runs in a worker process)."""
    import triton

    from tiledispatch.native.launch import template_for

    config = parse_kernel_name(kernel_name)
    cache = Path(cache_dir)
    spec = get_arch(arch)
    programs = template_for(config).programs(config)
    keys: dict[str, str] = {}
    shared = registers = stack = local = 0
    compiled_any = False
    started = time.perf_counter()
    try:
        for program_name, program in sorted(programs.items()):
            key = artifact_key(config, program_name, program, arch)
            keys[program_name] = key
            final = cache / "artifacts" / key
            if not (final / "info.json").exists():
                compiled_any = True
                kernel = triton.compile(_source(program), target=target_for(arch), options=program.compile_options())
                staging = cache / "tmp" / f"{key}-{uuid.uuid4().hex}"
                staging.mkdir(parents=True)
                (staging / "kernel.json").write_text(json.dumps(kernel.metadata._asdict(), default=_json_default))
                (staging / "kernel.cubin").write_bytes(kernel.asm["cubin"])
                regs, stack_bytes, local_bytes = _resource_usage(staging / "kernel.cubin")
                info = {"kernel": kernel_name, "program": program_name, "shared_bytes": kernel.metadata.shared,
                        "registers": regs, "stack_bytes": stack_bytes, "local_bytes": local_bytes,
                        "triton": triton.__version__, "target": spec.arch}
                (staging / "info.json").write_text(json.dumps(info, sort_keys=True))
                try:
                    os.replace(staging, final)
                except OSError:  # another build put the same key in place first: keep theirs
                    shutil.rmtree(staging, ignore_errors=True)
            info = json.loads((final / "info.json").read_text())
            shared = max(shared, info["shared_bytes"])
            registers = max(registers, info["registers"])
            stack = max(stack, info["stack_bytes"])
            local = max(local, info["local_bytes"])
    except Exception as error:  # a compile failure is recorded, never fatal to the build
        return BuildResult(kernel_name, "error", keys, compile_s=time.perf_counter() - started,
                           error=f"{type(error).__name__}: {str(error)[:2000]}")
    status = "ok" if compiled_any else "cached"
    if shared > spec.smem_per_block_bytes:
        status = "over_smem"
    elif local > 0 or stack > 0:
        status = "spills"
    return BuildResult(kernel_name, status, keys, shared, registers, stack, local,
                       time.perf_counter() - started)


def _json_default(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        return value._asdict()
    if hasattr(value, "__dict__"):
        return vars(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _worker_init(triton_cache: str) -> None:
    # Workers must never see a GPU (no CUDA context while compiling) nor the interpreter switch.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = triton_cache


def build(configs: Iterable[KernelConfig], *, arch: str, cache_dir: Path | str, workers: int,
          rule_set: str = "", progress: Callable[[int, int, BuildResult], None] | None = None) -> list[BuildResult]:
    """Compile ``configs`` for ``arch`` into ``cache_dir``; merge the results into the manifest."""
    cache = Path(cache_dir)
    (cache / "artifacts").mkdir(parents=True, exist_ok=True)
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    names = sorted({c.name for c in configs})
    started = time.time()
    results: list[BuildResult] = []
    if workers <= 1:
        _worker_init(str(cache / "triton"))
        for index, name in enumerate(names, 1):
            results.append(_build_kernel(name, arch, str(cache)))
            if progress:
                progress(index, len(names), results[-1])
    else:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=_worker_init,
                                 initargs=(str(cache / "triton"),)) as pool:
            futures = [pool.submit(_build_kernel, name, arch, str(cache)) for name in names]
            for index, future in enumerate(as_completed(futures), 1):
                results.append(future.result())
                if progress:
                    progress(index, len(names), results[-1])
    results.sort(key=lambda r: r.kernel)
    results = _with_build_ids(results, cache, arch)
    _update_manifest(cache, arch, results, {
        "rule_set": rule_set, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 2), "workers": workers, "kernels": len(results),
        "compiled": sum(r.status != "cached" for r in results), "failed": sum(not r.usable for r in results),
        "python": sys.version.split()[0],
    })
    shutil.rmtree(cache / "tmp", ignore_errors=True)
    return results


def _with_build_ids(results: list[BuildResult], cache: Path, arch: str) -> list[BuildResult]:
    """``results`` with their build ids (native.build_ids): the manifest's where a kernel's artifact keys
    are unchanged (same programs, same binary), the rest computed in one interpreter (no compile), so a
    build that compiles nothing computes nothing either. A failure is reported, never fails the build."""
    from tiledispatch.native.build_ids import build_ids

    path = manifest_path(cache, arch)
    previous = json.loads(path.read_text())["kernels"] if path.exists() else {}
    ids = {r.kernel: previous[r.kernel]["build"] for r in results
           if previous.get(r.kernel, {}).get("build") and previous[r.kernel].get("programs") == r.programs}
    todo = [r.kernel for r in results if r.usable and r.kernel not in ids]
    if todo:
        try:
            ids.update(build_ids(todo, arch))
        except (RuntimeError, OSError, subprocess.SubprocessError) as error:
            print(f"registry: no build ids recorded ({error}); measurements will not be told apart by build",
                  file=sys.stderr)
    return [replace(r, build=ids.get(r.kernel, "")) for r in results]


def manifest_path(cache_dir: Path | str, arch: str) -> Path:
    return Path(cache_dir) / f"manifest-{get_arch(arch).arch}.json"


def _update_manifest(cache: Path, arch: str, results: list[BuildResult], build_record: dict) -> None:
    import triton

    path = manifest_path(cache, arch)
    manifest = json.loads(path.read_text()) if path.exists() else {
        "manifest_version": MANIFEST_VERSION, "arch": get_arch(arch).arch, "kernels": {}, "builds": []}
    manifest["triton"] = triton.__version__
    for result in results:
        entry = asdict(result)
        previous = manifest["kernels"].get(result.kernel)
        if result.status == "cached" and previous:  # keep the first build's compile time
            entry["compile_s"] = previous.get("compile_s", entry["compile_s"])
            entry["status"] = previous["status"] if previous["status"] != "cached" else "ok"
        elif result.status == "cached":
            entry["status"] = "ok"
        manifest["kernels"][result.kernel] = entry
    manifest["builds"].append(build_record)
    write_json_atomic(path, manifest)


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 1, sort_keys: bool = True) -> None:
    """Write JSON through a temporary file in the same directory and ``os.replace`` (``indent=None``: one line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name + ".", suffix=".tmp",
                                     delete=False) as handle:
        json.dump(data, handle, indent=indent, sort_keys=sort_keys)
        handle.flush()
        os.fsync(handle.fileno())
        temporary = handle.name
    os.replace(temporary, path)


# ---- loading ----------------------------------------------------------------------------------
class Registry:
    """The kernels built for one arch in one cache directory, loadable without compiling."""

    def __init__(self, cache_dir: Path, arch: str, manifest: dict):
        self.cache_dir = cache_dir
        self.arch = arch
        self.manifest = manifest
        self.entries = {name: entry for name, entry in manifest["kernels"].items()
                        if entry["status"] in ("ok", "cached")}
        self.configs = [parse_kernel_name(name) for name in sorted(self.entries)]
        #: kernel name -> build id (native.build_ids) of the binaries this registry holds, where the build
        #: recorded one (manifests written before session 7 have none)
        self.builds = {name: entry["build"] for name, entry in self.entries.items() if entry.get("build")}
        self._loaded: dict[str, dict[str, Any]] = {}

    @classmethod
    def load(cls, cache_dir: Path | str, arch: str) -> Registry:
        path = manifest_path(cache_dir, arch)
        if not path.exists():
            raise FileNotFoundError(f"registry: no manifest at {path}; run "
                                    f"'tiledispatch registry build --arch {arch} --cache-dir {cache_dir}'")
        return cls(Path(cache_dir), arch, json.loads(path.read_text()))

    def __len__(self) -> int:
        return len(self.configs)

    def binaries(self, config: KernelConfig) -> dict[str, Any]:
        """The compiled programs of one kernel (loaded once per process)."""
        cached = self._loaded.get(config.name)
        if cached is not None:
            return cached
        if config.name not in self.entries:
            raise RegistryError(f"kernel {config.name} is not in the registry at {self.cache_dir}")
        from triton.compiler.compiler import CompiledKernel

        from tiledispatch.native.launch import template_for

        out = {}
        for program_name, program in template_for(config).programs(config).items():
            key = artifact_key(config, program_name, program, self.arch)
            folder = self.cache_dir / "artifacts" / key
            if not (folder / "info.json").exists():
                raise RegistryError(f"kernel {config.name}: no artifact {key} for the current kernel source "
                                    "(source changed since the build?); rebuild the registry")
            group = {"kernel.json": str(folder / "kernel.json"), "kernel.cubin": str(folder / "kernel.cubin")}
            out[program_name] = CompiledKernel(_source(program), group, key)
        self._loaded[config.name] = out
        return out

    def loader(self) -> Callable[[KernelConfig], dict[str, Any]]:
        return self.binaries
