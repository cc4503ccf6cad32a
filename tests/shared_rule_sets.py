"""The ``full`` rule set generated once per test run instead of once per pytest-xdist worker.

Generating ``full`` (2.8M kernel configs, each validated as it is built) takes about 60 s of one core, and
every worker process that runs a test of it (test_rules, test_configs, test_bench_select, test_features,
test_registry_build) generated it again. Under xdist, each worker's ``rules._generate`` of a ``full`` slice
now reads the slice another worker of the same run wrote (pickled, ~1 s), or claims it and generates it with
the library's own ``_generate``; a worker waiting for a slice that the other is generating generates
another unclaimed slice of the same rule set and arch meanwhile, so two workers that both need the whole set
split the work. Files live in this run's temporary folder (the workers' shared basetemp), are written whole
(renamed into place) and removed at the end of the run. Without xdist nothing changes.
"""

from __future__ import annotations

import itertools
import os
import pickle
import time
from pathlib import Path

#: A slice that another worker claimed but never wrote within this time (a crashed worker) is generated here.
WAIT_S = 600.0
SHARED = ("full",)
#: ``ArchSpec.name`` of sm_90, whose every ``full`` slice the suite reads.
SUITE_ARCH = "h200"


def install(folder: Path) -> None:
    """Route ``tiledispatch.native.rules._generate`` of the ``SHARED`` rule sets through ``folder``."""
    from tiledispatch.native import rules
    from tiledispatch.native.problem import Direction, DType

    original = getattr(rules, "_generate", None)
    if original is None:  # renamed: every worker generates its own, as before
        return
    folder.mkdir(parents=True, exist_ok=True)
    held: dict[tuple, tuple] = {}

    def path(key: tuple) -> Path:
        rule_set, direction, dtype, ndim, arch = key
        return folder / f"{rule_set}-{arch}-{Direction(direction).value}-{DType(dtype).value}-{ndim}d.pickle"

    def claim(key: tuple) -> bool:
        try:
            os.close(os.open(path(key).with_suffix(".claimed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def build(key: tuple) -> tuple:
        try:
            configs = original(*key)
        except BaseException:
            path(key).with_suffix(".claimed").unlink()  # (whoever waits for it claims it next)
            raise
        scratch = path(key).with_suffix(f".{os.getpid()}.partial")
        scratch.write_bytes(pickle.dumps(configs, protocol=pickle.HIGHEST_PROTOCOL))
        scratch.replace(path(key))
        held[key] = configs
        return configs

    def help_with_another(rule_set: str, arch: str) -> bool:
        """Generate one slice of (rule_set, arch) that no worker has claimed; False if none is left. Only for
        the arch the suite tests every slice of (the others' few slices are not worth guessing)."""
        if arch != SUITE_ARCH:
            return False
        for direction, dtype, ndim in itertools.product(Direction, DType, (2, 3)):
            other = (rule_set, direction, dtype, ndim, arch)
            if other not in held and not path(other).exists() and claim(other):
                build(other)
                return True
        return False

    def generate(*args, **kwargs):
        if kwargs or len(args) != 5 or args[0] not in SHARED:  # (a signature this module does not know: as is)
            return original(*args, **kwargs)
        rule_set, direction, dtype, ndim, arch_name = args
        key = (rule_set, Direction(direction), DType(dtype), ndim, arch_name)
        if key in held:
            return held[key]
        deadline = time.monotonic() + WAIT_S
        while True:
            if path(key).exists():
                held[key] = pickle.loads(path(key).read_bytes())
                return held[key]
            if claim(key):
                return build(key)
            if time.monotonic() > deadline:
                held[key] = original(*key)
                return held[key]
            if not help_with_another(rule_set, arch_name):
                time.sleep(0.1)

    rules._generate = generate
