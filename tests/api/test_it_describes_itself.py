"""The API's index, its OpenAPI schema and the docs page that reads it, public; any other path under /api/ is
answered 404 in the API's JSON."""

from django.core.management import call_command
from django.test import Client


def test_it_lists_its_routes_at_the_index(db):
    answer = Client().get("/api/v1/")
    assert answer.status_code == 200
    assert answer.json()["schema"] == "/api/v1/schema/"


def test_it_serves_an_openapi_3_schema_that_asks_for_a_bearer_token(db):
    answer = Client().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert answer.status_code == 200
    schema = answer.json()
    assert schema["openapi"].startswith("3.")
    assert "/api/v1/me/" in schema["paths"]
    schemes = schema["components"]["securitySchemes"]
    assert any(scheme.get("scheme") == "bearer" for scheme in schemes.values())


def test_the_docs_page_loads_its_script_and_style_from_the_portal(db):
    page = Client().get("/api/v1/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<style>" not in html and "cdn" not in html.lower()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    script = Client().get("/api/v1/docs/?script=")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.content.decode()


def test_it_answers_an_unknown_route_in_json(db):
    answer = Client().get("/api/v1/no-such-thing/")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


def test_the_schema_is_valid_openapi_without_a_warning(tmp_path, db):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    assert "/api/v1/jobs/{id}/output/{name}:" in (tmp_path / "schema.yaml").read_text()


def test_it_lists_the_work_kinds_their_parameters_and_which_an_online_node_runs(partner_api, online_slots):
    """A client checks a job's kind and parameters here before it uploads the data. The fake node reported
    no kinds: it runs those that need only requirements.txt."""
    assert Client().get("/api/v1/").json()["work_kinds"] == "/api/v1/work-kinds/"
    assert Client().get("/api/v1/work-kinds/").status_code == 401, "for a token's holder"
    kinds = {kind["name"]: kind for kind in partner_api.get("/api/v1/work-kinds/").json()}
    assert {"clean-table", "embed", "generate", "onnx-infer", "test-slow-echo"} <= set(kinds)
    assert kinds["clean-table"]["runs_online"] and not kinds["generate"]["runs_online"]
    assert kinds["generate"]["model_file"].startswith("a Hugging Face model folder")
    assert kinds["clean-table"]["model_file"] == ""
    assert kinds["generate"]["input_formats"] == ["csv", "jsonl", "parquet"]
    tokens = next(param for param in kinds["generate"]["params"] if param["name"] == "max_new_tokens")
    assert tokens == {
        "name": "max_new_tokens", "type": "int", "default": 64, "minimum": 1, "maximum": 8192,
        "help": "The most tokens generated per record.",
    }  # fmt: skip
