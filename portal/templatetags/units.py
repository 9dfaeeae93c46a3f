from django import template

from portal import units

register = template.Library()
register.filter("size", units.size)
register.filter("limit", units.limit)
register.filter("rate", units.rate)
register.filter("gigabytes", units.gigabytes)
