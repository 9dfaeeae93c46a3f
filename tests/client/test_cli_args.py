"""The command line's own refusals, before it asks the portal anything: one line each, and the exit
status that says which kind of failure it was."""

import subprocess
import sys

import pytest
from e31 import cli


@pytest.fixture(autouse=True)
def no_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("E31_URL", "E31_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        status = cli.run(list(argv))
    except SystemExit as exit:
        status = exit.code
    written = capsys.readouterr()
    return status, written.out, written.err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["submit", "data.csv", "--gpus", "2", "--hours", "1"], "the following arguments are required: --work"),
        (["submit", "d.csv", "--work", "w", "--gpus", "1", "--hours", "1", "--param", "dedupe"], "not 'dedupe'"),
        (["submit", "d.csv", "--work", "w", "--gpus", "1", "--hours", "1", "--chunk-size", "8X"], "a size such as 8M"),
        (["ledger", "--month", "2026-13"], "a month as YYYY-MM, not '2026-13'"),
        (["ledger", "--csv", "--json"], "argument --json: not allowed with argument --csv"),
        (["status", "forty-two"], "argument id: invalid int value: 'forty-two'"),
        (["teleport"], "argument COMMAND: invalid choice: 'teleport'"),
    ],
)
def test_it_refuses_bad_arguments_in_one_line(capsys, argv, line):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("e31: ") and line in err


def test_it_says_how_to_log_in_when_it_has_no_config(capsys):
    assert run(capsys, "jobs") == (1, "", "e31: Run e31 login, or set E31_URL and E31_TOKEN.\n")


def test_it_refuses_output_without_wait(capsys, monkeypatch):
    monkeypatch.setenv("E31_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("E31_TOKEN", "e31_x")
    status, _, err = run(capsys, "submit", "d.csv", "--work", "w", "--gpus", "1", "--hours", "1", "-o", "out")
    assert (status, err) == (1, "e31: -o needs --wait (or run e31 download later).\n")


def test_it_says_a_file_is_missing_before_it_connects(capsys, monkeypatch):
    monkeypatch.setenv("E31_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("E31_TOKEN", "e31_x")
    status, _, err = run(capsys, "submit", "nowhere.csv", "--work", "w", "--gpus", "1", "--hours", "1")
    assert status == 1
    assert err == "e31: There is no file nowhere.csv (data is a file, an https:// URL or an s3:// location).\n"


def test_it_says_in_one_line_that_the_portal_is_not_there(capsys, monkeypatch):
    monkeypatch.setenv("E31_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("E31_TOKEN", "e31_x")
    status, out, err = run(capsys, "jobs")
    assert (status, out) == (1, "")
    assert err.startswith("e31: Cannot reach http://127.0.0.1:9/api/v1/jobs/:") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "size"), [("8M", 8 * 1024**2), ("512K", 512 * 1024), ("1048576", 1048576), ("2MiB", 2 * 1024**2)]
)
def test_it_reads_chunk_sizes(text, size):
    assert cli.parse_size(text) == size


def test_it_takes_s3_credentials_from_the_options_or_the_environment():
    args = cli.build_parser().parse_args(
        ["submit", "s3://b/k.csv", "--work", "w", "--gpus", "1", "--hours", "1", "--s3-secret", "from-option"]
    )
    env = {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "from-env", "AWS_DEFAULT_REGION": "eu-west-1"}
    assert cli.s3_credentials(args, env) == {
        "access_key_id": "AKIA",
        "secret_access_key": "from-option",
        "region": "eu-west-1",
        "session_token": "",
    }
    with pytest.raises(cli.Failure, match="Give both --s3-key-id and --s3-secret"):
        cli.s3_credentials(args, {})
    args.s3_secret = None
    assert cli.s3_credentials(args, {"AWS_DEFAULT_REGION": "eu-west-1"}) is None


def test_a_models_own_s3_credentials_come_from_its_options_only():
    submit = ["submit", "d.csv", "--work", "w", "--gpus", "1", "--hours", "1", "--model", "s3://models/bert/"]
    own = ["--model-s3-key-id", "AKIA2", "--model-s3-secret", "model-secret", "--model-s3-region", "us-east-2"]
    args = cli.build_parser().parse_args([*submit, *own])
    env = {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "data-secret", "AWS_SESSION_TOKEN": "t"}
    assert cli.s3_credentials(args, {}, "model_s3") == {
        "access_key_id": "AKIA2",
        "secret_access_key": "model-secret",
        "region": "us-east-2",
        "session_token": "",
    }
    assert cli.s3_credentials(args, env)["secret_access_key"] == "data-secret"
    args.model_s3_secret = None
    with pytest.raises(cli.Failure, match=r"^Give both --model-s3-key-id and --model-s3-secret\.$"):
        cli.s3_credentials(args, {}, "model_s3")


def test_it_prints_a_receipt_whichever_way_its_totals_come():
    entry = {"job": 4, "kind": "hold", "gpus": 2, "seconds": 90, "gpu_hours": "0.050000", "rate": "3.6000"}
    entry.update(amount="0.1800", currency="USD")
    assert cli.receipt_totals({"totals": [{"currency": "USD", "amount": "0.18"}]}) == [("USD", "0.18")]
    assert cli.receipt_totals({"totals": {"USD": "0.18", "EUR": "1"}}) == [("USD", "0.18"), ("EUR", "1")]
    assert cli.receipt_totals({"total": {"currency": "USD", "amount": "0.18"}}) == [("USD", "0.18")]
    assert cli.receipt_entries({"entries": [entry]}) == [entry]
    assert cli.ledger_line(entry) == "job 4 hold: 2 × 90 s = 0.05 GPU-hours at 3.60 USD per GPU-hour = 0.18 USD"
    staging = {"job": 4, "kind": "staging", "gpus": 0, "seconds": 2, "bytes": 167_680_567}
    staging.update(amount="0.0000", currency="USD")
    assert cli.ledger_line(staging) == "job 4 staging: 167.7 MB in 2 s = 0.00 USD"


def test_it_shows_the_portals_times_in_utc():
    assert cli.moment_text("2026-12-01T15:29:07.854347+00:00") == "2026-12-01 15:29 UTC"
    assert cli.moment_text("2026-12-01T16:29:07+01:00", seconds=True) == "2026-12-01 15:29:07"
    assert cli.moment_text("soon") == "soon"


def test_it_refuses_an_output_name_that_leaves_the_folder():
    for name in ("../evil", "/etc/passwd", "a/b", "..", ""):
        with pytest.raises(cli.Failure, match="refusing to write it"):
            cli.safe_name(name)
    assert cli.safe_name("output.parquet") == "output.parquet"


def test_it_ends_quietly_when_what_reads_its_output_closes_it():
    """`e31 ledger | head -5`: the pipe closes while e31 writes; it says nothing of it."""
    script = (
        "import sys\nfrom e31 import cli\n"
        "def closed_pipe(args):\n    raise BrokenPipeError(32, 'Broken pipe')\n"
        "cli.cmd_ledger = closed_pipe\nsys.argv = ['e31', 'ledger']\ncli.main()\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert (ended.returncode, ended.stderr) == (1, "")


def test_after_a_sample_it_says_to_run_the_pass_unless_the_sample_ran_over_every_record():
    measured = {"records": 600, "records_total": 36_000}
    assert cli.sample_hint({"id": 9, "sample": {"result": measured}}) == (
        "Sample 9 sized the full pass: e31 estimate 9, then e31 pass 9 --gpus N."
    )
    assert cli.sample_hint({"id": 9, "sample": {"result": {**measured, "records": 36_000}}}) == (
        "Sample 9 ran over every record: its output is the whole result; no pass is needed."
    )
