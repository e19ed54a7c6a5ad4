"""A local HTTP server standing in for the catalogue's public sources (tests only).

It serves, under each source URL's path, what that URL serves, rebuilt from a data mirror
folder (KERNATTN_DATA_MIRROR, or ../shared/data beside the repository): the mirror's file
itself, its content, or a bzip2/gzip of the content, whichever has the source's sha256 (a
source without a known sha256 gets the mirror's file, verified by its content). A source none
of them matches (the Silesia bz2, made by an older bzip2) answers 404, as a vanished file would.
Range requests are honoured (resumed downloads). `faults` maps a URL path to one of
  "truncate"   Content-Length of the whole file, half the body, then the connection closes
  "corrupt"    one byte flipped
  "midfile"    the first request sends half the body and closes; every later one gets 503
  "missing"    404
and `requests` counts what was asked for.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from kernattn.datasets import catalogue


def _served(stored: bytes, url: str, sha256: str | None) -> bytes | None:
    """What `url` serves, rebuilt from the mirror's file: the first form with its sha256
    (forms are built lazily: a bzip2 only for a .bz2 URL, the slow one)."""
    if sha256 is None or hashlib.sha256(stored).hexdigest() == sha256:
        return stored
    content = gzip.decompress(stored) if stored[:2] == b"\x1f\x8b" else stored
    forms = [lambda: content, lambda: gzip.compress(content, 9, mtime=0)]
    if url.endswith(".bz2"):
        forms.append(lambda: bz2.compress(content, 9))
    return next((body for body in (form() for form in forms) if hashlib.sha256(body).hexdigest() == sha256), None)


def served_files(mirror: Path) -> dict[str, bytes]:
    """URL path -> bytes, for every catalogued source the mirror can rebuild."""
    out = {}
    for ds in catalogue.load().values():
        for f in ds.files:
            path = mirror / f.path
            if not path.is_file():
                continue
            stored = path.read_bytes()
            for s in f.sources:
                body = _served(stored, s.url, s.sha256)
                if body is not None:
                    out[urlsplit(s.url).path] = body
    return out


class DataServer:
    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.faults: dict[str, str] = {}
        self.requests: list[str] = []
        self._midfile_sent: set[str] = set()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def path_of(self, url: str) -> str:
        return urlsplit(url).path

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802 (http.server's name)
                path = urlsplit(self.path).path
                server.requests.append(path)
                fault = server.faults.get(path)
                body = server.files.get(path)
                if body is None or fault == "missing":
                    return self.send_error(404)
                if fault == "midfile" and path in server._midfile_sent:
                    return self.send_error(503)
                if fault == "corrupt":
                    body = body[:len(body) // 2] + bytes([body[len(body) // 2] ^ 0xFF]) + body[len(body) // 2 + 1:]
                start = 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes=") and rng[6:].rstrip("-").isdigit():
                    start = int(rng[6:].rstrip("-"))
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                part = body[start:]
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                if fault in ("truncate", "midfile"):
                    server._midfile_sent.add(path)
                    self.wfile.write(part[: max(1, len(part) // 2)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(part)

        return Handler

    @contextmanager
    def running(self):
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
