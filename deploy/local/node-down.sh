#!/usr/bin/env bash
# make node-down: removes the real node of `make node-up` and everything it put on the machine
# (drains its Pods first, so the kubelet tears their network and volumes down), leaving the
# control plane running. Exits 1 if anything is left behind.
# Usage: deploy/local/node-down.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/node.sh"

lock
if ! node_recorded; then
  nsay "no node"
else
  node_down
fi
node_leftovers
