"""Routes that answer whatever the client's Accept header says: a download tool asking for an output file or the
ledger's exports as application/octet-stream or text/csv, and a tus client, must not be refused 406 before the
view runs. Their errors are JSON all the same (the tus views' are their own)."""

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
