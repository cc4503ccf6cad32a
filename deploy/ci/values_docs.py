"""Every value of the Helm chart documented: checks, and writes the chart README's table.

    python values_docs.py            # check (scripts/check_deploy.sh)
    python values_docs.py --write    # regenerate the table in deploy/helm/tiledispatch/README.md

A key of values.yaml is documented by the ``# --`` comment right above it (continued by further
``#`` lines); the keys under a documented key are covered by their parent's text. Every other key
fails the check, and the README's table must match the comments. Stdlib only (no YAML parser: the
file is read line by line, which is all its plain layout needs).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CHART = Path(__file__).resolve().parents[1] / "helm" / "tiledispatch"
BEGIN, END = "<!-- values:begin -->", "<!-- values:end -->"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<value>.*)$")


def documented(values_text: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    """([(dotted key, default, description)], [undocumented dotted keys])."""
    rows, missing = [], []
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented)
    comment: list[str] = []
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if text.startswith("--"):
                comment = [text[2:].strip()]
            elif comment:
                comment.append(text)
            continue
        match = KEY.match(line)
        if not match or stripped.startswith("-"):
            comment = [] if not stripped else comment
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        covered = any(doc for _, _, doc in stack)
        path = ".".join([k for _, k, _ in stack] + [match["key"]])
        if comment:
            rows.append((path, match["value"].split(" #")[0].strip() or "(see values.yaml)", " ".join(comment)))
        elif not covered and match["value"].strip():
            missing.append(path)
        stack.append((indent, match["key"], bool(comment)))
        comment = []
    return rows, missing


def table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| value | default | what |", "|---|---|---|"]
    escape = str.maketrans({"|": "\\|"})
    lines += [f"| `{key}` | `{default}` | {text.translate(escape)} |" for key, default, text in rows]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    rows, missing = documented((CHART / "values.yaml").read_text())
    readme_path = CHART / "README.md"
    readme = readme_path.read_text()
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    expected = f"{head}{BEGIN}\n{table(rows)}\n{END}{tail}"
    if "--write" in argv:
        readme_path.write_text(expected)
        return 0
    problems = [f"values.yaml: {key} has no '# --' comment (nor a documented parent)" for key in missing]
    if BEGIN not in readme or END not in readme:
        problems.append(f"README.md: no {BEGIN} ... {END} section")
    elif readme != expected:
        problems.append("README.md: the values table is not values.yaml's comments: run "
                        "python deploy/ci/values_docs.py --write")
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"values_docs: {len(rows)} values documented, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
