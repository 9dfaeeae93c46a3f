from django.urls import path

from billing import views

app_name = "billing"
urlpatterns = [
    path("ledger/", views.ledger, name="ledger"),
    path("ledger.csv", views.ledger_csv, name="ledger_csv"),
    path("ledger.json", views.ledger_json, name="ledger_json"),
    path("receipts/<int:job_id>/", views.receipt, name="receipt"),
]
