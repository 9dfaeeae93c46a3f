"""`Authorization: Bearer e31_…`: the only way into the API. A token acts as its user; a missing, wrong,
expired or revoked one is 401. Users in no organisation get past here and are refused by permissions.py."""

from django.utils import timezone
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from rest_framework.exceptions import AuthenticationFailed, Throttled

from api.models import ApiToken
from api.throttling import AddressRate

WRONG = "This token is not valid: it is wrong, or it was revoked."


class BearerTokenAuthentication(TokenAuthentication):
    """knox's header parsing and hashing; the token is found by its digest (the table's key), an expired one
    is refused but kept for its owner to see on the tokens page, and each use is recorded. A request without a
    valid token counts against its address's rate (throttling.AddressRate): past it, 429 rather than 401."""

    def authenticate(self, request):
        try:
            found = super().authenticate(request)
        except AuthenticationFailed:
            _count_without_token(request)
            raise
        if found is None:
            _count_without_token(request)
        return found

    def authenticate_credentials(self, token: bytes):
        try:
            text = token.decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed(WRONG) from None
        found = ApiToken.objects.select_related("user").filter(digest=hash_token(text)).first()
        if found is None:
            raise AuthenticationFailed(WRONG)
        if found.expired:
            when = timezone.localtime(found.expiry).strftime("%Y-%m-%d %H:%M %Z")
            raise AuthenticationFailed(f"This token expired on {when}; make a new one on the API tokens page.")
        if not found.user.is_active:
            raise AuthenticationFailed("This token's user is no longer active.")
        found.record_use()
        return found.user, found


def _count_without_token(request) -> None:
    limit = AddressRate()
    if not limit.allow_request(request, None):
        raise Throttled(limit.wait())
