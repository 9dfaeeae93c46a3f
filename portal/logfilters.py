"""Log filters: what must not be written to a log, taken out of each record before a handler sees it."""

import logging
import re

# A password-reset path, /accounts/reset/<uidb64>/<token>/: until it is used, the token sets the password.
_RESET_TOKEN = re.compile(r"(/reset/[^/\s]+/)[^/\s]+/")


def redact_reset_tokens(text: str) -> str:
    """`text` with the token of each password-reset path it holds replaced by "[token]"."""
    return _RESET_TOKEN.sub(r"\1[token]/", text)


class RedactResetTokens(logging.Filter):
    """Rewrites a record that names a password-reset path (the dev server's request line, django.request's
    "Not Found: <path>") with the token taken out; every other record passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_reset_tokens(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True
