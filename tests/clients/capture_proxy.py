"""capture_proxy.py — a logging proxy in front of the classroom server: what a real client sends, kept.

    python tests/clients/capture_proxy.py UPSTREAM_URL LOG.jsonl [--port 0]

Each request is written to LOG.jsonl as one line {method, path, headers, body}, with the API key
replaced by "<key>", then forwarded to UPSTREAM_URL; the answer goes back to the client whole (a
stream is read to its end first, which a client reads as a stream all the same). It prints its own
URL on its first line, so a test or a teacher can point ANTHROPIC_BASE_URL at it.

How the findings in /work/notes/clients-findings.md and tests/classroom/clients/ were captured: the
standard library only, so it runs wherever the tests do.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SECRET_HEADERS = ("x-api-key", "authorization")
HOP_BY_HOP = ("connection", "keep-alive", "transfer-encoding", "content-length", "host")


class Capture:
    """Where each request goes: the upstream's address and the log, written one line at a time."""

    def __init__(self, upstream: str, log_path: str):
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname, parts.port or 80
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 (open for the proxy's life)
        self.lock = threading.Lock()

    def write(self, record: dict) -> None:
        with self.lock:
            self.log.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.log.flush()


def handler_for(capture: Capture):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # the log file is the record; the terminal stays quiet
            pass

        def relay(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            shown = {k: ("<key>" if k in SECRET_HEADERS else v) for k, v in headers.items()}
            capture.write({"method": self.command, "path": self.path, "headers": shown, "body": body})
            upstream = http.client.HTTPConnection(capture.host, capture.port, timeout=60)
            forwarded = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
            try:
                upstream.request(self.command, self.path, body=raw or None, headers=forwarded)
                answer = upstream.getresponse()
                data = answer.read()
            except OSError:
                self.close_connection = True  # the upstream dropped it (a recorded failure): so do we
                return
            finally:
                upstream.close()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = relay

    return Handler


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream")
    parser.add_argument("log")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    proxy = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(Capture(args.upstream, args.log)))
    print(f"http://127.0.0.1:{proxy.server_address[1]}", flush=True)
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
