"""The scan engine: logs and a rule library in, an ``Analysis`` out; pure Python, no I/O edges.

- ``pipeline``: the runtime path (load rules, ingest, scan, evaluate, rank, remedy, redact);
  ``pipeline.triage.triage`` is the one entry point.
- ``timeline``: what the ranks were doing when the job died (clocks, collectives, verdicts).
- ``ruledev``: tools for writing and measuring rules (fixture tests, scoring, mutation).
- ``models``: the ``Analysis`` the pipeline returns; ``fingerprint``: its versioned failure
  fingerprints (recurrence).

Nothing is imported here: a caller pays only for the modules it uses.
"""

__all__ = ["fingerprint", "models", "pipeline", "ruledev", "timeline"]
