"""Job controller placeholder: the real controller lands in the next commit (Jobs get no pods yet)."""

from __future__ import annotations

from typing import Any


class JobController:
    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass
