"""A Hugging Face model folder packed into one .tar to upload, as the portal takes a model.

The same folder packs to the same file in the user's cache folder, so that an upload stopped half-way
goes on from where it stopped when the command is run again. What the portal never reads stays out:
hidden entries (.git, .cache) and, beside safetensors weights, pickle weights. Links are followed (a
Hugging Face cache's snapshot is links into its blobs): the portal takes only plain files.
"""

import contextlib
import hashlib
import os
import tarfile
from pathlib import Path

import platformdirs

PICKLE_SUFFIXES = frozenset({".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack"})


class PackError(ValueError):
    """The folder cannot be packed; the message is for the user."""


def files_of(folder: Path) -> list[tuple[str, Path]]:
    """(path inside the folder, file) for each file packed, in name order."""
    found = []
    for directory, names, files in os.walk(folder, followlinks=True):
        names[:] = sorted(name for name in names if not name.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                path = Path(directory, name)
                found.append((path.relative_to(folder).as_posix(), path))
    if not any(name.endswith(".safetensors") for name, _ in found):
        return found
    return [(name, path) for name, path in found if Path(name).suffix not in PICKLE_SUFFIXES]


def cache_folder() -> Path:
    return Path(platformdirs.user_cache_dir("e31")) / "models"


def pack(folder: Path, cache: Path | None = None) -> Path:
    """The folder as `<cache>/<fingerprint>/<name>.tar`, packed once for the folder as it is now."""
    files = files_of(folder)
    if not any(name == "config.json" for name, _ in files):
        raise PackError(f"{folder} holds no config.json: it is not a Hugging Face model folder.")
    facts = hashlib.sha256(str(folder.resolve()).encode())
    for name, path in files:
        stat = path.stat()
        facts.update(f"\0{name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    packed = (cache or cache_folder()) / facts.hexdigest()[:32] / f"{folder.resolve().name}.tar"
    if packed.is_file():
        return packed
    packed.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = packed.with_suffix(".part")
    with tarfile.open(scratch, "w", format=tarfile.PAX_FORMAT) as archive:
        for name, path in files:
            member = tarfile.TarInfo(f"{packed.stem}/{name}")
            member.size, member.mtime, member.mode = path.stat().st_size, int(path.stat().st_mtime), 0o644
            with path.open("rb") as handle:
                archive.addfile(member, handle)
    os.replace(scratch, packed)
    return packed


def discard(packed: Path) -> None:
    """Remove a packed folder once its job has it."""
    packed.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # something else is in its folder
        packed.parent.rmdir()
