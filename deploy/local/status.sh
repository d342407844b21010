#!/usr/bin/env bash
# Lists the components up.sh started, whether each still runs, and where its log is.
# Exits 1 when a recorded component has exited, else 0.
# Usage: deploy/local/status.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

mapfile -t names < <(recorded)
if [ ${#names[@]} -eq 0 ]; then
  say "not running"
  exit 0
fi
code=0
printf '%-28s %-8s %-8s %s\n' COMPONENT PID STATE LOG
for name in "${names[@]}"; do
  state=running
  if ! alive "$name"; then state=exited code=1; fi
  printf '%-28s %-8s %-8s %s\n' "$name" "$(pid_of "$name")" "$state" "${LOGS#"$ROOT"/}/$name.log"
done
echo
summary
exit "$code"
