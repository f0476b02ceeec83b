"""The sandbox's ``resource.ParseQuantity`` errors: which texts the real decoder refuses, and with which
error (``ErrFormatWrong`` for a malformed text, ``ErrSuffix`` for a well-formed one with an unknown
suffix), as ``k8s.io/apimachinery/pkg/api/resource/quantity.go`` decides."""

from __future__ import annotations

import pytest

from airflow_jobwatch_testing.sandbox.decoding import ERR_FORMAT_WRONG, ERR_SUFFIX, quantity_error


@pytest.mark.parametrize(
    "text,error",
    [
        ("1", None),
        ("0", None),
        ("500m", None),
        ("1.5Gi", None),
        ("+1k", None),
        ("-2", None),
        ("1e3", None),
        ("1E", None),  # exa
        ("1.", None),
        ("e3", None),  # no numeric part: zero
        ("128Mi", None),
        ("", ERR_FORMAT_WRONG),
        ("1x", ERR_FORMAT_WRONG),  # recorded: invalid-bodies.json "invalid resource quantity"
        ("lots", ERR_FORMAT_WRONG),  # recorded (the Pod's limits.memory)
        ("1Gb", ERR_FORMAT_WRONG),
        ("1.5.5", ERR_FORMAT_WRONG),
        ("1 Gi", ERR_FORMAT_WRONG),
        ("1mm", ERR_SUFFIX),
        ("1KiB", ERR_FORMAT_WRONG),
        ("1-", ERR_SUFFIX),
        ("1ki", ERR_SUFFIX),
    ],
)
def test_quantity_errors(text: str, error: str | None) -> None:
    assert quantity_error(text) == error
