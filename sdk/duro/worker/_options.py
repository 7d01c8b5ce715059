"""How an engine's worker runs: its lease, its poll interval and its id (:class:`WorkerOptions`)."""

from __future__ import annotations

import warnings
from dataclasses import InitVar, dataclass

from .._durations import Duration, to_ms
from .._errors import DuroError

_NOT_GIVEN: object = object()  # unload_after left out


@dataclass(frozen=True)
class WorkerOptions:
    """The worker an entered engine runs (``Engine(..., options=WorkerOptions(...))``).

    ``lease``: how long a worker's runs stay its own without a heartbeat going through (it beats
    every third of it); another worker takes them over after a whole lease of silence.
    ``poll_interval``: how often the worker looks at the store for what notifications missed (runs
    to claim, other processes' changes); ``None``: never (one process alone on its store, e.g.
    under a simulated clock: the worker acts on local wake-ups only). ``worker_id``: the worker's
    row in the store (default: host, pid and a random suffix).

    Waiting costs nothing (see ``duro.rules._eviction``): ``max_resident_runs`` bounds the runs a
    worker holds in memory (executing or waiting; over it, the longest idle waiting runs are
    evicted and replayed when their wait ends; 0: every waiting run at once);
    ``max_concurrent_runs`` bounds the runs it executes at once (it claims due work in batches of
    its free capacity; a start beyond it is left to the store, due at once, for whichever worker
    has room first); ``evict_after``: a run waiting on a signal, a slot or a child stays in memory
    this long before it is evicted, and a sleep that ends later than this from now is evicted at
    once (``None``: only over ``max_resident_runs``, as the harness runs). ``unload_after``, the
    former name of ``evict_after``, is still accepted with a ``DeprecationWarning``.

    ``cancel_grace``: how long a cancelled run's code may go on after the cancel reached its
    worker (its ``finally`` blocks releasing slots, say) before the run is ended ``cancelled``
    whatever it is doing (docs/durability.md, "Cancelling a run").

    ``max_recoveries``: a run whose worker died while executing it this many times in a row, its
    history no longer each time (a step that crashes the process: ``os._exit``, a segfault, the OOM
    killer), is failed with a :class:`~duro.RunSetAsideError` by the worker that would take it up
    next, instead of taking that worker down too.
    """

    poll_interval: Duration | None = "1s"
    lease: Duration = "30s"
    worker_id: str | None = None
    max_resident_runs: int = 10_000
    max_concurrent_runs: int = 250
    evict_after: Duration | None = "5s"
    cancel_grace: Duration = "30s"
    max_recoveries: int = 5
    unload_after: InitVar[object] = _NOT_GIVEN

    def __post_init__(self, unload_after: object) -> None:
        if unload_after is not _NOT_GIVEN:
            warnings.warn(
                "WorkerOptions(unload_after=...) is now WorkerOptions(evict_after=...): rename the "
                "keyword (unload_after will be removed)",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "evict_after", unload_after)
        self.poll_interval_ms  # noqa: B018 - checked now, not at the first poll
        self.lease_ms  # noqa: B018
        self.evict_after_ms  # noqa: B018
        self.cancel_grace_ms  # noqa: B018
        for name, least in (("max_resident_runs", 0), ("max_concurrent_runs", 1), ("max_recoveries", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise DuroError(f"WorkerOptions.{name} must be an int of at least {least}, got {value!r}")
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str) or not 0 < len(self.worker_id) <= 200
        ):
            raise DuroError(f"worker_id must be a string of 1 to 200 characters, got {self.worker_id!r}")

    @property
    def poll_interval_ms(self) -> int | None:
        """The poll interval in milliseconds (``None``: no periodic pass)."""
        return None if self.poll_interval is None else max(1, to_ms(self.poll_interval, "poll_interval"))

    @property
    def evict_after_ms(self) -> int | None:
        """``evict_after`` in milliseconds (``None``: waiting runs stay until the bound)."""
        return None if self.evict_after is None else to_ms(self.evict_after, "evict_after")

    @property
    def lease_ms(self) -> int:
        """The lease in milliseconds (at least 3: a heartbeat every third of it)."""
        return max(3, to_ms(self.lease, "lease"))

    @property
    def cancel_grace_ms(self) -> int:
        """``cancel_grace`` in milliseconds."""
        return to_ms(self.cancel_grace, "cancel_grace")
