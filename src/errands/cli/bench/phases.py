"""The phases of ``errands bench``: each errands phase, the raw baseline it is paired with in
a round, and how the report names them (the catalogue both the measuring and the report
read)."""

from __future__ import annotations

from . import producers
from . import raw as bench_raw

BATCH_LABEL = f"claims of {bench_raw.BATCH}"

# Each errands phase and the raw baseline it runs right after, in the same round (in run order).
BASELINE = {
    **{phase: "insert" for phase in producers.LABELS},
    "enqueue_many": "bulk_insert",
    "process_1": "process",
    "process_p": "process_p",
}
RAW_LABELS = {
    "insert_audited": "raw insert + audit row",
    "insert": "raw insert",
    "bulk_insert": "raw bulk insert",
    "process": "raw processing",
    "process_p": "raw processing, P processes",
}

RAW_BASELINE_LABELS = {  # what each raw baseline does, for the report
    "insert_audited": "insert and its ENQUEUED event row, 1 tx per job",
    "insert": "insert, 1 tx per row",
    "bulk_insert": "bulk insert, 1 tx",
    "process": BATCH_LABEL,
    "process_p": "the same, in each process at once",
}
