"""The one error tree.

Every error the CLI, the API or the Slack bot can show to a user is a ``LogtriageError``.
Each subclass knows its HTTP status, its RFC 9457 problem type slug and its CLI exit code,
so the edges never translate errors by hand.
"""

from __future__ import annotations

import errno

# what a full disk (or an exhausted quota) says: ENOSPC, EDQUOT
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# ... and how a database says it (SQLite; PostgreSQL's "could not extend file": No space left)
_DISK_FULL_WORDS = ("database or disk is full", "no space left on device", "disk quota exceeded")


class LogtriageError(Exception):
    """Base of every user-facing error."""

    http_status: int = 400
    slug: str = "bad-request"
    title: str = "Bad request"
    exit_code: int = 1

    def __init__(self, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        # seconds a client should wait before trying again (sent as Retry-After); None: the
        # edge's default for the class, if any
        self.retry_after = retry_after


class UsageError(LogtriageError):
    slug, title, exit_code = "usage", "Invalid usage", 2


class InputError(LogtriageError):
    """The log (or config) given cannot be read: missing, unreadable, corrupt archive."""

    slug, title, http_status = "unreadable-input", "Unreadable input", 400


class InputTooLargeError(InputError):
    slug, title, http_status = "input-too-large", "Input too large", 413


class UnsupportedMediaError(InputError):
    slug, title, http_status = "unsupported-media-type", "Unsupported media type", 415


class ConfigFileError(InputError):
    slug, title, http_status = "bad-config-file", "Job config file cannot be parsed", 422


class RuleError(LogtriageError):
    """A rule file is invalid. Raised while loading or linting the library."""

    slug, title, http_status = "invalid-rule", "Invalid rule", 500

    def __init__(self, detail: str, *, file: str | None = None, field: str | None = None) -> None:
        where = ":".join(p for p in (file, field) if p)
        super().__init__(f"{where}: {detail}" if where else detail)
        self.file = file
        self.field = field


class NotFoundError(LogtriageError):
    slug, title, http_status = "not-found", "Not found", 404


class ConflictError(LogtriageError):
    slug, title, http_status = "conflict", "Conflict", 409


class AuthError(LogtriageError):
    slug, title, http_status = "unauthorized", "Unauthorized", 401


class LoginRequiredError(AuthError):
    """A web page needs a sign-in the browser does not have: it is sent to /login."""

    slug, title = "login-required", "Sign-in required"

    def __init__(self, detail: str, *, next_url: str = "/") -> None:
        super().__init__(detail)
        self.next_url = next_url


class ForbiddenError(LogtriageError):
    slug, title, http_status = "forbidden", "Forbidden", 403


class ValidationFailedError(LogtriageError):
    slug, title, http_status = "validation-failed", "Validation failed", 422


class PayloadTooLargeError(InputTooLargeError):
    """The request body itself is over the upload limit (before decompression)."""

    slug, title, http_status = "payload-too-large", "Payload too large", 413


class RequestTimeoutError(InputError):
    """The client stopped sending the request body (`LOGTRIAGE_BODY_TIMEOUT`)."""

    slug, title, http_status = "request-timeout", "Request timeout", 408


class HeaderFieldsTooLargeError(LogtriageError):
    """The request's headers (or its URL) are over the server's limit; answered by the HTTP
    protocol layer before the request reaches the app."""

    slug, title, http_status = "request-header-fields-too-large", "Request header fields too large", 431


class TooManyConnectionsError(LogtriageError):
    """One client address holds `LOGTRIAGE_MAX_CONNECTIONS_PER_CLIENT` connections to a server
    process already; answered by the HTTP protocol layer as the connection opens."""

    slug, title, http_status, exit_code = "too-many-connections", "Too many connections", 429, 3


class HostNotAllowedError(LogtriageError):
    """The request's `Host` is not a name the service answers to (loopback names in open mode;
    `LOGTRIAGE_ALLOWED_HOSTS` and the host of `LOGTRIAGE_PUBLIC_URL` when set)."""

    slug, title, http_status = "host-not-allowed", "Host not allowed", 400


class AnalysisNotReadyError(ConflictError):
    """The analysis exists but has no result yet (still running) or failed."""

    slug, title = "analysis-not-ready", "Analysis not ready"


class IdempotencyKeyReusedError(LogtriageError):
    """An ``Idempotency-Key`` was sent again with a different request body."""

    slug, title, http_status = "idempotency-key-reused", "Idempotency key reused with another request", 422


class RangeNotSatisfiableError(LogtriageError):
    slug, title, http_status = "range-not-satisfiable", "Range not satisfiable", 416


class ServiceUnavailableError(LogtriageError):
    """A dependency (database, scan workers) is down; retry later."""

    slug, title, http_status, exit_code = "service-unavailable", "Service unavailable", 503, 3


class TooManyRequestsError(LogtriageError):
    """This client has more work waiting than its share; retry after Retry-After."""

    slug, title, http_status, exit_code = "too-many-requests", "Too many requests", 429, 3


class InsufficientStorageError(LogtriageError):
    """The disk (blob store, spool or database) is full: nothing was stored; free space and retry."""

    slug, title, http_status, exit_code = "insufficient-storage", "Insufficient storage", 507, 3


def is_disk_full(exc: BaseException) -> bool:
    """An OSError with ENOSPC/EDQUOT, or a database error that says the disk is full."""
    if isinstance(exc, InsufficientStorageError):
        return True
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return True
    text = str(exc).lower()
    return any(w in text for w in _DISK_FULL_WORDS)


def disk_full(exc: BaseException | None = None) -> InsufficientStorageError:
    """The one 507 a full disk becomes, wherever it is met (spool, pending blob, commit, database)."""
    why = f" ({exc.strerror})" if isinstance(exc, OSError) and exc.strerror else ""
    return InsufficientStorageError(
        f"the server's disk is full{why}: nothing was stored; retry once space is freed"
    )


class RemoteError(LogtriageError):
    """The logtriage service answered with an error (or could not be reached) from `logtriage submit`."""

    slug, title, http_status, exit_code = "remote-error", "logtriage service error", 502, 3


class SubmitGaveUpError(RemoteError):
    """`logtriage submit` kept getting retryable answers (429, 5xx, 507, no connection) or an
    interrupted analysis until its deadline (`--deadline`) passed: nothing was reported as done."""

    slug, title, http_status, exit_code = "submit-gave-up", "Gave up submitting", 503, 4


class SlackError(LogtriageError):
    """Slack's Web API refused a call, or a file could not be fetched from Slack."""

    slug, title, http_status, exit_code = "slack-error", "Slack API error", 502, 3


class InternalError(LogtriageError):
    """A bug: never raised on purpose for bad input. Logged with its traceback, shown without it."""

    slug, title, http_status = "internal-error", "Internal server error", 500


def all_errors() -> list[type[LogtriageError]]:
    """Every error class in the tree (for the problem-type catalogue and the docs)."""
    out: list[type[LogtriageError]] = []
    todo: list[type[LogtriageError]] = [LogtriageError]
    while todo:
        cls = todo.pop(0)
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


class MissingExtraError(LogtriageError):
    """An optional feature was asked for whose extra is not installed (e.g. `--ray`)."""

    slug, title, http_status, exit_code = "missing-extra", "Optional dependency not installed", 501, 1
