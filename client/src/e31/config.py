"""Where the client finds the portal and its token: E31_URL and E31_TOKEN, or else the file `e31 login`
wrote in the user's config folder (readable by its owner alone)."""

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "e31"


class ConfigError(Exception):
    """The client is not set up: no URL or no token anywhere, or a config file that does not read."""


@dataclass(frozen=True)
class Config:
    url: str
    token: str


def config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP)) / "config.json"


def normalise_url(url: str) -> str:
    """The portal's root URL: scheme and host, without a trailing slash or the API's own path."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"The portal's URL starts with https:// (or http://), not {url!r}.")
    for suffix in ("/api/v1", "/api"):
        url = url.removesuffix(suffix)
    return url


def read_file(path: Path | None = None) -> dict[str, str]:
    path = path or config_path()
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} does not read as e31's config ({error}); run e31 login again.") from None
    return {key: str(value) for key, value in found.items() if key in ("url", "token") and value}


def load(env: Mapping[str, str] = os.environ, path: Path | None = None) -> Config:
    """The URL and token in force: each from the environment when set there, else from the file."""
    stored = read_file(path)
    url = env.get("E31_URL") or stored.get("url")
    token = env.get("E31_TOKEN") or stored.get("token")
    if not url or not token:
        missing = " and ".join(name for name, value in (("E31_URL", url), ("E31_TOKEN", token)) if not value)
        raise ConfigError(f"Run e31 login, or set {missing}.")
    return Config(normalise_url(url), token.strip())


def save(url: str, token: str, path: Path | None = None) -> Path:
    """Store the URL and token for the user alone: the folder 0700, the file 0600 from its first byte."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".new")
    scratch.unlink(missing_ok=True)
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump({"url": normalise_url(url), "token": token.strip()}, handle)
        handle.write("\n")
    os.replace(scratch, path)
    return path
