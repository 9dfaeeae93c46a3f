"""Settings of the E31 portal. Every value comes from the environment; docs/configuration.md lists them."""

import os
import re
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from django.utils.crypto import salted_hmac

from portal.env import env_bool, env_choice, env_int, env_ints, env_list, env_rate, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("E31_VAR_DIR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)
# Where numba keeps staging's compiled scan between processes: writable wherever the portal runs,
# unlike the code's own folder in a locked-down deployment (numba reads this when it is imported).
os.environ.setdefault("NUMBA_CACHE_DIR", str(VAR_DIR / "numba"))


def _secret_key() -> str:
    configured = env_str("E31_SECRET_KEY", "")
    if configured:
        return configured
    # A local install keeps a generated key under var/ so sessions survive restarts.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()


def _ledger_key(secret_key: str) -> bytes:
    """The key that seals the ledger's entries (billing.chain): E31_LEDGER_KEY, 32 bytes or more in hex,
    else derived from the secret key, so a local install needs nothing. An entry sealed under another
    key no longer verifies, so production sets it explicitly, the same everywhere, and never changes it."""
    configured = env_str("E31_LEDGER_KEY", "")
    if not configured:
        return salted_hmac("e31.billing.ledger", "the ledger's seal", secret=secret_key, algorithm="sha256").digest()
    try:
        key = bytes.fromhex(configured)
    except ValueError:
        raise ImproperlyConfigured("E31_LEDGER_KEY must be hexadecimal digits (secrets.token_hex(32))") from None
    if len(key) < 32:
        raise ImproperlyConfigured(f"E31_LEDGER_KEY must be at least 32 bytes (64 hex digits), not {len(key)}")
    return key


E31_LEDGER_KEY = _ledger_key(SECRET_KEY)
DEBUG = env_bool("E31_DEBUG", False)
ALLOWED_HOSTS = env_list("E31_ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env_list("E31_CSRF_TRUSTED_ORIGINS", "")
# Behind an HTTPS proxy in production: cookies only over HTTPS, the proxy's word on the scheme, plain HTTP
# redirected to HTTPS, and browsers told to use nothing but HTTPS (HSTS) for E31_HSTS_SECONDS.
E31_HTTPS = env_bool("E31_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = E31_HTTPS
if E31_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# A year, the least the browsers' preload lists take; 0 turns HSTS off. A browser that saw it refuses plain
# HTTP for that long, so an operator trying HTTPS out sets a few minutes first.
SECURE_HSTS_SECONDS = env_int("E31_HSTS_SECONDS", 31_536_000 if E31_HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
if SECURE_HSTS_SECONDS and not E31_HTTPS:
    raise ImproperlyConfigured("E31_HSTS_SECONDS needs E31_HTTPS: browsers take HSTS only from an HTTPS answer.")

INSTALLED_APPS = [
    "portal.apps.ConsoleConfig",  # django.contrib.admin, with our site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "axes",
    "csp",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "portal",
    "jobs",
    "billing",
    "api",
    "api.webhooks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as axes asks: it turns a login refused for a lockout into the locked-out page.
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy (django-csp): scripts, styles, images and fetches from the portal itself only, so an
# injected <script>, inline handler or style attribute does nothing. The pages keep to it: scripts and styles
# are static files, htmx is told not to add its inline style (templates/htmx_head.html), bars are <progress>.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# The API (/api/v1/, docs/api.md): personal tokens only, no session and so no CSRF; JSON in and out; every
# error as {"error": {...}} (api/errors.py); E31_API_RATE per token on every route, E31_API_SUBMIT_RATE per
# organisation on top for creating jobs, counted in the cache (api/throttling.py).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.InOrganisation"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.TokenRate"],
    "DEFAULT_PAGINATION_CLASS": "api.pagination.Pages",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
E31_API_RATE = env_rate("E31_API_RATE", "120/min")
E31_API_SUBMIT_RATE = env_rate("E31_API_SUBMIT_RATE", "30/hour")
E31_API_ADDRESS_RATE = env_rate("E31_API_ADDRESS_RATE", "60/min")  # per client address, without a valid token
# Webhooks (api/webhooks/): a delivery not answered 2xx is tried again after each of these delays in turn (1 min,
# 5 min, 30 min, 2 h, 6 h), then given up; each attempt is on the job's delivery log.
E31_WEBHOOK_RETRY_SECONDS = env_ints("E31_WEBHOOK_RETRY_SECONDS", "60,300,1800,7200,21600", minimum=1)
# knox keeps a token's SHA-512 only; ours is "e31_" and 64 hex digits, sent as "Authorization: Bearer …", with
# the expiry its owner chose (none by default) and never extended by use.
KNOX_TOKEN_MODEL = "api.ApiToken"
# Its own migrations would make a table for the model ours swaps out: an empty knox_authtoken whose key to the
# users table stops the tests' flush (PostgreSQL truncates no table another one refers to).
MIGRATION_MODULES = {"knox": None}
REST_KNOX = {
    "TOKEN_PREFIX": "e31_",
    "AUTH_HEADER_PREFIX": "Bearer",
    "TOKEN_TTL": None,
    "AUTO_REFRESH": False,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "E31 portal API",
    "DESCRIPTION": "Jobs, their outputs and the ledger, from a partner's own machine. The contract is docs/api.md.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.portal",
                "jobs.pages.context_processors.fleet",
            ],
        },
    },
]


def _database() -> dict:
    """The database, its connections kept for E31_DB_CONN_MAX_AGE seconds between requests (each checked
    before it is used again). Celery's Django fix-up still closes a worker's connections around every task."""
    url = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}")
    max_age = env_int("E31_DB_CONN_MAX_AGE", 60, minimum=0)
    try:
        database = dj_database_url.parse(url, conn_max_age=max_age, conn_health_checks=True)
    except ValueError as error:
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {error}") from None
    if database["ENGINE"] == "django.db.backends.sqlite3":
        # Web, workers and beat write the same file: WAL lets readers and one writer overlap,
        # IMMEDIATE takes the write lock up front so two writers queue instead of deadlocking.
        database["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
    return database


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _redis_url() -> str:
    url = env_str("REDIS_URL", f"unix://{VAR_DIR / 'redis.sock'}")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(f"REDIS_URL must start with redis://, rediss:// or unix://, not {url!r}")
    return url


REDIS_URL = _redis_url()
# The embedded Redis is started by `manage.py runportal` (and by the tests) on this socket.
EMBEDDED_REDIS = "REDIS_URL" not in os.environ
CELERY_BROKER_URL = REDIS_URL.replace("unix://", "redis+socket://", 1)
# The cache is the same Redis, so that what it counts (the intake form's posts) holds across web processes.
# Never cache.clear(): Django's RedisCache then empties the whole database, the broker's queues with it.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "e31-cache",
        # A Redis that stops answering fails a check of the limit within seconds instead of holding the page.
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}
# The intake form takes E31_INTAKE_POSTS_PER_HOUR posts from one address (portal.throttling.client_ip) in any
# hour (a sliding hour, portal.throttling.PostsPerHour); the next ones are answered 429 with the form kept.
E31_INTAKE_POSTS_PER_HOUR = env_int("E31_INTAKE_POSTS_PER_HOUR", 10, minimum=1)
# The same for asking a password reset: each ask emails an address that may not be the asker's.
E31_PASSWORD_RESETS_PER_HOUR = env_int("E31_PASSWORD_RESETS_PER_HOUR", 5, minimum=1)
# A create sent again with its key (Idempotency-Key, a form's one-time token) while the first is still being
# answered waits this long for that answer (portal.idempotency), then is told to try again.
E31_IDEMPOTENCY_WAIT_SECONDS = env_int("E31_IDEMPOTENCY_WAIT_SECONDS", 60, minimum=1)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Every login (the partners' page and the admin's) goes through axes first: after E31_LOGIN_FAILURE_LIMIT
# failures for one username from one address, that username is refused from that address, even with the
# right password, until E31_LOGIN_LOCKOUT_MINUTES have passed since the last try. By username and address
# together, so nobody can lock a partner out from elsewhere. The records are rows in the database
# (migrate makes their tables), shared by every web process; an operator lifts a lock early by deleting
# its access attempt in the admin console.
AUTHENTICATION_BACKENDS = [
    "portal.backends.AddressLimit",
    "axes.backends.AxesStandaloneBackend",
    "portal.backends.EmailOrUsernameBackend",
]
# Failed logins from one address in any hour across usernames (password spraying), then every login from it
# waits out the hour's oldest failure (portal.backends.AddressLimit).
E31_LOGIN_FAILURES_PER_ADDRESS_PER_HOUR = env_int("E31_LOGIN_FAILURES_PER_ADDRESS_PER_HOUR", 10, minimum=1)
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = env_int("E31_LOGIN_FAILURE_LIMIT", 5, minimum=1)
E31_LOGIN_LOCKOUT_MINUTES = env_int("E31_LOGIN_LOCKOUT_MINUTES", 15, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=E31_LOGIN_LOCKOUT_MINUTES)
AXES_RESET_ON_SUCCESS = True
# Failed logins are what the lockout needs; a row for every successful login, kept for ever, is not.
AXES_DISABLE_ACCESS_LOG = True
AXES_CLIENT_IP_CALLABLE = "portal.throttling.client_ip"
AXES_LOCKOUT_CALLABLE = "portal.views.locked_out"
# No start-up line in every process: `manage.py submit` says why it refused in one line on stderr.
AXES_VERBOSE = False
# The proxies in front of the portal (nginx, a load balancer), each appending the address it got the request
# from to X-Forwarded-For. With N of them the client is the Nth address from the right: what lies to its left,
# the client wrote itself. 0 (Django's server, or gunicorn reached directly): the connection's own address.
E31_TRUSTED_PROXIES = env_int("E31_TRUSTED_PROXIES", 0, minimum=0)
if E31_HTTPS and "E31_TRUSTED_PROXIES" not in os.environ:
    # Behind a proxy, the default (0) makes every client the proxy: one stranger's five wrong passwords
    # would lock a partner out from everywhere. The number must be chosen, not assumed.
    raise ImproperlyConfigured(
        "E31_HTTPS is on: set E31_TRUSTED_PROXIES to the number of proxies in front of the portal "
        "(1 behind one nginx or load balancer; 0 when gunicorn serves HTTPS itself)."
    )
# Email: a job's end to whoever submitted it, and the set-password link to an accepted applicant.
# Without E31_EMAIL_HOST each email is written to the process's output instead of being sent.
E31_EMAIL_HOST = env_str("E31_EMAIL_HOST", "")
EMAIL_BACKEND = f"django.core.mail.backends.{'smtp' if E31_EMAIL_HOST else 'console'}.EmailBackend"
EMAIL_HOST = E31_EMAIL_HOST or "localhost"
EMAIL_PORT = env_int("E31_EMAIL_PORT", 587, minimum=1)
EMAIL_HOST_USER = env_str("E31_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env_str("E31_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("E31_EMAIL_TLS", True)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = env_str("E31_EMAIL_FROM", "E31 portal <noreply@localhost>")
# Where partners reach the portal, for the links in emails (which no request is there to tell): needed
# once emails are sent, else every link in them would lead to this machine's loopback.
E31_PUBLIC_URL = env_str("E31_PUBLIC_URL", f"http://127.0.0.1:{os.environ.get('PORT', '8000')}").rstrip("/")
if E31_EMAIL_HOST and "E31_PUBLIC_URL" not in os.environ:
    raise ImproperlyConfigured(
        "E31_EMAIL_HOST is set: set E31_PUBLIC_URL to the portal's address, for the links in emails."
    )
if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", E31_PUBLIC_URL):
    raise ImproperlyConfigured(
        f"E31_PUBLIC_URL must be an http(s) address such as https://portal.example.com, not {E31_PUBLIC_URL!r}."
    )
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/jobs/"
LOGOUT_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
# Served by whitenoise straight from the apps and static/, so a fresh clone needs no collectstatic; `make serve`
# collects them into STATIC_ROOT, compressed, and turns the finders off to serve that copy.
WHITENOISE_USE_FINDERS = env_bool("E31_STATIC_FINDERS", True)
MEDIA_ROOT = VAR_DIR / "media"

E31_STORAGE = env_choice("E31_STORAGE", "filesystem", ("filesystem", "s3"))
if E31_STORAGE == "s3":
    _bucket = env_str("E31_S3_BUCKET", "")
    if not _bucket:
        raise ImproperlyConfigured("E31_STORAGE=s3 needs E31_S3_BUCKET")
    _default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": _bucket,
            "endpoint_url": env_str("E31_S3_ENDPOINT_URL", "") or None,
            "region_name": env_str("E31_S3_REGION", "") or None,
            "file_overwrite": False,
            "querystring_expire": 3600,
        },
    }
else:
    _default_storage = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT},
    }


def _ledger_checkpoints(location: str) -> dict:
    """The storage of the ledger's checkpoints (billing/anchor.py): a folder, or an S3 bucket and prefix
    (s3://bucket/prefix) on E31_S3_ENDPOINT_URL; never the database, whose superuser they hold to account."""
    if not location.startswith("s3://"):
        return {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": Path(location).resolve()},
        }
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    if not bucket:
        raise ImproperlyConfigured(f"E31_LEDGER_CHECKPOINTS must name a bucket (s3://bucket/prefix), not {location!r}")
    options = {
        "bucket_name": bucket,
        "location": prefix.strip("/"),
        "endpoint_url": env_str("E31_S3_ENDPOINT_URL", "") or None,
        "region_name": env_str("E31_S3_REGION", "") or None,
        "file_overwrite": False,
    }
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}


E31_LEDGER_CHECKPOINTS = env_str(
    "E31_LEDGER_CHECKPOINTS",
    f"s3://{_bucket}/ledger-checkpoints" if E31_STORAGE == "s3" else str(VAR_DIR / "ledger-checkpoints"),
)
STORAGES = {
    "default": _default_storage,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
    "ledger": _ledger_checkpoints(E31_LEDGER_CHECKPOINTS),
}

# Uploads always go to a temporary file on disk, never into memory, through a size guard.
FILE_UPLOAD_HANDLERS = [
    "jobs.uploads.SizeLimitUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]
FILE_UPLOAD_TEMP_DIR = VAR_DIR / "tmp"
FILE_UPLOAD_TEMP_DIR.mkdir(parents=True, exist_ok=True)
E31_MAX_UPLOAD_BYTES = env_int("E31_MAX_UPLOAD_BYTES", 2 * 1024**3, minimum=1)
# Datasets staged from a URL or a server path can be larger than a browser upload.
E31_OUTPUT_URL_SECONDS = env_int("E31_OUTPUT_URL_SECONDS", 900, minimum=1)
E31_MAX_MODEL_BYTES = env_int("E31_MAX_MODEL_BYTES", 2 * 1024**3, minimum=1)
# A slot's worker imports its work kinds' libraries (torch, transformers) when it starts, not on a hold.
E31_WARM_SLOTS = env_bool("E31_WARM_SLOTS", True)
# A Hugging Face model folder (embed, classify, generate): the most files its archive may hold.
E31_MODEL_MAX_FILES = env_int("E31_MODEL_MAX_FILES", 200, minimum=1)
E31_MAX_DATASET_BYTES = env_int("E31_MAX_DATASET_BYTES", 50 * 1024**3, minimum=1)
# A compressed dataset expanding more than this many times the bytes sent is refused as a compression bomb.
E31_MAX_COMPRESSION_RATIO = env_int("E31_MAX_COMPRESSION_RATIO", 200, minimum=2)
# A dataset of several locations (repeated --data, a list in the API, a URL a line in the form): its most parts.
E31_MAX_DATASET_PARTS = env_int("E31_MAX_DATASET_PARTS", 1024, minimum=1)
# Image collections (.zip, .tar): the most members, and bytes once expanded, an archive may hold;
# the largest one image may be (a slot reads each image whole before Pillow checks its pixels).
E31_ARCHIVE_MAX_MEMBERS = env_int("E31_ARCHIVE_MAX_MEMBERS", 1_000_000, minimum=1)
E31_ARCHIVE_MAX_BYTES = env_int("E31_ARCHIVE_MAX_BYTES", 4 * E31_MAX_DATASET_BYTES, minimum=1)
E31_IMAGE_MAX_BYTES = env_int("E31_IMAGE_MAX_BYTES", 512 * 10**6, minimum=1)
# Resumable uploads in progress; with several web servers, a folder they share.
E31_UPLOAD_DIR = Path(env_str("E31_UPLOAD_DIR", str(VAR_DIR / "uploads"))).resolve()
E31_UPLOAD_DIR.mkdir(parents=True, exist_ok=True)
E31_UPLOAD_EXPIRY_HOURS = env_int("E31_UPLOAD_EXPIRY_HOURS", 24, minimum=1)
E31_UPLOAD_CHUNK_BYTES = env_int("E31_UPLOAD_CHUNK_BYTES", 16 * 1024**2, minimum=64 * 1024)
E31_STAGING_ROOTS = [Path(root).resolve() for root in env_list("E31_STAGING_ROOTS", "")]
E31_STAGING_ALLOWED_HOSTS = env_list("E31_STAGING_ALLOWED_HOSTS", "")
# S3 sources: the operator's buckets (read with the portal's own AWS credentials, each organisation
# under <slug>/), and an S3-compatible endpoint instead of AWS.
E31_STAGING_S3_BUCKETS = env_list("E31_STAGING_S3_BUCKETS", "")
E31_STAGING_S3_ENDPOINT_URL = env_str("E31_STAGING_S3_ENDPOINT_URL", "")
E31_STAGING_S3_REGION = env_str("E31_STAGING_S3_REGION", "us-east-1")

E31_CPU_SLOTS = env_int("E31_CPU_SLOTS", 4, minimum=1)
E31_MAX_HOURS = env_int("E31_MAX_HOURS", 72, minimum=1)
# The fair share between organisations counts their GPU-hours held, each hour's weight halved every this many hours.
E31_FAIR_SHARE_HALF_LIFE_HOURS = env_int("E31_FAIR_SHARE_HALF_LIFE_HOURS", 24, minimum=1)
E31_MAX_RETENTION_DAYS = env_int("E31_MAX_RETENTION_DAYS", 90, minimum=0)
# A job's output: kept this many days after the job ends unless the partner chooses otherwise, at most the max.
E31_OUTPUT_KEEP_DAYS = env_int("E31_OUTPUT_KEEP_DAYS", 30, minimum=1)
E31_MAX_OUTPUT_KEEP_DAYS = env_int("E31_MAX_OUTPUT_KEEP_DAYS", 365, minimum=1)
if E31_OUTPUT_KEEP_DAYS > E31_MAX_OUTPUT_KEEP_DAYS:
    raise ImproperlyConfigured(
        f"E31_OUTPUT_KEEP_DAYS ({E31_OUTPUT_KEEP_DAYS}) is more than "
        f"E31_MAX_OUTPUT_KEEP_DAYS ({E31_MAX_OUTPUT_KEEP_DAYS})."
    )
E31_SHARD_RECORDS = env_int("E31_SHARD_RECORDS", 50_000, minimum=1)
E31_SHARD_BYTES = env_int("E31_SHARD_BYTES", 64 * 1024**2, minimum=1024)
E31_SHARD_MAX_ATTEMPTS = env_int("E31_SHARD_MAX_ATTEMPTS", 3, minimum=1)
E31_SHARD_LEASE_SECONDS = env_int("E31_SHARD_LEASE_SECONDS", 60, minimum=2)
# A batch still running after this long is taken as stuck: its shard's lease is no longer kept for it.
E31_BATCH_MAX_SECONDS = env_int("E31_BATCH_MAX_SECONDS", 1800, minimum=1)
E31_STAGING_LEASE_SECONDS = env_int("E31_STAGING_LEASE_SECONDS", 120, minimum=2)
# Staging streams into the pass (CSV and JSONL on job storage on a filesystem): shards run while the rest arrives.
E31_STREAM_STAGING = env_bool("E31_STREAM_STAGING", True)
E31_SHARD_SECONDS = env_int("E31_SHARD_SECONDS", 30, minimum=1)
E31_SAMPLE_SECONDS = env_int("E31_SAMPLE_SECONDS", 60, minimum=1)
E31_SAMPLE_MAX_RECORDS = env_int("E31_SAMPLE_MAX_RECORDS", 100_000, minimum=1)
E31_SAMPLE_KEEP_DAYS = env_int("E31_SAMPLE_KEEP_DAYS", 7, minimum=1)
E31_SLOT_SLICE_SECONDS = env_int("E31_SLOT_SLICE_SECONDS", 300, minimum=1)
E31_HEARTBEAT_SECONDS = env_int("E31_HEARTBEAT_SECONDS", 5, minimum=1)
E31_NODE_TIMEOUT_SECONDS = env_int("E31_NODE_TIMEOUT_SECONDS", 3 * E31_HEARTBEAT_SECONDS, minimum=1)
if E31_NODE_TIMEOUT_SECONDS < 2 * E31_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured(
        f"E31_NODE_TIMEOUT_SECONDS ({E31_NODE_TIMEOUT_SECONDS}) must be at least two heartbeats "
        f"(E31_HEARTBEAT_SECONDS, {E31_HEARTBEAT_SECONDS}), or one slow beat takes a live node offline."
    )
E31_NVML_MODULE = env_str("E31_NVML_MODULE", "pynvml")

CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "control"
# A webhook's attempt may wait 10 s on another server: on a queue of its own, it never holds up staging.
CELERY_TASK_ROUTES = {"api.webhooks.tasks.deliver": {"queue": "webhooks"}}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The visibility timeout is above the longest slot slice plus a shard, so Redis never hands a running
# task to a second worker. A broker that does not answer (its host gone, the server hung) fails a
# send in seconds rather than never.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": E31_SLOT_SLICE_SECONDS * 4 + 600,
    "socket_connect_timeout": 5,
    "socket_timeout": 15,
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE = {
    "schedule-queued-jobs": {"task": "jobs.tasks.schedule", "schedule": 5.0},
    "enforce-time-limits": {"task": "jobs.tasks.enforce_time_limits", "schedule": 30.0},
    "reconcile-jobs": {"task": "jobs.tasks.reconcile", "schedule": 30.0},
    "purge-expired-copies-and-outputs": {"task": "jobs.tasks.purge_expired", "schedule": 600.0},
    "purge-abandoned-uploads": {"task": "jobs.tasks.purge_abandoned_uploads", "schedule": 600.0},
    "send-due-webhooks": {"task": "api.webhooks.tasks.send_due", "schedule": 60.0},
    "sample-the-fleet": {"task": "jobs.tasks.sample_fleet", "schedule": 60.0},
    "forget-spent-request-keys": {"task": "portal.tasks.purge_request_keys", "schedule": 3600.0},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The request loggers write paths, and a password-reset path holds a working token until it is used.
    "filters": {"reset_tokens": {"()": "portal.logfilters.RedactResetTokens"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "django.server": {"class": "logging.StreamHandler", "formatter": "django.server"},
    },
    "root": {"handlers": ["console"], "level": env_str("E31_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # axes says INFO about every login; its warnings (failures, lockouts) are what an operator needs.
        "axes": {"level": "WARNING"},
        # Django's own set-up for the dev server's request lines (naming a logger here replaces it), filtered.
        "django.server": {
            "handlers": ["django.server"],
            "level": "INFO",
            "propagate": False,
            "filters": ["reset_tokens"],
        },
        "django.request": {"filters": ["reset_tokens"]},
    },
}
