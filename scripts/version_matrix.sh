#!/usr/bin/env bash
# The PostgreSQL version matrix (issue 25): the compact end-to-end check
# (ctest label `matrix`: migrate and schema upgrade from the previous
# schema version, grants, the claim and ack fences refusing a zombie, a
# fleet with keyed items through joins, kill -9, SIGSTOP and graceful
# leaves with every item exactly once and each key in order, the SQL
# handler exactly once through kill -9, a live part-count change) on each
# major given (default 14 16 17 18; 15 runs the full suite), then checks
# that a server older than 14 is refused with nothing created. Prints one
# line per major and a summary; exits non-zero if any failed.
#
# Usage: scripts/version_matrix.sh [--build build] [MAJOR...]
set -uo pipefail
cd "$(dirname "$0")/.."
build=build
if [ "${1:-}" = "--build" ]; then build=$2; shift 2; fi
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(14 16 17 18)

failed=0
summary=""
for major in "${majors[@]}"; do
  start=$(date +%s)
  if ! bin=$(scripts/fetch_postgres.sh "$major"); then
    summary+="PostgreSQL $major: could not be fetched"$'\n'
    failed=1
    continue
  fi
  version=$("$bin/postgres" --version | awk '{print $NF}')
  echo "== PostgreSQL $version ($bin)"
  if SQLGROUP_PG_BIN=$bin ctest --test-dir "$build" -L '^matrix$' -j2 \
       --output-on-failure; then
    result=passed
  else
    result=FAILED
    failed=1
  fi
  summary+="PostgreSQL $version: $result in $(( $(date +%s) - start )) s"$'\n'
done

# A server older than the oldest supported major: refused, nothing made.
start=$(date +%s)
old_result=FAILED
if bin=$(scripts/fetch_postgres.sh 13); then
  log=$(mktemp)
  SQLGROUP_PG_BIN=$bin "$build/sqlgroup" postgres >"$log" 2>&1 &
  pg=$!
  for _ in $(seq 1 100); do grep -q '^dsn:' "$log" && break; sleep 0.1; done
  dsn=$(sed -n 's/^dsn: //p' "$log")
  if [ -n "$dsn" ]; then
    out=$("$build/sqlgroup" migrate --dsn "$dsn" 2>&1); rc=$?
    schema=$(psql "$dsn" -Atc "SELECT count(*) FROM pg_namespace WHERE nspname = 'sqlgroup'")
    echo "== PostgreSQL 13: migrate exit $rc: $out"
    if [ "$rc" = 1 ] && [ "$schema" = 0 ] &&
       grep -q "sqlgroup needs PostgreSQL 14 or newer" <<<"$out"; then
      old_result=passed
    fi
  fi
  kill "$pg" 2>/dev/null
  wait "$pg" 2>/dev/null
  rm -f "$log"
fi
[ "$old_result" = passed ] || failed=1
summary+="PostgreSQL 13 refused by migrate, nothing created: $old_result in $(( $(date +%s) - start )) s"$'\n'

echo
echo "Version matrix:"
printf '%s' "$summary"
exit $failed
