"""The "API tokens" page's routes, under /account/tokens/ (portal/urls.py)."""

from django.urls import path

from api import tokens

urlpatterns = [
    path("", tokens.tokens, name="api_tokens"),
    path("revoke/", tokens.revoke, name="api_token_revoke"),
]
