#!/usr/bin/env bash
# `make helm-lint`: helm lint (strict), helm template with each controller alone and with all
# of them (the defaults that survive a node loss, one replica without a PodDisruptionBudget, the
# ServiceMonitor and control-plane placement paths), and the values schema rejecting bad values. deploy/tests/chart's Go tests check the rendered objects in depth.
# Usage: deploy/tests/chart/helm-lint.sh [BIN_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
helm=${1:-$root/bin}/helm
chart=$root/charts/kcm-split
[ -x "$helm" ] || { echo "helm-lint: $helm not found; run \`make tools\`" >&2; exit 1; }

# Controller aliases: the keys under `controllers:` in values.yaml.
mapfile -t aliases < <(awk '/^controllers:/{f=1; next} /^[^ #]/{f=0} f && /^  [a-z0-9]+:/{sub(":", "", $1); print $1}' "$chart/values.yaml")
[ ${#aliases[@]} -gt 0 ] || { echo "helm-lint: no controllers in values.yaml" >&2; exit 1; }

only() { # alias -> --set flags enabling it alone
  for a in "${aliases[@]}"; do printf -- '--set\ncontrollers.%s.enabled=%s\n' "$a" "$([ "$a" = "$1" ] && echo true || echo false)"; done
}
all() { for a in "${aliases[@]}"; do printf -- '--set\ncontrollers.%s.enabled=true\n' "$a"; done; }
count() { grep -c "^kind: $1\$" || true; }
lines() { grep -cF -- "$1" || true; } # how many lines hold the fixed string $1

echo "helm-lint: helm lint --strict"
"$helm" lint --strict "$chart" >/dev/null
mapfile -t a < <(all)
"$helm" lint --strict "$chart" "${a[@]}" >/dev/null

for alias in "${aliases[@]}"; do
  mapfile -t a < <(only "$alias")
  out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}")
  [ "$(count Deployment <<<"$out")" = 1 ] || { echo "helm-lint: $alias alone does not render exactly one Deployment" >&2; exit 1; }
  # The defaults survive a node loss: 2 replicas spread over nodes, a PodDisruptionBudget,
  # kube-controller-manager's priority class.
  [ "$(lines "replicas: 2" <<<"$out")" = 1 ] && [ "$(count PodDisruptionBudget <<<"$out")" = 1 ] &&
    [ "$(lines "topologyKey: kubernetes.io/hostname" <<<"$out")" = 1 ] &&
    [ "$(lines "whenUnsatisfiable: ScheduleAnyway" <<<"$out")" = 1 ] &&
    [ "$(lines "priorityClassName: system-cluster-critical" <<<"$out")" = 1 ] ||
    { echo "helm-lint: $alias alone: not 2 replicas spread over nodes with a PodDisruptionBudget and system-cluster-critical" >&2; exit 1; }
  out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}" --set "controllers.$alias.replicas=1" \
        --set serviceMonitor.enabled=true --api-versions monitoring.coreos.com/v1/ServiceMonitor)
  [ "$(count PodDisruptionBudget <<<"$out")" = 0 ] && [ "$(count ServiceMonitor <<<"$out")" = 1 ] ||
    { echo "helm-lint: $alias with 1 replica and a ServiceMonitor: wrong objects (a PodDisruptionBudget?)" >&2; exit 1; }
  echo "helm-lint: template $alias alone: ok"
done
mapfile -t a < <(all)
out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}")
[ "$(count Deployment <<<"$out")" = ${#aliases[@]} ] || { echo "helm-lint: all enabled: wrong number of Deployments" >&2; exit 1; }
echo "helm-lint: template all ${#aliases[@]} controllers: ok"
# The renders here are what an install creates (--skip-tests); `helm test` adds a Pod per
# controller (helmtest_test.go checks them in depth).
tests=$("$helm" template kcm-split "$chart" -n kcm-system "${a[@]}" --show-only templates/tests/check.yaml)
[ "$(count Pod <<<"$tests")" = ${#aliases[@]} ] && [ "$(lines "- check" <<<"$tests")" = ${#aliases[@]} ] ||
  { echo "helm-lint: helm test: not one check Pod per controller" >&2; exit 1; }
echo "helm-lint: helm test, a check Pod per controller: ok"
# Control-plane placement is off by default and, turned on, selects and tolerates the role.
[ "$(lines "node-role.kubernetes.io/control-plane" <<<"$out")" = 0 ] ||
  { echo "helm-lint: control-plane placement rendered by default" >&2; exit 1; }
out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}" --set defaults.controlPlane=true)
[ "$(lines 'node-role.kubernetes.io/control-plane: ""' <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "key: node-role.kubernetes.io/control-plane" <<<"$out")" = ${#aliases[@]} ] ||
  { echo "helm-lint: defaults.controlPlane=true: not every Deployment has the control-plane selector and toleration" >&2; exit 1; }
echo "helm-lint: control-plane placement: ok"
# A serving Secret is passed to every controller and mounted whole: the kubelet never updates a
# subPath mount, and the binaries reload the certificate when the files change.
out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}" --set serving.tlsSecretName=serving-cert)
[ "$(lines "secretName: serving-cert" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "--tls-cert-file=/etc/kcm-split/tls/tls.crt" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "--tls-private-key-file=/etc/kcm-split/tls/tls.key" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "subPath" <<<"$out")" = 0 ] ||
  { echo "helm-lint: serving.tlsSecretName: not every Deployment mounts the Secret whole and passes its files" >&2; exit 1; }
echo "helm-lint: serving Secret: ok"
# Leader Migration: off by default; on, every binary reads one configuration that names
# kube-controller-manager's controllers with the chosen owner, and may hold the migration Lease
# in kube-controller-manager's namespace.
[ "$(lines "leader-migration" <<<"$out")" = 0 ] || { echo "helm-lint: leader migration rendered by default" >&2; exit 1; }
out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}" --set leaderMigration.enabled=true --set leaderMigration.owner=kcm-split)
[ "$(lines "- --enable-leader-migration" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "mountPath: /etc/kcm-split/leader-migration" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "kind: LeaderMigrationConfiguration" <<<"$out")" = 1 ] && [ "$(lines "component: kcm-split" <<<"$out")" = 10 ] &&
  [ "$(lines "resourceNames: [\"kcm-split-migration\"]" <<<"$out")" = ${#aliases[@]} ] ||
  { echo "helm-lint: leaderMigration.enabled: not every binary gets the flags, the configuration (10 controllers owned by kcm-split) and the Lease's Role" >&2; exit 1; }
echo "helm-lint: leader migration: ok"
# Take-over from kube-controller-manager: off by default; on, every binary gets the flags and may
# read kube-controller-manager's Pods and its one Lease; never together with Leader Migration.
[ "$(lines "- --take-over-from-kcm" <<<"$out")" = 0 ] || { echo "helm-lint: take-over rendered with leader migration" >&2; exit 1; }
out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}" --set takeOverFromKCM.enabled=true)
[ "$(lines "- --take-over-from-kcm" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "- \"--kcm-pod-selector=component=kube-controller-manager\"" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(lines "resourceNames: [\"kube-controller-manager\"]" <<<"$out")" = ${#aliases[@]} ] ||
  { echo "helm-lint: takeOverFromKCM.enabled: not every binary gets the flags and the Role on kube-controller-manager's Pods and Lease" >&2; exit 1; }
if "$helm" template kcm-split "$chart" --set takeOverFromKCM.enabled=true --set leaderMigration.enabled=true >/dev/null 2>&1; then
  echo "helm-lint: takeOverFromKCM with leaderMigration rendered" >&2; exit 1
fi
echo "helm-lint: take-over: ok"

# Pod options: host network brings ClusterFirstWithHostNet; a bring-your-own ServiceAccount is
# not created and every binding names it; every budget lets not-Ready Pods be evicted.
mapfile -t a < <(all)
out=$("$helm" template kcm-split "$chart" -n kcm-system --skip-tests "${a[@]}" --set defaults.hostNetwork=true --set serviceAccount.create=false)
[ "$(lines "hostNetwork: true" <<<"$out")" = ${#aliases[@]} ] && [ "$(lines "dnsPolicy: ClusterFirstWithHostNet" <<<"$out")" = ${#aliases[@]} ] &&
  [ "$(count ServiceAccount <<<"$out")" = 0 ] && [ "$(lines "unhealthyPodEvictionPolicy: AlwaysAllow" <<<"$out")" = ${#aliases[@]} ] ||
  { echo "helm-lint: hostNetwork / serviceAccount.create=false / unhealthyPodEvictionPolicy: wrong render" >&2; exit 1; }
echo "helm-lint: pod options: ok"

# The schema: typos and wrong types fail, naming the key.
bad() { # --set value, expected message part
  if msg=$("$helm" template kcm-split "$chart" --set "$1" 2>&1 >/dev/null); then
    echo "helm-lint: --set $1 was accepted; the schema must reject it" >&2; exit 1
  fi
  grep -qF -- "$2" <<<"$msg" || { echo "helm-lint: --set $1 failed without naming $2: $msg" >&2; exit 1; }
}
bad "controllers.${aliases[0]}.replica=2" "'replica' not allowed"
bad "controllers.${aliases[0]}.flags.no-such-flag=1" "'no-such-flag' not allowed"
bad "controllers.no-such-controller.enabled=true" "'no-such-controller' not allowed"
bad "defaults.leaderElection.leaseDuration=15" "/defaults/leaderElection/leaseDuration"
bad "defaults.logFormat=xml" "/defaults/logFormat"
bad "defaults.topologySpread=always" "/defaults/topologySpread"
bad "defaults.controlPlane=yes" "/defaults/controlPlane"
bad "defaults.noExecuteTolerationSeconds=-1" "/defaults/noExecuteTolerationSeconds"
bad "defaults.priorityClassName=Not_A_Class" "/defaults/priorityClassName"
bad "leaderMigration.owner=kcm" "/leaderMigration/owner"
bad "controllers.${aliases[0]}.dnsPolicy=ClusterFirstWithHostnet" "/controllers/${aliases[0]}/dnsPolicy"
bad "controllers.${aliases[0]}.image.digest=latest" "/controllers/${aliases[0]}/image/digest"
bad "defaults.hostNetwork=yes" "/defaults/hostNetwork"
bad "podDisruptionBudget.unhealthyPodEvictionPolicy=Never" "/podDisruptionBudget/unhealthyPodEvictionPolicy"
bad "serviceAccount.create=no" "/serviceAccount/create"
bad "networkPolicy.apiServer.cidrs[0]=apiserver" "/networkPolicy/apiServer/cidrs/0"
bad "helmTest.enabled=yes" "/helmTest/enabled"
echo "helm-lint: schema rejects typos and wrong types: ok"
