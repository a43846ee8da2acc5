"""Steady background load for the latency benchmarks (ours and the peers'):
one SQL session that enqueues `rate` items per second in batches of
`batch`, each batch its own transaction, due at start + sent / rate
(catching up when behind, never bursting ahead), as `sqlgroup produce
--rate` paces its batches. pgbench -R would schedule transactions as a
Poisson process instead. Prints `load_rate=N` (reached) as a NOTICE.

    p = start_load(dsn, seconds, batch_sql, batch, rate)   # a psql Popen
    ...
    rate_reached(p)
"""
import re
import subprocess

# COMMIT inside DO makes each batch its own transaction (and NOTIFY).
# batch_sql enqueues `n` items, n being generate_series(1, batch).
LOAD = """DO $$
DECLARE t0 timestamptz := clock_timestamp(); n bigint := 0;
BEGIN
  WHILE clock_timestamp() < t0 + interval '%g s' LOOP
    %s;
    COMMIT;
    n := n + %d;
    PERFORM pg_sleep(extract(epoch FROM t0 + n::float8 / %g * interval '1 s'
                                         - clock_timestamp()));
  END LOOP;
  RAISE NOTICE 'load_rate=%%', round(n / extract(epoch FROM clock_timestamp() - t0));
END $$"""


def start_load(dsn, seconds, batch_sql, batch, rate):
    return subprocess.Popen(
        ["psql", dsn, "-qAtc", LOAD % (seconds, batch_sql, batch, rate)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def rate_reached(load):
    """The rate the load session reached, once it ended (None: unknown)."""
    found = re.search(r"load_rate=(\d+)", load.communicate(timeout=120)[1])
    return int(found.group(1)) if found else None
