"""Small HTTP helpers shared by the sandbox server's modules: JSON answers and Status error answers."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .errors import ApiError

JSON = "application/json"


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    return web.Response(body=data, status=status, content_type=JSON, headers=headers)


def _error_response(err: ApiError) -> web.Response:
    return _json_response(err.status(), err.code, headers=err.headers or None)


def _bool_param(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "yes")


__all__ = ["JSON", "_bool_param", "_error_response", "_json_response"]
