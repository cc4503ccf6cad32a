"""Check the Grafana dashboard (run by scripts/check_deploy.sh; stdlib only, plus promtool).

    python check_dashboard.py [deploy/grafana/dashboards/tiledispatch.json]

Loads the JSON and checks what Grafana needs to provision it (uid, title, schema version, unique
panel ids, grid positions inside 24 columns, a target with a refId and an expression on every
panel, every query on the ``$datasource`` variable), that it covers what the operations view needs
(RPC rate, latency and errors by method; selections by source and model; predicted-vs-measured
error; kernel time; worker restarts), and that every PromQL expression parses: Grafana's variables
are replaced by sample values and the expressions are checked as recording rules by ``promtool``.

:func:`referenced_metrics` lists the service's metric names used by the dashboard, the alert
rules and the chart's HPA; tests/deploy checks them against a real server's /metrics.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[1]
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "tiledispatch.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
VALUES = DEPLOY / "helm" / "tiledispatch" / "values.yaml"
METRIC = re.compile(r"\btiledispatch_[a-z0-9_]+\b")
#: What the dashboard must show: (what, a regular expression one of its queries must match).
REQUIRED = [
    ("RPC rate by method", r"sum by \(method\) \(rate\(tiledispatch_rpc_requests_total"),
    ("RPC errors by method", r"by \(method, code\).*tiledispatch_rpc_requests_total\{[^}]*code!=\"OK\""),
    ("RPC latency by method", r"histogram_quantile\(0\.99, sum by \(method, le\).*rpc_latency_seconds_bucket"),
    ("selections by source", r"sum by \(source\) .*tiledispatch_selections_total"),
    ("selections by model version", r"sum by \(model\) .*tiledispatch_selections_total"),
    ("predicted-vs-measured error", r"tiledispatch_prediction_relative_error_bucket"),
    ("kernel time", r"tiledispatch_kernel_run_seconds_bucket"),
    ("worker restarts", r"increase\(tiledispatch_worker_restarts_total"),
]
#: Sample values of Grafana's variables, so that expressions can be parsed.
VARIABLES = {"$__rate_interval": "1m", "$__interval": "30s", "$__range": "1h", "$instance": ".*"}


def panels(dashboard: dict) -> list[dict]:
    """Every panel, rows' collapsed children included."""
    out = []
    for panel in dashboard.get("panels", []):
        out.append(panel)
        out += panel.get("panels", [])
    return out


def expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query."""
    return [(p.get("title", ""), t.get("expr", "")) for p in panels(dashboard) for t in p.get("targets", [])]


def structure_problems(dashboard: dict) -> list[str]:
    problems = [f"missing {key}" for key in ("uid", "title", "schemaVersion", "panels") if not dashboard.get(key)]
    names = [v.get("name") for v in dashboard.get("templating", {}).get("list", [])]
    if "datasource" not in names:
        problems.append("no $datasource variable")
    seen: set[int] = set()
    for panel in panels(dashboard):
        title = panel.get("title", "?")
        if panel.get("id") in seen:
            problems.append(f"{title}: duplicate panel id {panel.get('id')}")
        seen.add(panel.get("id"))
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in "hwxy") or grid["x"] + grid["w"] > 24:
            problems.append(f"{title}: bad gridPos {grid}")
        if panel.get("type") == "row":
            continue
        if not panel.get("description"):
            problems.append(f"{title}: no description")
        targets = panel.get("targets", [])
        if not targets:
            problems.append(f"{title}: no query")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or not all(refs):
            problems.append(f"{title}: refIds must be set and unique, got {refs}")
        for item in (panel, *targets):
            if item.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{title}: datasource must be ${{datasource}}, got {item.get('datasource')}")
        problems += [f"{title}: query {t.get('refId')} has no expression" for t in targets if not t.get("expr")]
    joined = "\n".join(expr for _, expr in expressions(dashboard))
    problems += [f"nothing shows {what}" for what, pattern in REQUIRED if not re.search(pattern, joined)]
    return problems


def promql_problems(dashboard: dict, promtool: str = "promtool") -> list[str]:
    """Parse every expression with promtool (as recording rules)."""
    rules = []
    for index, (title, expr) in enumerate(expressions(dashboard)):
        for name, value in VARIABLES.items():
            expr = expr.replace(name, value)
        if "$" in expr:
            return [f"{title}: unknown variable in {expr}"]
        rules.append({"record": f"dashboard:query_{index}", "expr": expr})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, handle)  # JSON is YAML
    done = subprocess.run([promtool, "check", "rules", handle.name], capture_output=True, text=True)
    Path(handle.name).unlink()
    return [] if done.returncode == 0 else [f"promtool: {done.stdout}{done.stderr}"]


def referenced_metrics() -> set[str]:
    """Metric names of the service (``tiledispatch_*``) that the dashboard, alerts and HPA use."""
    dashboard = json.loads(DASHBOARD.read_text())
    names = {m for _, expr in expressions(dashboard) for m in METRIC.findall(expr)}
    names |= set(METRIC.findall(ALERTS.read_text()))
    names |= set(re.findall(r"^\s+name: (tiledispatch_[a-z0-9_]+)", VALUES.read_text(), re.MULTILINE))
    return names


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DASHBOARD
    dashboard = json.loads(path.read_text())
    problems = structure_problems(dashboard) + promql_problems(dashboard)
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    print(f"check_dashboard: {len(panels(dashboard))} panels, {len(expressions(dashboard))} queries, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
