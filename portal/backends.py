"""Logging in by email: an accepted partner's account is named by their email address, and the demo's and
operators' accounts have an email beside their username. Either one logs in. Before either, an address that
failed too many logins this hour, across usernames, is refused (AddressLimit)."""

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver

from portal import throttling


class AddressLimit:
    """Refuses every login from an address past E31_LOGIN_FAILURES_PER_ADDRESS_PER_HOUR failures, the right
    password too, and has the lockout page say so (axes' middleware draws it: portal.views.locked_out). It only
    refuses: with no get_user, a session is never its (as axes' own backend)."""

    def authenticate(self, request, **credentials):
        if request is not None and throttling.login_failures_wait(request):
            request.axes_locked_out = True
            request.address_locked_out = True
            raise PermissionDenied


@receiver(user_login_failed)
def _count_failure(sender, credentials, request=None, **kwargs) -> None:
    if request is not None:
        throttling.count_login_failure(request)


class EmailOrUsernameBackend(ModelBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None or not username or "@" not in username:
            return user
        # An address two accounts share names neither of them.
        found = list(get_user_model()._default_manager.filter(email__iexact=username.strip())[:2])
        if len(found) != 1:
            return None
        return super().authenticate(request, username=found[0].get_username(), password=password, **kwargs)
