"""The api app's configuration."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "API"

    def ready(self) -> None:
        from api import schema  # noqa: F401, PLC0415 (registers the token's scheme with drf-spectacular)
