from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        # Django's place to connect receivers and register answers: the models are loaded only now.
        from billing import answers, metering  # noqa: F401, PLC0415
        from jobs import billing_port  # noqa: PLC0415

        billing_port.register(answers)
