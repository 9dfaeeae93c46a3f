"""The schema read as a page (Swagger UI, served from drf-spectacular-sidecar's static files: no CDN). Public,
like the schema: they describe the routes, and every route asks for a token. The page keeps to the portal's
Content-Security-Policy: its script is a separate request (the split view) and its style a static file."""

from drf_spectacular.views import SpectacularSwaggerSplitView

from api.throttling import AddressRate


class SwaggerDocs(SpectacularSwaggerSplitView):
    template_name = "api/swagger_ui.html"
    authentication_classes = []
    throttle_classes = [AddressRate]
    # OPTIONS describes a route's JSON, and this route has none: its description rendered as the page was a 500.
    metadata_class = None
