#!/usr/bin/env python3
"""A slow handler process for `sqlgroup consume --handler exec:...` tests
of handovers: the payload says how long each attempt takes, in seconds,
as a list ("6": 6 s every attempt; "30 0": 30 s on the first attempt,
none after), or "kill": the item kills its member (SIGKILL to sqlgroup,
this process's parent) on every attempt, a poison item. Every start and end of an item is appended to the log file
argv[1], flushed at once, as

  start <id> <pid> <attempt> <unix time>
  alive <id> <pid> <attempt> <unix time>     (every 0.1 s while it works)
  end <id> <pid> <attempt> <unix time>

so a checker can tell whether one item ever ran in two processes at once.
A call cut off (the process killed) has a start and no end: it ended
within 0.1 s of its last "alive".
"""
import base64
import json
import os
import signal
import sys
import time

log = open(sys.argv[1], "a")


def note(event, item):
    log.write("%s %s %d %d %.6f\n" % (event, item["id"], os.getpid(),
                                      item["attempt"], time.time()))
    log.flush()


for line in sys.stdin:
    item = json.loads(line)
    times = base64.b64decode(item["payload"]).decode().split()
    attempt = item["attempt"]
    if times == ["kill"]:
        note("start", item)
        os.kill(os.getppid(), signal.SIGKILL)
        sys.exit(3)  # never replies: its member is gone
        continue
    seconds = float(times[min(attempt, len(times)) - 1]) if times else 0.0
    note("start", item)
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(max(0.0, min(0.1, end - time.time())))
        note("alive", item)
    note("end", item)
    print("ok", flush=True)
