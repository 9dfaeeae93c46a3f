from django.contrib import admin
from django.urls import include, path

from portal import views

urlpatterns = [
    path("", views.landing, name="landing"),
    path("design-partners/", views.design_partners, name="design_partners"),
    path("design-partners/apply/", views.apply, name="apply"),
    path("design-partners/apply/thanks/", views.applied, name="applied"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("jobs/", include("jobs.urls")),
    path("billing/", include("billing.urls")),
    path("admin/", admin.site.urls),
]
