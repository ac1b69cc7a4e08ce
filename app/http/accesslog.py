"""The server's access log without what a query string carries.

uvicorn logs each request line with its query string, and query strings carry metadata: a job
id, a label holding `WANDB_API_KEY=...`, a search term. Values are replaced by `…` (names stay,
for debugging); the path itself goes through the log redactor. Error logs never print request
data.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl

from app.engine.pipeline.redact import redact_text


def scrub_target(target: str) -> str:
    path, sep, query = target.partition("?")
    path = redact_text(path)
    if not sep:
        return path
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    return path + "?" + "&".join(f"{redact_text(n)}=…" for n in names)


class ScrubQuery(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn.access: args = (client, method, full_path, http_version, status)
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], scrub_target(args[2]), *args[3:])
        return True


def install() -> None:
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, ScrubQuery) for f in logger.filters):
        logger.addFilter(ScrubQuery())
