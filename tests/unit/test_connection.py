"""The store's writer lock is taken in turn: a thread that releases it and asks again waits behind
the threads already waiting (a long grant pass's batches let a slot request in between)."""

from __future__ import annotations

import threading

import pytest

from duro.store._connection import TurnLock


def _queued(lock: TurnLock, n: int) -> None:
    """Wait (bounded) until ``n`` threads wait for ``lock``."""
    with lock._cond:
        assert lock._cond.wait_for(lambda: len(lock._queue) == n, timeout=10), "threads never queued"


def test_a_thread_that_releases_and_asks_again_waits_its_turn():
    lock = TurnLock()
    order: list[str] = []
    lock.acquire()

    def take(name: str) -> None:
        with lock:
            order.append(name)

    waiter = threading.Thread(target=take, args=("waiter",))
    waiter.start()
    _queued(lock, 1)
    lock.release()
    with lock:  # asked again at once: the waiter, asking first, goes first
        order.append("again")
    waiter.join(timeout=10)
    assert order == ["waiter", "again"]


def test_waiters_go_in_the_order_they_asked():
    lock = TurnLock()
    order: list[int] = []
    lock.acquire()
    threads = []
    for i in range(5):
        thread = threading.Thread(target=lambda i=i: (lock.acquire(), order.append(i), lock.release()))
        thread.start()
        _queued(lock, i + 1)
        threads.append(thread)
    lock.release()
    for thread in threads:
        thread.join(timeout=10)
    assert order == [0, 1, 2, 3, 4]


def test_it_is_reentrant_and_refuses_without_blocking_while_held():
    lock = TurnLock()
    with lock, lock:
        got: list[bool] = []
        other = threading.Thread(target=lambda: got.append(lock.acquire(blocking=False)))
        other.start()
        other.join(timeout=10)
        assert got == [False]
    assert lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(RuntimeError, match="does not hold it"):
        lock.release()
