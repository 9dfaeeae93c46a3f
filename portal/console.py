"""The operators' console: Django's admin site, with what a request may ask of it checked before any of its views."""

from functools import wraps

from django.contrib import admin
from django.contrib.admin.exceptions import DisallowedModelAdminToField
from django.contrib.admin.options import TO_FIELD_VAR
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import BadRequest

# Longer than any field a list searches: SQLite refuses a LIKE pattern past 50,000 bytes.
SEARCH_MAX_LENGTH = 1_000


class ConsoleSite(admin.AdminSite):
    def admin_view(self, view, cacheable=False):
        """Each view, refusing with a 400 what Django's own views let through to a 500: an empty `_to_field`
        (checked only when it names a field, then looked up as a field named ""), an object's id or a list's
        filter with a NUL character (PostgreSQL takes none in any text), and a search too long for the database."""

        @wraps(view)
        def checked(request, *args, **kwargs):
            if "" in (request.GET.get(TO_FIELD_VAR), request.POST.get(TO_FIELD_VAR)):
                raise DisallowedModelAdminToField("An empty _to_field names no field.")
            asked = [*map(str, kwargs.values()), *(value for _, values in request.GET.lists() for value in values)]
            if any("\x00" in text for text in asked):
                raise BadRequest("An id or a filter with a NUL character names nothing.")
            if len(request.GET.get(SEARCH_VAR, "")) > SEARCH_MAX_LENGTH:
                raise BadRequest(f"A search is at most {SEARCH_MAX_LENGTH:,} characters.")
            return view(request, *args, **kwargs)

        return super().admin_view(checked, cacheable)
