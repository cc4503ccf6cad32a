"""The ``tiledispatch`` command. Each sub-command lives in the package that owns it and is imported
only when used, so ``tiledispatch select`` never loads torch or triton.

Local commands: ``kernels list`` (the rule sets), ``registry build``, ``bench`` (the tile engine),
``serve``, ``torch-ext build`` (the PyTorch integration's C++ launch path, ahead of a training run).
Client commands talk to a server: ``select``, ``run``, ``models``, ``info``,
``lift-quarantine``; ``kernels``
and ``bench`` become client commands when given ``--target``.
"""

from __future__ import annotations

import importlib
import sys

_LOCAL = {
    "kernels": "tiledispatch.native.cli",
    "registry": "tiledispatch.native.cli",
    "bench": "tiledispatch.native.cli",
    "serve": "tiledispatch.server.main",
    "torch-ext": "tiledispatch.integrations.torch_native",
}
_CLIENT = "tiledispatch.client.cli"
_CLIENT_ONLY = ("select", "run", "models", "info", "lift-quarantine")

USAGE = """usage: tiledispatch <command> [options]

local:   kernels list | registry build | bench | serve | torch-ext build
client:  select | run | models | info | lift-quarantine | kernels --target T | bench --target T
'tiledispatch <command> --help' for each command's options."""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command = args[0]
    remote = command in _CLIENT_ONLY or (command in ("kernels", "bench")
                                         and any(a == "--target" or a.startswith("--target=") for a in args))
    module_name = _CLIENT if remote else _LOCAL.get(command)
    if module_name is None:
        print(f"tiledispatch: unknown command {command!r}\n{USAGE}", file=sys.stderr)
        return 2
    module = importlib.import_module(module_name)
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
