from django import template

from portal import units

register = template.Library()
register.filter("size", units.size)
register.filter("limit", units.limit)
register.filter("gigabytes", units.gigabytes)
register.filter("money", units.money)
register.filter("price", units.price)
register.filter("hundredths", units.hundredths)
