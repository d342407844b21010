#!/usr/bin/env bash
# Removes the real node of node-up.sh if there is one (its Pods drained first), then stops
# exactly the processes up.sh started (pid files in .local/run/): kcm-split controllers, kwok, the scheduler and KCM first, then kube-apiserver, then etcd. Each gets SIGTERM and, after
# STOP_TIMEOUT seconds (default 30), SIGKILL. Logs stay in .local/logs/, etcd data in .local/data/
# until the next `make up` starts afresh.
# Usage: deploy/local/down.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/node.sh"

lock
# The real node first (make node-up): its Pods are drained while the apiserver still runs.
if node_recorded; then node_down; fi
stopped=1
stop_all || stopped=0
# The guard goes last: until every process is stopped, it fences their traffic.
if netguard_active; then
  netguard_verdict "make down" || true
  # Another clone's cluster (or a kubeadm cluster) keeps the guard it uses.
  netguard_release_down "$RUN" || true
fi
if [ "$stopped" = 0 ]; then
  say "not running"
  exit 0
fi
say "logs: $LOGS"
