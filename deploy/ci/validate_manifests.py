"""Validate rendered Kubernetes manifests offline (run by scripts/check_deploy.sh in its tools venv).

    python validate_manifests.py --kube-version 1.30.0 --kube-version 1.35.0 rendered.yaml ...

Core kinds are checked with kubernetes-validate (Kubernetes' own OpenAPI schemas, bundled in the
package, strict: unknown fields fail) for each version given. The Prometheus Operator's kinds
(ServiceMonitor, PrometheusRule) are checked against the typed models generated from its CRDs
(cloudcoil-models-prometheus-operator), made strict here by rejecting any field the model dropped.
Any other kind fails: nothing is waved through unchecked.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import kubernetes_validate
import yaml

MONITORING = "monitoring.coreos.com/v1"


def _monitoring_model(kind: str) -> Any:
    from cloudcoil.models.prometheus_operator import v1

    return {"ServiceMonitor": v1.ServiceMonitor, "PrometheusRule": v1.PrometheusRule}.get(kind)


def _dropped(given: Any, kept: Any, path: str = "") -> list[str]:
    """Paths present in ``given`` but missing from ``kept`` (fields a model does not know)."""
    if isinstance(given, dict) and isinstance(kept, dict):
        out = []
        for key, value in given.items():
            where = f"{path}.{key}" if path else key
            out += [where] if key not in kept else _dropped(value, kept[key], where)
        return out
    if isinstance(given, list) and isinstance(kept, list) and len(given) == len(kept):
        return [p for i, (g, k) in enumerate(zip(given, kept)) for p in _dropped(g, k, f"{path}[{i}]")]
    return []


def check(doc: dict, versions: list[str]) -> list[str]:
    """Problems of one manifest (empty when valid)."""
    name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
    if doc.get("apiVersion") == MONITORING:
        model = _monitoring_model(doc.get("kind", ""))
        if model is None:
            return [f"{name}: no schema for {MONITORING} kind {doc.get('kind')}"]
        try:
            kept = model.model_validate(doc).model_dump(by_alias=True, exclude_unset=True, mode="json")
        except Exception as error:  # pydantic's ValidationError: report every field
            return [f"{name}: {error}"]
        return [f"{name}: unknown field {path}" for path in _dropped(doc, kept)]
    problems = []
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{name}: no Kubernetes {version} schema for {doc.get('apiVersion')} {doc.get('kind')}")
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(p) for p in error.path)
            problems.append(f"{name} (Kubernetes {version}): {where}: {error.message}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kube-version", action="append", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    problems, count = [], 0
    for path in args.files:
        with open(path) as handle:
            for doc in yaml.safe_load_all(handle):
                if not doc:
                    continue
                count += 1
                problems += [f"{path}: {p}" for p in check(doc, args.kube_version)]
    for problem in problems:
        print(problem, file=sys.stderr)
    if count == 0:
        print("validate_manifests: no manifests found", file=sys.stderr)
        return 1
    print(f"validate_manifests: {count} manifests, {len(problems)} problems "
          f"(Kubernetes {', '.join(args.kube_version)})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
