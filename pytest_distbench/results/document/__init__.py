"""The results document: built from a run (build), checked (schema), kept on disk (io), with a
baseline's history of runs (history) and the environment it was measured in (environment).

The names most callers need are importable from here.
"""

from .build import DroppedRecordWarning, make_document
from .io import (
    ResultsFileError,
    ResultsFileExistsError,
    read_document,
    resolve_baseline,
    write_document,
)
from .record import Record
from .schema import SCHEMA_VERSION, RecordError, check_record, records

__all__ = [
    "SCHEMA_VERSION",
    "DroppedRecordWarning",
    "Record",
    "RecordError",
    "ResultsFileError",
    "ResultsFileExistsError",
    "check_record",
    "make_document",
    "read_document",
    "records",
    "resolve_baseline",
    "write_document",
]
