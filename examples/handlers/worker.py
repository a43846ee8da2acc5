#!/usr/bin/env python3
"""The exec handler's example: a Python worker that "sends" a receipt per
item, run by sqlgroup as one long-lived process per worker thread.

    sqlgroup consume --group receipts --handler 'exec:python3 examples/handlers/worker.py /tmp/outbox'

The line protocol (docs/HANDLERS.md): sqlgroup writes one item per line as
JSON ({"id", "key", "payload" in base64, "attempt", "part", "enqueued_at"});
the worker answers each with one line: "ok", "retry REASON" or
"dead REASON". It must flush each answer and exit at end of input.

What the worker does happens outside sqlgroup's transaction, so it is
at-least-once: an item is delivered again if the member dies after the
worker did its work but before the acknowledgement committed. This worker
is idempotent: it writes the receipt under the item's id with an atomic
rename, so a second delivery finds it done and only answers ok.
"""
import base64
import json
import os
import sys

outbox = sys.argv[1] if len(sys.argv) > 1 else "outbox"
os.makedirs(outbox, exist_ok=True)

for line in sys.stdin:
    item = json.loads(line)
    done = os.path.join(outbox, item["id"] + ".txt")
    if os.path.exists(done):  # delivered before: the work is done already
        print("ok", flush=True)
        continue
    try:
        body = base64.b64decode(item["payload"]).decode("utf-8")
    except UnicodeDecodeError:
        print("dead the payload is not UTF-8 text", flush=True)
        continue
    if not item["key"]:
        print("dead a receipt needs a customer key", flush=True)
        continue
    try:
        tmp = done + ".tmp"
        with open(tmp, "w") as f:
            f.write("to %s: %s\n" % (item["key"], body))
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, done)  # atomic: the receipt exists whole or not at all
    except OSError as e:
        print("retry cannot write the receipt: %s" % e, flush=True)
        continue
    print("ok", flush=True)
