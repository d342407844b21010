#!/usr/bin/env bash
# Stops exactly the processes up.sh started (pid files in .local/run/): kcm-split controllers,
# kwok, the scheduler and KCM first, then kube-apiserver, then etcd. Each gets SIGTERM and, after
# STOP_TIMEOUT seconds (default 30), SIGKILL. Logs stay in .local/logs/, etcd data in .local/data/
# until the next `make up` starts afresh.
# Usage: deploy/local/down.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

lock
if ! stop_all; then
  say "not running"
  exit 0
fi
say "logs: $LOGS"
