"""A static file server for the staging benchmarks, in a process of its own as a remote server would be:
GET and HEAD with one byte range (`Range: bytes=a-b`, `bytes=a-`, `If-Range`, `If-Match`), `Accept-Ranges`,
an ETag, and the body sent by the kernel (os.sendfile), so the server's own share of this machine's cores
stays small and the same for every client measured against it. Python's http.server answers no Range
request. Its paths are those of S3's path-style requests too (/bucket/key, signatures not checked), so
boto3 reads a file here as an S3 object.

    python bench/ranged_server.py FOLDER PORT
"""

import email.utils
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RANGE = re.compile(r"bytes=(\d+)-(\d*)", re.ASCII)


class Ranged(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    folder = Path(".")

    def do_HEAD(self) -> None:
        self.do_GET(body=False)

    def do_GET(self, body: bool = True) -> None:
        path = self.folder / self.path.lstrip("/").split("?", 1)[0]
        try:
            source = path.open("rb")
        except OSError:
            self.send_error(404)
            return
        with source:
            stat = os.fstat(source.fileno())
            size, tag = stat.st_size, f'"{stat.st_ino:x}-{stat.st_mtime_ns:x}-{stat.st_size:x}"'
            start, end, partial = self._range(size, tag)
            if self.headers.get("If-Match", tag) != tag:
                self.send_response(412)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if partial and start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206 if partial else 200)
            if partial:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", tag)
            self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
            self.end_headers()
            self.wfile.flush()
            offset, left = start, (end - start + 1) * body
            while left:
                sent = os.sendfile(self.connection.fileno(), source.fileno(), offset, left)
                if not sent:
                    break
                offset, left = offset + sent, left - sent

    def _range(self, size: int, tag: str) -> tuple[int, int, bool]:
        """The bytes to send and whether they are a part: the range asked for when it is valid and still
        of this file (If-Range), else all of it."""
        asked = RANGE.fullmatch(self.headers.get("Range", "").strip())
        if not asked or self.headers.get("If-Range", tag) != tag:
            return 0, size - 1, False
        return int(asked[1]), min(int(asked[2] or size - 1), size - 1), True

    def log_message(self, *args) -> None:
        return


def main() -> None:
    Ranged.folder = Path(sys.argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Ranged)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
