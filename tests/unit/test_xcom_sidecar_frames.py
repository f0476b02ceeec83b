"""The XCom sidecar's frame, as its own shell program prints it and as the reader decodes it: any file
comes back byte for byte whatever the chunking of the log, and every log that does not hold the whole
file is refused with what was wrong."""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_jobwatch.kube.meaning.xcom_sidecar import (
    MAX_RESULT_BYTES,
    SidecarResultError,
    decode_log,
    sidecar_command,
    too_large_hint,
)


def _printed(path: Path) -> bytes:
    """What the sidecar program prints for ``path`` when stopped with SIGTERM, as the kubelet stops it."""
    proc = subprocess.Popen(sidecar_command(str(path)), stdout=subprocess.PIPE, start_new_session=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 10

    def sleeping() -> bool:  # its trap is set before it starts its sleep (Linux's /proc shows the child)
        pids = children.read_text().split()
        return bool(pids) and Path(f"/proc/{pids[0]}/comm").read_text().strip() == "sleep"

    while proc.poll() is None and not sleeping():
        assert time.monotonic() < deadline, "the sidecar program never started its sleep"
        time.sleep(0.01)
    # to the whole group, as a container's end takes every process of it (the sandbox signals the group)
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    return out


def _frame(data: bytes, *, nonce: str = "ab12", size: int | None = None, digest: str | None = None) -> bytes:
    body = base64.encodebytes(gzip.compress(data))
    end = f"airflow-xcom-end {nonce} {len(data) if size is None else size} {digest or hashlib.sha256(data).hexdigest()}"
    return f"airflow-xcom-begin {nonce} gzip+base64\n".encode() + body + end.encode() + b"\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=20_000), chunk=st.integers(min_value=1, max_value=5000))
def test_the_programs_frame_gives_back_any_file_whatever_the_chunking(
    tmp_path: Path, data: bytes, chunk: int
) -> None:
    path = tmp_path / "return.json"
    path.write_bytes(data)
    log = b"noise before\nairflow-xcom-end zz 1 00\n" + _printed(path)
    pieces = [log[i : i + chunk] for i in range(0, len(log), chunk)]
    assert decode_log(pieces, limit=MAX_RESULT_BYTES) == data


def test_no_file_is_no_result(tmp_path: Path) -> None:
    assert decode_log([_printed(tmp_path / "missing.json")], limit=100) is None


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (b"", "holds no result"),
        (b"Terminated\n", "holds no result"),
        (_frame(b'{"a": 1}')[:-90], "ends before the end of the result"),  # cut inside the end line
        (_frame(b'{"a": 1}', size=9), "is not the file it printed"),
        (_frame(b'{"a": 1}', digest="0" * 64), "is not the file it printed"),
        (_frame(b"x" * 101), "larger than 100 bytes"),
        (_frame(b"\0" * 10_000_000), "larger than 100 bytes"),  # a small gzip that inflates far
        (b"airflow-xcom-begin ab gzip+base64\nnot base64 at all!\n", "not base64"),
        (b"airflow-xcom-begin ab zstd\n", r"expected 'gzip\+base64'"),
        (
            b"airflow-xcom-begin ab gzip+base64\n"
            + base64.encodebytes(b"plain")
            + b"airflow-xcom-end ab 5 x\n",
            "not valid gzip",
        ),
    ],
    ids=[
        "empty",
        "other-lines",
        "cut",
        "length",
        "digest",
        "over-limit",
        "gzip-bomb",
        "not-base64",
        "format",
        "not-gzip",
    ],
)
def test_a_log_without_the_whole_file_is_refused_saying_why(log: bytes, expected: str) -> None:
    with pytest.raises(SidecarResultError, match=expected):
        decode_log([log], limit=100, where="pod ns/p")


def test_an_end_line_with_another_nonce_is_not_the_end() -> None:
    data = b'{"a": 1}'
    log = _frame(data, nonce="real").replace(
        b"airflow-xcom-end real", b"airflow-xcom-end fake 8 0\nairflow-xcom-end real"
    )
    assert decode_log([log], limit=100) == data


def test_a_result_over_the_limit_says_why_the_limit_is_what_it_is() -> None:
    with pytest.raises(SidecarResultError) as raised:
        decode_log([_frame(b"x" * 101)], limit=100, where="pod ns/p")
    text = too_large_hint(str(raised.value))
    assert text.startswith("pod ns/p: the XCom result is larger than 100 bytes")
    assert "max_allowed_packet" in text and "object storage" in text
