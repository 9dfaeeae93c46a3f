"""`Authorization: Bearer e31_…`: the only way into the API. A token acts as its user; a missing, wrong,
expired or revoked one is 401. Users in no organisation get past here and are refused by permissions.py."""

from django.utils import timezone
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from rest_framework.exceptions import AuthenticationFailed

from api.models import ApiToken

WRONG = "This token is not valid: it is wrong, or it was revoked."


class BearerTokenAuthentication(TokenAuthentication):
    """knox's header parsing and hashing; the token is found by its digest (the table's key), an expired one
    is refused but kept for its owner to see on the tokens page, and each use is recorded."""

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
