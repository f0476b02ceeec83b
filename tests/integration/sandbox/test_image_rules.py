"""The sandbox's rule for images that cannot be pulled (pure function, table-driven)."""

from __future__ import annotations

import re

import pytest

from airflow_jobwatch_testing.sandbox.images import cannot_pull, registry_host


@pytest.mark.parametrize(
    ("image", "host"),
    [
        ("busybox:1.36", None),
        ("library/busybox:1.36", None),
        ("registry.invalid/app:1", "registry.invalid"),
        ("Registry.Invalid:5000/team/app@sha256:abc", "registry.invalid"),
        ("localhost/app", "localhost"),
        ("ghcr.io/org/app:2", "ghcr.io"),
    ],
)
def test_registry_host(image: str, host: str | None) -> None:
    assert registry_host(image) == host


@pytest.mark.parametrize(
    ("image", "pattern", "fails"),
    [
        ("registry.invalid/jobwatch/no-such-image:1", None, True),
        ("mirror.registry.invalid:443/app:1", None, True),
        ("busybox:1.36", None, False),
        ("invalid/app:1", None, False),  # a Docker Hub user called "invalid", not a registry host
        ("ghcr.io/org/app:2", None, False),
        ("ghcr.io/org/app:2", re.compile(r"^ghcr\.io/"), True),
        ("busybox:1.36", re.compile(r"^ghcr\.io/"), False),
    ],
)
def test_cannot_pull(image: str, pattern: re.Pattern[str] | None, fails: bool) -> None:
    assert cannot_pull(image, pattern) is fails
