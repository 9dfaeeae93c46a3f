"""The routes under /api/ (docs/api.md): version 1's, and a JSON 404 for any other path under /api/.
tests/api/test_it_isolates_organisations.py lists every route: a new one must be added there."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from api import docs, errors, jobs, ledger, submit, uploads, views
from api.webhooks import views as webhooks

app_name = "api"
urlpatterns = [
    path("v1/", views.index, name="index"),
    path("v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs/", docs.SwaggerDocs.as_view(url_name="api:schema"), name="docs"),
    path("v1/me/", views.me, name="me"),
    path("v1/work-kinds/", views.work_kinds, name="work_kinds"),
    path("v1/jobs/", jobs.job_list, name="jobs"),
    path("v1/jobs/<int:pk>/", jobs.job_detail, name="job"),
    path("v1/jobs/<int:pk>/events/", jobs.job_events, name="events"),
    path("v1/jobs/<int:pk>/manifest/", jobs.job_manifest, name="manifest"),
    path("v1/jobs/<int:pk>/output/<str:name>", jobs.job_output_file, name="output_file"),
    path("v1/jobs/<int:pk>/cancel/", jobs.job_cancel, name="cancel"),
    path("v1/jobs/<int:pk>/receipt/", jobs.job_receipt, name="receipt"),
    path("v1/jobs/<int:pk>/estimate/", submit.job_estimate, name="estimate"),
    path("v1/jobs/<int:pk>/pass/", submit.job_pass, name="pass"),
    path("v1/jobs/<int:pk>/webhooks/", webhooks.job_deliveries, name="job_webhooks"),
    path("v1/uploads/", uploads.upload_create, name="uploads"),
    path("v1/uploads/<uuid:upload_id>/", uploads.upload_detail, name="upload"),
    path("v1/webhooks/", webhooks.endpoint_list, name="webhooks"),
    path("v1/webhooks/<int:pk>/", webhooks.endpoint_detail, name="webhook"),
    path("v1/ledger/", ledger.ledger, name="ledger"),
    path("v1/ledger.csv", ledger.ledger_csv, name="ledger_csv"),
    path("v1/ledger.json", ledger.ledger_json, name="ledger_json"),
    # Any other path under /api/ (another version too) is answered in JSON.
    re_path(r"^.*$", errors.not_found, name="no_such_route"),
]
