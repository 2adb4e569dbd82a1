"""Checks answers of the HTTP API against its OpenAPI document (a JSON Schema subset)."""

from __future__ import annotations

import re
from typing import Any

from perdure.dashboard.api.openapi import DOCUMENT

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def _matches(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[kind])


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    """Raise AssertionError when ``value`` does not follow ``schema``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = DOCUMENT["components"]["schemas"][name]
    if "oneOf" in schema:
        passed = 0
        for choice in schema["oneOf"]:
            try:
                validate(value, choice, where)
            except AssertionError:
                continue
            passed += 1
        assert passed == 1, f"{where}: {value!r:.80} matches {passed} of oneOf"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        assert any(_matches(value, k) for k in kinds), f"{where}: {value!r:.80} is not {kinds}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            assert name in value, f"{where}: {name!r} is missing"
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                validate(item, properties[name], f"{where}.{name}")
            elif extra is False:
                raise AssertionError(f"{where}: {name!r} is not documented")
            elif isinstance(extra, dict):
                validate(item, extra, f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            validate(item, schema["items"], f"{where}[{index}]")


def operation(method: str, path: str) -> tuple[str, dict[str, Any]]:
    """The documented path template and operation that serve ``method path`` (under /api/v1)."""
    relative = path.split("?")[0].removeprefix("/api/v1")
    for template, item in DOCUMENT["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template)
        if re.fullmatch(pattern, relative) and method.lower() in item:
            return template, item[method.lower()]
    raise AssertionError(f"{method} {relative} is not documented")


def check_response(method: str, path: str, status: int, media: str, body: Any) -> None:
    """Assert that the answer is one the document promises for this operation."""
    template, op = operation(method, path)
    responses = op["responses"]
    assert str(status) in responses, f"{method} {template}: status {status} is not documented"
    content = responses[str(status)].get("content", {})
    media = media.split(";")[0].strip()
    assert media in content, f"{method} {template} {status}: {media} is not documented"
    schema = content[media].get("schema")
    if schema is not None and body is not None:
        validate(body, schema)
