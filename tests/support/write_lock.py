"""Hold an SQLite file's write lock from another process, as a stuck writer would::

    python -m tests.support.write_lock DB_PATH SECONDS

It waits for a line on stdin (so it is started, imported and connected before the moment matters),
then ``BEGIN IMMEDIATE`` (waiting up to 60 s for the lock), prints ``locked``, holds the lock
``SECONDS``, rolls back and prints ``released``. Readers (WAL) go on; every other writer waits."""

from __future__ import annotations

import sqlite3
import sys
import threading


def main(path: str, seconds: float) -> None:
    conn = sqlite3.connect(path, timeout=60.0, isolation_level=None)
    try:
        sys.stdin.readline()
        conn.execute("BEGIN IMMEDIATE")
        print("locked", flush=True)
        threading.Event().wait(seconds)
        conn.execute("ROLLBACK")
        print("released", flush=True)
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
