"""The e31 client's wheel, as the portal offers it to partners: `make client-wheel` builds it into
static/downloads/ (make run does), and collectstatic carries it to STATIC_ROOT in production."""

from django.conf import settings
from django.templatetags.static import static


def client_wheel() -> str | None:
    """The static URL of the e31 wheel built for this portal; None when none is built."""
    folders = [*settings.STATICFILES_DIRS, settings.STATIC_ROOT]
    wheels = sorted({path.name for folder in folders for path in (folder / "downloads").glob("e31-*.whl")})
    return static(f"downloads/{wheels[-1]}") if wheels else None
