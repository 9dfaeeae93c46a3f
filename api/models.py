"""A personal API token: knox's hashed token (the digest is the key, the token itself is never stored), with
the name its owner gave it and when it was last used. Revoking a token deletes its row."""

from datetime import timedelta

from django.db import models
from django.utils import timezone
from knox.models import AbstractAuthToken

# A token in use is written at most once a minute, not on every request.
LAST_USE_PRECISION = timedelta(minutes=1)


class ApiToken(AbstractAuthToken):
    name = models.CharField(max_length=100)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.token_key}…) of {self.user}"

    @property
    def expired(self) -> bool:
        return self.expiry is not None and self.expiry <= timezone.now()

    def record_use(self, now=None) -> bool:
        """Note that the token was used now, unless that was noted less than a minute ago: one conditional
        UPDATE, so concurrent requests write it once."""
        now = now or timezone.now()
        stale = now - LAST_USE_PRECISION
        if self.last_used_at is not None and self.last_used_at > stale:
            return False
        unseen = models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lte=stale)
        written = ApiToken.objects.filter(unseen, pk=self.pk).update(last_used_at=now)
        if written:
            self.last_used_at = now
        return bool(written)
