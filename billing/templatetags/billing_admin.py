"""The operator console's warnings about billing."""

from django import template
from django.urls import reverse
from django.utils.html import format_html

from billing.models import RateCard

register = template.Library()


@register.simple_tag
def no_rate_card_warning() -> str:
    """A warning while no rate card is in force: every hold that starts then is priced at 0."""
    if RateCard.in_force() is not None:
        return ""
    return format_html(
        '<ul class="messagelist"><li class="warning">No rate card is in force: GPU holds that start now are '
        'priced at 0 and staging is free. <a href="{}">Add a rate card</a>.</li></ul>',
        reverse("admin:billing_ratecard_add"),
    )
