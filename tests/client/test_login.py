"""`e31 login` against the portal the tests start: the token checked and kept for the user alone;
a token the portal refuses said in one line, and kept nowhere."""

import json
import stat

NO_ENV = {"E31_URL": "", "E31_TOKEN": ""}


def test_it_logs_in_and_keeps_the_token_for_the_user_alone(e31, portal, token, tmp_path):
    done = e31("login", "--url", portal.url + "/", input=token + "\n", **NO_ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Logged in to {portal.url} as partner")
    path = tmp_path / "config" / "e31" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": portal.url, "token": token}
    listed = e31("jobs", **NO_ENV)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert listed.stdout.startswith("ID")


def test_it_refuses_a_bad_token_in_one_line(e31, portal, tmp_path):
    bad = "e31_" + "0" * 64
    refused = e31("jobs", E31_TOKEN=bad)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.startswith("e31: ") and refused.stderr.count("\n") == 1
    login = e31("login", "--url", portal.url, input=bad + "\n", **NO_ENV)
    assert login.returncode == 1 and login.stderr.count("\n") == 1
    assert not (tmp_path / "config" / "e31" / "config.json").exists()
