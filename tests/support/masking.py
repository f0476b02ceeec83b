"""Secrets registered with this process's secrets masker, as Airflow's task runner registers them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from airflow_jobwatch.ending import masking


@contextlib.contextmanager
def registered(*values: str, name: str | None = None) -> Iterator[None]:
    """``values`` registered with this process's masker as the task runner registers what a task's
    templates read (``mask_secret``), and taken out again afterwards."""
    from airflow.sdk.log import mask_secret

    module = masking._masker_module()
    assert module is not None
    masker = module._secrets_masker()
    before = (set(masker.patterns), masker.replacer)
    try:
        for value in values:
            mask_secret(value, name)
        yield
    finally:
        masker.patterns, masker.replacer = before
