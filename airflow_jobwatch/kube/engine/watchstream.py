"""The bytes of a watch response, split into its JSON lines, with a stall detector around every read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import aiohttp

from airflow_jobwatch.kube.engine.apierrors import Stalled

# Chunk size for reading watch streams. Events are single JSON lines; a few KiB each for pods. 64 KiB reads
# amortise the per-read overhead (a timeout context per read) over many events when the stream is busy.
_READ_CHUNK_BYTES = 2**16


def split_lines(buffer: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """Append ``chunk`` to ``buffer``; return the complete lines and the incomplete rest."""
    data = buffer + chunk if buffer else chunk
    if b"\n" not in chunk:
        return [], data
    *lines, rest = data.split(b"\n")
    return lines, rest


async def read_lines(
    content: aiohttp.StreamReader, *, stall_timeout: float, deadline: float | None
) -> AsyncGenerator[bytes, None]:
    """Yield the lines of a watch stream until EOF (the server ended it) or ``deadline`` (loop time).

    Every read is bounded by ``stall_timeout``: a server that keeps the connection open but sends nothing
    (a half-open TCP connection after a network change, a stuck apiserver or proxy) raises
    :class:`Stalled` instead of hanging the informer forever (apache/airflow #14974, #12229).
    """
    loop = asyncio.get_running_loop()
    buffer = b""
    while True:
        timeout = stall_timeout
        if deadline is not None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            timeout = min(timeout, remaining)
        try:
            async with asyncio.timeout(timeout):
                chunk = await content.readany()
        except TimeoutError:
            if deadline is not None and loop.time() >= deadline:
                return
            raise Stalled(f"no data for {stall_timeout:g} s") from None
        if not chunk:  # EOF: the server ended the stream (timeoutSeconds, restart, dropped watch)
            return
        lines, buffer = split_lines(buffer, chunk)
        for line in lines:
            if line.strip():
                yield line
