"""Fixtures the end-to-end tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    """A PostgreSQL server of Debian's package for one test module (skipped where it is not installed):
    production Airflow runs several schedulers and triggerers on it, and LocalExecutor's parallel tasks
    would lock SQLite."""
    from support.postgres import PostgresServer, PostgresUnavailable

    try:
        server = PostgresServer()
    except PostgresUnavailable as err:
        pytest.skip(str(err))
    with server:
        yield server
