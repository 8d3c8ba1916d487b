"""An in-memory record made into the JSON values a results file holds.

Ranks hand over numpy arrays and scalars, tuples and whatever a test parametrized with; the
file holds plain numbers, lists and strings. Normalising never refuses anything: what still
does not fit is left for validation (schema.py) to name with its field. What each field
becomes is declared in fields.RECORD_FIELDS.
"""

from __future__ import annotations

from typing import Any, cast

from .fields import MAX_INT, RECORD_FIELDS, json_safe
from .record import Record

# Written as null when unknown, so a reader finds every one of them.
NULLABLE_RECORD_FIELDS = tuple(key for key, field in RECORD_FIELDS.items()
                               if field.fill is not None and field.fill() is None)


def normalize_record(record: Record) -> Record:
    """A copy of the record with every always-written field present and plain JSON values."""
    out: dict[str, Any] = dict(record)
    for key, field in RECORD_FIELDS.items():
        if out.get(key) is None and field.fill is not None:
            out[key] = field.fill()
        if out.get(key) is not None and field.plain is not None:
            out[key] = field.plain(out[key])
    return cast(Record, out)


__all__ = ["MAX_INT", "NULLABLE_RECORD_FIELDS", "json_safe", "normalize_record"]
