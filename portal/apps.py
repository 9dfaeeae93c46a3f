from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"


class ConsoleConfig(admin_apps.AdminConfig):
    """Django's admin, with the operators' console (portal.console) as its site."""

    default = False  # the portal app's own config is PortalConfig
    default_site = "portal.console.ConsoleSite"
