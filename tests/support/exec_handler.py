#!/usr/bin/env python3
"""A handler process for `sqlgroup consume --handler exec:...` tests, speaking
docs/HANDLERS.md's line protocol. What it does with an item depends on the
item's payload (after a leading "N " sequence number, if any):

  ok        replies ok
  retry     replies "retry ..." on attempts 1 and 2, then ok
  dead      replies "dead ..."
  crash     exits (status 3) without replying on attempt 1, then ok
  hang      never replies on attempt 1 (the member's timeout kills it), then ok
  garbage   replies a line out of protocol on attempt 1, then ok

Every item it replies ok to is appended to the log file argv[1] as
"<id> <key> <attempt> <pid> <number>" and flushed before the reply.
"""
import base64
import json
import os
import sys
import time

log = open(sys.argv[1], "a")
for line in sys.stdin:
    item = json.loads(line)
    payload = base64.b64decode(item["payload"]).decode()
    word = payload.split(" ", 1)[-1] if payload[:1].isdigit() else payload
    attempt = item["attempt"]
    if word == "retry" and attempt <= 2:
        print("retry not yet, attempt %d" % attempt, flush=True)
        continue
    if word == "dead":
        print("dead this item can never succeed", flush=True)
        continue
    if word == "crash" and attempt == 1:
        sys.exit(3)
    if word == "hang" and attempt == 1:
        time.sleep(3600)
    if word == "garbage" and attempt == 1:
        print("what?", flush=True)
        continue
    number = payload.split(" ", 1)[0] if payload[:1].isdigit() else "0"
    log.write("%s %s %d %d %s\n" % (item["id"], item["key"], attempt,
                                     os.getpid(), number))
    log.flush()
    print("ok", flush=True)
