from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        # Django's place to connect receivers: the models are loaded only now.
        from billing import metering  # noqa: F401, PLC0415
