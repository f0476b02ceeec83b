"""What the end of a task reads of the trigger that ends it: a narrow view, so that ``ending/`` never
imports ``triggers/`` (:class:`~airflow_jobwatch.triggers.job.JobTrigger` is the one implementation)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class EndingTrigger(Protocol):
    """The trigger of one deferred task, as its end sees it (read-only)."""

    @property
    def namespace(self) -> str: ...

    @property
    def job_name(self) -> str: ...

    @property
    def base_container_name(self) -> str: ...

    @property
    def disruption_retries(self) -> int | None: ...

    @property
    def end_task(self) -> dict[str, Any] | None:
        """What the operator allowed to be done here (``end_plan``), or None."""

    @property
    def deferred_at(self) -> float | None:
        """``time.time()`` when the task deferred, or None."""

    @property
    def log(self) -> Any:
        """The logger whose lines go into the task's log."""

    async def end_client(self) -> tuple[Any, Callable[[], Awaitable[None]]]:
        """A ``kubernetes_asyncio`` client for the end's reads and writes, and how to give it back."""
        ...
