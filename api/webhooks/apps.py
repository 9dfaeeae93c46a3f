"""The webhooks app: its receivers hear every committed change of a job's state, and a deadline at risk."""

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "api.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        from api.webhooks import receivers  # noqa: PLC0415 (the models are ready only now)
        from jobs.signals import deadline_at_risk, state_changed  # noqa: PLC0415

        state_changed.connect(receivers.job_state_changed, dispatch_uid="webhooks.job_state_changed")
        deadline_at_risk.connect(receivers.job_deadline_at_risk, dispatch_uid="webhooks.job_deadline_at_risk")
