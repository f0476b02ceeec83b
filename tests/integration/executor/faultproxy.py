"""An HTTP proxy in front of the sandbox that loses or holds back chosen answers.

The sandbox fails requests (error rates, outages) but always answers a request it carried out. A
real API server behind a flaky network can do what the sandbox cannot: carry out a create and have
its answer lost (the client times out, the pod exists), or take far longer than usual to answer a
GET. This proxy forwards everything to the sandbox, streaming watches through unchanged, and
applies a rule chosen by the test to each request:

* ``"pass"``: forward and answer;
* ``"lose_answer"``: forward (the sandbox carries it out), then never answer: the client's read
  timeout fires, as with a black-holed connection;
* ``"hold"``: do not forward until :meth:`FaultProxy.release` is called (or the client gives up);
* ``"quota_403"``: do not forward; answer a pod create as a namespace ResourceQuota on pod count does
  (403 Forbidden, "exceeded quota", the Status body of the quota admission plugin).

Only the tests use it; it never imports the code under test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

Rule = Callable[[str, str, str], str]  # (method, path, query string) -> "pass" | "lose_answer" | "hold"

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.rule: Rule = lambda method, path, query: "pass"
        self.seen: list[tuple[str, str, str]] = []  # (method, path, action) of every request
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._released: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._start())
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fault proxy did not start within 10 s")
        return self

    async def _start(self) -> None:
        self._released = asyncio.Event()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        server = web.Server(self._handle)
        # Held and answer-losing handlers are cancelled at once on stop.
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=0.5)  # type: ignore[assignment]
        assert self._runner is not None
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    def release(self) -> None:
        """Let every held request (and every later "hold") through."""
        assert self._loop is not None and self._released is not None
        self._loop.call_soon_threadsafe(self._released.set)

    def stop(self) -> None:
        if self._loop is None:
            return

        async def stop() -> None:
            assert self._released is not None
            self._released.set()
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        assert self._session is not None and self._released is not None
        action = self.rule(request.method, request.path, request.query_string)
        self.seen.append((request.method, request.path, action))
        if action == "hold":
            await self._released.wait()
        body = await request.read()
        if action == "quota_403":
            return web.json_response(quota_refusal(body), status=403)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            request.method,
            self.upstream + request.rel_url.path_qs,
            data=body or None,
            headers=headers,
            allow_redirects=False,
        ) as upstream:
            if action == "lose_answer":
                await upstream.read()
                # Carried out; the answer never comes. The client's read timeout ends this.
                await asyncio.Event().wait()
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP_BY_HOP:
                    resp.headers[k] = v
            await resp.prepare(request)  # type: ignore[arg-type]
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp


#: The quota admission plugin's refusal (k8s.io/apiserver/pkg/admission/plugin/resourcequota, message
#: "exceeded quota: %s, requested: %s, used: %s, limited: %s", wrapped by NewForbidden).
QUOTA_NAME = "pod-count"


def quota_refusal(request_body: bytes) -> dict[str, Any]:
    import json

    try:
        name = json.loads(request_body)["metadata"]["name"]
    except (ValueError, KeyError, TypeError):
        name = ""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods "{name}" is forbidden: exceeded quota: {QUOTA_NAME}, requested: pods=1, '
        "used: pods=2, limited: pods=2",
        "reason": "Forbidden",
        "details": {"name": name, "kind": "pods"},
        "code": 403,
    }


def write_proxy_kubeconfig(path: str, proxy: FaultProxy, token: str) -> str:
    from airflow_jobwatch_testing.sandbox.kubeconfig import write_kubeconfig_file

    return write_kubeconfig_file(path, proxy.url, token)


__all__: list[Any] = ["FaultProxy", "quota_refusal", "write_proxy_kubeconfig"]
