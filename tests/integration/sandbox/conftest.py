"""Fixtures shared by the sandbox's own tests (``sandbox`` and ``kubeconfig`` come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config


@pytest.fixture
def core(kubeconfig: Path) -> Iterator[client.CoreV1Api]:
    """The official client's CoreV1Api for this test's sandbox, closed after the test."""
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()
