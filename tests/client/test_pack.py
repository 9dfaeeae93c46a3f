"""A model folder packed for upload: the same folder gives the same file (so its upload resumes), what
the portal never reads stays out, and links are followed into plain files."""

import tarfile

import pytest
from e31 import pack

from tests.hf_models import checkable_bert


def members(packed) -> dict[str, bytes]:
    with tarfile.open(packed) as archive:
        return {member.name: archive.extractfile(member).read() for member in archive.getmembers()}


def test_it_packs_the_same_folder_into_the_same_file_once(tmp_path):
    folder = checkable_bert(tmp_path / "bert")
    first = pack.pack(folder, tmp_path / "cache")
    stamp = first.stat().st_mtime_ns
    again = pack.pack(folder, tmp_path / "cache")
    assert (again, again.stat().st_mtime_ns) == (first, stamp), "not packed again: its upload can resume"
    assert first.name == "bert.tar"
    assert members(first) == {f"bert/{path.name}": path.read_bytes() for path in folder.iterdir()}, (
        "each file under the folder's name"
    )
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    assert pack.pack(folder, tmp_path / "cache") != first, "a changed folder is packed anew"


def test_it_leaves_out_hidden_entries_and_pickles_beside_safetensors_and_follows_links(tmp_path):
    folder = checkable_bert(tmp_path / "bert")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: main")
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    blob = tmp_path / "blobs" / "tokenizer"  # as a Hugging Face cache's snapshot links into its blobs
    blob.parent.mkdir()
    (folder / "tokenizer.json").rename(blob)
    (folder / "tokenizer.json").symlink_to(blob)
    found = members(pack.pack(folder, tmp_path / "cache"))
    names = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    assert sorted(found) == [f"bert/{name}" for name in names]
    assert found["bert/tokenizer.json"] == blob.read_bytes()


def test_it_refuses_a_folder_that_is_no_model(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("a")
    with pytest.raises(pack.PackError, match=r"notes holds no config\.json: it is not a Hugging Face model folder\."):
        pack.pack(tmp_path / "notes", tmp_path / "cache")
