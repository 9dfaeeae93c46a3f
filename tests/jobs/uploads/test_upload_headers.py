"""Counts in protocol headers are ASCII digits and nothing else: a resumable upload's Upload-Length,
Upload-Offset and Content-Length, and a fetched file's Content-Length. Anything else is a 400 (or a staging
error) that says which header, never a 500, and leaves the upload as it was."""

import pytest

from jobs.models import Upload
from jobs.staging.fetch import FetchError
from tests.api.support import api_client, token_for
from tests.jobs.staging.reading import LOCAL, get
from tests.jobs.uploads.tus import DATA, TUS, create, created, send, upload_of

pytestmark = pytest.mark.django_db

# Superscript two (isdigit() but not int()), Arabic-Indic digits (int() reads them), a sign, spaces, an
# exponent, hexadecimal, an underscore (int() takes it), a fraction, and more digits than int() reads.
NOT_COUNTS = ["²", "1²", "١٢٣", "٥", "+5", " 5", "5 ", "-1", "1e3", "0x10", "1_000", "5.0", "", "9" * 5000]
HUGE = str(10**30)


@pytest.mark.parametrize("length", NOT_COUNTS)
def test_it_refuses_an_upload_length_that_is_not_ascii_digits(partner_client, length):
    response = create(partner_client, length=length)
    assert response.status_code == 400, response.content
    assert "Upload-Length must be a whole number of bytes" in response.content.decode()
    assert not Upload.objects.exists()


@pytest.mark.parametrize("offset", NOT_COUNTS)
def test_it_refuses_an_upload_offset_that_is_not_ascii_digits(partner_client, offset):
    url = created(partner_client)
    response = send(partner_client, url, 0, DATA[:100], HTTP_UPLOAD_OFFSET=offset)
    assert response.status_code == 400, response.content
    assert "Upload-Offset must be a whole number of bytes" in response.content.decode()
    assert upload_of(url).offset == 0


@pytest.mark.parametrize("length", [value for value in NOT_COUNTS if value])
def test_it_refuses_a_chunk_whose_content_length_is_not_ascii_digits(partner_client, length):
    url = created(partner_client)
    response = send(partner_client, url, 0, DATA[:100], CONTENT_LENGTH=length)
    assert response.status_code == 400, response.content
    assert "Content-Length must be a whole number of bytes" in response.content.decode()
    assert upload_of(url).offset == 0


def test_it_answers_huge_counts_with_the_limit_they_pass(partner_client):
    response = create(partner_client, length=HUGE)
    assert response.status_code == 413
    assert "more than the 53,687,091,200-byte (50\xa0GiB) limit for a dataset" in response.content.decode()
    url = created(partner_client)
    response = send(partner_client, url, 0, DATA[:100], HTTP_UPLOAD_OFFSET=HUGE)
    assert (response.status_code, response.content.decode()) == (
        409,
        f"The upload is at byte 0, not {HUGE}: resume from there.",
    )
    response = send(partner_client, url, 0, DATA[:100], CONTENT_LENGTH=HUGE)
    assert response.status_code == 400
    assert f"The chunk ends at byte {HUGE}, past the upload's" in response.content.decode()
    assert upload_of(url).offset == 0


def test_it_still_takes_plain_ascii_counts(partner_client):
    url = created(partner_client, length=len(DATA))
    assert send(partner_client, url, 0, DATA[:100]).status_code == 204
    assert send(partner_client, url, 100, DATA[100:], checksum=None).status_code == 204
    assert upload_of(url).complete


@pytest.mark.parametrize("declared", [b"\xb2", b"1\xb2", b"+5", b"-1", b"1e3", b"0x10", b"1_000", b"9" * 5000])
def test_it_refuses_a_fetched_file_whose_content_length_is_not_ascii_digits(raw_server, declared):
    # http.client reads headers as Latin-1, so the byte B2 arrives as "²".
    url = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: " + declared + b"\r\n\r\n" + b"x" * 10)
    with pytest.raises(FetchError, match="sent an invalid Content-Length"):
        get(url, allowed_hosts=LOCAL)


def test_it_refuses_a_fetched_file_of_a_huge_content_length(raw_server):
    url = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(10**30).encode() + b"\r\n\r\n" + b"x" * 10)
    with pytest.raises(FetchError, match="is larger than the 10000000 byte limit"):
        get(url, allowed_hosts=LOCAL)


# What a header carries past ASCII arrives as Latin-1 characters: base64 has none of them.
NOT_BASE64 = ["ZGF0YS5jc3Y=é", "é", "ZGF0YS5jc3Y", "!!!!"]


@pytest.mark.parametrize("value", NOT_BASE64)
@pytest.mark.parametrize("path", ["/jobs/uploads/", "/api/v1/uploads/"])
def test_it_refuses_metadata_that_is_not_base64_on_both_doors(partner, partner_client, path, value):
    client = api_client(token_for(partner)) if path.startswith("/api/") else partner_client
    response = client.post(path, **TUS, HTTP_UPLOAD_LENGTH="10", HTTP_UPLOAD_METADATA=f"filename {value}")
    assert response.status_code == 400, response.content
    assert "The metadata value of 'filename' is not base64." in response.content.decode()
    assert not Upload.objects.exists()


@pytest.mark.parametrize("value", NOT_BASE64)
def test_it_refuses_a_checksum_that_is_not_base64_and_keeps_the_upload(partner_client, value):
    url = created(partner_client)
    response = send(partner_client, url, 0, DATA[:100], checksum=f"sha256 {value}")
    assert response.status_code == 400, response.content
    assert "The checksum is not base64." in response.content.decode()
    assert upload_of(url).offset == 0
