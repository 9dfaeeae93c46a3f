"""{% client_howto %}: the e31 client's install, login and first job, with this portal's address."""

from django import template

from portal.downloads import client_wheel

register = template.Library()


@register.inclusion_tag("portal/client_howto.html", takes_context=True)
def client_howto(context) -> dict:
    request = context["request"]
    return {"portal_url": request.build_absolute_uri("/").rstrip("/"), "client_wheel": client_wheel()}
