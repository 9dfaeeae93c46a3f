"""The E31 portal's client: `e31.Client(url, token)` for every route of its API (docs/api.md), and the
`e31` command (e31.cli). The package README shows both."""

from e31.client import VERSION as __version__
from e31.client import Client, job_spec, request_spec
from e31.errors import APIError
from e31.schema import ENDED, Job

__all__ = ["ENDED", "APIError", "Client", "Job", "__version__", "job_spec", "request_spec"]
