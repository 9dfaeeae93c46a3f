"""What the tests of making jobs through the API share: a tus client over the token (Django's test client, real
files and database), and real HTTP servers on loopback, reached as `localhost` (allowed by tests/settings.py):
one that serves files, one that receives webhooks."""

import base64
import contextlib
import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.test import Client

from jobs.uploads import resumable

TUS = {"HTTP_TUS_RESUMABLE": "1.0.0"}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def create_upload(client: Client, length: int, name: str = "customers.csv"):
    metadata = f"filename {b64(name.encode())}"
    return client.post("/api/v1/uploads/", HTTP_UPLOAD_LENGTH=str(length), HTTP_UPLOAD_METADATA=metadata, **TUS)


def send_chunk(client: Client, url: str, offset: int, chunk: bytes, checksum: bytes | None = None):
    digest = checksum if checksum is not None else hashlib.sha256(chunk).digest()
    return client.generic(
        "PATCH",
        url,
        chunk,
        content_type=resumable.CHUNK_TYPE,
        HTTP_UPLOAD_OFFSET=str(offset),
        HTTP_UPLOAD_CHECKSUM=f"sha256 {b64(digest)}",
        **TUS,
    )


def upload(client: Client, data: bytes, name: str = "customers.csv", chunk: int = 64 * 1024) -> str:
    """The whole file sent over the API in checksummed chunks; the finished upload's id."""
    created = create_upload(client, len(data), name)
    assert created.status_code == 201, created.content
    url = created["Location"]
    assert url.startswith("/api/v1/uploads/"), url
    for offset in range(0, len(data), chunk):
        sent = send_chunk(client, url, offset, data[offset : offset + chunk])
        assert sent.status_code == 204, sent.content
    return url.rstrip("/").rsplit("/", 1)[-1]


@contextlib.contextmanager
def file_server(folder: Path) -> Iterator[str]:
    """A plain HTTP server serving `folder`; its base URL."""
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(folder))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Received:
    at: float
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    """What a webhook endpoint received, in order; it answers 500 to its first `failing` posts, then 204. A held
    one answers each post only once `release` is set: the attempt is under way until then."""

    port: int = 0
    failing: int = 0
    held: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    posts: list[Received] = field(default_factory=list)

    def url(self, path: str = "/hook") -> str:
        return f"http://localhost:{self.port}{path}"


@contextlib.contextmanager
def webhook_receiver(failing: int = 0, held: bool = False) -> Iterator[Receiver]:
    received = Receiver(failing=failing, held=held)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.posts.append(Received(time.time(), dict(self.headers.items()), body))
            if received.held:
                received.release.wait(60)
            self.send_response(500 if len(received.posts) <= received.failing else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
