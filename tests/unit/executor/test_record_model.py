"""Model-based test of the executor's per-key record (executors/record.py).

Random sequences of what the scheduler and the cluster do (queue a key, create its pod or fail to, see it
running, the pod ends, the key is queued again, revoked, adopted away, adopted, the scheduler restarts)
are applied both to :class:`TaskRecords` and to a small reference model. The rules checked after every
step:

- no end is reported for a pod that is not its key's current launch (the launch the database names);
- no key is in ``running`` (the records' keys) without a record, and every key holding a slot has one;
- a key never has two live pods that both count as current;
- every slot is freed exactly once.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from airflow_jobwatch.executors.record import TaskRecords

KEYS = ["a", "b", "c"]
_ids = itertools.count()


class RecordMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.records = TaskRecords()
        self.db_launch: dict[str, str] = {}  # key -> the launch the database names (last queue)
        self.live: dict[tuple[str, str], tuple[str, str]] = {}  # pods that exist: ref -> (key, launch id)
        self.running: set[str] = set()  # what the executor's ``running`` is: keys holding a slot
        self.taken = 0
        self.freed = 0
        self.reported: list[tuple[str, str]] = []  # (key, launch id) of every reported end
        self.in_line: dict[str, int] = {}  # key -> when its pod to create was put in line (launch order)

    # ---- helpers ------------------------------------------------------------------------------

    def _settle(self, key: str) -> None:
        if key in self.records:
            if key not in self.running:
                self.taken += 1
            self.running.add(key)
        elif key in self.running:
            self.running.discard(key)
            self.freed += 1

    def _new_ref(self) -> tuple[str, str]:
        return ("default", f"pod-{next(_ids)}")

    # ---- scheduler --------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), priority=st.integers(0, 2))
    def queue(self, key: str, priority: int) -> None:
        launch = f"L{next(_ids)}"
        self.db_launch[key] = launch
        workload = SimpleNamespace(ti=SimpleNamespace(priority_weight=priority))
        self.records.queue(key, workload=workload, launch_id=launch)
        self.in_line[key] = next(_ids)  # queued again: behind every launch already in line
        self._settle(key)

    @rule(key=st.sampled_from(KEYS))
    def revoke(self, key: str) -> None:
        self.records.end(key)
        self._settle(key)

    @rule()
    def restart_and_adopt(self) -> None:
        """The scheduler dies; a new one adopts every live pod, by the launch the database names."""
        self.records = TaskRecords()
        for key in list(self.running):
            self.running.discard(key)
            self.freed += 1
        for ref, (key, launch) in sorted(self.live.items()):
            current = self.db_launch.get(key) == launch and key not in self.records
            self.records.adopt(key, ref, launch, current=current)
            self._settle(key)

    # ---- cluster ----------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), lost_answer=st.booleans())
    def create_ok(self, key: str, lost_answer: bool) -> None:
        record = self.records.get(key)
        if record is None or record.create is None:
            return
        ref = self._new_ref()
        self.records.create_sent(key, ref)
        self.live[ref] = (key, record.launch_id)
        if not lost_answer:
            self.records.created(key, ref)

    @rule(key=st.sampled_from(KEYS))
    def create_failed(self, key: str) -> None:
        record = self.records.get(key)
        if record is None or record.create is None or record.create.ref is not None:
            return
        self.records.end(key)
        self._settle(key)
        self.reported.append((key, record.launch_id))

    @rule(key=st.sampled_from(KEYS))
    def seen_running(self, key: str) -> None:
        record = self.records.get(key)
        if record is not None and record.pod is not None:
            self.records.seen_running(key, record.pod)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), relaunch=st.booleans())
    def pod_ends(self, data: st.DataObject, relaunch: bool) -> None:
        ref = data.draw(st.sampled_from(sorted(self.live)))
        key, launch = self.live.pop(ref)
        if not self.records.is_current(key, ref):
            self.records.stale_ended(ref)
            return
        record = self.records.get(key)
        assert record is not None
        if record.create is not None:
            self.records.created(key, ref)  # the watch saw the pod before the create's answer
        assert launch == record.launch_id == self.db_launch[key], "an end reported for a launch not current"
        if relaunch and not record.seen_running:
            self.records.relaunch(key, ref, "evicted", backoff=None, not_before=0.0)  # type: ignore[arg-type]
            self.in_line[key] = next(_ids)
            return
        self.records.end(key, ref)
        self._settle(key)
        self.reported.append((key, launch))

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def adopted_away(self, data: st.DataObject) -> None:
        ref = data.draw(st.sampled_from(sorted(self.live)))
        key, _ = self.live[ref]
        if self.records.is_current(key, ref):
            self.records.end(key, ref)
            self._settle(key)
        else:
            self.records.stale_ended(ref)

    # ---- invariants -------------------------------------------------------------------------

    @invariant()
    def running_follows_the_records(self) -> None:
        assert self.records.keys() == self.running

    @invariant()
    def one_current_pod_per_key(self) -> None:
        for key in KEYS:
            current = [
                ref for ref, (k, _) in self.live.items() if k == key and self.records.is_current(key, ref)
            ]
            assert len(current) <= 1, current

    @invariant()
    def pending_is_every_record_with_a_pod_to_create(self) -> None:
        pending = self.records.pending()
        assert {id(r) for r in pending} == {id(r) for r in self.records if r.create is not None}
        assert len(pending) == len({id(r) for r in pending})
        assert self.records.pending_count() == len(pending)
        # Launch order: highest priority first, then in the order they were put in line.
        order = [(-r.priority, self.in_line[r.key]) for r in pending]
        assert order == sorted(order), order

    @invariant()
    def every_slot_freed_once(self) -> None:
        assert self.taken - self.freed == len(self.running)
        assert self.freed <= self.taken


TestRecordModel = RecordMachine.TestCase
TestRecordModel.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
