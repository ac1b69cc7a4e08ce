"""Service-side CLI commands (serve, submit, db, tokens, retriage): registered into `logtriage`."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the service commands to the `logtriage` parser (filled in by the [service] work)."""
