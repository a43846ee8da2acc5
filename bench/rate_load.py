"""Steady background load for the latency benchmarks (ours and the peers'):
one SQL session that enqueues `rate` items per second in batches of
`batch`, each batch its own transaction, due at start + sent / rate
(catching up when behind, never bursting ahead), as `sqlgroup produce
--rate` paces its batches. pgbench -R would schedule transactions as a
Poisson process instead. Prints `load_rate=N` (reached) as a NOTICE.

    add_protocol_args(parser)      # --items --gap --rate --load_batch
    p = start_load(dsn, seconds, batch_sql, load_batch(args), args.rate)
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


def add_protocol_args(ap):
    """The latency protocol's knobs, the same for sqlgroup and its peers."""
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--gap", type=float, default=0.03)
    ap.add_argument("--rate", type=int, default=0)
    ap.add_argument("--load_batch", type=int, default=0,
                    help="load items per transaction; 0: rate/20, a batch "
                    "every 50 ms as `sqlgroup produce --rate` sends them")


def load_batch(args):
    return args.load_batch or max(1, round(args.rate / 20))


def start_load(dsn, seconds, batch_sql, batch, rate):
    return subprocess.Popen(
        ["psql", dsn, "-qAtc", LOAD % (seconds, batch_sql, batch, rate)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def rate_reached(load):
    """The rate the load session reached, once it ended (None: unknown)."""
    found = re.search(r"load_rate=(\d+)", load.communicate(timeout=120)[1])
    return int(found.group(1)) if found else None
