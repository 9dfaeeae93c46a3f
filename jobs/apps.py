from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        # The console's pages live with the other pages (jobs/pages/), where Django's admin does not look for them.
        from jobs.pages import admin  # noqa: F401, PLC0415
