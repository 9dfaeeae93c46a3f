"""gunicorn's settings for `make serve`, the portal's web side in production, behind an HTTPS proxy.

Threaded workers (gthread): a long download (an output zip, a ledger export) or a resumable upload's chunk
keeps one thread busy, not a whole worker, and never runs into the worker timeout, which only the worker's
own loop resets. Each thread keeps its own database connection (E31_DB_CONN_MAX_AGE), so a machine opens up
to E31_WEB_WORKERS × E31_WEB_THREADS connections: PostgreSQL's max_connections must allow for all machines.
"""

import os

from portal.env import env_int, env_str

# The cores this process may run on (a container's limit, not the host's), as gunicorn's docs size workers.
CORES = len(os.sched_getaffinity(0))

wsgi_app = "portal.wsgi:application"
bind = env_str("E31_BIND", f"127.0.0.1:{env_int('PORT', 8000, minimum=1)}")
worker_class = "gthread"
workers = env_int("E31_WEB_WORKERS", 2 * CORES + 1, minimum=1)
threads = env_int("E31_WEB_THREADS", 4, minimum=1)
# A worker is replaced after about a thousand requests, at a jittered count so they do not all restart at once.
max_requests = 1000
max_requests_jitter = 100
# Behind the proxy, which keeps connections to gunicorn open between requests.
keepalive = 5
# On stop (SIGTERM), requests in flight get this long to finish.
graceful_timeout = 30
# No access log: the proxy keeps one, where /accounts/reset/ paths are dropped (docs/production.md).
errorlog = "-"
loglevel = env_str("E31_LOG_LEVEL", "INFO").lower()
# gunicorn's control socket sits at one path per user, which a second server on the machine would take over;
# nothing here uses it.
control_socket_disable = True
