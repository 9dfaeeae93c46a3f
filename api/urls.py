"""The routes under /api/v1/ (docs/api.md). tests/api/test_it_isolates_organisations.py lists every route that
takes an object's id: a new one must be added there."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from api import docs, errors, submit, uploads, views
from api.webhooks import views as webhooks

app_name = "api"
urlpatterns = [
    path("", views.index, name="index"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", docs.SwaggerDocs.as_view(url_name="api:schema"), name="docs"),
    path("me/", views.me, name="me"),
    # Making jobs, uploads and webhooks (api/submit.py, api/uploads.py, api/webhooks/).
    path("jobs/", submit.job_create, name="jobs"),
    path("jobs/<int:pk>/estimate/", submit.job_estimate, name="estimate"),
    path("jobs/<int:pk>/pass/", submit.job_pass, name="pass"),
    path("jobs/<int:pk>/webhooks/", webhooks.job_deliveries, name="job_webhooks"),
    path("uploads/", uploads.upload_create, name="uploads"),
    path("uploads/<uuid:upload_id>/", uploads.upload_detail, name="upload"),
    path("webhooks/", webhooks.endpoint_list, name="webhooks"),
    path("webhooks/<int:pk>/", webhooks.endpoint_detail, name="webhook"),
    # Any other path under /api/ is answered in JSON too.
    re_path(r"^.*$", errors.not_found, name="no_such_route"),
]
