"""Kubelet placeholder: the process-running kubelet lands in the next commit (pods stay Pending)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .errors import ApiError


class Kubelet:
    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def evict(self, namespace: str, name: str) -> None:
        raise RuntimeError("evict_pod is not implemented yet")

    def kill_silently(self, namespace: str, name: str) -> None:
        pass

    async def serve_logs(self, request: web.BaseRequest, pod: dict[str, Any]) -> web.StreamResponse:
        raise ApiError(400, "logs are not implemented yet")
