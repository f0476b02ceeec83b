"""The end of a deferred task: what the trigger and the operator's resume both do when a Job's wait is over.

* ``end`` - ending the task from the triggerer (``end_from_triggerer``) or holding its resume, and the
  words a task ends with (``failure_text``, ``log_ending``), the same in the worker, on resume and in
  the triggerer;
* ``outcomes`` - the words of a trigger event (``status``, ``outcome``), which the trigger writes and the
  operator's resume reads;
* ``masking`` - the task's secrets, captured by the operator when it defers and masked in what the
  triggerer writes into the task's log;
* ``pod_logs`` - the pods' logs written into the task's log without stalling the triggerer's loop;
* ``sidecar_results`` - the XCom sidecars' results read in the triggerer;
* ``result_keys`` - the keys that sign and check a finished Job's stored result;
* ``interface`` - ``EndingTrigger``, what the end reads of the trigger that ends the task.

Layer 1.5 (docs/internals.md, "The map"): imports ``kube/`` and the shared layer (``config``,
``metrics``, ``compat``, ``connections``); never ``triggers/``, ``operators/``, ``executors/`` or
``cli/``, which import it.
"""
