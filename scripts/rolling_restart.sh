#!/bin/bash
# A rolling restart of 4 members of a 32-part group (issue 20): each member
# in turn gets SIGTERM and starts again under the same --instance. Prints,
# per restart, how long the new process took to own 8 parts again and how
# many parts other members took meanwhile (static members: none).
#
#   scripts/rolling_restart.sh BIN DSN [lexical|sticky] [STATIC_TIMEOUT]
#   scripts/rolling_restart.sh build/sqlgroup "$DSN" lexical 30s   # static
#   scripts/rolling_restart.sh build/sqlgroup "$DSN" lexical 0s    # dynamic
set -u
BIN=$1 DSN=$2 ASSIGNOR=${3:-lexical} STATIC=${4:-30s}
G=rolling_${ASSIGNOR}_$RANDOM
LOGS=$(mktemp -d /tmp/sqlgroup-rolling-XXXXXX)
"$BIN" group create "$G" --parts 32 --assignor "$ASSIGNOR" --dsn "$DSN" >/dev/null
declare -A PID
start() {
  "$BIN" consume --group "$G" --instance "$1" --static_timeout "$STATIC" \
    --handler noop --workers 1 --metrics_addr= --dsn "$DSN" \
    >"$LOGS/$1.log" 2>&1 &
  PID[$1]=$!
}
q() { psql "$DSN" -Atc "$1"; }
for m in m0 m1 m2 m3; do start $m; done
sleep 4
for m in m0 m1 m2 m3; do
  base=$(q "SELECT count(*) FROM sqlgroup.ownership_log WHERE group_name = '$G'")
  kill -TERM "${PID[$m]}"; wait "${PID[$m]}" 2>/dev/null
  t0=$(date +%s%N); start $m
  until [ "$(q "SELECT count(*) FROM sqlgroup.session_parts p
      JOIN sqlgroup.sessions s ON s.id = p.session_id
      WHERE p.group_name = '$G' AND s.instance = '$m'
      AND s.pid = ${PID[$m]}")" = 8 ]; do sleep 0.02; done
  t1=$(date +%s%N); sleep 1
  recent="SELECT * FROM sqlgroup.ownership_log WHERE group_name = '$G'
      ORDER BY acquired_at OFFSET $base"
  takes=$(q "SELECT count(*) FROM ($recent) l")
  others=$(q "SELECT count(*) FROM ($recent) l
      JOIN sqlgroup.sessions s ON s.id = l.session_id WHERE s.instance <> '$m'")
  echo "restart $m: 8 parts again $(( (t1 - t0) / 1000000 )) ms after its start;" \
       "takes $takes, by other members $others"
done
for m in m0 m1 m2 m3; do kill -TERM "${PID[$m]}"; done
wait
"$BIN" group delete "$G" --dsn "$DSN" >/dev/null
rm -rf "$LOGS"
