"""{% once_field %}: the one-time token of a form that makes something (portal.sent_once)."""

from django import template
from django.utils.html import format_html

from portal import sent_once

register = template.Library()


@register.simple_tag(takes_context=True)
def once_field(context) -> str:
    token = sent_once.token_for(context["request"])
    return format_html('<input type="hidden" name="{}" value="{}">', sent_once.FIELD, token)
