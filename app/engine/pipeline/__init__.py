"""The runtime path from logs to an ``Analysis``: ``triage.triage`` runs it.

library (load and validate rules; ``triggers`` declares the non-text trigger kinds) ->
ingest (+ archive: files, stdin, compression) -> scan (matcher, lines, unwrap, metric_stream,
metrics: one pass) -> findings (rules evaluated) -> rank -> patches (+ expr) -> redact.

Submodules are imported on use, never here: Hyperscan and zstandard load only when a scan runs.
"""

__all__ = [
    "archive",
    "expr",
    "findings",
    "framework_names",
    "ingest",
    "library",
    "lines",
    "matcher",
    "metric_stream",
    "metrics",
    "patches",
    "rank",
    "redact",
    "redos",
    "scan",
    "triage",
    "triggers",
    "unwrap",
]
