"""Helpers the tests share, imported as ``support.*`` (``tests/`` is on ``sys.path`` under pytest, as for
``statsd_listener``). They live here, not in the package, so that the tests run against an installed wheel."""
