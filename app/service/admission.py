"""Admission control for one server process: who analyses next, and who is told to come back.

A burst of failing jobs (a switch dies, a hundred hooks post in the same minute) must not turn
into a hundred connections each held for tens of seconds: hooks time out, liveness probes fail,
the service is killed in the middle of the incident. So the analyses of a process run at most
`slots` at a time (one per scan worker), and what waits is a bounded backlog:

- an upload that gets a slot at once is analysed while its request waits (the hook gets its
  answer, 201, in one round trip);
- one that has to queue is answered 202 at once (a status URL to poll) and runs when its turn
  comes; its connection is not held;
- a backlog full in count answers 503 with Retry-After, and a client that holds more than its
  share of the backlog answers 429 (its own retry, not everyone's); an upload that would wait
  when the bytes the backlog holds in memory are at their limit waits on disk instead
  (`spills`: its caller writes it to the spool, then admits it holding no memory);
- turns go round-robin between clients (API token, or address when there is none), so one
  job array posting a thousand logs does not hold back another team's single hook.

Nothing here blocks or does I/O: it is bookkeeping on the event loop, O(1) per upload.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from app.errors import ServiceUnavailableError, TooManyRequestsError

__all__ = ["Admission", "Ticket"]

# the drain estimate behind Retry-After starts here, then follows the measured analyses
_INITIAL_SECONDS = 0.5
_EWMA = 0.2
RETRY_AFTER_MIN_S = 1
RETRY_AFTER_MAX_S = 60


@dataclass(eq=False)
class Ticket:
    """An admitted analysis: it holds `memory` bytes until it is done, then gives its slot back."""

    client: str
    memory: int
    admission: Admission
    granted: asyncio.Future[None] = field(repr=False)
    started: float = 0.0
    ahead: int = 0  # waiting before it when it was admitted
    _released: bool = False

    @property
    def running(self) -> bool:
        return self.granted.done() and not self.granted.cancelled()

    def turn_s(self) -> float:
        """Seconds until its turn, at the measured pace (0 when it is next for a slot)."""
        return self.admission.expected_s(self.ahead) - self.admission.expected_s(0)

    async def wait_turn(self) -> None:
        await asyncio.shield(self.granted)

    def release(self) -> None:
        """Give the slot (or the place in the backlog) back; idempotent."""
        if not self._released:
            self._released = True
            self.admission._release(self)


class Admission:
    """Slots, a fair backlog and the refusals of one process (see the module docstring)."""

    def __init__(self, *, slots: int, backlog: int, backlog_bytes: int, client_share: float = 0.5) -> None:
        self.slots = max(1, slots)
        self.backlog = max(0, backlog)
        self.backlog_bytes = max(0, backlog_bytes)
        # a client may hold this share of the backlog, never less than a slot's worth
        self.client_limit = max(self.slots, math.ceil(self.backlog * client_share))
        self.running = 0
        self.memory = 0  # bytes of the waiting uploads held in memory
        self._queues: OrderedDict[str, deque[Ticket]] = OrderedDict()  # round-robin order
        self._waiting = 0
        self._seconds = _INITIAL_SECONDS

    @property
    def waiting(self) -> int:
        return self._waiting

    def expected_s(self, ahead: int) -> float:
        """Seconds for `ahead` waiting analyses to start and one more to run, at the measured pace."""
        return (ahead // self.slots + 1) * self._seconds

    def retry_after(self) -> int:
        """Seconds until the backlog has drained at the measured pace (what a refusal says)."""
        drain = (self._waiting + self.running) * self._seconds / self.slots
        return int(min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(drain))))

    def spills(self, memory: int) -> bool:
        """Whether an upload holding `memory` bytes would wait past the memory the backlog may
        hold while the backlog has room in count: it should wait on disk (an incident's
        thousand hooks are acknowledged, not sent back to retry for want of memory)."""
        would_wait = self.running >= self.slots or self._waiting > 0
        over = bool(memory and self.backlog_bytes and self.memory + memory > self.backlog_bytes)
        return would_wait and over and self._waiting < self.backlog

    def admit(self, *, client: str, memory: int = 0) -> Ticket:
        """A ticket that runs at once when a slot is free, else waits in the backlog; refused
        with 503 (backlog full) or 429 (this client's share taken) otherwise."""
        loop = asyncio.get_running_loop()
        ticket = Ticket(client=client, memory=memory, admission=self, granted=loop.create_future())
        if self.running < self.slots and not self._waiting:
            self._grant(ticket)
            return ticket
        if self._waiting >= self.backlog or (
            memory and self.backlog_bytes and self.memory + memory > self.backlog_bytes
        ):
            raise ServiceUnavailableError(
                f"the server is analysing {self.running} logs with {self._waiting} waiting, its "
                "limit; retry after the time in Retry-After (nothing was stored)",
                retry_after=self.retry_after(),
            )
        queued = len(self._queues.get(client, ()))
        if queued >= self.client_limit:
            raise TooManyRequestsError(
                f"this client has {queued} logs waiting for analysis, its share of "
                "the server's backlog; retry after the time in Retry-After (nothing was stored)",
                retry_after=self.retry_after(),
            )
        ticket.ahead = self._waiting
        self._queues.setdefault(client, deque()).append(ticket)
        self._waiting += 1
        self.memory += memory
        return ticket

    def _grant(self, ticket: Ticket) -> None:
        self.running += 1
        ticket.started = time.monotonic()
        ticket.granted.set_result(None)

    def _release(self, ticket: Ticket) -> None:
        if ticket.running:
            self.running -= 1
            took = time.monotonic() - ticket.started
            self._seconds += _EWMA * (took - self._seconds)
        else:  # left the backlog before its turn (its request failed or was cancelled)
            queue = self._queues.get(ticket.client)
            if queue is not None and ticket in queue:
                queue.remove(ticket)
                if not queue:
                    del self._queues[ticket.client]
                self._unqueued(ticket)
            ticket.granted.cancel()
        self._next()

    def _unqueued(self, ticket: Ticket) -> None:
        self._waiting -= 1
        self.memory -= ticket.memory

    def _next(self) -> None:
        """Hand free slots out, one client at a time in turn."""
        while self.running < self.slots and self._queues:
            client, queue = next(iter(self._queues.items()))
            ticket = queue.popleft()
            if queue:
                self._queues.move_to_end(client)  # the next client's turn
            else:
                del self._queues[client]
            self._unqueued(ticket)
            self._grant(ticket)
