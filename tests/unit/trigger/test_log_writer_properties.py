"""Properties of the trigger's pod-log writer, over generated line shapes (empty, long, ``\\r``,
unicode) and supervisor paces (a fake supervisor reading a real socketpair at a given rate, or
stopping):

* no write ever finds the socket without room (so no write can block the event loop), and the loop's
  longest stall stays far below Airflow's "event loop appears deadlocked" threshold;
* every line is either written, in order, or counted in the one warning that says lines were dropped;
* the tail's memory stays within its bound, however short its lines.
"""

from __future__ import annotations

import asyncio

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.log_socket import LoopLag, Supervisor, logging_to

from airflow_jobwatch.ending import pod_logs

PREFIX = "[pod-a] [base] "
STALL = 0.3  # the writer's patience here: a supervisor that stopped reading is found in 0.3 s
PIECE = 4096  # the longest piece of a line written as one record (docs/trigger.md)

_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")
_line = st.one_of(
    st.just(""),
    st.text(_chars, max_size=40),
    st.text(_chars, max_size=20).map(lambda s: s + "\r"),  # a line of a CRLF log
    st.builds(
        lambda c, n: c * n, st.sampled_from(["x", "é", "€", "😀", "\x01", "\r"]), st.integers(0, 30_000)
    ),
)
_lines = st.lists(_line, max_size=40).flatmap(
    lambda shapes: st.integers(0, 2000).map(lambda empties: shapes + [""] * empties)
)


def pieces(line: str) -> list[str]:
    """What the writer writes for one line: a trailing ``\\r`` dropped, then pieces of at most
    ``LINE_PIECE_BYTES`` UTF-8 bytes, whole characters, from the start."""
    line = line.removesuffix("\r")
    out, piece, size = [], "", 0
    for char in line:
        n = len(char.encode())
        if size + n > PIECE:
            out.append(piece)
            piece, size = "", 0
        piece, size = piece + char, size + n
    return [*out, piece]


async def _write(lines: list[str], supervisor: Supervisor) -> tuple[pod_logs.Tail, float]:
    tail = pod_logs.Tail(16 * 1024 * 1024)
    tail.start("pod-a", "base", kept=True, namespace="ns")
    for line in lines:
        tail.add(line)
    async with LoopLag() as lag:  # the log socket is found as the triggerer's is: structlog's output
        await pod_logs.write(structlog.get_logger("trigger"), tail, "keep_pod")
    return tail, lag.longest


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=_lines,
    pause=st.sampled_from([0.0, 0.0005, 0.002]),
    stop_after=st.one_of(st.none(), st.integers(0, 300_000)),
)
def test_every_line_is_written_in_order_or_counted_and_no_write_could_block(
    lines: list[str], pause: float, stop_after: int | None
) -> None:
    with (
        Supervisor(pause=pause, stop_after=stop_after) as supervisor,
        logging_to(supervisor),
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(pod_logs, "STALL_SECONDS", STALL, raising=False)
        tail, longest_stall = asyncio.run(_write(lines, supervisor))
        supervisor.read_rest()
        events = supervisor.events()

    expected = [p for line in lines for p in pieces(line)]
    written = [e.removeprefix(PREFIX) for e in events if e.startswith(PREFIX)]
    dropped = [e for e in events if "not written" in e]
    assert written == expected[: len(written)]  # in order, each line whole or in its pieces
    if len(written) < len(expected):
        assert len(dropped) == 1, dropped
        assert dropped[0].startswith(f"{len(expected) - len(written)} lines (")
        assert "kubectl logs -n ns pod-a -c base" in dropped[0]
        assert stop_after is not None  # only a supervisor that stopped reading loses lines
    else:
        assert dropped == []
    assert supervisor.risky_writes == 0
    assert all(len(e.encode()) <= PIECE + len(PREFIX) for e in written)
    assert longest_stall < 1.0, longest_stall  # Airflow's deadlock watchdog: nothing near it
    assert tail.memory() <= 3 * tail.size + 4096


@settings(max_examples=60, deadline=None)
@given(lines=_lines, limit=st.integers(1024, 64 * 1024))
def test_the_tail_keeps_the_last_lines_within_its_bound_in_memory(lines: list[str], limit: int) -> None:
    tail = pod_logs.Tail(limit)
    tail.start("pod-a", "base", kept=True)
    for line in lines:
        tail.add(line)
    expected = [p for line in lines for p in pieces(line)]
    segment = tail.segments[0]
    kept = list(segment.texts())
    assert kept == expected[len(expected) - len(kept) :]  # the tail, in order
    assert segment.dropped_lines == len(expected) - len(kept)
    assert tail.size <= limit
    assert tail.memory() <= 3 * limit + 4096
