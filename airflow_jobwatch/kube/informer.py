"""The watch engine: list + watch + relist + reconcile + backoff + health for one kind of object.

One :class:`Informer` follows one (kind, namespace or all namespaces, label selector, field selector) and keeps
a local store of the matching objects keyed by uid. Subscribers get typed events: ``ADDED``, ``MODIFIED``,
``DELETED`` and ``DELETED_UNKNOWN`` (a tombstone: the object vanished while we were not watching, its final
state is unknown and the event carries the last state we saw).

Why not :class:`kubernetes_asyncio.watch.Watch`? It retries a 410 once on its own (from the same stale
resourceVersion, and only without ``timeout_seconds``), raises on any ``ERROR`` event, yields BOOKMARK objects
as raw dicts next to models, closes the whole ``ApiClient`` on any exception, and deserialises every object
into models we would immediately turn back into dicts. So kubernetes_asyncio is used only for what it is good
at (kubeconfig, auth and token refresh, TLS, the HTTP session) through :meth:`ApiClient.call_api` with
``_preload_content=False``, and the JSON lines are parsed here.

Layers, from the outside in (the same split as client-go's Reflector and kopf's watching module):

* :meth:`Informer._run` - forever: list when needed, watch, classify what went wrong, back off, repeat.
* :meth:`Informer._relist` / :meth:`Informer._list_page` / :meth:`Informer._apply_page` - a paged LIST and the
  reconcile against the store, page by page.
* :meth:`Informer._watch_once` - one watch request, applying its events to the store.
* :func:`_read_lines` - bytes from the socket split into lines, with the stall detector around every read.

What "does resetting mean we miss events?" gets as an answer: no. Whenever the watch cannot be resumed (410
Expired), the engine lists again and diffs the fresh list against its store: every object whose
resourceVersion changed is delivered as MODIFIED, every new one as ADDED, and every one that disappeared as a
DELETED_UNKNOWN tombstone. After each relist subscribers have seen every object's latest state and every
disappearance, exactly once per uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import json
import logging
import random
import time
import zlib
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from airflow_jobwatch.kube.backoff import Backoff, parse_retry_after
from airflow_jobwatch.kube.projection import projector

log = logging.getLogger(__name__)

__all__ = [
    "EventType",
    "Informer",
    "InformerConfig",
    "InformerEvent",
    "InformerHealth",
    "KubeApiError",
]

Kind = Literal["pods", "jobs", "events"]

# kind -> (API group/version prefix, plural, kind, apiVersion). Items of a LIST carry no kind/apiVersion
# (only the List does), watch event objects do; we fill them in on listed items so every object a
# subscriber sees looks the same whichever way it arrived.
_RESOURCES: dict[str, tuple[str, str, str, str]] = {
    "pods": ("/api/v1", "pods", "Pod", "v1"),
    "jobs": ("/apis/batch/v1", "jobs", "Job", "batch/v1"),
    # core/v1 Events: what the Job controller records when the API refuses a Job's pods (FailedCreate).
    "events": ("/api/v1", "events", "Event", "v1"),
}

# A watch the server closes this soon after opening, without sending a single event, is counted as a
# failure and backed off (client-go's reflector does the same: "very short watch" - an apiserver or a proxy
# that accepts and immediately drops watches would otherwise be hammered in a tight loop).
MIN_HEALTHY_WATCH_SECONDS = 1.0

# The server's own default for timeoutSeconds is random in [minRequestTimeout, 2*minRequestTimeout), i.e.
# up to 1800 s; we always send ours so that the stream ends well within the client-side timeouts and
# every informer does not reconnect at the same moment (the jitter spreads the reconnects).
_WATCH_TIMEOUT_JITTER = (1.0, 2.0)

# Chunk size for reading watch streams. Events are single JSON lines; a few KiB each for pods. 64 KiB reads
# amortise the per-read overhead (a timeout context per read) over many events when the stream is busy.
_READ_CHUNK_BYTES = 2**16


class EventType(enum.Enum):
    """What happened to an object, as far as this informer can tell."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    #: The object disappeared while the engine was not watching (found missing by a relist): its final
    #: state is unknown, the event carries the last state we saw (client-go's DeletedFinalStateUnknown).
    DELETED_UNKNOWN = "DELETED_UNKNOWN"


@dataclass(frozen=True, slots=True)
class InformerEvent:
    """One change delivered to subscribers. ``obj`` is API JSON (camelCase) and must be treated as
    read-only: it is the same dict the store holds."""

    type: EventType
    obj: dict[str, Any]

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    @property
    def namespace(self) -> str | None:
        ns = self.obj["metadata"].get("namespace")
        return None if ns is None else str(ns)

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


@dataclass(frozen=True)
class InformerConfig:
    """Tuning of one informer. Defaults suit a production cluster; tests shrink them."""

    # Server-side timeoutSeconds of each watch, multiplied by a random factor in [1, 2) so informers do
    # not all reconnect together. 5 min is client-go's minWatchTimeout: long enough that reconnects are
    # rare, short enough that a connection silently broken by a proxy is replaced regularly.
    watch_timeout_seconds: float = 300
    # No byte (event or bookmark) for this long -> the stream is considered dead and is reopened from the
    # last resourceVersion. Servers send bookmarks about once a minute when they send them at all, so 90 s
    # does not fire on a healthy but quiet stream in the common case; when it does, reopening is cheap.
    stall_timeout_seconds: float = 90
    # TCP connect timeout. A reachable apiserver accepts within milliseconds; 10 s covers a slow network
    # without letting a black-holed address hang a reconnect.
    connect_timeout_seconds: float = 10
    # Backoff between failed attempts: 0.8 s doubling to 30 s (client-go's reflector values, which its
    # authors measured to cut API traffic from clients of an unhealthy server by ~98%), reset after 2 min
    # without failure. See airflow_jobwatch.kube.backoff for the jitter.
    backoff_initial_seconds: float = 0.8
    backoff_max_seconds: float = 30
    backoff_reset_after_seconds: float = 120
    # Continuous failure for this long -> subscribers are told the informer is unhealthy (they decide what
    # to do: fail tasks, poll, alert). 60 s rides out an apiserver restart or a short network blip.
    unhealthy_after_seconds: float = 60
    # Optional safety-net relist every N seconds, for events a server never sent (None = off). Each relist
    # is a full LIST, so keep it at many minutes in production.
    resync_interval_seconds: float | None = None
    # Items per LIST page. 500 is client-go's pager default: pages small enough not to time out or bloat a
    # response, few enough requests for 10,000 objects (20 pages).
    page_size: int = 500
    # Drop metadata.managedFields from stored objects. Server-side-apply bookkeeping is often a third to a
    # half of an object's JSON and nothing that consumes this engine reads it (client-go offers the same
    # as TransformStripManagedFields); with 10,000 pods it is tens of MB of resident memory.
    strip_managed_fields: bool = True
    # Store only the fields consumers read (airflow_jobwatch/kube/projection.py): a few hundred bytes per
    # pod instead of several KiB, which is what makes a namespace full of other people's pods affordable.
    # Off only for benchmarks (to measure the difference) and tests that look at whole objects.
    projection: bool = True
    # Keep each stored object as its compact JSON text, deflated (one bytes object; see _CompactStore), and
    # decode it on every read, instead of as a tree of dicts. A projected worker pod is ~150 bytes that way
    # (~1 KiB of JSON) against ~4.8 KiB of Python objects,
    # none of which the garbage collector tracks, and the allocator can give back the memory of parsed list
    # pages because no small stored object sits between their freed ones. Reads cost a decode each (~10 us),
    # so this suits a store that is mostly written and rarely read: the executor's watcher child, which reads
    # an object only to compare a resourceVersion or to report a deletion. Off by default: the
    # trigger registry reads its Jobs on every decision.
    compact_store: bool = False
    # Confirmations of a possibly stale relist (see Informer._confirm): at most this many GETs in flight at
    # once, so a list missing thousands of objects does not fire thousands of requests together (client-go's
    # default QPS is 5 with a burst of 10; 8 concurrent GETs stays in that range), ...
    confirm_concurrency: int = 8
    # ... and at most this many per relist. Objects beyond the cap are kept (never tombstoned unconfirmed)
    # and are checked again by the next relist; the watch that follows the list settles them meanwhile.
    max_confirmations_per_relist: int = 2000
    # How many deleted uids are remembered so that a stale list (or a watch replay from its older
    # resourceVersion) cannot bring an object back after its deletion was delivered. uids are never reused,
    # so remembering one is always right; the bound caps memory (~100 bytes each).
    remembered_deletions: int = 20_000

    def __post_init__(self) -> None:
        positive = {
            "watch_timeout_seconds": self.watch_timeout_seconds,
            "stall_timeout_seconds": self.stall_timeout_seconds,
            "connect_timeout_seconds": self.connect_timeout_seconds,
            "backoff_initial_seconds": self.backoff_initial_seconds,
            "backoff_max_seconds": self.backoff_max_seconds,
            "unhealthy_after_seconds": self.unhealthy_after_seconds,
        }
        for key, value in positive.items():
            if not value > 0:
                raise ValueError(f"InformerConfig.{key} must be a number > 0 (seconds), got {value!r}")
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise ValueError(
                f"InformerConfig.backoff_max_seconds ({self.backoff_max_seconds!r}) must be >= "
                f"backoff_initial_seconds ({self.backoff_initial_seconds!r})"
            )
        if self.backoff_reset_after_seconds < 0:
            raise ValueError(
                f"InformerConfig.backoff_reset_after_seconds must be >= 0, got {self.backoff_reset_after_seconds!r}"
            )
        if self.resync_interval_seconds is not None and not self.resync_interval_seconds > 0:
            raise ValueError(
                "InformerConfig.resync_interval_seconds must be None (off) or a number of seconds > 0, "
                f"got {self.resync_interval_seconds!r}"
            )
        if not isinstance(self.page_size, int) or self.page_size < 1:
            raise ValueError(f"InformerConfig.page_size must be an integer >= 1, got {self.page_size!r}")
        for key in ("confirm_concurrency", "max_confirmations_per_relist", "remembered_deletions"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"InformerConfig.{key} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class InformerHealth:
    """A snapshot of the informer's state, given to ``on_health`` subscribers and by :attr:`Informer.health`.

    :param connected: a watch stream is open right now.
    :param healthy: False once every attempt has failed for ``unhealthy_after_seconds`` in a row; True again
        after the next success (a completed LIST, or a watch that delivers an event or stays open).
    :param synced: the initial LIST has completed (the store holds a full view).
    :param consecutive_failures: failed attempts since the last success.
    :param seconds_since_sync: None before the first LIST; 0.0 while connected; otherwise how long ago the
        store was last known current (end of the last watch or LIST).
    :param last_error: a one-line description of the last failure (server message, no credentials).
    :param relists: LISTs completed after the initial one (410 recoveries and periodic resyncs).
    :param watches: watch requests the server accepted.
    """

    connected: bool
    healthy: bool
    synced: bool
    consecutive_failures: int
    seconds_since_sync: float | None
    last_error: str | None
    relists: int
    watches: int
    # Permission errors: the explained 401/403 of the last failure, None once a request works.
    access_denied: str | None = None


class KubeApiError(Exception):
    """The API server answered with an error status (HTTP status, or an ERROR event in a watch stream).

    Keeps the server's code, reason and message; ``retry_after`` is the ``Retry-After`` header in seconds
    when the server sent one (429 Too Many Requests, 503).
    """

    def __init__(self, status: int, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

        self.causes: tuple[str, ...] = ()

    @classmethod
    def from_status(cls, status: dict[str, Any], *, http_status: int | None = None) -> KubeApiError:
        """From a ``kind: Status`` object (an error body or an ERROR event's object)."""
        code = status.get("code", http_status)
        raw_details = status.get("details")
        details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
        retry = details.get("retryAfterSeconds")
        error = cls(
            int(code) if isinstance(code, int) else (http_status or 0),
            str(status.get("reason") or "Unknown"),
            str(status.get("message") or ""),
            retry_after=float(retry)
            if isinstance(retry, int | float) and not isinstance(retry, bool)
            else None,
        )
        error.causes = tuple(
            str(c.get("reason"))
            for c in details.get("causes") or []
            if isinstance(c, dict) and c.get("reason")
        )
        return error

    @property
    def too_large_resource_version(self) -> bool:
        """The server has not caught up with the resourceVersion we asked for (an HA apiserver whose watch
        cache lags the one we talked to before). The real server answers 504 Timeout with the cause
        ``ResourceVersionTooLarge`` after waiting ~3 s (older servers: only the message "Too large resource
        version"; tests/fixtures and /work/shared/reference/real-apiserver/watch-expired-410.json). Not a
        failure of ours: wait and ask again, as client-go's reflector does."""
        return (
            "ResourceVersionTooLarge" in self.causes or "too large resource version" in self.message.lower()
        )


class _Expired(Exception):
    """410 Gone / Expired: the requested resourceVersion (or continue token) is no longer in the server's
    history. The only way forward is a fresh LIST."""


class _ShortWatch(Exception):
    """The server closed a watch within MIN_HEALTHY_WATCH_SECONDS without sending anything."""


class _Stalled(Exception):
    """No byte arrived on a watch stream for stall_timeout_seconds."""


# How a LIST chooses its snapshot (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list):
# * "any": resourceVersion=0 - whatever the apiserver's watch cache holds, cheap for the server but possibly
#   older than what we have already seen (another apiserver of an HA control plane may lag behind).
#   Used for the first list and after a 410, and its verdicts are checked before they are believed.
# * "not_older_than": resourceVersion=<last synced>&resourceVersionMatch=NotOlderThan - what client-go's
#   reflector uses for a relist that does not follow a 410: still served from the cache, but never older
#   than what we have seen, so everything it says can be believed.
# * "consistent": no resourceVersion - a quorum read from etcd. The fallback when the cache keeps answering
#   "Too large resource version" to a NotOlderThan list (client-go: isLastSyncResourceVersionUnavailable).
ListMode = Literal["any", "not_older_than", "consistent"]

# "Too large resource version" answers to a NotOlderThan list in a row before the next list is a consistent
# read instead. The server itself waits ~3 s for its cache before answering so, with our backoff, three
# answers mean the cache has been behind for well over 10 s: not a blip, and one quorum read is cheaper
# than waiting on.
_TOO_LARGE_BEFORE_CONSISTENT = 3

_Subscriber = tuple[Callable[[InformerEvent], None], Callable[[InformerHealth], None] | None]


def compare_resource_versions(a: str | None, b: str | None) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b``; None when they cannot be compared.

    resourceVersions are opaque strings by contract, but KEP-5504 ("comparable resource versions", Kubernetes
    1.35) makes it official that kube-apiserver's are decimal integers without leading zeros (etcd
    revisions) and may be compared as such: by length, then digit by digit. Anything else (an aggregated
    API's own scheme, an empty string) is not compared, and the caller confirms with a consistent read
    instead of guessing.
    """
    if not a or not b or not a.isdigit() or not b.isdigit() or a[0] == "0" or b[0] == "0":
        return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def _selector_matcher(selector: str | None) -> Callable[[dict[str, str]], bool] | None:
    """A predicate for the equality- and set-based label selector syntax, or None when ``selector`` uses
    something this does not understand (then the caller does not filter). Used only to decide whether an
    object confirmed by a GET still belongs to this informer; the server does the real filtering."""
    # (operator, key, values): "in", "notin", "exists", "!exists"
    requirements: list[tuple[str, str, frozenset[str]]] = []
    parts, depth, current = [], 0, ""
    for ch in selector or "":  # split on commas outside parentheses
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if selector:
        parts.append(current)
    for raw in parts:
        part = raw.strip()
        if " notin " in part or " in " in part:
            op = "notin" if " notin " in part else "in"
            key, _, rest = part.partition(f" {op} ")
            rest = rest.strip()
            if not (rest.startswith("(") and rest.endswith(")")):
                return None
            requirements.append((op, key.strip(), frozenset(v.strip() for v in rest[1:-1].split(","))))
        elif "!=" in part:
            key, _, value = part.partition("!=")
            requirements.append(("notin", key.strip(), frozenset({value.strip()})))
        elif "=" in part:
            key, _, value = part.replace("==", "=").partition("=")
            requirements.append(("in", key.strip(), frozenset({value.strip()})))
        elif part.startswith("!"):
            requirements.append(("!exists", part[1:].strip(), frozenset()))
        elif part and all(c.isalnum() or c in "-_./" for c in part):
            requirements.append(("exists", part, frozenset()))
        else:
            return None

    def matches(labels: dict[str, str]) -> bool:
        for op, key, values in requirements:
            value = labels.get(key)
            if op == "in" and value not in values:
                return False
            if op == "notin" and value in values:
                return False
            if op == "exists" and key not in labels:
                return False
            if op == "!exists" and key in labels:
                return False
        return True

    return matches


def _split_lines(buffer: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """Append ``chunk`` to ``buffer``; return the complete lines and the incomplete rest."""
    data = buffer + chunk if buffer else chunk
    if b"\n" not in chunk:
        return [], data
    *lines, rest = data.split(b"\n")
    return lines, rest


async def _read_lines(
    content: aiohttp.StreamReader, *, stall_timeout: float, deadline: float | None
) -> AsyncGenerator[bytes, None]:
    """Yield the lines of a watch stream until EOF (the server ended it) or ``deadline`` (loop time).

    Every read is bounded by ``stall_timeout``: a server that keeps the connection open but sends nothing
    (a half-open TCP connection after a network change, a stuck apiserver or proxy) raises
    :class:`_Stalled` instead of hanging the informer forever (apache/airflow #14974, #12229).
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
            raise _Stalled(f"no data for {stall_timeout:g} s") from None
        if not chunk:  # EOF: the server ended the stream (timeoutSeconds, restart, dropped watch)
            return
        lines, buffer = _split_lines(buffer, chunk)
        for line in lines:
            if line.strip():
                yield line


# ---- decoding LIST pages -------------------------------------------------------------------------------
# A relist mostly finds what it already has: of 50,000 listed pods, the 45,000 unchanged ones need only their
# uid and resourceVersion. With msgspec (which Airflow itself requires, so it is installed wherever this
# provider is), a page is split into its items' raw JSON without building them, each item's uid and
# resourceVersion are read by a decoder that skips everything else, and only the items that are stored are
# decoded whole: a relist of 50,000 pods costs ~0.5 s of CPU instead of ~2 s. Without msgspec, the stdlib
# parses every item whole; the rules applied to the items are the same either way.

_Head = Callable[[Any], tuple[str, str | None]]
_Load = Callable[[Any], dict[str, Any]]
_Page = tuple[str, str | None, list[Any], _Head, _Load]


def _decode_page_stdlib(body: bytes) -> _Page:
    """(list resourceVersion, continue token, items, item -> (uid, resourceVersion), item -> object)."""
    page = json.loads(body)
    if not isinstance(page, dict):
        raise ValueError("LIST returned no list object")
    metadata = page.get("metadata") or {}
    items: list[dict[str, Any]] = page.get("items") or []
    return (
        str(metadata.get("resourceVersion") or ""),
        metadata.get("continue") or None,
        items,
        _stdlib_head,
        _identity,
    )


def _stdlib_head(obj: dict[str, Any]) -> tuple[str, str | None]:
    metadata = obj["metadata"]
    return metadata["uid"], metadata.get("resourceVersion")


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


try:
    import msgspec
except ImportError:  # pragma: no cover - Airflow requires msgspec; the engine does not
    _decode_page = _decode_page_stdlib
else:

    class _ListMeta(msgspec.Struct, gc=False):
        resourceVersion: str | None = None
        continue_: str | None = msgspec.field(default=None, name="continue")

    class _RawList(msgspec.Struct, gc=False):
        metadata: _ListMeta | None = None
        items: list[msgspec.Raw] | None = None

    class _ItemMeta(msgspec.Struct, gc=False):
        uid: str
        resourceVersion: str | None = None

    class _ItemHead(msgspec.Struct, gc=False):
        metadata: _ItemMeta

    _raw_list = msgspec.json.Decoder(_RawList)
    _item_head = msgspec.json.Decoder(_ItemHead)
    _item_whole = msgspec.json.Decoder(dict[str, Any])

    def _msgspec_head(raw: msgspec.Raw) -> tuple[str, str | None]:
        metadata = _item_head.decode(raw).metadata
        return metadata.uid, metadata.resourceVersion

    def _decode_page_msgspec(body: bytes) -> _Page:
        page = _raw_list.decode(body)
        metadata = page.metadata or _ListMeta()
        return (
            metadata.resourceVersion or "",
            metadata.continue_ or None,
            page.items or [],
            _msgspec_head,
            _item_whole.decode,
        )

    _decode_page = _decode_page_msgspec


@dataclass(slots=True)
class _Listing:
    """What one LIST (all its pages) has told so far: its resourceVersion, the uids it listed, objects whose
    fate it cannot tell (uid -> stored copy), and counts for the log line."""

    rv: str = ""
    seen: set[str] = field(default_factory=set)
    doubtful: dict[str, dict[str, Any]] = field(default_factory=dict)
    added: int = 0
    modified: int = 0


def _encode_stored(obj: dict[str, Any]) -> bytes:
    if _decode_page is _decode_page_stdlib:  # pragma: no cover - Airflow requires msgspec
        return json.dumps(obj, separators=(",", ":")).encode()
    return msgspec.json.encode(obj)


def _decode_stored(raw: bytes) -> dict[str, Any]:
    if _decode_page is _decode_page_stdlib:  # pragma: no cover - Airflow requires msgspec
        obj: dict[str, Any] = json.loads(raw)
        return obj
    return _item_whole.decode(raw)


class _CompactStore:
    """The informer's store (uid -> object) with each object kept as compact JSON, deflated (see
    ``InformerConfig.compact_store``). Every read decodes a new dict: callers may keep or change it
    without touching the store, and two reads of one object are equal but never identical.

    Objects of one kind (worker pods of one executor) repeat the same keys, labels and most values, which
    deflate alone barely finds in 1 KiB; with the first object stored as zlib's preset dictionary, a
    projected worker pod's 1,051 bytes of JSON deflate to about 120 (raw deflate, level 6: ~6 us to
    compress, ~1 us to inflate on top of the JSON decode). The dictionary is fixed for the life of the
    store (every entry is inflated with it); an object unlike the first one is merely compressed less.
    """

    __slots__ = ("_data", "_zdict")

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._zdict: bytes | None = None

    def _pack(self, obj: dict[str, Any]) -> bytes:
        raw = _encode_stored(obj)
        if self._zdict is None:
            self._zdict = raw
        packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=self._zdict)
        return packer.compress(raw) + packer.flush()

    def _unpack(self, packed: bytes) -> dict[str, Any]:
        assert self._zdict is not None  # set by the first _pack
        unpacker = zlib.decompressobj(-15, zdict=self._zdict)
        return _decode_stored(unpacker.decompress(packed) + unpacker.flush())

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, uid: object) -> bool:
        return uid in self._data

    def __getitem__(self, uid: str) -> dict[str, Any]:
        return self._unpack(self._data[uid])

    def __setitem__(self, uid: str, obj: dict[str, Any]) -> None:
        self._data[uid] = self._pack(obj)

    def get(self, uid: str) -> dict[str, Any] | None:
        raw = self._data.get(uid)
        return None if raw is None else self._unpack(raw)

    def pop(self, uid: str, default: None = None) -> dict[str, Any] | None:
        raw = self._data.pop(uid, None)
        return default if raw is None else self._unpack(raw)

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for uid, raw in list(self._data.items()):
            yield uid, self._unpack(raw)

    def values(self) -> Iterator[dict[str, Any]]:
        for raw in list(self._data.values()):
            yield self._unpack(raw)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector for a short stretch of code that cannot suspend.

    A LIST page of 500 pods parses into ~20,000 dicts and lists. They live until the page is applied, long
    enough for the generational collector to promote them to its oldest generation, and every ~25% growth
    of that generation triggers a full collection, which walks every object of the process: the 50,000
    stored pods included. A relist of 50,000 pods (100 pages) spent about half of its CPU in ~11 such
    collections (1.9 s of 3.5 s), though nothing it allocates forms a cycle (parsed JSON never does). With
    the collector held off until the page is applied and freed, what is not kept is freed by reference
    counting without ever being promoted, and only the objects the store keeps age as they should.

    Used around code that never awaits (one page: parse, apply, free - a few ms), so other tasks do not
    run meanwhile; a thread that runs in between merely has its collection delayed by as much. If the
    collector was off already (an application's choice), it is left off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class InformerObserver(Protocol):
    """Told what the engine does, for metrics (airflow_jobwatch.metrics.InformerMetrics implements it;
    this module stays free of Airflow). Every method must return at once and never raise."""

    def on_list(self, *, relist: bool) -> None: ...
    def on_expired(self) -> None: ...
    def on_watch_start(self, *, restart: bool) -> None: ...
    def on_stall(self) -> None: ...
    def on_event(self, event_type: str) -> None: ...
    def on_health(self, healthy: bool) -> None: ...
    def on_stop(self) -> None: ...


class _NoObserver:
    def on_list(self, *, relist: bool) -> None: ...
    def on_expired(self) -> None: ...
    def on_watch_start(self, *, restart: bool) -> None: ...
    def on_stall(self) -> None: ...
    def on_event(self, event_type: str) -> None: ...
    def on_health(self, healthy: bool) -> None: ...
    def on_stop(self) -> None: ...


class Informer:
    """List + watch one kind of object, keep a local store, tell subscribers what changed.

    :param api_client: a ``kubernetes_asyncio.client.ApiClient`` (config, auth, TLS, HTTP session). The
        informer never closes it; several informers may share one.
    :param kind: ``"pods"`` (core/v1), ``"jobs"`` (batch/v1) or ``"events"`` (core/v1).
    :param namespace: a namespace, or None for all namespaces.
    :param label_selector: e.g. ``"airflow-worker=3,app in (a,b)"``; None for no filter.
    :param field_selector: e.g. ``"status.phase!=Succeeded"``; None for no filter.
    :param config: tuning, see :class:`InformerConfig`.
    :param name: a name for log lines; derived from the other arguments if not given.
    :param observer: told about lists, 410s, watch restarts, stalls, events and health (metrics).
    """

    def __init__(
        self,
        api_client: Any,
        *,
        kind: Kind,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        config: InformerConfig = InformerConfig(),  # frozen dataclass: safe as a shared default
        name: str | None = None,
        observer: InformerObserver | None = None,
    ) -> None:
        if kind not in _RESOURCES:
            raise ValueError(f"Informer kind must be one of {sorted(_RESOURCES)}, got {kind!r}")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise ValueError(
                f"Informer namespace must be a non-empty string or None (all), got {namespace!r}"
            )
        if not isinstance(config, InformerConfig):
            raise TypeError(f"Informer config must be an InformerConfig, got {type(config).__name__}")
        self._api = api_client
        self._observer: InformerObserver = observer or _NoObserver()
        self.kind: Kind = kind
        self.namespace = namespace
        self.label_selector = label_selector or None
        self.field_selector = field_selector or None
        self.config = config
        self.name = name or "{}/{}{}{}".format(
            kind,
            namespace or "*",
            f" l={self.label_selector}" if self.label_selector else "",
            f" f={self.field_selector}" if self.field_selector else "",
        )
        prefix, plural, self._kind_name, self._api_version = _RESOURCES[kind]
        self._path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"

        # The store: uid -> object, plus (namespace, name) -> uid for by_name().
        self._store: dict[str, dict[str, Any]] | _CompactStore = (
            _CompactStore() if config.compact_store else {}
        )
        self._by_name: dict[tuple[str | None, str], str] = {}
        self._rv: str | None = None  # resourceVersion to resume the watch from
        # uids whose deletion was delivered (bounded, oldest forgotten first): a stale list or a watch replay
        # from an older resourceVersion must not bring them back (uids are never reused).
        self._gone: OrderedDict[str, None] = OrderedDict()
        # List modes for which the server was seen to ignore `limit` (a watch cache answering
        # resourceVersion=0 returns everything in one response): we stop asking for pages there.
        self._limit_ignored: set[str] = set()
        self._label_match = _selector_matcher(self.label_selector)
        self._project = projector(kind) if config.projection else None
        #: Objects for which this returns True are stored whole, projection or not (the trigger registry
        #: keeps the Jobs its triggers wait for whole: their event carries the whole Job).
        self.keep_whole: Callable[[dict[str, Any]], bool] | None = None
        # Counters for tests and benchmarks: confirmations by GET, their verdicts, stale copies skipped.
        self.stats: dict[str, int] = {
            "confirm_gets": 0,
            "confirmed_gone": 0,
            "confirmed_present": 0,
            "confirm_failed": 0,
            "confirm_deferred": 0,
            "stale_copies_ignored": 0,
            "too_large_rv": 0,
        }

        self._subscribers: dict[int, _Subscriber] = {}
        self._next_token = 0

        self._backoff = Backoff(
            initial_seconds=config.backoff_initial_seconds,
            max_seconds=config.backoff_max_seconds,
            reset_after_seconds=config.backoff_reset_after_seconds,
        )
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._synced_event = asyncio.Event()

        # Health bookkeeping (times are time.monotonic()).
        self._connected = False
        self._synced = False
        self._consecutive_failures = 0
        self._failing_since: float | None = None
        self._last_error: str | None = None
        self._access_denied: str | None = None
        self._verb = "list"
        self._last_sync: float | None = None
        self._lists = 0
        self._watches = 0
        self._unhealthy_timer: asyncio.TimerHandle | None = None
        # Set by the unhealthy timer (or a failure past the threshold), cleared by a success. The health
        # property reads this flag rather than comparing clocks, so what `health` says and what on_health
        # subscribers were told can never disagree, even for the instant before the timer fires.
        self._unhealthy = False
        self._reported: tuple[bool, bool, bool] | None = None

    def __repr__(self) -> str:
        return f"<Informer {self.name} objects={len(self._store)} connected={self._connected}>"

    # ----------------------------------------------------------------------------------------- public API

    def subscribe(
        self,
        on_event: Callable[[InformerEvent], None],
        on_health: Callable[[InformerHealth], None] | None = None,
    ) -> Callable[[], None]:
        """Register callbacks, run in the informer's event loop (they must not block). Returns a function
        that unsubscribes. A subscriber that joins after the initial sync receives nothing retroactively:
        it reads :meth:`items` for the current state. A callback that raises is logged and ignored."""
        token = self._next_token
        self._next_token += 1
        self._subscribers[token] = (on_event, on_health)

        def unsubscribe() -> None:
            self._subscribers.pop(token, None)

        return unsubscribe

    async def start(self) -> None:
        """Start the engine in a background task of the running loop; returns at once."""
        if self._stopped:
            raise RuntimeError(f"informer {self.name} was stopped; create a new Informer to start again")
        if self._task is not None:
            return
        self._task = asyncio.create_task(self._run(), name=f"informer {self.name}")

    async def wait_synced(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - contract
        """Wait until the initial LIST has been applied (subscribers got ADDED for every object).
        Returns False if ``timeout`` seconds passed first."""
        if self._synced_event.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._synced_event.wait()
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Stop promptly: cancel the engine task (which closes any open response) and wait for it."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._unhealthy_timer is not None:
            self._unhealthy_timer.cancel()
            self._unhealthy_timer = None
        self._set_connected(False)
        self._observer.on_stop()

    def get(self, uid: str) -> dict[str, Any] | None:
        """The stored object with this uid (read-only), or None."""
        return self._store.get(uid)

    def items(self) -> list[dict[str, Any]]:
        """All stored objects (read-only dicts, a new list)."""
        return list(self._store.values())

    def names(self) -> list[tuple[str | None, str]]:
        """``(namespace, name)`` of every stored object (a new list; no object is read, so this costs no
        decode with ``compact_store``)."""
        return list(self._by_name)

    def by_name(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object with this namespace and name (read-only), or None."""
        uid = self._by_name.get((namespace, name))
        return None if uid is None else self._store.get(uid)

    @property
    def resource_version(self) -> str | None:
        """The resourceVersion the next watch would resume from (opaque; for diagnostics)."""
        return self._rv

    @property
    def synced(self) -> bool:
        """Whether the first list has completed (``health.synced``, without building the snapshot)."""
        return self._synced

    @property
    def failing(self) -> bool:
        """Whether the last list or watch attempt failed (``health.consecutive_failures > 0``) or the API
        refuses us; cheap enough to ask on every trigger's turn, unlike the ``health`` snapshot."""
        return self._consecutive_failures > 0 or self._access_denied is not None

    @property
    def health(self) -> InformerHealth:
        now = time.monotonic()
        healthy = not self._unhealthy
        if self._last_sync is None:
            since: float | None = None
        elif self._connected:
            since = 0.0
        else:
            since = max(0.0, now - self._last_sync)
        return InformerHealth(
            connected=self._connected,
            healthy=healthy,
            synced=self._synced,
            consecutive_failures=self._consecutive_failures,
            seconds_since_sync=since,
            last_error=self._last_error,
            relists=max(0, self._lists - 1),
            watches=self._watches,
            access_denied=self._access_denied,
        )

    # ------------------------------------------------------------------------------------- the main loop

    async def _run(self) -> None:
        """List, then watch; on every failure decide what to do next and back off.

        * 410 Expired (ERROR event, HTTP 410, or an expired continue token): the resourceVersion is gone
          from the server's history, so resuming is impossible - relist and reconcile. A 410 relists at
          once unless the previous failure was a 410 too (the 410 that greets us after an outage is the
          normal way back, not a reason to wait out the outage's backoff); 410s in a row back off like
          any error, so a server that answers 410 to every watch is not hammered (apache/airflow #21087).
        * A stalled stream: reopen the watch from the last resourceVersion at once (indistinguishable from
          a quiet stream without bookmarks, so not a failure).
        * A watch the server ended normally (timeoutSeconds, apiserver restart): resume at once.
        * Anything else (connection refused/reset, timeouts, 5xx, 429, unexpected ERROR events, bad
          JSON): count a failure, back off (honouring Retry-After), then resume the watch from the last
          resourceVersion (or retry the LIST if we have no complete view yet).
        """
        loop = asyncio.get_running_loop()
        need_list = True
        # The first list and every list after a 410 read resourceVersion=0 (see ListMode): cheap for the
        # server, possibly stale, and checked by _relist before anything it says is delivered.
        list_mode: ListMode = "any"
        too_large_in_a_row = 0
        next_resync: float | None = None
        listed_before = False
        log.debug("informer %s: starting", self.name)
        while True:
            delay = 0.0
            if next_resync is not None and loop.time() >= next_resync and not need_list:
                # The resync is due even if the last watch ended by an error. It follows no 410, so it can
                # ask for a list at least as new as what we have seen (client-go's relist does the same).
                need_list = True
                list_mode = "not_older_than" if self._rv else "any"
            try:
                listed = need_list
                if need_list:
                    await self._relist(list_mode)
                    self._observer.on_list(relist=listed_before)
                    listed_before = True
                    need_list = False
                    too_large_in_a_row = 0
                    if self.config.resync_interval_seconds is not None:
                        next_resync = loop.time() + self.config.resync_interval_seconds
                self._observer.on_watch_start(restart=not listed)
                await self._watch_once(deadline=next_resync)
                too_large_in_a_row = 0
                if next_resync is not None and loop.time() >= next_resync:
                    log.debug("informer %s: periodic resync", self.name)
                    need_list = True
                    list_mode = "not_older_than" if self._rv else "any"
            except asyncio.CancelledError:
                raise
            except _Expired as exc:
                self._observer.on_expired()
                need_list = True
                list_mode = "any"
                delay = self._failure(f"410 Expired: {exc}", free=True)
                log.info("informer %s: %s; relisting in %.1f s", self.name, exc, delay)
            except _Stalled as exc:
                self._observer.on_stall()
                # DEBUG, not WARNING: a quiet collection on a server that sends no bookmarks looks the same.
                log.debug("informer %s: watch silent (%s); reconnecting", self.name, exc)
            except KubeApiError as exc:
                if exc.too_large_resource_version:
                    # The apiserver we reached has not caught up with a resourceVersion another one gave us
                    # (HA control plane). Waiting is the answer; for a NotOlderThan list that keeps meeting
                    # it, one consistent read (no resourceVersion) ends the wait.
                    self.stats["too_large_rv"] += 1
                    too_large_in_a_row += 1
                    if (
                        need_list
                        and list_mode == "not_older_than"
                        and too_large_in_a_row >= _TOO_LARGE_BEFORE_CONSISTENT
                    ):
                        list_mode = "consistent"
                    delay = self._failure(str(exc), retry_after=exc.retry_after)
                    log.info(
                        "informer %s: server behind our resourceVersion %s (%s); retrying in %.1f s",
                        self.name,
                        self._rv,
                        exc.message,
                        delay,
                    )
                elif denied := self._access_denied_by(exc):
                    # Permanent until someone grants it; unhealthy at once, an ERROR per backoff.
                    self._access_denied = denied
                    delay = self._failure(denied, retry_after=exc.retry_after)
                    self._mark_unhealthy()
                    log.error("informer %s: %s Retrying in %.1f s.", self.name, denied, delay)
                else:
                    delay = self._failure(str(exc), retry_after=exc.retry_after)
                    log.warning("informer %s: API error %s; retrying in %.1f s", self.name, exc, delay)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError, _ShortWatch) as exc:
                # ValueError covers a malformed JSON line (json.JSONDecodeError) and bad response shapes.
                desc = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                delay = self._failure(desc)
                log.warning("informer %s: %s; retrying in %.1f s", self.name, desc, delay)
            except Exception as exc:
                # Not expected (a bug, or an auth plugin failing to refresh a token): keep the engine
                # alive - subscribers rely on it - but log the traceback so it gets fixed.
                delay = self._failure(f"{type(exc).__name__}: {exc}")
                log.exception("informer %s: unexpected error; retrying in %.1f s", self.name, delay)
            if delay > 0:
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------------------------- HTTP requests

    async def _request(
        self, params: dict[str, str], *, read_timeout: float, path: str | None = None
    ) -> aiohttp.ClientResponse:
        """GET the collection (or ``path``) with ``params``; the raw response on 2xx, :class:`KubeApiError`
        (or :class:`_Expired` for 410) otherwise."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.config.connect_timeout_seconds, sock_read=read_timeout
        )
        self._verb = "watch" if params.get("watch") == "true" else "list"  # For 401/403 advice
        resp: aiohttp.ClientResponse = await self._api.call_api(
            path or self._path,
            "GET",
            query_params=list(params.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        if 200 <= resp.status < 300:
            return resp
        try:
            body = await resp.read()
        finally:
            resp.release()
        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        error: KubeApiError
        try:
            status = json.loads(body)
            if not isinstance(status, dict):
                raise ValueError("not a Status object")
            error = KubeApiError.from_status(status, http_status=resp.status)
            error.status = resp.status
        except ValueError:
            text = body[:200].decode("utf-8", "replace").strip()
            error = KubeApiError(resp.status, resp.reason or "Error", text)
        if retry_after is not None or error.retry_after is None:
            error.retry_after = retry_after  # the header wins over the Status' details.retryAfterSeconds
        if resp.status == 410:
            raise _Expired(error.message or "Gone") from error
        raise error

    # ------------------------------------------------------------------------------------ list/reconcile

    async def _list_page(self, mode: ListMode, continue_token: str | None) -> bytes:
        """One page of a LIST: the raw body. The first page (no ``continue_token``) chooses the snapshot by
        ``mode`` (see :data:`ListMode`); later pages belong to the snapshot of the first (the continue token
        pins it)."""
        params = self._selector_params()
        # A watch cache answering resourceVersion=0 ignores `limit` and sends the whole collection at once
        # (kube-apiserver before ConsistentListFromCache/paginated cache lists; still so for RV=0 on many
        # versions). Asking is harmless, but once we know it is ignored we stop pretending to page.
        if mode not in self._limit_ignored:
            params["limit"] = str(self.config.page_size)
        if continue_token:
            # resourceVersion must not be sent with continue: the token pins the snapshot. A token older than
            # the server's history answers 410 Expired, and _run restarts the whole list.
            params["continue"] = continue_token
        elif mode == "any":
            params["resourceVersion"] = "0"
        elif mode == "not_older_than":
            assert self._rv is not None
            params["resourceVersion"] = self._rv
            params["resourceVersionMatch"] = "NotOlderThan"
        # mode "consistent": no resourceVersion at all, a quorum read
        resp = await self._request(params, read_timeout=self.config.stall_timeout_seconds)
        try:
            return await resp.read()
        finally:
            resp.release()

    def _prepare(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Make a listed or fetched object look like a watched one, and drop what nobody reads."""
        obj.setdefault("kind", self._kind_name)
        obj.setdefault("apiVersion", self._api_version)
        if self.config.strip_managed_fields:
            obj["metadata"].pop("managedFields", None)
        if self._project is not None and not (self.keep_whole is not None and self.keep_whole(obj)):
            return self._project(obj)
        return obj

    async def _relist(self, mode: ListMode = "any") -> None:
        """LIST and reconcile the store with what the server has now.

        Emits ADDED for objects new to the store, MODIFIED for objects whose resourceVersion changed, and
        DELETED_UNKNOWN (with the last state we saw) for objects no longer listed; unchanged objects emit
        nothing. On the first list every object is new, so subscribers get ADDED for all of them.

        A list read with resourceVersion=0 may come from a watch cache that lags behind what this informer
        has already seen (another apiserver of an HA control plane, a cache still catching up after a
        restart). Believing it would report running pods as deleted and roll finished ones back to running,
        so what such a list says is checked first (issue: "relists that never invent a deletion"):

        * a listed copy older than the stored one (resourceVersions compared as integers, KEP-5504) does not
          replace it; the watch that follows, from the list's older resourceVersion, replays the changes in
          order and the ones we already have are skipped the same way;
        * an object missing from the list is a deletion only if the list is at least as new as our copy of
          it (a snapshot at resourceVersion L that lacks an object we saw at V <= L really lost it);
          otherwise (our copy is newer than the list, or the versions cannot be compared) a GET by name, which
          the server answers from etcd, decides (:meth:`_confirm`);
        * an object whose deletion was already delivered never comes back (uids are never reused).

        Pages are applied as they arrive (:meth:`_apply_page`), replacing stored objects one by one, so the
        peak memory is one store plus one page rather than two full copies of the collection.
        Disappearances are decided only once the list is complete; if it fails half-way, the next list
        finishes the job.
        """
        started = time.monotonic()
        first = not self._synced
        listing = _Listing()
        continue_token: str | None = None
        while True:
            body = await self._list_page(mode, continue_token)
            # No await from here to the end of the page: see _gc_paused for why the collector waits.
            with _gc_paused():
                continue_token = self._apply_page(body, mode, listing)
                del body
            if not continue_token:
                break
        list_rv = listing.rv
        seen = listing.seen
        doubtful = listing.doubtful
        vanished: list[str] = []
        for uid, prev in self._store.items():
            if uid in seen or uid in doubtful:
                continue
            order = compare_resource_versions(prev["metadata"].get("resourceVersion"), list_rv)
            if (order is not None and order <= 0) or (order is None and mode != "any"):
                vanished.append(uid)
            else:
                doubtful[uid] = prev
        for uid in vanished:
            self._remove(uid, EventType.DELETED_UNKNOWN, self._store[uid])
        confirmed_gone = await self._confirm(doubtful) if doubtful else 0
        self._rv = list_rv
        self._lists += 1
        self._last_sync = time.monotonic()
        self._synced = True
        self._record_success()
        log.debug(
            "informer %s: %s %d objects at resourceVersion %s (%s) in %.2f s (%d added, %d modified, "
            "%d vanished, %d confirmed gone of %d checked)",
            self.name,
            "listed" if first else "relisted",
            len(seen),
            list_rv,
            mode,
            time.monotonic() - started,
            listing.added,
            listing.modified,
            len(vanished),
            confirmed_gone,
            len(doubtful),
        )
        if first:
            self._synced_event.set()
        self._notify_health()

    def _apply_page(self, body: bytes, mode: ListMode, listing: _Listing) -> str | None:
        """Parse one LIST page and apply its items to the store (see :meth:`_relist` for the rules); returns
        the continue token of the next page, or None after the last.

        Items are decoded whole (with msgspec; see ``_decode_page``) and prepared (stripped, projected) only
        when stored: an unchanged object, the bulk of a relist, costs reading its uid and resourceVersion, a
        dict lookup and a string comparison. Everything parsed here that is not stored is freed when this
        returns (the caller holds the collector off until then, :func:`_gc_paused`).
        """
        list_rv, continue_token, items, head, load = _decode_page(body)
        if not list_rv and not listing.rv:
            raise ValueError(f"LIST {self._path} returned no metadata.resourceVersion")
        listing.rv = listing.rv or list_rv
        if len(items) > self.config.page_size and mode not in self._limit_ignored:
            self._limit_ignored.add(mode)
            log.debug(
                "informer %s: the server ignored limit=%d on a %s list (%d items in one response); "
                "not paging such lists any more",
                self.name,
                self.config.page_size,
                mode,
                len(items),
            )
        seen = listing.seen
        gone = self._gone
        store = self._store
        for item in items:
            uid, new_rv = head(item)
            seen.add(uid)
            if uid in gone:
                self.stats["stale_copies_ignored"] += 1
                continue
            prev = store.get(uid)
            if prev is not None:
                prev_rv = prev["metadata"].get("resourceVersion")
                if prev_rv == new_rv:
                    continue
                order = compare_resource_versions(new_rv, prev_rv)
                if order is not None and order < 0:
                    self.stats["stale_copies_ignored"] += 1
                    continue
                if order is None and mode == "any":
                    listing.doubtful[uid] = prev
                    continue
            obj = self._prepare(load(item))
            self._put(obj)
            if prev is None:
                listing.added += 1
                self._emit(EventType.ADDED, obj)
            else:
                listing.modified += 1
                self._emit(EventType.MODIFIED, obj)
        return continue_token

    async def _confirm(self, doubtful: dict[str, dict[str, Any]]) -> int:
        """Settle objects a possibly stale list could not: one GET by name each (a consistent read, answered
        from etcd), at most ``confirm_concurrency`` at a time and ``max_confirmations_per_relist`` in all.

        404, or an object of that name with another uid: the one we knew is gone - DELETED_UNKNOWN. The same
        uid: it is alive; a newer copy replaces ours (MODIFIED), and one that no longer matches our label
        selector has left this informer (a watch reports that as DELETED too). A GET that fails, or one over
        the cap, leaves the object as it is: never tombstoned on a guess; the next relist asks again and
        the watch that follows this list settles it meanwhile. Returns how many were confirmed gone.
        """
        batch = list(doubtful.items())
        cap = self.config.max_confirmations_per_relist
        if len(batch) > cap:
            self.stats["confirm_deferred"] += len(batch) - cap
            log.warning(
                "informer %s: %d objects need a confirming GET after a possibly stale list; checking %d now, "
                "the rest at the next relist",
                self.name,
                len(batch),
                cap,
            )
            batch = batch[:cap]
        semaphore = asyncio.Semaphore(self.config.confirm_concurrency)

        async def fetch(prev: dict[str, Any]) -> dict[str, Any] | None:
            async with semaphore:
                self.stats["confirm_gets"] += 1
                return await self._get_current(prev)

        results = await asyncio.gather(*(fetch(prev) for _, prev in batch), return_exceptions=True)
        gone = 0
        for (uid, prev), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                self.stats["confirm_failed"] += 1
                log.info(
                    "informer %s: could not confirm %s/%s (%s); keeping it until the next relist",
                    self.name,
                    prev["metadata"].get("namespace"),
                    prev["metadata"].get("name"),
                    result,
                )
                continue
            stored = self._store.get(uid)
            if stored is None or stored["metadata"].get("resourceVersion") != prev["metadata"].get(
                "resourceVersion"
            ):
                continue  # changed meanwhile (cannot happen while the watch is not running; be safe)
            current = result
            labels = ((current or {}).get("metadata") or {}).get("labels") or {}
            if (
                current is None
                or current["metadata"].get("uid") != uid
                or (self._label_match is not None and not self._label_match(labels))
            ):
                gone += 1
                self.stats["confirmed_gone"] += 1
                self._remove(uid, EventType.DELETED_UNKNOWN, prev)
                continue
            self.stats["confirmed_present"] += 1
            order = compare_resource_versions(
                current["metadata"].get("resourceVersion"), prev["metadata"].get("resourceVersion")
            )
            if order == 0 or (
                order is None
                and current["metadata"].get("resourceVersion") == prev["metadata"].get("resourceVersion")
            ):
                continue
            if order is not None and order < 0:
                continue
            self._put(current)
            self._emit(EventType.MODIFIED, current)
        return gone

    async def _get_current(self, prev: dict[str, Any]) -> dict[str, Any] | None:
        """The object named like ``prev`` as the server has it now (None on 404)."""
        metadata = prev["metadata"]
        prefix, plural, _, _ = _RESOURCES[self.kind]
        namespace = metadata.get("namespace") or self.namespace
        path = (
            f"{prefix}/namespaces/{namespace}/{plural}/{metadata['name']}"
            if namespace
            else f"{prefix}/{plural}/{metadata['name']}"
        )
        try:
            # No resourceVersion: "most recent", served from etcd (a quorum read), never from a cache.
            resp = await self._request({}, read_timeout=self.config.stall_timeout_seconds, path=path)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        try:
            body = await resp.read()
        finally:
            resp.release()
        obj = json.loads(body)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ValueError(f"GET {path} returned no object")
        return self._prepare(obj)

    def _put(self, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        self._store[metadata["uid"]] = obj
        self._by_name[(metadata.get("namespace"), metadata["name"])] = metadata["uid"]

    def _remove(self, uid: str, etype: EventType, last: dict[str, Any]) -> None:
        """Drop ``uid`` from the store, remember it is gone, and deliver its one deletion event."""
        prev = self._store.pop(uid, None)
        if prev is not None:
            key = (prev["metadata"].get("namespace"), prev["metadata"]["name"])
            if self._by_name.get(key) == uid:
                del self._by_name[key]
        self._gone[uid] = None
        if len(self._gone) > self.config.remembered_deletions:
            self._gone.popitem(last=False)
        self._emit(etype, last)

    # ------------------------------------------------------------------------------------------- watch

    async def _watch_once(self, *, deadline: float | None) -> None:
        """One watch request from the current resourceVersion, applying events until the stream ends.

        Returns when the server ends the stream normally or ``deadline`` (loop time, for the periodic
        resync) passes. Raises :class:`_Expired` on 410, :class:`KubeApiError` on another ERROR event,
        :class:`_Stalled` if the stream goes silent, :class:`_ShortWatch` if the server closes it at once.
        """
        assert self._rv is not None  # a LIST always precedes the first watch
        loop = asyncio.get_running_loop()
        params = self._selector_params()
        params["watch"] = "true"
        params["allowWatchBookmarks"] = "true"
        params["resourceVersion"] = self._rv
        params["timeoutSeconds"] = str(
            max(1, int(self.config.watch_timeout_seconds * random.uniform(*_WATCH_TIMEOUT_JITTER)))
        )
        # sock_read bounds the wait for the response headers (a server that accepted the connection but never
        # answers, as a half-open connection does); during the stream _read_lines' stall detector applies.
        resp = await self._request(params, read_timeout=self.config.stall_timeout_seconds)
        opened = loop.time()
        events = 0
        proved: asyncio.TimerHandle | None = None
        try:
            self._watches += 1
            self._set_connected(True)
            # A watch that stays open for a second is a working watch, even if the namespace is quiet.
            proved = loop.call_later(MIN_HEALTHY_WATCH_SECONDS, self._record_success)
            lines = _read_lines(
                resp.content, stall_timeout=self.config.stall_timeout_seconds, deadline=deadline
            )
            try:
                async with contextlib.aclosing(lines):
                    async for line in lines:
                        event = json.loads(line)
                        events += 1
                        if events == 1:
                            self._record_success()
                        self._apply_watch_event(event)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError) as exc:
                # The connection broke mid-stream (apiserver restart, load balancer idle cut, dropped
                # connection). After a watch that worked, that is the end of a stream like any other:
                # resume at once from the last resourceVersion (which makes any gap visible as a 410).
                # A watch broken before it delivered anything or proved itself is a failure (backoff).
                if events == 0 and loop.time() - opened < MIN_HEALTHY_WATCH_SECONDS:
                    raise
                log.debug(
                    "informer %s: watch connection broken (%s); resuming", self.name, type(exc).__name__
                )
                return
        finally:
            if proved is not None:
                proved.cancel()
            resp.close()
            self._last_sync = time.monotonic()
            self._set_connected(False)
        if (
            events == 0
            and loop.time() - opened < MIN_HEALTHY_WATCH_SECONDS
            and (deadline is None or loop.time() < deadline)
        ):
            raise _ShortWatch(f"server closed the watch after {loop.time() - opened:.2f} s without any event")

    def _apply_watch_event(self, event: dict[str, Any]) -> None:
        etype = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without an object: type={etype!r}")
        if etype == "ERROR":
            error = KubeApiError.from_status(obj)
            if error.status == 410:
                raise _Expired(error.message or "Expired")
            raise error
        metadata = obj.get("metadata") or {}
        rv = metadata.get("resourceVersion")
        if etype == "BOOKMARK":
            # A bookmark only moves our resourceVersion forward, so a reconnect after a quiet period resumes
            # from a recent revision instead of one that may have left the history (KEP-956).
            if rv:
                self._rv = str(rv)
            return
        uid = metadata.get("uid")
        if not uid or etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: ignoring unexpected watch event type=%r uid=%r", self.name, etype, uid)
            return
        obj = self._prepare(obj)
        if rv:
            self._rv = str(rv)
        if uid in self._gone:
            return  # a replay (after a stale list) of an object whose deletion was already delivered
        prev = self._store.get(uid)
        if etype == "DELETED":
            if prev is None:
                # Never stored, or already reported gone: deletions are delivered exactly once.
                return
            self._remove(uid, EventType.DELETED, obj)
            return
        if prev is not None:
            prev_rv = prev["metadata"].get("resourceVersion")
            if prev_rv == rv:
                return  # the same revision again: nothing changed
            order = compare_resource_versions(rv, prev_rv)
            if order is not None and order < 0:
                # A watch resumed from a stale list's resourceVersion replays changes we already have
                # (our copy came from a newer source: an earlier watch or a confirming GET). Skip them.
                self.stats["stale_copies_ignored"] += 1
                return
        self._put(obj)
        self._emit(EventType.MODIFIED if prev is not None else EventType.ADDED, obj)

    # --------------------------------------------------------------------------------------- helpers

    def _selector_params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    def _emit(self, etype: EventType, obj: dict[str, Any]) -> None:
        self._observer.on_event(etype.value)
        if not self._subscribers:
            return
        event = InformerEvent(etype, obj)
        for on_event, _ in list(self._subscribers.values()):
            try:
                on_event(event)
            except Exception:
                log.exception(
                    "informer %s: subscriber %r failed on %s event", self.name, on_event, etype.value
                )

    def _failure(self, description: str, *, retry_after: float | None = None, free: bool = False) -> float:
        """Count a failure for health, return the backoff delay."""
        now = time.monotonic()
        self._consecutive_failures += 1
        self._last_error = description
        if self._failing_since is None:
            self._failing_since = now
            if self._unhealthy_timer is not None:
                self._unhealthy_timer.cancel()
            # Health must change while we are disconnected and sleeping, not at the next attempt.
            self._unhealthy_timer = asyncio.get_running_loop().call_later(
                self.config.unhealthy_after_seconds, self._mark_unhealthy
            )
        elif now - self._failing_since >= self.config.unhealthy_after_seconds:
            self._unhealthy = True  # in case the loop was too busy to run the timer yet
        self._notify_health()
        return self._backoff.failure(now, retry_after=retry_after, free=free)

    def _access_denied_by(self, exc: KubeApiError) -> str | None:
        """A 401 (after the client's one credential reload) or 403 RBAC refusal, explained."""
        if exc.status not in (401, 403) or "exceeded quota" in exc.message:
            return None
        from airflow_jobwatch.kube.errors import describe_access_denied

        group = self._api_version.rpartition("/")[0]
        plural = self._path.rsplit("/", 1)[-1]
        verb = getattr(self, "_verb", "list")
        return describe_access_denied(
            exc.status, exc.message, verb=verb, resource=plural, group=group, namespace=self.namespace
        ).message()

    def _record_success(self) -> None:
        self._access_denied = None
        if self._failing_since is None and self._consecutive_failures == 0:
            return
        self._consecutive_failures = 0
        self._failing_since = None
        self._unhealthy = False
        if self._unhealthy_timer is not None:
            self._unhealthy_timer.cancel()
            self._unhealthy_timer = None
        self._notify_health()

    def _mark_unhealthy(self) -> None:
        self._unhealthy_timer = None
        if self._failing_since is not None:
            self._unhealthy = True
            self._notify_health()

    def _set_connected(self, connected: bool) -> None:
        if self._connected != connected:
            self._connected = connected
            self._notify_health()

    def _notify_health(self) -> None:
        """Call on_health subscribers when connected, healthy or synced changed since the last call."""
        health = self.health
        key = (health.connected, health.healthy, health.synced)
        if key == self._reported:
            return
        if self._reported is not None and self._reported[1] != health.healthy:
            if health.healthy:
                log.info("informer %s: healthy again", self.name)
            elif self._access_denied:  # Refused, not failing: say so (the refusal is logged anyway)
                log.error("informer %s: unhealthy - refused by the API server", self.name)
            else:
                log.error(
                    "informer %s: unhealthy - failing for %.0f s (%d attempts), last error: %s",
                    self.name,
                    self.config.unhealthy_after_seconds,
                    health.consecutive_failures,
                    health.last_error,
                )
        self._reported = key
        self._observer.on_health(health.healthy)
        for _, on_health in list(self._subscribers.values()):
            if on_health is None:
                continue
            try:
                on_health(health)
            except Exception:
                log.exception("informer %s: health subscriber %r failed", self.name, on_health)
