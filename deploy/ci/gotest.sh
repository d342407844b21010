#!/usr/bin/env bash
# Runs `go test -v` in every module given, keeps each module's full output under .test-logs/,
# shows the package verdicts (and the whole output of a failing module), and ends with one
# line counting every test and subtest: "N passed, N failed, N skipped".
# Usage: deploy/ci/gotest.sh "<go test flags>" MODULE...
set -uo pipefail
flags=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
logs=$root/.test-logs
rm -rf "$logs" && mkdir -p "$logs"
status=0
for m in "$@"; do
  echo "== go test $m"
  log=$logs/$(echo "$m" | tr / _).log
  # The benchmark package has no tests; `go vet` (make lint) keeps it compiling.
  # A module outside go.work (deploy/images: its dependencies must not move the controllers'
  # build list) is tested alone.
  if grep -qE "^\s*\./$m/?\s*$" "$root/go.work"; then gowork=; else gowork=off; fi
  pkgs=$(cd "$root/$m" && GOWORK=$gowork go list ./... | grep -v '/bench$')
  # shellcheck disable=SC2086 # flags are words
  (cd "$root/$m" && GOWORK=$gowork go test $flags -v $pkgs) >"$log" 2>&1
  rc=$?
  grep -E '^(ok|FAIL|---) ' "$log" | grep -v '^--- PASS' || true
  if [ $rc -ne 0 ]; then
    status=1
    echo "-- $m failed; its full output (also in $log):"
    cat "$log"
  fi
done
# Why each failing test failed, last, where a CI summary that keeps a log's head and tail shows
# it: the lines its test files printed (t.Errorf and t.Logf alike; the last 40 of each test),
# not the controllers' logs a failing test dumps after them.
if [ $status -ne 0 ]; then
  echo "== why: the lines of the failing tests' own files"
  awk '
    /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3 }
    /^[ \t]*--- FAIL: / { order[++n] = $3 }
    /^    [A-Za-z0-9_]+_test\.go:[0-9]+: / && cur != "" { k = ++count[cur]; line[cur, k] = $0 }
    END {
      for (i = 1; i <= n; i++) {
        t = order[i]
        if (!count[t]) continue
        from = count[t] > 40 ? count[t] - 39 : 1
        printf "-- %s%s\n", t, (from > 1 ? " (last 40 lines)" : "")
        for (k = from; k <= count[t]; k++) print line[t, k]
      }
    }
  ' "$logs"/*.log
fi
awk '/^[ \t]*--- PASS: /{p++} /^[ \t]*--- FAIL: /{f++} /^[ \t]*--- SKIP: /{s++}
     END {printf "%d passed, %d failed, %d skipped\n", p, f, s}' "$logs"/*.log
exit $status
