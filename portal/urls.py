from django.contrib import admin
from django.urls import include, path

from portal import views

# The operators' console without the stock sidebar of every model: its lists (applications, jobs) take the width
# of a laptop's screen, and its index and breadcrumbs lead everywhere the sidebar did.
admin.site.enable_nav_sidebar = False

handler400 = "portal.views.bad_request"

urlpatterns = [
    path("", views.landing, name="landing"),
    path("design-partners/", views.design_partners, name="design_partners"),
    path("design-partners/apply/", views.apply, name="apply"),
    path("design-partners/apply/thanks/", views.applied, name="applied"),
    # Before Django's own, which it replaces: throttled, in the portal's words, with the portal's address.
    path("accounts/password_reset/", views.PasswordReset.as_view(), name="password_reset"),
    path("accounts/login/", views.Login.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("jobs/", include("jobs.urls")),
    path("billing/", include("billing.urls")),
    path("account/", views.account, name="account"),
    path("account/tokens/", include("api.token_urls")),
    path("api/", include("api.urls")),
    path("admin/", admin.site.urls),
    # What browsers and crawlers ask for without reading the page's <link rel="icon">.
    path("favicon.ico", views.favicon),
]
