"""The watch engine: list + watch + relist + reconcile + backoff + health for one kind of object.

``informer`` is its facade (:class:`~airflow_jobwatch.kube.engine.informer.Informer`); the parts meet at
small interfaces as client-go's do: ``listwatch`` (the source that lists and watches), ``cache`` (the
store and the fan-out), ``relist`` and ``watch`` (the two halves of a Reflector, both handed a
``reflector.ReflectorParts``), with ``listing``, ``watchstream``, ``store``, ``projection``, ``health``,
``backoff``, ``observer``, ``label_selector``, ``informer_types`` (the vocabulary) and ``apierrors`` (what
the API server said went wrong).

The upper layer of ``kube/``: imports ``kube/meaning/`` (the projection keeps what the classification
reads) and ``kube/cluster/`` (refusals explained), never the reverse; nothing of Airflow.
"""
