"""The resumable-upload endpoints (tus 1.0, see resumable.py): create an upload, then ask its offset (with
the CRC-32 of the bytes before it, Upload-Offset-Checksum), send its chunks or discard it. Members of an
organisation only: logged in on the pages, or by an API token (api/uploads.py serves these same views under
/api/v1/uploads/)."""

from functools import wraps

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotAllowed
from django.urls import reverse
from django.utils.http import http_date

from jobs.models import Upload
from jobs.uploads import resumable
from portal.models import organisation_for


def _tus(response: HttpResponse) -> HttpResponse:
    response["Tus-Resumable"] = resumable.VERSION
    response["Cache-Control"] = "no-store"
    return response


def _tus_error(error: resumable.UploadError) -> HttpResponse:
    response = HttpResponse(str(error), status=error.status, content_type="text/plain; charset=utf-8")
    if error.status == 412:
        response["Tus-Version"] = resumable.VERSION
    return _tus(response)


def _tus_request(view):
    """Resumable-upload endpoints: members of an organisation only, answers in the protocol's terms."""

    @wraps(view)
    def checked(request, *args, **kwargs):
        try:
            if request.method != "OPTIONS" and request.headers.get("Tus-Resumable") != resumable.VERSION:
                raise resumable.UploadError(412, f"Send Tus-Resumable: {resumable.VERSION}.")
            organisation = organisation_for(request.user)
            if organisation is None:
                raise resumable.UploadError(403, "Log in as a member of an organisation to upload.")
            return _tus(view(request, organisation, *args, **kwargs))
        except resumable.UploadError as error:
            return _tus_error(error)

    return checked


@_tus_request
def upload_create(request, organisation):
    if request.method == "OPTIONS":
        response = HttpResponse(status=204)
        response["Tus-Version"] = resumable.VERSION
        response["Tus-Extension"] = resumable.EXTENSIONS
        response["Tus-Max-Size"] = settings.E31_MAX_DATASET_BYTES
        response["Tus-Checksum-Algorithm"] = ",".join(resumable.ALGORITHMS)
        return response
    if request.method != "POST":
        return HttpResponseNotAllowed(["OPTIONS", "POST"])
    upload = resumable.create(
        organisation, request.user, request.headers.get("Upload-Length"), request.headers.get("Upload-Metadata", "")
    )
    response = HttpResponse(status=201)
    # The upload's own route beside the one that created it: /jobs/uploads/<id>/, or the API's /api/v1/uploads/<id>/.
    response["Location"] = reverse(f"{request.resolver_match.namespace}:upload", args=[upload.pk])
    response["Upload-Expires"] = http_date(upload.expires_at.timestamp())
    return response


@_tus_request
def upload_detail(request, organisation, upload_id):
    upload = Upload.objects.filter(organisation=organisation, pk=upload_id).first()
    if upload is None:
        raise resumable.UploadError(404, "There is no such upload.")
    if request.method == "HEAD":
        if upload.expired:
            raise resumable.UploadError(410, "The upload expired and its data was deleted; start it again.")
        response = HttpResponse(status=200)
    elif request.method == "PATCH":
        if request.content_type != resumable.CHUNK_TYPE:
            raise resumable.UploadError(415, f"Send chunks as {resumable.CHUNK_TYPE}.")
        resumable.write_chunk(
            upload,
            request.headers.get("Upload-Offset"),
            request,
            request.META.get("CONTENT_LENGTH"),
            request.headers.get("Upload-Checksum", ""),
        )
        response = HttpResponse(status=204)
    elif request.method == "DELETE":
        resumable.discard(upload)
        return HttpResponse(status=204)
    else:
        return HttpResponseNotAllowed(["HEAD", "PATCH", "DELETE"])
    upload.refresh_from_db()
    response["Upload-Offset"] = upload.offset
    if upload.crc32 is not None:
        response[resumable.OFFSET_CHECKSUM] = resumable.crc32_header(upload.crc32)
    response["Upload-Length"] = upload.length
    response["Upload-Expires"] = http_date(upload.expires_at.timestamp())
    return response
