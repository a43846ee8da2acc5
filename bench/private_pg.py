"""A private, durable PostgreSQL for a benchmark script: `sqlgroup postgres
--durable` started, migrated, and stopped when the block ends.

    with private_postgres(cli) as dsn:
        ...
"""
import contextlib
import signal
import subprocess


@contextlib.contextmanager
def private_postgres(cli):
    pg = subprocess.Popen([cli, "postgres", "--durable"],
                          stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          text=True)
    try:
        dsn = pg.stdout.readline()[len("dsn: "):].strip()
        if not dsn:
            raise RuntimeError("sqlgroup postgres did not print a DSN")
        subprocess.run([cli, "migrate", "--dsn", dsn], check=True,
                       capture_output=True)
        yield dsn
    finally:
        pg.send_signal(signal.SIGTERM)
        pg.wait(timeout=60)
