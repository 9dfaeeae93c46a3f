"""The client's creates are sent under an Idempotency-Key: an answer lost on the way back (the portal made the
thing, the connection broke before the client heard) is asked again with the key and names what was made,
which is made once. Against the portal the tests start, the network's loss played by the client's transport."""

import contextlib
import socket
import threading
from urllib.parse import urlsplit

import e31 as library
import httpx
from e31.upload import ResumeStore

from api.webhooks.models import Endpoint
from jobs.models import Job, Upload
from tests.client.world import Relay, hang_up
from tests.support import EXAMPLE


class LosesAnswers(httpx.HTTPTransport):
    """Real HTTP to the portal, but the answer to the first POST of each path in `paths` is lost after the
    portal gave it, as a connection that breaks on its way back."""

    def __init__(self, *paths: str):
        super().__init__()
        self.losing = set(paths)
        self.lost: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path in self.losing:
            self.losing.remove(request.url.path)
            response.read()
            response.close()
            self.lost.append(request.url.path)
            raise httpx.ReadError("the connection broke before the answer came", request=request)
        return response


def test_a_create_whose_answer_is_lost_is_asked_again_and_made_once(portal, token, fleet, tmp_path):
    network = LosesAnswers("/api/v1/uploads/", "/api/v1/jobs/", "/api/v1/webhooks/")
    with library.Client(portal.url, token, transport=network) as client:
        upload_id = client.upload(EXAMPLE, store=ResumeStore(tmp_path))
        spec = library.job_spec(work="clean-table", upload=upload_id, gpus=1, hours="1")
        job = client.create_job(spec)
        hook = client.create_webhook("http://localhost:9/e31")
    assert sorted(network.lost) == ["/api/v1/jobs/", "/api/v1/uploads/", "/api/v1/webhooks/"], "each answer was lost"
    assert Job.objects.get().pk == job["id"]
    assert not Upload.objects.exists(), "one upload, which became the job's data"
    assert Endpoint.objects.get().pk == hook["id"]


class BreaksAfterTheJobIsMade(Relay):
    """A relay that lets everything through until a job is made (`POST /api/v1/jobs/`, not a
    dry run): that request reaches the portal, its answer never comes back, and from then on the portal cannot
    be reached, until mend(). A run of `e31 submit` through it breaks after the job is made, before it can say
    so; the next run, through it mended, reaches the same portal at the same address."""

    def __init__(self, target_port: int):
        self.broken = threading.Event()
        self.mended = threading.Event()
        super().__init__(target_port)

    def relay(self, downstream: socket.socket) -> None:
        if self.broken.is_set() and not self.mended.is_set():
            downstream.close()
            return
        upstream = self.portal()
        making = threading.Event()
        threading.Thread(target=self._requests, args=(downstream, upstream, making), daemon=True).start()
        threading.Thread(target=self._answers, args=(upstream, downstream, making), daemon=True).start()

    def _requests(self, downstream: socket.socket, upstream: socket.socket, making: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := downstream.recv(65536):
                if b"POST /api/v1/jobs/ HTTP/1.1" in data and not self.mended.is_set():
                    making.set()
                upstream.sendall(data)

    def _answers(self, upstream: socket.socket, downstream: socket.socket, making: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if making.is_set():  # the job is made: its answer is lost, and so is the portal
                    self.broken.set()
                    break
                downstream.sendall(data)
        hang_up(upstream, downstream)

    def mend(self) -> None:
        self.mended.set()


def test_a_submit_run_again_after_one_that_broke_once_the_job_was_made_names_that_job(e31, portal, fleet):
    (e31.folder / "customers.csv").write_bytes(EXAMPLE.read_bytes())
    submit = ("submit", "customers.csv", "--work", "clean-table", "--gpus", "1", "--hours", "1")
    relay = BreaksAfterTheJobIsMade(int(urlsplit(portal.url).port))
    try:
        broke = e31(*submit, E31_URL=relay.url)
        assert broke.returncode != 0 and relay.broken.is_set(), broke.stderr
        made = Job.objects.get()
        relay.mend()
        again = e31(*submit, E31_URL=relay.url)
    finally:
        relay.close()
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == str(made.pk)
    assert f"Job {made.pk} submitted" in again.stderr
    assert "upload" not in again.stderr.lower(), "the file is not sent again"
    assert Job.objects.count() == 1
