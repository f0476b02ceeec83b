"""The informer's compact store (uid -> object kept as deflated JSON), the packing it uses (also the
triggerer's tombstones'), and the GC pause around a LIST page."""

from __future__ import annotations

import contextlib
import gc
import zlib
from collections.abc import Iterator
from typing import Any

from airflow_jobwatch.kube.engine import listing

#: Deflate's window (2**15): the most of a preset dictionary it can refer to.
_WINDOW = 32 * 1024


class Packer:
    """Objects of one kind packed one by one: compact JSON, deflated with the first packed object as zlib's
    preset dictionary (raw deflate, level 6). Each :meth:`unpack` decodes a new dict.

    Objects of one kind (worker pods of one executor, the Jobs of a namespace) repeat the same keys, labels
    and most values, which deflate alone barely finds in 1 KiB; with the first object as the dictionary, a
    projected worker pod's 1,051 bytes of JSON deflate to about 120 (~6 us to compress, ~1 us to inflate on
    top of the JSON decode). The dictionary is fixed for the life of the packer (every packed object is
    inflated with it); an object unlike the first one is merely compressed less.
    """

    __slots__ = ("_zdict",)

    def __init__(self) -> None:
        self._zdict: bytes | None = None

    def pack(self, obj: dict[str, Any]) -> bytes:
        raw = listing.encode_item(obj)  # the form the LIST page decoder in use reads
        if self._zdict is None:
            self._zdict = raw[-_WINDOW:]  # deflate reads at most its window's worth of a dictionary
        packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=self._zdict)
        return packer.compress(raw) + packer.flush()

    def unpack(self, packed: bytes) -> dict[str, Any]:
        assert self._zdict is not None  # set by the first pack
        unpacker = zlib.decompressobj(-15, zdict=self._zdict)
        return listing.decode_item(unpacker.decompress(packed) + unpacker.flush())


class CompactStore:
    """The informer's store (uid -> object) with each object kept packed (see :class:`Packer` and
    ``InformerConfig.compact_store``). Every read decodes a new dict: callers may keep or change it
    without touching the store, and two reads of one object are equal but never identical.
    """

    __slots__ = ("_data", "_packer")

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._packer = Packer()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, uid: object) -> bool:
        return uid in self._data

    def __getitem__(self, uid: str) -> dict[str, Any]:
        return self._packer.unpack(self._data[uid])

    def __setitem__(self, uid: str, obj: dict[str, Any]) -> None:
        self._data[uid] = self._packer.pack(obj)

    def get(self, uid: str) -> dict[str, Any] | None:
        raw = self._data.get(uid)
        return None if raw is None else self._packer.unpack(raw)

    def pop(self, uid: str, default: None = None) -> dict[str, Any] | None:
        raw = self._data.pop(uid, None)
        return default if raw is None else self._packer.unpack(raw)

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for uid, raw in list(self._data.items()):
            yield uid, self._packer.unpack(raw)

    def values(self) -> Iterator[dict[str, Any]]:
        for raw in list(self._data.values()):
            yield self._packer.unpack(raw)

    def packed_sizes(self) -> Iterator[int]:
        """The length of each object's packed bytes, for memory benchmarks."""
        for raw in list(self._data.values()):
            yield len(raw)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
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
