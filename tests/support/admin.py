"""HTTP to the admin endpoint (blocking urllib, or awaitable from the test reactor), and
response validation against the shipped OpenAPI file."""
import json
import urllib.error
import urllib.request
from importlib import resources

from jsonschema import Draft202012Validator
from twisted.internet.threads import deferToThread

SPEC = json.loads(resources.files("mqksbridge.bridge.admin").joinpath(
    "static", "openapi.json").read_text())


def fetch(port, path, method="GET", body=None, content_type="application/json", timeout=10):
    """(status, content type, body bytes) of one request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     method=method)
    if content_type and method != "GET":
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers.get("content-type"), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("content-type"), exc.read()


def fetch_json(port, path, method="GET", body=None, expect=200, **kwargs):
    status, ctype, raw = fetch(port, path, method, body, **kwargs)
    assert status == expect, (status, raw)
    assert ctype == "application/json", ctype
    return json.loads(raw)


def aget(port, path, method="GET", body=None, expect=200, **kwargs):
    return deferToThread(fetch_json, port, path, method, body, expect, **kwargs)


def validate(data, schema_name):
    """Raise if `data` does not match components/schemas/<schema_name>."""
    schema = {"$ref": f"#/components/schemas/{schema_name}",
              "components": SPEC["components"]}
    Draft202012Validator(schema).validate(data)


def response_schema(path, method="get", status="200"):
    """The schema name the OpenAPI file gives for a path's answer."""
    content = SPEC["paths"][path][method]["responses"][status]["content"]
    return content["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
