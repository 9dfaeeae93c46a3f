"""The API's JSON parser: Django REST framework's, with a body nested deeper than Python's decoder goes (a few
thousand brackets) refused as any malformed JSON is, a 400 in the API's shape, where its RecursionError was a
500."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
