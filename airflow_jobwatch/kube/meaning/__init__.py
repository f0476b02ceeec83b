"""What Kubernetes objects mean: the one reading of a Pod's or a Job's state, and a finished Job's result.

* ``states`` - the facade and its rules (``classify_pod``, ``classify_job``); built from ``objectstate``
  (the vocabulary), ``pod_states``, ``job_states``, ``containers``, ``disruptions`` and ``state_words``;
* ``result`` - a finished Job's result, read one way by the trigger and by the operator;
  ``xcom_sidecar`` - a pod's XCom result read from its native sidecar's log;
* ``objects`` - objects of either client library normalised to the API's JSON shape.

Pure reading, no watching: imports nothing of the provider outside this folder (the lowest layer of
``kube/``, beside ``cluster/``), and nothing of Airflow.
"""
