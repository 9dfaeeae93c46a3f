"""Logging in by email: an accepted partner's account is named by their email address, and the demo's and
operators' accounts have an email beside their username. Either one logs in."""

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend


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
