#!/usr/bin/env bash
# What systemd's kubelet unit with kubeadm's drop-in (10-kubeadm.conf) does, on a machine
# without systemd: run the kubelet with the files kubeadm writes, wait while they are missing
# (kubeadm writes them in its kubelet-start phase, after the unit is enabled), start it again
# when it exits (Restart=always) and restart it on SIGHUP (`systemctl restart kubelet`, which
# kubeadm's upgrade asks for). SIGTERM stops the kubelet and this.
# Usage: kubelet-service.sh KUBELET LOG
set -uo pipefail
kubelet=$1 log=$2
config=/var/lib/kubelet/config.yaml flags=/var/lib/kubelet/kubeadm-flags.env
child="" stopping=""

stop_child() {
  [ -n "$child" ] || return 0
  kill -TERM "$child" 2>/dev/null
  wait "$child" 2>/dev/null
  child=""
}
trap 'stopping=1; stop_child; exit 0' TERM INT
trap 'echo "kubelet-service: restart (SIGHUP)" >>"$log"; stop_child' HUP

while [ -z "$stopping" ]; do
  if [ ! -f "$config" ] || [ ! -f "$flags" ]; then sleep 0.5; continue; fi
  KUBELET_KUBEADM_ARGS="" KUBELET_EXTRA_ARGS=""
  # shellcheck source=/dev/null
  source "$flags"
  # shellcheck source=/dev/null
  [ -f /etc/default/kubelet ] && source /etc/default/kubelet
  echo "kubelet-service: starting the kubelet $(date -u +%FT%TZ)" >>"$log"
  # The drop-in's order: kubeconfigs, config, kubeadm's flags, the operator's.
  # shellcheck disable=SC2086 # the flag variables hold several words, as in the unit
  "$kubelet" --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
    --kubeconfig=/etc/kubernetes/kubelet.conf --config="$config" \
    $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS >>"$log" 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  child=""
  [ -n "$stopping" ] && break
  echo "kubelet-service: the kubelet exited ($rc); starting it again in 2s" >>"$log"
  sleep 2
done
