from django.urls import include, path

from jobs.pages import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_new, name="new"),
    path("example/customers.csv", views.example_dataset, name="example_dataset"),
    path("", include("jobs.uploads.urls")),
    path("<int:pk>/", views.job_detail, name="detail"),
    path("<int:pk>/progress/", views.job_progress, name="progress"),
    path("<int:pk>/charts/", views.job_charts, name="charts"),
    path("<int:pk>/cancel/", views.job_cancel, name="cancel"),
    path("<int:pk>/estimate/", views.job_estimate, name="estimate"),
    path("<int:pk>/pass/", views.job_pass, name="pass"),
    path("<int:pk>/output/", views.job_output, name="output"),
    path("<int:pk>/output/<str:name>", views.job_output_file, name="output_file"),
]
