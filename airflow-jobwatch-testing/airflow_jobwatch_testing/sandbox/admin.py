"""Admin endpoints (``/_sandbox/...``) to drive a sandbox running in another process, and a tiny client.

Admin requests use the same bearer token, are never counted and never fault-injected. During an
outage they are unreachable like everything else.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import web

# Sandbox methods that may be called through POST /_sandbox/fault.
FAULT_ACTIONS = frozenset(
    {
        "set_history_window",
        "current_resource_version",
        "drop_watches",
        "stall_watches",
        "set_watch_expired",
        "set_error_rate",
        "start_outage",
        "end_outage",
        "outage",
        "set_image_pull_failure",
        "evict_pod",
        "preempt_pod",
        "api_evict_pod",
        "taint_evict_pod",
        "kubelet_preempt_pod",
        "shutdown_node",
        "set_pod_quota",
        "pod_quota_usage",
        "set_pod_creation_rate",
        "set_kueue",
        "kueue_preempt",
        "kueue_state",
        "lose_node",
        "force_delete_pod",
        "counters",
        "reset_counters",
        "record_pod_ends",
        "pod_ends",
        "objects",
        "get_object",
        "issue_token",
        "expire_token",
        "tokens_seen",
        "rotate_service_account_token",
        "set_rbac",
        "grant",
        "load_rbac_manifests",
        "clear_rbac",
        "set_watch_cache",
        "set_watch_cache_lag",
        "freeze_watch_cache",
        "thaw_watch_cache",
        "watch_cache_resource_version",
    }
)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


class AdminHandler:
    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        try:
            if path == "/_sandbox/fault" and request.method == "POST":
                payload = await request.json()
                action = payload.get("action")
                args = payload.get("args") or {}
                if action not in FAULT_ACTIONS:
                    return _json(
                        {
                            "ok": False,
                            "error": f"unknown action {action!r}; expected one of {sorted(FAULT_ACTIONS)}",
                        },
                        400,
                    )
                if not isinstance(args, dict):
                    return _json(
                        {"ok": False, "error": "args must be a JSON object of keyword arguments"}, 400
                    )
                if action == "set_error_rate" and args.get("verbs") is not None:
                    args["verbs"] = set(args["verbs"])
                result = getattr(self.sb, action)(**args)
                if inspect.isawaitable(result):
                    result = await result
                if isinstance(result, asyncio.Task):
                    result = None
                return _json({"ok": True, "result": result})
            if path == "/_sandbox/counters" and request.method == "GET":
                return _json(self.sb.counters())
            if path == "/_sandbox/reset_counters" and request.method == "POST":
                self.sb.reset_counters()
                return _json({"ok": True, "result": None})
            if path.startswith("/_sandbox/objects/") and request.method == "GET":
                kind = path.rsplit("/", 1)[-1]
                return _json(self.sb.objects(kind, request.query.get("namespace")))
        except (TypeError, ValueError, LookupError, RuntimeError) as exc:
            return _json({"ok": False, "error": f"{type(exc).__name__}: {exc}"}, 400)
        return _json({"ok": False, "error": f"no admin endpoint {request.method} {path}"}, 404)


class AdminClient:
    """Drive a sandbox subprocess's faults over HTTP (stdlib only, so any test or script can use it).

    ``AdminClient(url, token).fault("drop_watches")``; ``.fault("set_error_rate", share=0.5, status=429)``.

    :param ca_pem: the sandbox's certificate (PEM) when it serves HTTPS (``--tls``): the client verifies
        the server against it. :meth:`from_kubeconfig` takes it from the kubeconfig.
    """

    def __init__(
        self, url: str, token: str, *, timeout: float = 10.0, ca_pem: bytes | str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self._ssl: ssl.SSLContext | None = None
        if ca_pem is not None:
            cadata = ca_pem.decode() if isinstance(ca_pem, bytes) else ca_pem
            self._ssl = ssl.create_default_context(cadata=cadata)
        elif self.url.startswith("https://"):
            raise ValueError(
                f"AdminClient for {self.url} needs ca_pem (the sandbox's certificate, PEM) to verify "
                "the server; AdminClient.from_kubeconfig(path) takes it from the sandbox's kubeconfig"
            )

    @property
    def token(self) -> str:
        """The bearer token the client sends (the sandbox's own test token, never a real cluster's)."""
        return self._token

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str], *, timeout: float = 10.0) -> AdminClient:
        """A client for the sandbox that wrote the kubeconfig at ``path`` (server, token and CA from it)."""
        try:
            data = json.loads(Path(path).read_text())
            cluster = data["clusters"][0]["cluster"]
            token = str(data["users"][0]["user"]["token"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise ValueError(
                f"{path} is not a kubeconfig written by the sandbox (server and token expected): "
                f"{type(exc).__name__}"
            ) from None
        ca_b64 = cluster.get("certificate-authority-data")
        ca_pem = base64.b64decode(ca_b64) if ca_b64 else None
        return cls(str(cluster["server"]), token, timeout=timeout, ca_pem=ca_pem)

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(
                f"sandbox admin {method} {path} failed with HTTP {exc.code}: {detail}"
            ) from None

    def fault(self, action: str, **args: Any) -> Any:
        if "verbs" in args and args["verbs"] is not None:
            args["verbs"] = sorted(args["verbs"])
        answer = self._request("POST", "/_sandbox/fault", {"action": action, "args": args})
        return answer.get("result")

    def counters(self) -> dict[str, int]:
        return dict(self._request("GET", "/_sandbox/counters"))

    def reset_counters(self) -> None:
        self._request("POST", "/_sandbox/reset_counters", {})

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        suffix = f"?namespace={namespace}" if namespace else ""
        return list(self._request("GET", f"/_sandbox/objects/{kind}{suffix}"))
