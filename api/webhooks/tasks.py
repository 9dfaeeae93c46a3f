"""The webhooks' Celery tasks, sent by name (api.webhooks.delivery.send, and beat): nothing imports this
module. Each takes ids and re-reads the database; an attempt is claimed before it is made, so a message
delivered twice (late acknowledgement, a restored message, the sweep) makes one attempt."""

from celery import shared_task

from api.webhooks import delivery


@shared_task(time_limit=60)
def deliver(delivery_id: str) -> str | None:
    """One attempt of a delivery, if it is due and nobody else is making it; within its lease (90 s) even if
    the endpoint never answers (10 s to connect, 10 s for each read)."""
    return delivery.attempt(delivery_id)


@shared_task
def send_due() -> int:
    """From beat: the deliveries due a while and not under way, sent again."""
    return delivery.sweep()
