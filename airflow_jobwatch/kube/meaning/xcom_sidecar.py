"""A pod's XCom result of any size, read from its native XCom sidecar's log (``pods/log``, no exec).

With ``do_xcom_push`` each pod of the Job gets a *native sidecar*: an init container with
``restartPolicy: Always`` (Kubernetes 1.29 and later, KEP-753), sharing an ``emptyDir`` with the base
container at the folder of ``xcom_path``. The kubelet starts it before the main containers, keeps it
beside them, and once every main container has exited sends it SIGTERM; it then prints the result
file to its own log, framed, and exits 0. A sidecar neither keeps a Job from completing nor counts
for the pod's phase, so the pod is ``Succeeded`` once the sidecar has printed; its log is kept as
long as the pod exists. The reader takes it with ``GET pods/{name}/log?container=airflow-xcom-sidecar``,
the right that copying logs into the task log already needs.

The frame (one line each, all ASCII)::

    airflow-xcom-begin <nonce> gzip+base64
    <the file, gzip-compressed, base64 in lines of 76 characters>
    airflow-xcom-end <nonce> <bytes of the file> <sha256 of the file, hex>

or ``airflow-xcom-empty <nonce>`` when the base container wrote no file. The nonce is 24 random hex
digits drawn when the sidecar stops, so no earlier line can announce the end of this frame; the end
line's length and digest prove that what was decoded is the whole file, byte for byte. Only the
sidecar writes to its log: what the base container prints never reaches it. Compression keeps a large
JSON result well under the kubelet's log rotation size (``containerLogMaxSize``, 10 MiB by default).

The reader streams: it decodes each chunk of the HTTP body as it arrives, so the log text is never
held whole; only the decoded file is, once (bounded by the caller's ``limit``).

Knows Kubernetes, not Airflow.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from airflow_jobwatch.kube.meaning.objects import to_dict
from airflow_jobwatch.kube.meaning.result import EMPTY_XCOM_RESULT, JobResult
from airflow_jobwatch.kube.meaning.states import classify_pod

__all__ = [
    "DEFAULT_IMAGE",
    "MAX_RESULT_BYTES",
    "READ_CONCURRENCY",
    "SIDECAR_NAME",
    "ResultTooLarge",
    "VOLUME_NAME",
    "FrameDecoder",
    "SidecarResultError",
    "has_sidecar",
    "read_result",
    "read_result_sync",
    "results_from_sidecars",
    "sidecar_command",
    "sidecar_kept",
    "sidecar_pods",
    "too_large_hint",
]

#: The sidecar's container name: upstream's XCom sidecar's, so that log filters written for
#: KubernetesPodOperator's pods still apply.
SIDECAR_NAME = "airflow-xcom-sidecar"

#: The ``emptyDir`` shared by the base container and the sidecar (upstream's volume name).
VOLUME_NAME = "xcom"

#: Upstream's default sidecar image; the connection's ``xcom_sidecar_container_image`` replaces it.
#: The script needs only a POSIX shell with ``od``, ``gzip``, ``base64``, ``sha256sum`` and ``wc``.
DEFAULT_IMAGE = "alpine"

#: The largest result read from a sidecar. Airflow stores an XCom as one JSON value in its metadata
#: database, and the smallest limit among the databases it supports is MySQL's default
#: ``max_allowed_packet`` (64 MiB, which holds the whole statement); 48 MiB leaves room for the rest of
#: the row and for the escaping of the JSON text. A larger result fails the task with this reason
#: instead of failing later inside Airflow.
MAX_RESULT_BYTES = 48 * 1024 * 1024


#: Results read at once in one process (the triggerer serves every deferred task): each read holds its
#: decoded file, so two bound the memory to two results, and a third waits (reads are short: a 10 MiB
#: result is read and checked in half a second to a few seconds, see the benchmarks).
READ_CONCURRENCY = 2

#: (connect, read) seconds for one log read: the log is complete when it is read (the sidecar has
#: exited), so a stalled body means a stalled API server, not a slow producer.
READ_TIMEOUT = (10.0, 120.0)

BEGIN = "airflow-xcom-begin"
END = "airflow-xcom-end"
EMPTY = "airflow-xcom-empty"

# The sidecar's program ($1 is the result file). SIGTERM (the kubelet stopping sidecars once the main
# containers have exited) prints the frame; the background sleep is killed first so that no process
# outlives the shell and holds its output open. `exit 0`: a sidecar's exit code does not decide the pod's
# phase, but a clean exit keeps `kubectl get pod` and events quiet.
_SCRIPT = r"""f="$1"
stop() {
  trap '' TERM
  kill "$pid" 2>/dev/null
  n=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  if [ -f "$f" ]; then
    size=$(wc -c < "$f" | tr -d ' ')
    sum=$(sha256sum "$f" | cut -d ' ' -f 1)
    echo "airflow-xcom-begin $n gzip+base64"
    gzip -c "$f" | base64
    echo "airflow-xcom-end $n $size $sum"
  else
    echo "airflow-xcom-empty $n"
  fi
  exit 0
}
trap stop TERM
sleep 2147483647 &
pid=$!
while :; do wait "$pid"; done
"""


class SidecarResultError(ValueError):
    """A sidecar's log does not hold a whole result; the message says what was found."""


class ResultTooLarge(SidecarResultError):
    """A sidecar's result is larger than the reader's limit (raised as soon as the limit is passed)."""


def sidecar_command(xcom_path: str) -> list[str]:
    """The sidecar container's ``command``, printing ``xcom_path`` when stopped."""
    return ["sh", "-c", _SCRIPT, SIDECAR_NAME, xcom_path]


def _sidecar_spec(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in spec.get("initContainers") or spec.get("init_containers") or []:
        if isinstance(c, Mapping) and c.get("name") == SIDECAR_NAME:
            return c
    return None


def has_sidecar(pod: Mapping[str, Any] | Any) -> bool:
    """Whether ``pod`` (API JSON or a client model) runs the XCom sidecar as a native sidecar, so its
    result is in the sidecar's log rather than in the base container's termination message."""
    spec = to_dict(pod).get("spec") or {}
    sidecar = _sidecar_spec(spec)
    return sidecar is not None and (sidecar.get("restartPolicy") or sidecar.get("restart_policy")) == "Always"


def sidecar_kept(job: Mapping[str, Any] | Any) -> bool | None:
    """For a Job as the API server returned it: whether its pod template kept the sidecar's
    ``restartPolicy: Always`` (True), dropped it (False: the server does not know native sidecars, a
    cluster older than 1.29 or with the ``SidecarContainers`` feature off), or has no sidecar (None)."""
    obj = to_dict(job)
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    sidecar = _sidecar_spec(spec)
    if sidecar is None:
        return None
    return (sidecar.get("restartPolicy") or sidecar.get("restart_policy")) == "Always"


class FrameDecoder:
    """Decodes a sidecar's log fed in chunks of any size; :meth:`result` gives the file's bytes.

    :param limit: the largest file accepted, in bytes; a larger one raises as soon as it is exceeded,
        before more is decoded.
    :param where: names the pod in error messages.
    """

    def __init__(self, *, limit: int, where: str) -> None:
        self.limit = limit
        self.where = where
        self._partial = b""
        self._nonce: str | None = None
        self._done = False
        self._empty = False
        self._b64 = b""  # base64 characters not yet decodable (not a multiple of 4)
        self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)  # gzip
        self._out = bytearray()
        self._sha = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def _line(self, line: bytes) -> None:
        if self._done:
            return  # after the frame: nothing the sidecar prints later changes the result
        if self._nonce is None:
            words = line.split()
            if len(words) >= 2 and words[0] == EMPTY.encode():
                self._done = self._empty = True
            elif len(words) >= 3 and words[0] == BEGIN.encode():
                if words[2] != b"gzip+base64":
                    raise SidecarResultError(
                        f"{self.where}: the XCom sidecar wrote its result as {words[2].decode(errors='replace')!r}, "
                        "expected 'gzip+base64'; is the sidecar image this provider's?"
                    )
                self._nonce = words[1].decode(errors="replace")
            return
        if line.startswith(END.encode() + b" "):
            self._end(line.decode(errors="replace").split())
            return
        self._data(line)

    def _data(self, line: bytes) -> None:
        text = self._b64 + line.strip()
        usable = len(text) - len(text) % 4
        self._b64 = text[usable:]
        try:
            compressed = base64.b64decode(text[:usable], validate=True)
        except binascii.Error:
            raise SidecarResultError(
                f"{self.where}: the XCom sidecar's log has a line that is not base64 inside the result"
            ) from None
        try:
            # at most what fits under the limit (+1 to see it exceeded): a small gzip that inflates to
            # gigabytes stops here
            piece = self._inflate.decompress(compressed, self.limit - len(self._out) + 1)
            while self._inflate.unconsumed_tail and len(self._out) + len(piece) <= self.limit:
                piece += self._inflate.decompress(
                    self._inflate.unconsumed_tail, self.limit - len(self._out) - len(piece) + 1
                )
        except zlib.error as e:
            raise SidecarResultError(
                f"{self.where}: the XCom sidecar's result is not valid gzip: {e}"
            ) from None
        if len(self._out) + len(piece) > self.limit:
            raise ResultTooLarge(
                f"{self.where}: the XCom result is larger than {self.limit} bytes, the largest accepted"
            )
        self._out += piece
        self._sha.update(piece)

    def _end(self, words: list[str]) -> None:
        if len(words) != 4 or words[1] != self._nonce:
            return  # not this frame's end (its nonce differs): base64 never has a space, so ignore it
        size, digest = words[2], words[3]
        if self._b64:
            raise SidecarResultError(f"{self.where}: the XCom sidecar's result ends in the middle of a block")
        if not self._inflate.eof:
            raise SidecarResultError(f"{self.where}: the XCom sidecar's result ends before its gzip stream")
        if not size.isdigit() or int(size) != len(self._out) or digest != self._sha.hexdigest():
            raise SidecarResultError(
                f"{self.where}: the XCom result read from the sidecar's log ({len(self._out)} bytes, sha256 "
                f"{self._sha.hexdigest()}) is not the file it printed ({size} bytes, sha256 {digest})"
            )
        self._done = True

    def result(self) -> bytes | None:
        """The file's bytes, or None when the base container wrote no file.

        :raises SidecarResultError: the log ended without a whole frame.
        """
        if self._partial:
            self._line(self._partial.rstrip(b"\r"))
            self._partial = b""
        if not self._done:
            if self._nonce is None:
                raise SidecarResultError(
                    f"{self.where}: the XCom sidecar's log holds no result: the sidecar did not run as a "
                    "native sidecar, or was killed before it printed (terminationGracePeriodSeconds), or "
                    "its log was rotated or removed"
                )
            raise SidecarResultError(
                f"{self.where}: the XCom sidecar's log ends before the end of the result ({len(self._out)} "
                "bytes read): the sidecar was stopped while printing (terminationGracePeriodSeconds), or "
                "its log was rotated (the kubelet's containerLogMaxSize)"
            )
        if self._empty:
            return None
        out = bytes(self._out)
        self._out = bytearray()
        return out


def _where(pod: str, namespace: str) -> str:
    return f"pod {namespace}/{pod}"


_semaphores: dict[int, asyncio.Semaphore] = {}


def _reading() -> asyncio.Semaphore:
    """The process-wide bound on results read at once (one event loop at a time in a triggerer)."""
    loop = asyncio.get_running_loop()
    semaphore = _semaphores.get(id(loop))
    if semaphore is None:
        _semaphores.clear()
        semaphore = _semaphores[id(loop)] = asyncio.Semaphore(READ_CONCURRENCY)
    return semaphore


async def read_result(core: Any, pod: str, namespace: str, *, limit: int) -> bytes | None:
    """The result file of ``pod``, read from its sidecar's log through ``core`` (a
    ``kubernetes_asyncio`` ``CoreV1Api``), streaming; None when the base container wrote none.

    :raises SidecarResultError: the log holds no whole result, or one larger than ``limit``.
    :raises kubernetes_asyncio.client.exceptions.ApiException: the log could not be read.
    """
    decoder = FrameDecoder(limit=limit, where=_where(pod, namespace))
    async with _reading():
        response = await core.read_namespaced_pod_log(
            pod, namespace, container=SIDECAR_NAME, _preload_content=False, _request_timeout=READ_TIMEOUT
        )
        try:
            async for chunk in response.content.iter_chunked(64 * 1024):
                decoder.feed(chunk)
        finally:
            response.release()
        return decoder.result()


def read_result_sync(core: Any, pod: str, namespace: str, *, limit: int) -> bytes | None:
    """:func:`read_result` with the ``kubernetes`` client's ``CoreV1Api`` (a worker)."""
    decoder = FrameDecoder(limit=limit, where=_where(pod, namespace))
    response = core.read_namespaced_pod_log(
        pod, namespace, container=SIDECAR_NAME, _preload_content=False, _request_timeout=READ_TIMEOUT
    )
    try:
        for chunk in response.stream(64 * 1024):
            decoder.feed(chunk)
    finally:
        response.release_conn()
    return decoder.result()


def _ordered_succeeded(pods: Iterable[Any]) -> list[dict[str, Any]]:
    """The succeeded pods, oldest first: the order of a result's ``xcom_result``."""
    listed = [to_dict(p) for p in pods]
    listed.sort(
        key=lambda p: (
            str((p.get("metadata") or {}).get("creationTimestamp") or ""),
            str((p.get("metadata") or {}).get("name") or ""),
        )
    )
    return [p for p in listed if classify_pod(p).phase == "succeeded"]


def sidecar_pods(pods: Iterable[Any]) -> list[str | None]:
    """For each succeeded pod, oldest first: its name when its result is in its sidecar's log, else
    None (its result is its termination message)."""
    return [str(p["metadata"]["name"]) if has_sidecar(p) else None for p in _ordered_succeeded(pods)]


def results_from_sidecars(result: JobResult, names: list[str | None], texts: dict[str, str]) -> JobResult:
    """``result`` with each sidecar pod's termination message replaced by what its sidecar printed
    (``texts``, by pod name)."""
    current = list(result.xcom_result or ())
    if len(current) != len(names):
        return result
    merged = [
        texts.get(name, EMPTY_XCOM_RESULT) if name else text
        for name, text in zip(names, current, strict=True)
    ]
    return replace(result, xcom_result=tuple(merged))


def too_large_hint(message: str) -> str:
    """A sidecar read error, with why the limit is what it is when the result was too large."""
    if "larger than" in message:
        return (
            f"{message}: Airflow stores an XCom as one value in its metadata database, and MySQL's default "
            "max_allowed_packet (64 MiB) bounds it. Write the data elsewhere (object storage, a volume) "
            "and return its location."
        )
    return message


def decode_log(chunks: Iterable[bytes], *, limit: int, where: str = "the log") -> bytes | None:
    """A whole log's result (tests and benchmarks feed recorded logs through it)."""
    decoder = FrameDecoder(limit=limit, where=where)
    for chunk in chunks:
        decoder.feed(chunk)
    return decoder.result()
