"""The README's "Use it from PyTorch" example, as written.

CI (no GPU): the block under that heading is ten lines of valid Python and imports only names
``tiledispatch.integrations.torch`` exports. GPU: the block runs as written — its ``configure(target=...)``
names a port where no service listens, so selection falls back to the local models and one WARNING says
so — every swapped convolution got a finite weight gradient, and every (direction, shape) was decided
under the default ``fastest`` policy with the kernel a trained model chose.

Run on a GPU machine: ``pytest -m gpu tests/integrations/test_readme_example.py`` (with
``TILEDISPATCH_REGISTRY_DIR`` naming a built registry, else each kernel is JIT-compiled on first use).
"""

from __future__ import annotations

import ast
import importlib
import logging
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "## Use it from PyTorch"
MODULE = "tiledispatch.integrations.torch"


def readme_example() -> str:
    """The first ```python block after :data:`HEADING`."""
    text = README.read_text(encoding="utf-8")
    assert HEADING in text, f"README.md has no {HEADING!r} section"
    section = text.split(HEADING, 1)[1]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```", start)]


def test_example_is_ten_lines_importing_what_the_module_exports():
    source = readme_example()
    tree = ast.parse(source, "README.md")
    assert len([line for line in source.splitlines() if line.strip()]) <= 10
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == MODULE
                for alias in node.names]
    assert imported, f"the example imports nothing from {MODULE}"
    pytest.importorskip("torch")
    exported = importlib.import_module(MODULE).__all__
    assert set(imported) <= set(exported), f"not exported by {MODULE}: {sorted(set(imported) - set(exported))}"


@pytest.mark.gpu
def test_example_runs_as_written(runtime_factory, caplog):
    torch = pytest.importorskip("torch")
    from tests.integrations.models import import_torchvision

    try:
        import_torchvision()
    except ImportError as error:
        pytest.skip(str(error))
    from tiledispatch.integrations.torch import TileConv2d, dispatch_report

    runtime_factory()  # the example's configure() installs its own runtime; the fixture puts the previous one back
    namespace: dict = {}
    with caplog.at_level(logging.WARNING, logger="tiledispatch.integrations"):
        exec(compile(readme_example(), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code

    model, loss = namespace["model"], namespace["loss"]
    swapped = [module for module in model.modules() if isinstance(module, TileConv2d)]
    assert len(swapped) == 18  # ConvNeXt-T's depthwise 7x7 convolutions (tests/integrations/models.py)
    assert torch.isfinite(loss)
    for conv in swapped:
        assert conv.weight.grad is not None and torch.isfinite(conv.weight.grad).all()
    unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in caplog.records]
    decided = dispatch_report()
    assert {entry["direction"] for entry in decided} == {"fwd", "bwd_data", "bwd_weight"}
    assert all(entry["source"].startswith("local:lgbm") for entry in decided), {e["source"] for e in decided}
