"""Creating once: a request that makes something (a job, a pass, an upload, a webhook, a token, an application)
may carry a key, the API's Idempotency-Key header or a form's one-time token. The first request with a key
claims it; the same key again, with the same request, gets the first one's answer and makes nothing; with a
different request it is refused; while the first is still being answered, the second waits for that answer.

A claim is a row committed before the work begins (the key is unique per owner), so two requests racing with
one key cannot both make. Only an answer that made something is kept: a refusal releases the key, so the
corrected request may use it again. A first request that broke part-way keeps its claim unanswered, since what
it made cannot be known: the key is then refused until it expires, never run twice. Keys are kept a day."""

import enum
import hashlib
import json
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal import crypto
from portal.models import RequestKey

KEPT = timedelta(days=1)
_SEALED_FOR = "request-key-answer"
_POLL_SECONDS = 0.1


class Found(enum.Enum):
    NEW = "new"  # this request claimed the key: make, then answer() or release()
    ANSWERED = "answered"  # the first request made something: its answer is the answer
    DIFFERENT = "different"  # the key was used for another request
    IN_FLIGHT = "in flight"  # the first request is still being answered (or broke part-way)


@dataclass(frozen=True)
class Claim:
    found: Found
    row: RequestKey

    @property
    def answer(self) -> dict:
        return json.loads(crypto.unseal(_SEALED_FOR, self.row.answer))


def fingerprint(*parts: bytes | str) -> str:
    """One hash of what a request asks for, to tell the same request from another under one key."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def claim(owner: str, key: str, sent: str) -> Claim:
    """The key claimed for this request (NEW), or what an earlier request with it left; an earlier request still
    in flight is waited for, up to E31_IDEMPOTENCY_WAIT_SECONDS."""
    give_up = time.monotonic() + settings.E31_IDEMPOTENCY_WAIT_SECONDS
    while True:
        row, new = _claimed(owner, key, sent)
        if new:
            return Claim(Found.NEW, row)
        if row.fingerprint != sent:
            return Claim(Found.DIFFERENT, row)
        if row.answer:
            return Claim(Found.ANSWERED, row)
        if time.monotonic() >= give_up:
            return Claim(Found.IN_FLIGHT, row)
        time.sleep(_POLL_SECONDS)


def _claimed(owner: str, key: str, sent: str) -> tuple[RequestKey, bool]:
    """The key's row, made for this request if there was none (an expired one is gone first)."""
    RequestKey.objects.filter(owner=owner, key=key, created__lt=timezone.now() - KEPT).delete()
    while True:
        try:
            with transaction.atomic():
                return RequestKey.objects.create(owner=owner, key=key, fingerprint=sent), True
        except IntegrityError:
            found = RequestKey.objects.filter(owner=owner, key=key).first()
            if found is not None:  # else its claim was released in between: claim it again
                return found, False


def answer(claim: Claim, given: dict) -> None:
    """What the first request answered, for every later one with the key."""
    sealed = crypto.seal(_SEALED_FOR, json.dumps(given).encode())
    RequestKey.objects.filter(pk=claim.row.pk).update(answer=sealed)


def release(claim: Claim) -> None:
    """The request made nothing: the key may be used again."""
    RequestKey.objects.filter(pk=claim.row.pk, answer="").delete()


def purge() -> int:
    """Forget the keys older than a day; the number forgotten."""
    return RequestKey.objects.filter(created__lt=timezone.now() - KEPT).delete()[0]
