"""The resumable-upload endpoints' routes, included in the jobs namespace: jobs:uploads and jobs:upload."""

from django.urls import path

from jobs.uploads import views

urlpatterns = [
    path("uploads/", views.upload_create, name="uploads"),
    path("uploads/<uuid:upload_id>/", views.upload_detail, name="upload"),
]
