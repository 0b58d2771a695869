"""A local webhook receiver for tests/webhooks.rs: verifies every delivery with an independent
implementation (the `standardwebhooks` package for `v1` HMAC signatures, PyNaCl for `v1a`
Ed25519 ones) and records what it got, one JSON line per request, in OUT.

    python3 tests/webhook_receiver.py OUT WHPK_PUBLIC_KEY SECRETS_DIR

Prints `listening on PORT` once bound. What it answers depends on the path:

    /ok, /tenant-a, /hmac   200
    /fail-once              500 to the first request of each webhook-id, then 200
    /gone                   410
    /retry-after            429 with `Retry-After: 3` to the first request of each id, then 200
    /slow                   records the request, waits 3 s, then 200

An `hmac` endpoint's secret is read from SECRETS_DIR/<path without the slash> when it exists.
"""

import base64
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import nacl.exceptions
import nacl.signing
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

OUT, PUBLIC_KEY, SECRETS = sys.argv[1], sys.argv[2], sys.argv[3]
LOCK = threading.Lock()
SEEN = {}


def verify(path, headers, body):
    """(scheme, error): which signature verified, or why none did."""
    sig = headers.get("webhook-signature", "")
    wid = headers.get("webhook-id", "")
    ts = headers.get("webhook-timestamp", "")
    secret_file = os.path.join(SECRETS, path.strip("/"))
    if os.path.exists(secret_file):
        secret = open(secret_file).read().strip()
        try:
            Webhook(secret).verify(body, dict(headers))
            return "v1", None
        except WebhookVerificationError as e:
            return None, "v1: %s" % e
    key = nacl.signing.VerifyKey(base64.b64decode(PUBLIC_KEY[len("whpk_"):]))
    signed = ("%s.%s." % (wid, ts)).encode() + body
    for item in sig.split(" "):
        version, _, value = item.partition(",")
        if version != "v1a":
            continue
        try:
            key.verify(signed, base64.b64decode(value))
            if abs(time.time() - int(ts)) > 300:
                return None, "v1a: timestamp too far from now"
            return "v1a", None
        except (nacl.exceptions.BadSignatureError, ValueError) as e:
            return None, "v1a: %s" % e
    return None, "no v1a signature in %r" % sig


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        wid = headers.get("webhook-id", "")
        scheme, error = verify(self.path, headers, body)
        with LOCK:
            n = SEEN.get((self.path, wid), 0) + 1
            SEEN[(self.path, wid)] = n
        status, extra = 200, {}
        if self.path == "/fail-once" and n == 1:
            status = 500
        elif self.path == "/gone":
            status = 410
        elif self.path == "/retry-after" and n == 1:
            status, extra = 429, {"Retry-After": "3"}
        record = {
            "path": self.path,
            "id": wid,
            "timestamp": headers.get("webhook-timestamp"),
            "received": time.time(),
            "scheme": scheme,
            "error": error,
            "status": status,
            "body": body.decode("utf-8", "replace"),
        }
        with LOCK:
            with open(OUT, "a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
        if self.path == "/slow":
            time.sleep(3)
        self.send_response(status)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening on %d" % server.server_address[1], flush=True)
server.serve_forever()
