"""One voice: the same bad request sent by each of the four doors (the job form, the API, `manage.py submit`
and `e31 submit`) is refused in the same sentences, the service's, every one of them at once and in the same
order; the form and the API name each by its field; nothing is made, nothing is uploaded by the client, and no
value ends in a 500. It lives beside the client's tests for their `e31` fixture, the client against a live
portal."""

import shutil
from dataclasses import dataclass, field

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Job
from tests.api.loopback import upload
from tests.api.support import api_client
from tests.support import EXAMPLE, job_form

DEADLINE = "A deadline is a date and time such as 2026-12-01T18:00 (UTC unless it says otherwise), not 'soon'."
CLEAN_TABLE_PARAMS = "clean-table has no parameter 'bogus' (it takes: type_threshold, types)"
GPUS = ("request.gpus", "gpus")
HOURS = ("request.hours", "hours")
STAGED = ("retention.staged_days", "keep_days")
WIDTH = ("request.max_gpus", "max_gpus")


@dataclass(frozen=True)
class Asked:
    """A job as it is asked for, with every value as typed, and what each door should say to it: (the API's
    field, the form's field, the sentence) for each refusal, in order."""

    refused: list[tuple[str, str, str]]
    work: str = "clean-table"
    params: dict[str, str] = field(default_factory=dict)
    gpus: str = "2"
    hours: str = "1"
    deadline: str = ""
    keep_days: str = ""
    output_days: str = ""
    kind: str = ""
    max_gpus: str = ""
    in_the_form: bool = True  # a parameter the work does not take has no field to type it in

    def form(self) -> dict:
        typed = {"work": self.work, "gpus": self.gpus, "hours": self.hours, "deadline": self.deadline}
        typed.update(retention="keep" if self.keep_days else "delete", output_days=self.output_days)
        typed.update(request_kind=self.kind, max_gpus=self.max_gpus)
        if self.keep_days:
            typed["keep_days"] = self.keep_days
        typed.update({f"param-{self.work}-{name}": value for name, value in self.params.items()})
        return job_form(**typed)

    def body(self, upload_id: str) -> dict:
        retention = {"staged_days": self.keep_days or 0, "output_days": self.output_days or None}
        request = {"gpus": self.gpus, "hours": self.hours, "deadline": self.deadline or None}
        request.update(kind=self.kind, max_gpus=self.max_gpus or None)
        return {
            "work": {"kind": self.work, "params": self.params},
            "data": {"upload": upload_id},
            "request": request,
            "retention": retention,
        }

    def options(self) -> list[str]:
        """The options of `manage.py submit` and of `e31 submit` alike."""
        given = ["--work", self.work, "--gpus", self.gpus, "--hours", self.hours]
        given += [option for name, value in self.params.items() for option in ("--param", f"{name}={value}")]
        for option, value in (
            ("--deadline", self.deadline),
            ("--keep-days", self.keep_days),
            ("--keep-output-days", self.output_days),
            ("--request", self.kind),
            ("--max-gpus", self.max_gpus),
        ):
            given += [option, value] if value else []
        return given


ASKED = {
    "gpus 0": Asked([(*GPUS, "Ask for at least one GPU, not 0.")], gpus="0"),
    "gpus -1": Asked([(*GPUS, "Ask for at least one GPU, not -1.")], gpus="-1"),
    "gpus 1.5": Asked([(*GPUS, "GPUs must be a whole number, not '1.5'.")], gpus="1.5"),
    "gpus abc": Asked([(*GPUS, "GPUs must be a whole number, not 'abc'.")], gpus="abc"),
    "gpus 10**30": Asked([(*GPUS, "The fleet has 4 CPU slots online; ask for 4 or fewer.")], gpus=str(10**30)),
    "hours 0": Asked([(*HOURS, "Hours must be more than zero, not 0.")], hours="0"),
    "hours 1.234": Asked([(*HOURS, "Hours can have at most two decimals, not 1.234.")], hours="1.234"),
    "hours x": Asked([(*HOURS, "Hours must be a number, not 'x'.")], hours="x"),
    "a past deadline": Asked(
        [("request.deadline", "deadline", "The deadline, 2001-01-01 00:00 UTC, has passed; give a later one.")],
        deadline="2001-01-01T00:00",
    ),
    "an unreadable deadline": Asked([("request.deadline", "deadline", DEADLINE)], deadline="soon"),
    "an unknown work kind": Asked(
        [("work.kind", "work", "There is no work kind 'frobnicate'; the kinds are: ")], work="frobnicate"
    ),
    "an unknown parameter": Asked(
        [("work.params.bogus", "", CLEAN_TABLE_PARAMS)], params={"bogus": "1"}, in_the_form=False
    ),
    "a parameter's value": Asked(
        [
            (
                "work.params.type_threshold",
                "param-clean-table-type_threshold",
                "type_threshold must be at least 0.5, not 0.1",
            )
        ],
        params={"type_threshold": "0.1"},
    ),
    "staged days 500": Asked([(*STAGED, "Keep the staged copy 0 to 90 days, not 500.")], keep_days="500"),
    "staged days -1": Asked([(*STAGED, "Keep the staged copy 0 to 90 days, not -1.")], keep_days="-1"),
    "request elastic": Asked(
        [("request.kind", "request_kind", "A request is fixed or flexible, not 'elastic'.")], kind="elastic"
    ),
    "width cap 0": Asked([(*WIDTH, "The width cap must be at least 1, not 0.")], max_gpus="0"),
    "width cap 2.5": Asked([(*WIDTH, "The width cap must be a whole number of GPUs, not '2.5'.")], max_gpus="2.5"),
    "width cap past the fleet": Asked(
        [(*WIDTH, "The fleet has 4 online that can run clean-table; cap the width at 4 or fewer.")], max_gpus="64"
    ),
    "a width cap on a fixed request": Asked(
        [(*WIDTH, "A width cap is for a flexible request; a fixed one runs on exactly its GPUs.")],
        kind="fixed",
        max_gpus="2",
    ),
    "output days 0": Asked(
        [("retention.output_days", "output_days", "Keep the output 1 to 365 days, not 0.")], output_days="0"
    ),
    "all at once": Asked(
        [
            (
                "work.params.type_threshold",
                "param-clean-table-type_threshold",
                "type_threshold must be a float, not 'x'",
            ),
            (*GPUS, "Ask for at least one GPU, not 0."),
            (*HOURS, "Hours can have at most two decimals, not 1.234."),
            ("request.deadline", "deadline", "The deadline, 2001-01-01 00:00 UTC, has passed; give a later one."),
            (*STAGED, "Keep the staged copy 0 to 90 days, not 500."),
            ("retention.output_days", "output_days", "Keep the output 1 to 365 days, not 'a month'."),
        ],
        params={"type_threshold": "x"},
        gpus="0",
        hours="1.234",
        deadline="2001-01-01T00:00",
        keep_days="500",
        output_days="a month",
    ),
}


def through_the_form(partner_client, asked: Asked) -> list[tuple[str, str]]:
    return through_the_form_as_is(partner_client, asked.form())


def through_the_form_as_is(partner_client, form: dict) -> list[tuple[str, str]]:
    response = partner_client.post("/jobs/new/", form)
    assert response.status_code == 400
    return [(name, message) for name, messages in response.context["form"].errors.items() for message in messages]


def through_the_api(token: str, asked: Asked) -> list[tuple[str, str]]:
    api = api_client(token)
    answer = api.post("/api/v1/jobs/", asked.body(upload(api, EXAMPLE.read_bytes())), content_type="application/json")
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert (error["field"], error["message"]) == (error["errors"][0]["field"], error["errors"][0]["message"])
    return [(refusal["field"], refusal["message"]) for refusal in error["errors"]]


def through_manage_py(asked: Asked) -> list[str]:
    with pytest.raises(CommandError) as refused:
        call_command("submit", "--org", "partner-lab", "--as", "partner", "--data", str(EXAMPLE), *asked.options())
    lines = str(refused.value).splitlines()
    assert all(line.startswith("Refused: ") for line in lines), lines
    return [line.removeprefix("Refused: ") for line in lines]


def through_e31(e31, portal, asked: Asked) -> list[str]:
    shutil.copy(EXAMPLE, e31.folder / "customers.csv")
    mark = len(portal.lines())
    refused = e31("submit", "customers.csv", *asked.options())
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
    assert portal.requests("POST", "/api/v1/uploads/", after=mark) == [], "refused before a byte is uploaded"
    lines = refused.stderr.splitlines()
    assert all(line.startswith("e31: ") for line in lines), lines
    return [line.removeprefix("e31: ") for line in lines]


def said(expected: str, sentence: str) -> bool:
    """The sentence expected, or, for one that ends listing what there is (the work kinds), begun by it."""
    return sentence == expected or (expected.endswith(": ") and sentence.startswith(expected))


@pytest.mark.parametrize("asked", ASKED.values(), ids=ASKED.keys())
def test_every_door_refuses_a_request_in_the_services_sentences(
    partner_client, token, e31, portal, online_slots, asked
):
    api = through_the_api(token, asked)
    sentences = [sentence for _, sentence in api]
    assert [name for name, _ in api] == [name for name, _, _ in asked.refused]
    assert all(said(expected, sentence) for (_, _, expected), sentence in zip(asked.refused, sentences, strict=True))
    if asked.in_the_form:
        form = through_the_form(partner_client, asked)
        assert form == [(name, sentence) for (_, name, _), sentence in zip(asked.refused, sentences, strict=True)]
    assert through_manage_py(asked) == sentences
    assert through_e31(e31, portal, asked) == sentences
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("parts", "sentence"),
    [
        (
            ["http://localhost/a.csv", "http://localhost/a.csv?sig=1"],
            "Part 2 (http://localhost/a.csv?…) is part 1 again: give each part once.",
        ),
        (
            ["http://localhost/a.csv", "s3://bucket/b.csv"],
            "Part 2 (s3://bucket/b.csv) is an S3 URI and part 1 is a URL: the parts of one dataset are all URLs, "
            "all S3 objects or all server paths.",
        ),
    ],
    ids=["a part twice", "parts of two kinds"],
)
def test_every_door_refuses_a_part_in_the_services_sentence(
    partner_client, token, e31, portal, online_slots, parts, sentence
):
    options = ["--work", "clean-table", "--gpus", "1", "--hours", "1"]
    form = job_form(location="\n".join(parts), gpus="1")
    del form["data"]
    assert through_the_form_as_is(partner_client, form) == [("location", sentence)]
    body = {"work": {"kind": "clean-table"}, "data": {"location": parts}, "request": {"gpus": 1, "hours": 1}}
    error = api_client(token).post("/api/v1/jobs/", body, content_type="application/json").json()["error"]
    assert (error["field"], error["message"]) == ("data.location", sentence)
    with pytest.raises(CommandError) as refused:
        given = [option for part in parts for option in ("--data", part)]
        call_command("submit", "--org", "partner-lab", "--as", "partner", *given, *options)
    assert str(refused.value) == f"Refused: {sentence}"
    by_e31 = e31("submit", *[option for part in parts for option in ("--data", part)], *options)
    assert (by_e31.returncode, by_e31.stderr) == (1, f"e31: {sentence}\n")
    assert not Job.objects.exists()
