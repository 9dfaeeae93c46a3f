"""The routes under /api/v1/ (docs/api.md). tests/api/test_it_isolates_organisations.py lists every route that
takes an object's id: a new one must be added there."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from api import docs, errors, jobs, ledger, views

app_name = "api"
urlpatterns = [
    path("", views.index, name="index"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", docs.SwaggerDocs.as_view(url_name="api:schema"), name="docs"),
    path("me/", views.me, name="me"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job"),
    path("jobs/<int:pk>/events/", jobs.job_events, name="events"),
    path("jobs/<int:pk>/manifest/", jobs.job_manifest, name="manifest"),
    path("jobs/<int:pk>/output/<str:name>", jobs.job_output_file, name="output_file"),
    path("jobs/<int:pk>/cancel/", jobs.job_cancel, name="cancel"),
    path("jobs/<int:pk>/receipt/", jobs.job_receipt, name="receipt"),
    path("ledger/", ledger.ledger, name="ledger"),
    path("ledger.csv", ledger.ledger_csv, name="ledger_csv"),
    path("ledger.json", ledger.ledger_json, name="ledger_json"),
    # Any other path under /api/ is answered in JSON too.
    re_path(r"^.*$", errors.not_found, name="no_such_route"),
]
