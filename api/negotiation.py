"""Routes that answer a file (an output file, the ledger's exports) whatever the client's Accept header says:
a download tool asking for application/octet-stream or text/csv must not be refused 406 before it starts.
Their errors are JSON all the same."""

from rest_framework.negotiation import BaseContentNegotiation


class AnyAccept(BaseContentNegotiation):
    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def any_accept(view):
    """For a function view, under @api_view (which reads the attribute)."""
    view.content_negotiation_class = AnyAccept
    return view
