"""Secrets the portal must read back later (a partner's S3 credentials until staged, a webhook's signing
secret), sealed with Fernet under a key derived from the secret key and the purpose: a value sealed for one
purpose does not open for another. A changed E31_SECRET_KEY leaves what was sealed before unreadable."""

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

__all__ = ["InvalidToken", "seal", "unseal"]


def _fernet(purpose: str) -> Fernet:
    digest = hashlib.sha256(purpose.encode() + b"\0" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(purpose: str, plain: bytes) -> str:
    return _fernet(purpose).encrypt(plain).decode()


def unseal(purpose: str, sealed: str) -> bytes:
    """The plain bytes; InvalidToken when the value was sealed for another purpose or under another key."""
    return _fernet(purpose).decrypt(sealed.encode())
