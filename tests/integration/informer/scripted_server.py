"""A tiny scripted Kubernetes API for the protocol branches the sandbox does not produce: each request is
answered from a script. Still real HTTP and the real kubernetes_asyncio client, no mock of either."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import kubernetes_asyncio.client as k8s
from aiohttp import web
from informer_helpers import FAST, Recorder

from airflow_jobwatch.kube.engine.informer import Informer, InformerConfig


def phase_of(informer: Informer, uid: str) -> str | None:
    obj = informer.get(uid)
    return None if obj is None else obj["status"]["phase"]


def pod(name: str, rv: int, phase: str = "Pending") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "status": {"phase": phase},
    }


def line(etype: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": etype, "object": obj}).encode() + b"\n"


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


CLOSING = web.AppKey("closing", asyncio.Event)
Watch = Callable[[web.Request], Any]  # a coroutine function writing one watch response


class ScriptedServer:
    """Serves LISTs from ``lists`` (one answer per request, the last one repeated) and watches from
    ``watches`` (one behaviour per request, the last one repeated). Records every request's query."""

    def __init__(self) -> None:
        self.lists: list[Callable[[web.Request], Any]] = []
        self.watches: list[Watch] = []
        self.requests: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.closing = asyncio.Event()  # ends the open streams when the server shuts down
        # GET by name: name -> the object the server has now (absent: 404). Every GET's name is recorded.
        self.current: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        script = self.watches if query.get("watch") == "true" else self.lists
        behaviour = script.pop(0) if len(script) > 1 else script[0]
        return await behaviour(request)

    async def handle_get(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.gets.append(name)
        obj = self.current.get(name)
        if obj is None:
            return web.json_response(status(404, "NotFound", f'pods "{name}" not found'), status=404)
        return web.json_response(obj)

    def list_queries(self) -> list[dict[str, str]]:
        return [q for q in self.requests if q.get("watch") != "true"]

    def watch_queries(self) -> list[dict[str, str]]:
        return [q for q in self.requests if q.get("watch") == "true"]

    async def __aenter__(self) -> ScriptedServer:
        app = web.Application()
        app[CLOSING] = self.closing
        app.router.add_get("/api/v1/namespaces/default/pods", self.handle)
        app.router.add_get("/api/v1/namespaces/default/pods/{name}", self.handle_get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        self.closing.set()
        await self._runner.cleanup()


def list_of(*pods: dict[str, Any], rv: int, cont: str | None = None) -> Callable[[web.Request], Any]:
    async def answer(request: web.Request) -> web.Response:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if cont:
            meta["continue"] = cont
        items = [{k: v for k, v in p.items() if k not in ("kind", "apiVersion")} for p in pods]
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})

    return answer


def http_error(code: int, reason: str, headers: dict[str, str] | None = None) -> Callable[[web.Request], Any]:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response(status(code, reason, f"scripted {code}"), status=code, headers=headers)

    return answer


def stream(*lines: bytes, then_wait: float = 30.0) -> Watch:
    """A 200 watch response writing ``lines``, then staying open for ``then_wait`` s (or ending at once if 0)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for data in lines:
            await resp.write(data)
        if then_wait:
            closing = request.app[CLOSING]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), then_wait)
        await resp.write_eof()
        return resp

    return answer


async def start(
    server: ScriptedServer, config: InformerConfig = FAST
) -> tuple[Informer, Recorder, k8s.ApiClient]:
    configuration = k8s.Configuration(host=server.url)
    configuration.api_key = {"BearerToken": "scripted"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    client = k8s.ApiClient(configuration)
    informer = Informer(client, kind="pods", namespace="default", config=config)
    recorder = Recorder()
    informer.subscribe(recorder.on_event, recorder.on_health)
    await informer.start()
    return informer, recorder, client


async def stop(informer: Informer, client: k8s.ApiClient) -> None:
    await informer.stop()
    await client.close()
