"""The sandbox's etcd + watch cache: objects, one global resourceVersion, bounded history, watch fan-out.

Every mutation goes through :meth:`Store.commit`, which (like etcd + the apiserver watch cache)

* bumps the single cluster-wide revision and stamps it into ``metadata.resourceVersion``;
* serializes the object to JSON **once** and keeps those bytes for GET, LIST and every watcher;
* appends the event to a bounded history (``history_window`` events) from which watches that
  resume at an older resourceVersion are replayed, or answered with 410 Expired once it fell out;
* hands the event to every open watch whose namespace/selectors match.

Everything runs in one event loop, so mutations are serialized without locks.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import collections
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .selectors import FieldMatcher, LabelMatcher

API_VERSIONS: dict[str, tuple[str, str]] = {
    # resource -> (apiVersion, kind)
    "pods": ("v1", "Pod"),
    "events": ("v1", "Event"),
    "namespaces": ("v1", "Namespace"),
    "jobs": ("batch/v1", "Job"),
}
LIST_KINDS = {"pods": "PodList", "namespaces": "NamespaceList", "jobs": "JobList", "events": "EventList"}

# How many undelivered events one watcher may have queued before it is closed. The real apiserver
# gives each watcher a small buffered channel and terminates watchers that cannot keep up ("too slow"
# watchers) instead of letting them hold memory; 5000 events is 2.5 s of the 2000 changes/s the
# sandbox is benchmarked for, far more than a healthy client ever lags.
WATCHER_MAX_BUFFER = 5000

# Past states of a collection kept for paged lists that continue at their first page's revision (see
# Store.listing). One paged list needs one; a few cover lists of several resources or clients interleaved.
SNAPSHOTS_KEPT = 4


def clone(value: Any) -> Any:
    """Deep copy of JSON data (dicts, lists, scalars); several times faster than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def now_rfc3339(ts: float | None = None) -> str:
    """Timestamps the way Kubernetes writes them: UTC, second precision, ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(slots=True)
class Entry:
    """One stored object. ``obj`` is never mutated after commit (mutations replace it), so it and its
    cached bytes can be shared with history and watchers."""

    obj: dict[str, Any]
    item: bytes  # JSON as in a list's ``items`` (no kind/apiVersion, like the real server)
    full: bytes  # JSON with kind/apiVersion (GET answers and watch events)


def key_string(key: tuple[str, str]) -> str:
    """The object's key as etcd orders it, without the resource prefix: ``namespace/name``, or ``name`` for a
    cluster-scoped object (etcd keys are ``/registry/pods/<namespace>/<name>``). LIST pages follow this
    order, and a continue token's ``start`` is such a key (``/name`` for a namespaced list)."""
    namespace, name = key
    return f"{namespace}/{name}" if namespace else name


class KeyIndex:
    """The keys of one state of a collection in etcd order, so that a LIST page starts with a binary search
    instead of sorting and scanning the whole collection (which made each page of a paged list O(n log n)
    and a full paged list quadratic: 100 pages of 500 out of 50,000 pods cost the sandbox ~5 s of CPU).

    ``strings[i]`` is :func:`key_string` of ``keys[i]``; both lists stay sorted by the strings. The index of
    the current state is kept up to date by :meth:`Store.commit` (an insertion or removal is one bisect
    and one memmove, microseconds even at 50,000 keys); the indexes of past states never change.
    """

    __slots__ = ("keys", "strings")

    def __init__(self, keys: Iterable[tuple[str, str]]) -> None:
        pairs = sorted((key_string(k), k) for k in keys)
        self.strings: list[str] = [s for s, _ in pairs]
        self.keys: list[tuple[str, str]] = [k for _, k in pairs]

    def add(self, key: tuple[str, str]) -> None:
        s = key_string(key)
        i = bisect.bisect_left(self.strings, s)
        if i < len(self.strings) and self.strings[i] == s:
            return
        self.strings.insert(i, s)
        self.keys.insert(i, key)

    def remove(self, key: tuple[str, str]) -> None:
        s = key_string(key)
        i = bisect.bisect_left(self.strings, s)
        if i < len(self.strings) and self.strings[i] == s:
            del self.strings[i]
            del self.keys[i]

    def after(self, namespace: str | None, start: str) -> Iterator[tuple[str, str]]:
        """Keys in etcd order, of ``namespace`` only (None: all), strictly after the continue token's
        ``start`` (``""``: from the first)."""
        strings = self.strings
        if namespace is None:
            lo, hi = (bisect.bisect_right(strings, start) if start else 0), len(strings)
        else:
            # "<ns>/..." keys are contiguous: from "<ns>/" up to (excluding) "<ns>0" ("0" follows "/").
            lo = bisect.bisect_left(strings, namespace + "/")
            hi = bisect.bisect_left(strings, namespace + "0", lo)
            if start:
                lo = min(max(lo, bisect.bisect_right(strings, namespace + start, lo, hi)), hi)
        return itertools.islice(self.keys, lo, hi)


@dataclass(slots=True)
class Event:
    rv: int
    resource: str
    type: str  # ADDED / MODIFIED / DELETED
    namespace: str
    obj: dict[str, Any]
    prev: dict[str, Any] | None  # the object before a MODIFIED, for selector transitions
    full: bytes

    def line(self, type_: str | None = None) -> bytes:
        return b'{"type":"' + (type_ or self.type).encode() + b'","object":' + self.full + b"}\n"


@dataclass(eq=False)
class Watcher:
    """One open watch request. The HTTP handler drains ``buffer`` whenever ``wakeup`` is set."""

    resource: str
    namespace: str | None
    label_match: LabelMatcher
    field_match: FieldMatcher
    selective: bool
    buffer: collections.deque[bytes] = field(default_factory=collections.deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    stalled: bool = False
    close_reason: str = ""
    # Renders an event line itself (kubectl's Table watches) instead of sharing the cached bytes.
    render: Callable[[str, dict[str, Any]], bytes] | None = None
    # Undelivered events allowed before the watcher is closed as "too slow"; None = no limit (used to
    # filter a replay, which must never be cut short). The handler raises it by the size of the initial
    # backlog (synthetic ADDED or replayed events), which the client has not had a chance to read yet.
    max_buffer: int | None = WATCHER_MAX_BUFFER

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if not self.selective:
            return True
        labels = obj.get("metadata", {}).get("labels") or {}
        return self.label_match(labels) and self.field_match(obj)

    def offer(self, event: Event) -> None:
        """Queue ``event`` if this watch sees it, translating selector transitions like the watch cache:
        an object that starts matching arrives as ADDED, one that stops matching as DELETED."""
        if self.closed or self.stalled or event.resource != self.resource:
            return
        if self.namespace is not None and event.namespace != self.namespace:
            return
        if not self.selective:
            type_ = event.type
        elif event.type == "MODIFIED":
            now_match = self.matches(event.obj)
            was_match = event.prev is not None and self.matches(event.prev)
            if now_match and was_match:
                type_ = "MODIFIED"
            elif now_match:
                type_ = "ADDED"
            elif was_match:
                type_ = "DELETED"
            else:
                return
        elif self.matches(event.obj):
            type_ = event.type
        else:
            return
        if self.render is not None:
            line = self.render(type_, event.obj)
        else:
            line = event.line(type_ if type_ != event.type else None)
        self.buffer.append(line)
        if self.max_buffer is not None and len(self.buffer) > self.max_buffer:
            self.close("too slow")
        self.wakeup.set()

    def close(self, reason: str = "closed") -> None:
        if not self.closed:
            self.closed = True
            self.close_reason = reason
            self.buffer.clear()
        self.wakeup.set()


class Store:
    def __init__(self, *, history_window: int) -> None:
        self.rv = 1
        self.objects: dict[str, dict[tuple[str, str], Entry]] = {r: {} for r in API_VERSIONS}
        # Two histories of ``history_window`` changes each: one for Events, one for everything else,
        # so that the kubelet's and controller's Events (which etcd keeps like any object, but for a
        # time, not a count) do not shorten how far back a pod or Job watch can resume.
        self._histories: dict[str, collections.deque[Event]] = {
            "main": collections.deque(),
            "events": collections.deque(),
        }
        # Highest revision that fell out of each history: a watch can resume from N only if N >= it.
        self._compacted: dict[str, int] = {"main": 0, "events": 0}
        self.history_window = history_window
        self.watchers: dict[str, list[Watcher]] = {r: [] for r in API_VERSIONS}
        self.listeners: list[Callable[[Event], None]] = []
        self.stall_new_watches = False
        # Key order of the current state of each resource (built on first use, then kept up to date by
        # commit) and of a few past states (resource, revision), for paged lists: see listing().
        self._indexes: dict[str, KeyIndex] = {}
        # Keys of the current objects of each resource by the uid of each of their owners, as
        # kube-controller-manager's informers index pods by owner: the Job controller and the garbage
        # collector look up a Job's pods here instead of scanning the namespace. With 6,000 pods in a
        # namespace, the scan (once per Job sync, several syncs per Job) cost most of the sandbox's CPU
        # and delayed terminal conditions by seconds under 38 Jobs/s (bench_trigger.py --live).
        self._owned: dict[str, dict[str, dict[tuple[str, str], None]]] = {r: {} for r in API_VERSIONS}
        self._snapshots: collections.OrderedDict[
            tuple[str, int], tuple[dict[tuple[str, str], Entry], KeyIndex]
        ] = collections.OrderedDict()

    # ---- serialization -------------------------------------------------------------------------
    @staticmethod
    def encode(resource: str, obj: dict[str, Any]) -> Entry:
        api_version, kind = API_VERSIONS[resource]
        item = _dumps(obj)
        full = b'{"kind":"' + kind.encode() + b'","apiVersion":"' + api_version.encode() + b'",' + item[1:]
        return Entry(obj, item, full)

    # ---- reads ---------------------------------------------------------------------------------
    def get(self, resource: str, namespace: str, name: str) -> Entry | None:
        return self.objects[resource].get((namespace, name))

    def owned_by(self, resource: str, namespace: str | None, owner_uid: str) -> list[Entry]:
        """The current objects of ``resource`` (in ``namespace``, or all) with an ownerReference to
        ``owner_uid``, in key order (``<namespace>/<name>``, as a list returns them)."""
        objs = self.objects[resource]
        out = []
        for key in sorted(self._owned[resource].get(owner_uid, ())):
            entry = objs.get(key)
            if entry is not None and (namespace is None or key[0] == namespace):
                out.append(entry)
        return out

    def _reindex_owners(
        self, resource: str, key: tuple[str, str], old: Entry | None, new: dict[str, Any] | None
    ) -> None:
        owned = self._owned[resource]
        before = (
            {r.get("uid", "") for r in (old.obj["metadata"].get("ownerReferences") or [])} if old else set()
        )
        after = {r.get("uid", "") for r in (new["metadata"].get("ownerReferences") or [])} if new else set()
        for uid in before - after:
            keys = owned.get(uid)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del owned[uid]
        for uid in after - before:
            owned.setdefault(uid, {})[key] = None

    def iter(self, resource: str, namespace: str | None = None) -> Iterable[Entry]:
        objs = self.objects[resource]
        if namespace is None:
            return objs.values()
        return (e for (ns, _n), e in objs.items() if ns == namespace)

    # ---- history -------------------------------------------------------------------------------
    @staticmethod
    def _history_name(resource: str | None) -> str:
        return "events" if resource == "events" else "main"

    @property
    def history(self) -> collections.deque[Event]:
        """The retained changes of pods, jobs and namespaces."""
        return self._histories["main"]

    @property
    def compacted_rv(self) -> int:
        """Highest revision of a pod/job/namespace change that fell out of history."""
        return self._compacted["main"]

    def compacted_for(self, resource: str) -> int:
        return self._compacted[self._history_name(resource)]

    def set_history_window(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"history_window must be >= 0, got {n}")
        self.history_window = n
        for name in self._histories:
            self._trim(name)

    def _trim(self, name: str) -> None:
        history = self._histories[name]
        while len(history) > self.history_window:
            self._compacted[name] = history.popleft().rv

    def replay_from(self, rv: int, resource: str | None = None) -> list[Event] | None:
        """Changes after ``rv`` from the history ``resource`` lives in (pods, jobs and namespaces
        share one), or None if some of them were compacted away (-> 410)."""
        name = self._history_name(resource)
        if rv < self._compacted[name]:
            return None
        if rv >= self.rv:
            return []
        out: list[Event] = []
        for ev in reversed(self._histories[name]):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def snapshot(self, resource: str, rv: int) -> dict[tuple[str, str], Entry]:
        """The objects of ``resource`` as they were at revision ``rv`` (which must not be compacted),
        rebuilt by undoing the retained history: what etcd gives a paged list that continues at the
        first page's revision, so all pages show one consistent state."""
        objects = dict(self.objects[resource])
        for ev in reversed(self._histories[self._history_name(resource)]):
            if ev.rv <= rv:
                break
            if ev.resource != resource:
                continue
            key = (ev.namespace, ev.obj["metadata"]["name"])
            if ev.type == "ADDED":
                objects.pop(key, None)
            else:
                before = ev.prev if ev.prev is not None else ev.obj
                objects[key] = self.encode(resource, before)
        return objects

    def listing(self, resource: str, rv: int | None = None) -> tuple[dict[tuple[str, str], Entry], KeyIndex]:
        """The objects of ``resource`` at revision ``rv`` (None or the current one: now) and their key order,
        for a LIST page. Past states are rebuilt once by :meth:`snapshot` and kept (the last
        ``SNAPSHOTS_KEPT``): every page of a paged list reads the state at the first page's revision, and
        rebuilding it (copying the collection, re-encoding every change since) for each page made a list
        of 100 pages cost 100 times one. The caller checks that ``rv`` was not compacted."""
        if rv is None or rv >= self.rv:
            index = self._indexes.get(resource)
            if index is None:
                index = self._indexes[resource] = KeyIndex(self.objects[resource])
            return self.objects[resource], index
        cached = self._snapshots.get((resource, rv))
        if cached is None:
            objects = self.snapshot(resource, rv)
            cached = self._snapshots[(resource, rv)] = (objects, KeyIndex(objects))
            while len(self._snapshots) > SNAPSHOTS_KEPT:
                self._snapshots.popitem(last=False)
        else:
            self._snapshots.move_to_end((resource, rv))
        return cached

    # ---- writes --------------------------------------------------------------------------------
    def commit(
        self, resource: str, type_: str, obj: dict[str, Any], prev: dict[str, Any] | None = None
    ) -> Entry:
        """Store ``obj`` (ADDED/MODIFIED) or remove it (DELETED) as a new revision and fan it out.

        ``obj`` becomes owned by the store; callers must not mutate it afterwards.
        """
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        namespace = meta.get("namespace", "")
        key = (namespace, meta["name"])
        entry = self.encode(resource, obj)
        objects = self.objects[resource]
        index = self._indexes.get(resource)
        self._reindex_owners(resource, key, objects.get(key), None if type_ == "DELETED" else obj)
        if type_ == "DELETED":
            if objects.pop(key, None) is not None and index is not None:
                index.remove(key)
        else:
            if index is not None and key not in objects:
                index.add(key)
            objects[key] = entry
        event = Event(self.rv, resource, type_, namespace, obj, prev, entry.full)
        name = self._history_name(resource)
        if self.history_window > 0:
            self._histories[name].append(event)
            self._trim(name)
        else:
            self._compacted[name] = self.rv
        for watcher in self.watchers[resource]:
            watcher.offer(event)
        for listener in list(self.listeners):
            listener(event)
        return entry

    # ---- watchers ------------------------------------------------------------------------------
    def add_watcher(self, watcher: Watcher) -> None:
        if self.stall_new_watches:
            watcher.stalled = True
        self.watchers[watcher.resource].append(watcher)

    def remove_watcher(self, watcher: Watcher) -> None:
        try:
            self.watchers[watcher.resource].remove(watcher)
        except ValueError:
            pass

    def all_watchers(self) -> list[Watcher]:
        return [w for ws in self.watchers.values() for w in ws]


# ---- continue tokens ---------------------------------------------------------------------------
def encode_continue(rv: int, start: str) -> str:
    """A continue token in the real server's format: base64url (no padding) of
    ``{"v":"meta.k8s.io/v1","rv":RV,"start":"<key after the last item>\\u0000"}``."""
    payload = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    """Inverse of :func:`encode_continue`; raises ValueError with the real server's wording."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"continue key is not valid: {exc}") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        bad = raw[:1].decode("latin-1") if raw else ""
        raise ValueError(
            f"continue key is not valid: invalid character {bad!r} looking for beginning of value"
        ) from None
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        raise ValueError(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    rv = data.get("rv")
    start = data.get("start")
    if not isinstance(rv, int) or rv <= 0 or not isinstance(start, str):
        raise ValueError(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    return rv, start.rstrip("\x00")
