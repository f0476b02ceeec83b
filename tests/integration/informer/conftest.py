"""Fixtures of the watch-engine tests (helpers live in informer_helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_asyncio.client as k8s
import pytest
from informer_helpers import SANDBOX_DEFAULTS, Pods, api_client_for
from scripted_server import ScriptedServer

from airflow_jobwatch_testing.sandbox import SandboxThread


@pytest.fixture
def make_sandbox() -> Iterator[Callable[..., SandboxThread]]:
    """Start sandboxes with the informer tests' defaults (no kubelet, no Job controller); stopped after."""
    started: list[SandboxThread] = []

    def make(**options: Any) -> SandboxThread:
        sb = SandboxThread(**{**SANDBOX_DEFAULTS, **options})
        sb.start()
        started.append(sb)
        return sb

    yield make
    for sb in started:
        sb.stop()


@pytest.fixture
def sb(make_sandbox: Callable[..., SandboxThread]) -> SandboxThread:
    return make_sandbox()


@pytest.fixture
async def api(sb: SandboxThread, tmp_path: Path) -> AsyncIterator[k8s.ApiClient]:
    async with api_client_for(sb, tmp_path) as client:
        yield client


@pytest.fixture
def pods(api: k8s.ApiClient) -> Pods:
    return Pods(api)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    """A scripted API server (scripted_server.py) for the protocol branches the sandbox does not produce."""
    async with ScriptedServer() as srv:
        yield srv


def _page_decoders() -> list[Any]:
    from airflow_jobwatch.kube.engine import listing

    out = [pytest.param(listing._decode_page_stdlib, id="stdlib-json")]
    if hasattr(listing, "_decode_page_msgspec"):
        out.append(pytest.param(listing._decode_page_msgspec, id="msgspec"))
    return out


@pytest.fixture(params=_page_decoders())
def each_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the test once with each LIST page decoder of kube/engine/listing.py (msgspec, used when it is installed,
    which it is wherever Airflow is; the stdlib's json otherwise): the relist rules must not depend on it.
    The engine reads ``listing._decode_page`` at each page, so patching it there reaches every informer."""
    from airflow_jobwatch.kube.engine import listing

    monkeypatch.setattr(listing, "_decode_page", request.param)


@pytest.fixture(params=["dict-store", "compact-store"])
def each_store_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run the test once with each form of the informer's store: dicts (the default) and compact JSON
    (``InformerConfig.compact_store``, the executor's watcher child): the relist, confirmation and
    deletion rules must not depend on it. Every informer the test creates gets the form."""
    import dataclasses

    from airflow_jobwatch.kube.engine import informer as module

    compact = request.param == "compact-store"
    original = module.Informer.__init__
    created: list[Any] = []

    def init(self: Any, api_client: Any, **kwargs: Any) -> None:
        config = kwargs.pop("config", module.InformerConfig())
        original(self, api_client, config=dataclasses.replace(config, compact_store=compact), **kwargs)
        created.append(self)

    monkeypatch.setattr(module.Informer, "__init__", init)
    yield
    assert all(i.cache.compact is compact for i in created)
