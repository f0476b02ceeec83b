"""The informer's cache and the two small parts it is built from, the seams between the watch engine's pieces.

client-go divides an informer the same way: the Reflector (here :class:`~airflow_jobwatch.kube.engine.relist.Relister`
and :class:`~airflow_jobwatch.kube.engine.watch.Watcher`) is handed a store to ``Add``/``Update``/``Delete`` and a
source that lists and watches, and never sees the informer that owns them; the fan-out to subscribers is a
third part that knows neither. Here:

* :class:`ObjectCache` - the store: objects by uid and by (namespace, name), the uids whose deletion was
  delivered, and every change handed to a sink, so that nothing is stored without being delivered and nothing
  delivered twice;
* :class:`Fanout` - the sink the informer gives its cache: counts the event for the observer and calls each
  subscriber;
* :class:`Preparer` - what a listed, fetched or watched object goes through before it is stored.

None of them holds the informer, so an informer dropped without ``stop()`` is still freed by reference
counting (it is in no reference cycle).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from airflow_jobwatch.kube.engine.informer_types import RESOURCES, EventType, InformerEvent, Kind, Subscriber
from airflow_jobwatch.kube.engine.observer import InformerObserver
from airflow_jobwatch.kube.engine.projection import projector
from airflow_jobwatch.kube.engine.store import CompactStore

# The engine's log lines keep the one logger name users configure for it, whichever module writes them.
log = logging.getLogger("airflow_jobwatch.kube.engine.informer")


class Preparer:
    """Makes a listed or fetched object look like a watched one, and drops what nobody reads.

    Items of a LIST carry no ``kind``/``apiVersion`` (only the List does) and watch objects do: both are filled
    in, so every object a subscriber sees looks the same whichever way it arrived. ``managedFields`` are dropped
    when ``strip_managed_fields`` is set, and the object is projected to what the engine's users read when
    ``projection`` is set, unless :attr:`keep_whole` says it is kept whole.
    """

    __slots__ = ("_api_version", "_kind_name", "_project", "_strip_managed_fields", "keep_whole")

    def __init__(self, kind: Kind, *, strip_managed_fields: bool, projection: bool) -> None:
        _, _, self._kind_name, self._api_version = RESOURCES[kind]
        self._strip_managed_fields = strip_managed_fields
        self._project = projector(kind) if projection else None
        #: Objects for which this returns True are stored whole, projection or not.
        self.keep_whole: Callable[[dict[str, Any]], bool] | None = None

    def __call__(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("kind", self._kind_name)
        obj.setdefault("apiVersion", self._api_version)
        if self._strip_managed_fields:
            obj["metadata"].pop("managedFields", None)
        if self._project is not None and not (self.keep_whole is not None and self.keep_whole(obj)):
            return self._project(obj)
        return obj


class Fanout:
    """Delivers each change to the observer (as a count) and to every subscriber, in the order subscribed.

    :param name: the informer's name, for log lines.
    :param observer: told about every event that came from the server.
    :param subscribers: token -> subscriber; the informer adds and removes entries (the health tracker reads
        the same mapping for its callbacks).
    """

    __slots__ = ("_name", "_observer", "_subscribers")

    def __init__(self, name: str, observer: InformerObserver, subscribers: dict[int, Subscriber]) -> None:
        self._name = name
        self._observer = observer
        self._subscribers = subscribers

    def __call__(self, etype: EventType, obj: dict[str, Any], *, replay: bool = False) -> None:
        # A replay of the cache (the periodic resync) is not news from the server: it must not count as an
        # event, nor reset the time since the last one, which is what shows a watch gone quiet.
        if not replay:
            self._observer.on_event(etype.value)
        if not self._subscribers:
            return
        event = InformerEvent(etype, obj)
        for on_event, _ in list(self._subscribers.values()):
            try:
                on_event(event)
            except Exception:
                log.exception(
                    "informer %s: subscriber %r failed on %s event", self._name, on_event, etype.value
                )


class ObjectCache:
    """The informer's store: uid -> object, (namespace, name) -> uid, and the uids whose deletion was delivered.

    Every write goes through :meth:`put` or :meth:`delete`, each of which hands the change to ``deliver``: an
    object is stored and delivered in one step, and a deletion is delivered exactly once per uid.

    :param deliver: the sink each change is handed to (the informer's :class:`Fanout`).
    :param compact: keep each object packed (``InformerConfig.compact_store``; see ``store.py``).
    :param remembered_deletions: how many delivered deletions are remembered (oldest forgotten first), so that
        a stale list or a watch replay from an older resourceVersion does not bring them back (uids are never
        reused).
    """

    __slots__ = ("_by_name", "_deliver", "_gone", "_objects", "_remembered")

    def __init__(
        self,
        deliver: Callable[[EventType, dict[str, Any]], None],
        *,
        compact: bool,
        remembered_deletions: int,
    ) -> None:
        self._objects: dict[str, dict[str, Any]] | CompactStore = CompactStore() if compact else {}
        self._by_name: dict[tuple[str | None, str], str] = {}
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._remembered = remembered_deletions
        self._deliver = deliver

    # ------------------------------------------------------------------------------------------ reads

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, uid: object) -> bool:
        return uid in self._objects

    @property
    def compact(self) -> bool:
        """Whether objects are kept packed."""
        return isinstance(self._objects, CompactStore)

    def get(self, uid: str) -> dict[str, Any] | None:
        """The stored object with this uid (read-only), or None."""
        return self._objects.get(uid)

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(uid, object) of every stored object, read-only."""
        yield from self._objects.items()

    def values(self) -> Iterator[dict[str, Any]]:
        yield from self._objects.values()

    def names(self) -> list[tuple[str | None, str]]:
        """``(namespace, name)`` of every stored object (a new list; no object is decoded)."""
        return list(self._by_name)

    def uid_of(self, namespace: str | None, name: str) -> str | None:
        """The uid of the stored object with this namespace and name, or None (no object is decoded)."""
        return self._by_name.get((namespace, name))

    def was_deleted(self, uid: str) -> bool:
        """Whether a deletion of ``uid`` was delivered (and is still remembered)."""
        return uid in self._gone

    def packed_sizes(self) -> Iterator[int]:
        """The length of each stored object's packed bytes, for memory benchmarks; nothing when the cache is
        not compact."""
        if isinstance(self._objects, CompactStore):
            yield from self._objects.packed_sizes()

    # ----------------------------------------------------------------------------------------- writes

    def put(self, obj: dict[str, Any]) -> bool:
        """Store a prepared object and deliver it: ADDED if its uid was not stored, MODIFIED if it was.
        Returns whether it was added."""
        metadata = obj["metadata"]
        uid = metadata["uid"]
        added = uid not in self._objects
        self._objects[uid] = obj
        self._by_name[(metadata.get("namespace"), metadata["name"])] = uid
        self._deliver(EventType.ADDED if added else EventType.MODIFIED, obj)
        return added

    def delete(self, uid: str, etype: EventType, last: dict[str, Any]) -> None:
        """Drop ``uid``, remember it is gone, and deliver its one deletion event (``DELETED`` as the watch saw
        it, ``DELETED_UNKNOWN`` for one found missing) with ``last`` as the object."""
        prev = self._objects.pop(uid, None)
        if prev is not None:
            key = (prev["metadata"].get("namespace"), prev["metadata"]["name"])
            if self._by_name.get(key) == uid:
                del self._by_name[key]
        self._gone[uid] = None
        if len(self._gone) > self._remembered:
            self._gone.popitem(last=False)
        self._deliver(etype, last)
