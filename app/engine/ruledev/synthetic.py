"""Synthetic extra rules for the growth benchmark (40 -> 200 -> 1000 rules).

Their patterns look like real ones (a distinctive literal, then captures) but name errors no
log contains, so they cost scan time without changing findings.
"""

from __future__ import annotations

import random

from app.engine.pipeline.library import Rule

_WORDS = [
    "Shard",
    "Bucket",
    "Pipeline",
    "Rollout",
    "Replica",
    "Gradient",
    "Optimizer",
    "Sampler",
    "Actor",
    "Critic",
    "Reward",
    "Buffer",
    "Stream",
    "Channel",
    "Kernel",
    "Mesh",
]
_KINDS = ["Error", "Failure", "Mismatch", "Timeout", "Overflow", "Corruption"]


def synthetic_rules(n: int, *, seed: int = 7) -> list[Rule]:
    rng = random.Random(seed)
    rules = []
    for i in range(n):
        a, b, k = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_KINDS)
        pat = rf"{a}{b}{k}{i:04d}: (?P<what>\w+) at step (?P<step>\d+) on rank (?P<rank>\d+)"
        rules.append(
            Rule.model_validate(
                {
                    "id": f"synthetic-{i:04d}",
                    "version": 1,
                    "status": "experimental",
                    "failure_class": "unknown",
                    "severity": "error",
                    "title": f"Synthetic rule {i}",
                    "match": {"any": [pat]},
                    "explanation": "Synthetic rule used only by the growth benchmark.",
                    "remediation": "None: this rule exists to measure scan cost.",
                }
            )
        )
    return rules
