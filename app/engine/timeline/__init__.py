"""What each rank was doing when the job died, and the verdicts that follow (``builder.build``).

Timestamps (clock), per-host clock offsets (clockskew), collective progress (forensics),
flight-recorder dumps (flight), py-spy stacks (stacks), fail-slow change points (failslow),
cheap pre-filters for its line patterns (gate); ``model`` holds the types the pipeline reads.

Submodules are imported on use, never here.
"""

__all__ = ["builder", "clock", "clockskew", "failslow", "flight", "forensics", "gate", "model", "stacks"]
