#!/usr/bin/env bash
# make node-up: adds a real node to a running `make up` (root only): containerd, kubelet and
# kube-proxy v1.36.3, Pods on a bridge with the node's own Pod range, the images of
# `make images` imported. Labelled type=real; `make down` (or `make node-down`) removes it and
# everything it put on the machine. See deploy/local/README.md.
# Usage: deploy/local/node-up.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/node.sh"

lock
ok=""
on_exit() {
  if [ -z "$ok" ]; then
    nsay "node-up failed: tearing down what was started; logs in $LOGS/node-*.log"
    node_down || true
  fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM
node_up
ok=1
