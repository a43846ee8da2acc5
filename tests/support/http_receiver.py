#!/usr/bin/env python3
"""An HTTP endpoint for `sqlgroup consume --handler http://...` tests. Prints
"port: N" once listening on 127.0.0.1 (port 0: the OS picks). What it
answers depends on the item's payload (after a leading "N " number):

  ok        200
  retry     503 on attempts 1 and 2, then 200
  later     503 with "Retry-After: 2" on attempt 1, then 200
  laterdate 503 with Retry-After an HTTP-date 3 s ahead (2..3 s away, as
            dates have whole seconds) on attempt 1, then 200
  dead      422
  drop      closes the connection without an answer on attempt 1, then 200
  hang      answers nothing for 30 s on attempt 1, then 200

Every item answered 200 is appended to the log file argv[1] as
"<id> <key> <attempt> <idempotency-key> <number>" and flushed first.

$RECEIVER_AUTHORIZATION, if set: a request whose Authorization header is
not exactly it is answered 401 (an endpoint that needs credentials).

argv[3], if given: for that many seconds after it starts, it is "down":
every request is answered 503 whatever its item, and logged in
argv[1] + ".down" as "<id> <unix time>" (an outage, e.g. during a deploy).
"""
import base64
import email.utils
import http.server
import json
import os
import socket
import sys
import threading
import time

LOG = open(sys.argv[1], "a")
LOCK = threading.Lock()
DOWN_UNTIL = time.time() + float(sys.argv[3]) if len(sys.argv) > 3 else 0
DOWN = open(sys.argv[1] + ".down", "a") if DOWN_UNTIL else None
AUTHORIZATION = os.environ.get("RECEIVER_AUTHORIZATION")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per worker

    def setup(self):
        super().setup()
        # The status line and headers go out in one write and the body in
        # another; with Nagle's algorithm on, the body waits for the
        # client's delayed ACK (40 ms) on every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def reply(self, status, text, headers=()):
        body = text.encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        item = json.loads(body)
        if AUTHORIZATION is not None and \
                self.headers.get("Authorization") != AUTHORIZATION:
            return self.reply(401, "who are you?")
        if time.time() < DOWN_UNTIL:
            with LOCK:
                DOWN.write("%s %.6f\n" % (item["id"], time.time()))
                DOWN.flush()
            return self.reply(503, "deploying, come back later")
        payload = base64.b64decode(item["payload"]).decode()
        word = payload.split(" ", 1)[-1] if payload[:1].isdigit() else payload
        attempt = item["attempt"]
        if word == "retry" and attempt <= 2:
            return self.reply(503, "busy, try later")
        if word == "later" and attempt == 1:
            return self.reply(503, "down for a while",
                              [("Retry-After", "2")])
        if word == "laterdate" and attempt == 1:
            return self.reply(503, "down for a while", [(
                "Retry-After",
                email.utils.formatdate(time.time() + 3, usegmt=True))])
        if word == "dead":
            return self.reply(422, "cannot process this item")
        if word == "drop" and attempt == 1:
            self.close_connection = True
            self.connection.close()
            return
        if word == "hang" and attempt == 1:
            time.sleep(30)
            return
        with LOCK:
            number = payload.split(" ", 1)[0] if payload[:1].isdigit() else "0"
            LOG.write("%s %s %d %s %s\n" % (
                item["id"], item["key"], attempt,
                self.headers.get("Idempotency-Key"), number))
            LOG.flush()
        self.reply(200, "ok")


# argv[2], if given: the port (to come back on the same one after a kill;
# empty or 0: the OS picks one).
port = int(sys.argv[2] or 0) if len(sys.argv) > 2 else 0
http.server.ThreadingHTTPServer.allow_reuse_address = True
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
server.daemon_threads = True
print("port: %d" % server.server_address[1], flush=True)
server.serve_forever()
