"""Pages of a list: `?page=N&page_size=M` (at most 100), as `{"count", "next", "previous", "results"}`, and the
query string of a list read strictly. A page or size that is not a whole number in range, a filter's value not
of its kind, and a parameter the route does not know are refused (400, naming it), never silently ignored."""

from django.core.paginator import InvalidPage
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination

from api.errors import invalid
from portal.text import ascii_count, shown

MAX_PAGE_SIZE = 100


class PageParameters(serializers.Serializer):
    """A list's `page` and `page_size`, beside its filters (Pages reads their values)."""

    page = serializers.CharField(required=False, allow_blank=True, help_text="1 and up")
    page_size = serializers.CharField(required=False, allow_blank=True, help_text="1 to 100; 50 when not given")


def query(request, filters: type[serializers.Serializer]) -> dict:
    """The query string read by `filters` (a serializer of its parameters, pages included)."""
    unknown = sorted(set(request.query_params) - set(filters().fields))
    if unknown:
        raise invalid(unknown[0], f"{shown(unknown[0])} is no parameter of this route.")
    found = filters(data=request.query_params.dict())
    found.is_valid(raise_exception=True)
    return found.validated_data


class Pages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        size = ascii_count(raw)
        if size is None or not 1 <= size <= MAX_PAGE_SIZE:
            raise invalid("page_size", f"A page size is a whole number from 1 to {MAX_PAGE_SIZE}, not {shown(raw)}.")
        return size

    def paginate_queryset(self, queryset, request, view=None):
        raw = request.query_params.get(self.page_query_param, "1")
        number = ascii_count(raw)
        if number is None or number < 1:
            raise invalid("page", f"A page is a whole number from 1, not {shown(raw)}.")
        self.request = request
        paginator = self.django_paginator_class(queryset, self.get_page_size(request))
        try:
            self.page = paginator.page(number)
        except InvalidPage:
            raise invalid("page", f"Page {number} is past the last page, {paginator.num_pages}.") from None
        return list(self.page)
