"""Webhooks: every change of a job's state posted, signed, to the organisation's endpoints and to the job's own
URL, retried with backoff, each attempt on the job's delivery log (docs/api.md, "Webhooks").

`models.py` the endpoints, deliveries and attempts; `receivers.py` hears `jobs.signals.state_changed` and
records the deliveries; `delivery.py` claims one attempt, signs it and posts it through the SSRF guard;
`tasks.py` is what the workers run, sent by name; `views.py` the API's routes."""
