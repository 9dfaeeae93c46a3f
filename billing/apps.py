from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        from billing import metering  # noqa: F401  (connects the hold_released receiver)
