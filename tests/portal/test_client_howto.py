"""The partner-facing pages offer the e31 client, not the server's `manage.py submit`: its wheel as
this portal serves it, `e31 login` with this portal's address and a first job, ready to copy."""

import pytest

from tests.support import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def static_folder(tmp_path, settings):
    settings.STATICFILES_DIRS = [tmp_path / "static"]
    settings.STATIC_ROOT = tmp_path / "collected"
    (tmp_path / "static" / "downloads").mkdir(parents=True)
    settings.STATIC_ROOT.mkdir()  # whitenoise looks in it
    return tmp_path / "static" / "downloads"


def test_it_shows_the_client_with_this_portals_address(client, static_folder, settings):
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    (static_folder / "e31-0.1.0-py3-none-any.whl").write_bytes(b"PK")
    page = client.get("/design-partners/", HTTP_HOST="portal.example.com").content.decode()
    assert "manage.py submit" not in page
    assert "pip install http://portal.example.com/static/downloads/e31-0.1.0-py3-none-any.whl" in page
    assert "e31 login --url http://portal.example.com\n" in page
    assert "e31 submit customers.csv --work clean-table --gpus 2 --hours 1 --wait -o out/" in page
    assert 'data-copy="client-commands"' in page and 'id="client-commands"' in page


def test_it_offers_the_newest_wheel_built(client, static_folder):
    for version in ("0.1.0", "0.2.0"):
        (static_folder / f"e31-{version}-py3-none-any.whl").write_bytes(b"PK")
    assert "/static/downloads/e31-0.2.0-py3-none-any.whl" in client.get("/design-partners/").content.decode()


def test_it_says_so_when_no_wheel_is_built(client, static_folder):
    page = client.get("/design-partners/").content.decode()
    assert "pip install http" not in page
    assert "make client-wheel" in page


def test_the_tokens_page_shows_how_to_use_a_token(partner, static_folder):
    (static_folder / "e31-0.1.0-py3-none-any.whl").write_bytes(b"PK")
    page = client_for(partner).get("/account/tokens/").content.decode()
    assert "e31 login --url http://testserver" in page
