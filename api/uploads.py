"""Resumable uploads over the API (docs/api.md, "Uploads"): /api/v1/uploads/ is served by the portal's own tus
views (jobs/uploads/views.py), the same code as /jobs/uploads/, with the token in place of the session.

Django REST framework authenticates the request with the bearer token only (a session is not enough: it is 401,
in the API's JSON, as on every route) and hands the view the token's user, on the request the view reads; its
views are exempt from CSRF, which a token does not need. Everything else is the tus view's: its answers, its
errors in tus's terms (a status and a sentence), and the Location of a new upload, which names the route it was
created at (/api/v1/uploads/<id>/). Making an upload counts against E31_API_RATE; its chunks do not, since a
large file is sent in many of them."""

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, throttle_classes

from api.idempotency import KEY_PARAMETER, idempotent
from api.negotiation import any_accept
from api.throttling import TokenRate
from jobs.uploads import views as tus


@extend_schema(
    summary="tus 1.0: OPTIONS says what is supported, POST creates an upload (Upload-Length, Upload-Metadata)",
    request=None,
    parameters=[KEY_PARAMETER],
    responses={201: None, 204: None},
)
@api_view(["OPTIONS", "POST"])
@throttle_classes([TokenRate])
@any_accept
@idempotent
def upload_create(request):
    return tus.upload_create(request._request)


@extend_schema(
    summary="tus 1.0: HEAD the confirmed offset, PATCH a chunk (with Upload-Checksum), DELETE the upload",
    request=None,
    responses={200: None, 204: None},
)
@api_view(["HEAD", "PATCH", "DELETE"])
@throttle_classes([])
@any_accept
def upload_detail(request, upload_id):
    return tus.upload_detail(request._request, upload_id=upload_id)
