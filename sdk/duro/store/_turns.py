"""A lock taken in turn: the threads waiting for it get it in the order they asked.

``threading.RLock`` lets the thread that releases it take it straight back, before a waiter wakes:
a thread writing a long hand-out in bounded transactions (see ``_slots.HAND_OUT_BATCH``) would then
keep SQLite's writer for the whole hand-out, and a slot request beside it wait as long. With turns,
a request waits for one transaction at the most.
"""

from __future__ import annotations

import threading
from collections import deque


class TurnLock:
    """A reentrant lock handed to its waiters first come, first served."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._queue: deque[int] = deque()  # the tickets of the threads waiting, in order
        self._tickets = 0

    def acquire(self, blocking: bool = True) -> bool:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and not self._queue:
                self._owner, self._depth = me, 1
                return True
            if not blocking:
                return False
            self._tickets += 1
            ticket = self._tickets
            self._queue.append(ticket)
            try:
                while self._owner is not None or self._queue[0] != ticket:
                    self._cond.wait()
            except BaseException:
                self._queue.remove(ticket)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self._owner, self._depth = me, 1
            return True

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("TurnLock released by a thread that does not hold it")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                if self._queue:
                    self._cond.notify_all()

    def __enter__(self) -> TurnLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
