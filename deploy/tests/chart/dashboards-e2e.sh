#!/usr/bin/env bash
# The dashboards against live data: `make up ENDPOINTS_SHARDS=2` (endpoints-controller as 2
# leading shards, the sources of the sharding panels), TestDashboardsLive (a real Prometheus scrapes
# every binary through the chart's authorization, a workload exercises each controller, every
# panel's every query must return data), then `make down`, whatever the test did. Holds the
# machine-wide lock of the real node and `make up` for the whole run. Part of `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=deploy/local/lib.sh
source "$root/deploy/local/lib.sh"
lock=/tmp/kcm-split-node.lock
start=$SECONDS
exec 9>"$lock"
flock -w 3600 9 || { echo "dashboards-e2e: $lock held for an hour" >&2; exit 1; }
echo "dashboards-e2e: lock taken after $((SECONDS - start))s"
# A control plane already up (a developer's) is used and left running; one started here is
# stopped again. The test refuses one whose endpoints-controller is not 2 shards.
started=1
if compgen -G "$root/.local/run/*.pid" >/dev/null; then started=0; fi
rc=0
make -s -C "$root" up ENDPOINTS_SHARDS=2 || rc=$?
if [ "$rc" = 0 ]; then
  (cd "$root/deploy/tests/chart" && KCM_SPLIT_DASHBOARDS_E2E=1 go test -short -count=1 -v -timeout 10m \
    -run '^TestDashboardsLive$' .) || rc=$?
fi
netguard_verdict dashboards-e2e || rc=1
if [ "$started" = 1 ]; then make -s -C "$root" down || true; fi
echo "dashboards-e2e: exit $rc after $((SECONDS - start))s"
exit "$rc"
