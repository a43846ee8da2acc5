#!/usr/bin/env python3
"""The http handler's example: an endpoint that ships orders.

    python3 examples/handlers/receiver.py 8080 &
    sqlgroup consume --group shipping --handler http://127.0.0.1:8080/ship

sqlgroup POSTs each item as JSON ({"id", "key", "payload" in base64,
"attempt", "part", "enqueued_at"}) with an Idempotency-Key header (the
item's id). 2xx acknowledges the item; 408, 425, 429 and 5xx retry it after
a backoff; any other 4xx dead-letters it at once. Delivery is at-least-once
(the endpoint's work is outside sqlgroup's transaction): this receiver
remembers the keys it has done and answers a repeat with 200 without
shipping twice (in memory here; a real one keeps them with its work).
"""
import base64
import http.server
import json
import socket
import sys
import threading

DONE = set()
LOCK = threading.Lock()


class Ship(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per worker

    def setup(self):
        super().setup()
        # The status line and headers go out in one write and the body in
        # another; with Nagle's algorithm on, the body waits for the
        # client's delayed ACK (40 ms) on every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass  # one line per order below instead of one per request

    def answer(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        item = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Idempotency-Key", item["id"])
        if not item["key"]:
            return self.answer(422, "an order to ship needs its order id as key")
        # Reserved before the work: a retry that arrives while the first
        # request still runs (it timed out on sqlgroup's side) ships nothing.
        with LOCK:
            if key in DONE:
                return self.answer(200, "already shipped")
            DONE.add(key)
        address = base64.b64decode(item["payload"]).decode("utf-8", "replace")
        print("shipping %s to %s" % (item["key"], address), flush=True)
        self.answer(200, "shipped")


port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
http.server.ThreadingHTTPServer(("0.0.0.0", port), Ship).serve_forever()
