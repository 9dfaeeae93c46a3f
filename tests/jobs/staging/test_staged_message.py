"""The timeline's line for a job staged counts in words: one shard, not "1 shards"."""

from jobs.staging.stage import staged_message

SHA = "607010b323a9" + "0" * 52


def test_it_says_one_of_each_in_the_singular():
    assert staged_message(1, 1, 1, SHA) == "staged 1 byte, 1 record in 1 shard, sha256 607010b323a9…"


def test_it_says_many_in_the_plural():
    line = staged_message(535_024, 5_000, 10, SHA)
    assert line == "staged 535,024 bytes, 5,000 records in 10 shards, sha256 607010b323a9…"
