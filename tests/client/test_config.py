"""The client's config: the file `e31 login` writes is the user's alone, and E31_URL/E31_TOKEN win."""

import stat

import pytest
from e31 import config


@pytest.fixture
def config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def test_it_stores_the_token_readable_by_its_owner_alone(config_home):
    path = config.save("https://portal.example/", "e31_" + "a" * 64)
    assert path == config_home / "e31" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert config.load(env={}) == config.Config("https://portal.example", "e31_" + "a" * 64)


def test_it_keeps_the_mode_when_login_writes_over_a_file_made_wider(config_home):
    path = config.save("https://one.example", "e31_one")
    path.chmod(0o644)
    config.save("https://two.example", "e31_two")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config.load(env={}).url == "https://two.example"


def test_it_lets_each_variable_override_the_file(config_home):
    config.save("https://stored.example", "e31_stored")
    assert config.load(env={"E31_URL": "https://env.example"}) == config.Config("https://env.example", "e31_stored")
    assert config.load(env={"E31_TOKEN": "e31_env"}) == config.Config("https://stored.example", "e31_env")


def test_it_needs_no_file_when_the_environment_has_both(config_home):
    found = config.load(env={"E31_URL": "http://127.0.0.1:8000/api/v1/", "E31_TOKEN": " e31_x\n"})
    assert found == config.Config("http://127.0.0.1:8000", "e31_x")


def test_it_says_what_is_missing(config_home):
    with pytest.raises(config.ConfigError, match=r"^Run e31 login, or set E31_URL and E31_TOKEN\.$"):
        config.load(env={})
    with pytest.raises(config.ConfigError, match=r"set E31_TOKEN\.$"):
        config.load(env={"E31_URL": "https://portal.example"})


def test_it_refuses_a_url_without_a_scheme(config_home):
    with pytest.raises(config.ConfigError, match="starts with https://"):
        config.load(env={"E31_URL": "portal.example", "E31_TOKEN": "e31_x"})


def test_it_says_which_file_does_not_read(config_home):
    path = config_home / "e31" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(config.ConfigError, match=r"config\.json does not read as e31's config"):
        config.load(env={})
