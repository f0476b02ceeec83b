"""What the two halves of a Reflector (:class:`~airflow_jobwatch.kube.engine.relist.Relister` and
:class:`~airflow_jobwatch.kube.engine.watch.Watcher`) are both handed, as client-go's ``NewReflector`` is
handed a ``ListerWatcher`` and a ``Store``: never the informer that owns them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_jobwatch.kube.engine.cache import ObjectCache
from airflow_jobwatch.kube.engine.informer_types import InformerConfig
from airflow_jobwatch.kube.engine.listwatch import ListWatch


@dataclass(frozen=True, slots=True)
class ReflectorParts:
    """The parts one informer's list and watch share.

    :param name: the informer's name, for log lines.
    :param source: the collection to list and watch.
    :param cache: the store the list is reconciled against and the events update; every change is
        delivered through it.
    :param prepare: what a listed, fetched or watched object goes through before it is stored.
    :param config: the engine's tuning (page size, timeouts, the confirming GETs' bounds).
    :param stats: counters for tests and benchmarks (confirmations, stale copies), updated in place.
    """

    name: str
    source: ListWatch
    cache: ObjectCache
    prepare: Callable[[dict[str, Any]], dict[str, Any]]
    config: InformerConfig
    stats: dict[str, int]


class ReflectorHalf:
    """A half of a Reflector: holds the :class:`ReflectorParts` it is handed, under the names it uses."""

    def __init__(self, parts: ReflectorParts) -> None:
        self._name = parts.name
        self._source = parts.source
        self._cache = parts.cache
        self._prepare = parts.prepare
        self._config = parts.config
        self.stats = parts.stats
