"""A run's progress writes, as typed commands.

Each write a run makes while it executes is an immutable named tuple (a frozen record: a third of
a frozen dataclass's cost to build, and a run builds one per write): the group commit
(:mod:`duro.worker._batching`) queues commands of many runs and hands them to the store together
(``Store.apply_batch``), or one alone (``Store.apply``); the store dispatches them with ``match``.
Every command is fenced on its run: it changes nothing unless ``owner`` still owns the run
unfinished. The store never changes a command or a record it was given: what it wrote comes back
in the result (:class:`SlotOutcome`, or the step of :class:`TakeSignal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from .._states import EndState, RunState
from ..definitions._config import LimitConfig
from ..rules._slots import SlotEvent, SlotRow
from ._records import RunRecord, StepRecord

_NOBODY: Mapping[str, OwnStep] = MappingProxyType({})  # no local grant
_NO_STEPS: Mapping[str, StepRecord] = MappingProxyType({})


class OwnStep(NamedTuple):
    """A step of the caller's own run, written with a decision in its transaction, and fenced like
    :class:`RecordStep`: a run its ``owner`` no longer owns rolls the whole decision back (``Fenced``)."""

    run_id: str
    owner: str | None
    step: StepRecord


class RecordStep(NamedTuple):
    """Write ``step`` (``None``: touch the run only, a sleep that ended: see ``settle_sleeps``) and
    set the run's status and timer. Result: ``True``, or ``False`` when the run is not ``owner``'s."""

    run_id: str
    owner: str | None
    step: StepRecord | None
    run_status: RunState | None = None
    wake_at: int | None = None
    now: int = 0


class FinishRun(NamedTuple):
    """End the run (``completed`` with ``output``, ``failed`` or ``cancelled`` with ``error``; a
    cancelled run's calls still waiting are closed ``cancelled`` with it). Result as :class:`RecordStep`."""

    run_id: str
    owner: str | None
    status: EndState
    output: str | None
    error: str | None
    now: int
    parent: str | None = None  # the run's parent, if any: its wait for this run is over (due now)


class TakeSignal(NamedTuple):
    """Consume the oldest unconsumed signal ``name`` of the run and write ``step`` completed with its
    payload (the run back to ``running``). Result: the step as written, or ``None`` when no signal
    waits. Raises ``Fenced`` when the run is not ``owner``'s."""

    run_id: str
    owner: str | None
    name: str
    step: StepRecord


class SendSignal(NamedTuple):
    """Buffer signal ``name`` (its JSON ``payload``) for run ``target`` and write the sender's
    ``step`` (completed), in one transaction, fenced on the sender's run like :class:`RecordStep`.
    Result: ``True``. Raises ``Fenced`` when the sender is not ``owner``'s, and the store's signal
    error when ``target`` is unknown or has ended (nothing written either way). Made again after a
    commit it did not hear of (a lost connection), it finds its step written and sends nothing."""

    run_id: str
    owner: str | None
    target: str
    name: str
    payload: str | None
    step: StepRecord


class RequestSlot(NamedTuple):
    """Ask for a slot (idempotent by ``slot_id``): busy at once when one is free and nobody waits,
    else queued last. ``hook``, the run's hook step, is written alongside: completed when the slot
    is busy at once, else waiting. Result: :class:`SlotOutcome` (``row``, ``step``)."""

    config: LimitConfig
    slot_id: str
    run_id: str | None
    label: str | None
    timeout_at: int | None
    now: int
    hook: OwnStep | None = None
    key: str | None = None  # a keyed limit's key


class ConfirmSlot(NamedTuple):
    """Take a slot reserved for the run (reserved -> busy), its hook step written completed alongside;
    a lapsed reservation is requeued instead and its slot handed on. Result: :class:`SlotOutcome`
    (``row``, ``granted``, ``step`` when it became busy)."""

    config: LimitConfig
    slot_id: str
    now: int
    hook: OwnStep | None = None


class GiveUpSlot(NamedTuple):
    """The waiter's timeout passed: a waiting request times out (a reserved or busy one is kept:
    the slot came in time), and ``hook`` is written as given (failed). Result: :class:`SlotOutcome`
    (``row``; ``step`` when the hook was written).

    ``cancelled``: the waiting run was cancelled instead. Its request leaves the queue whatever
    its state: a slot reserved for it, or handed to it a moment before, goes to the next run
    (``granted``), and ``hook`` is written as given (cancelled)."""

    config: LimitConfig
    slot_id: str
    now: int
    hook: OwnStep | None = None
    cancelled: bool = False


class ReleaseSlot(NamedTuple):
    """Release a held or reserved slot and hand freed capacity to the queue's heads. ``hook`` (the
    releasing run's ``release_slot`` step) is written with ``{"released": ...}`` as its result.

    ``local_waiters`` is the local grant: waiters idle in the calling process, by slot id, with
    their hook steps. A head among them takes its slot at once, busy, its hook step written
    completed in this transaction (fenced on its own run), so it wakes holding the slot with nothing
    to confirm; any other head is reserved. Result: :class:`SlotOutcome` (``row``: the slot, or
    ``None`` if unknown; ``released``; ``granted``; ``claimed``). ``claim``: the releasing worker
    also takes up heads evicted from memory (see :class:`Claimer`)."""

    configs: Mapping[str, LimitConfig]
    slot_id: str
    now: int
    reason: str = "release"
    hook: OwnStep | None = None
    local_waiters: Mapping[str, OwnStep] = _NOBODY
    claim: Claimer | None = None


class Claimer(NamedTuple):
    """A worker that takes up a queue's head evicted from memory (see ``ReleaseSlot.claim``): a head
    whose run is unowned, of ``namespace`` and one of ``workflows``, becomes ``owner``'s with its
    slot busy and its hook step written completed, all in the release's transaction; the worker
    replays it (``SlotOutcome.claimed``), and it finds the slot its own with nothing to confirm."""

    owner: str
    namespace: str
    workflows: tuple[str, ...]
    versions: tuple[tuple[str, str], ...] = ()  # and only these versions of them (see Claim.versions)


class Waiting(NamedTuple):
    """What an idle run waits for (see :class:`Evict`): ``kind`` is ``sleep`` (a timer: a sleep
    or a retry's delay), ``signal`` (``key`` its name), ``slot`` (``key`` the slot's id) or
    ``child`` (``key`` the child run's id); ``due_at`` when the wait ends by itself (its timer or
    timeout; ``None``: it does not)."""

    run_id: str
    kind: str
    key: str | None
    due_at: int | None


class Evict(NamedTuple):
    """``owner`` gives up runs idle in its memory: each is unowned and falls due when its wait
    ends, or at once if what it waits for happened already (checked in the same statement as the
    hand-back, so a signal, a slot or a child's end committed at any moment is never missed).
    Result: the ids of the runs given up (a run no longer ``owner``'s, or finished, is left as it is)."""

    owner: str
    waits: tuple[Waiting, ...]
    now: int


Command = (
    RecordStep
    | FinishRun
    | TakeSignal
    | SendSignal
    | RequestSlot
    | ConfirmSlot
    | GiveUpSlot
    | ReleaseSlot
    | Evict
)
SlotCommand = RequestSlot | ConfirmSlot | GiveUpSlot | ReleaseSlot


class SlotOutcome(NamedTuple):
    """What a slot command did: the slot's row afterwards (``None``: unknown slot), whether a release
    released it, the rows handed out (reserved, or busy for a local grant), and the caller's hook
    step as written (``None``: none was written)."""

    row: SlotRow | None
    step: StepRecord | None = None
    released: bool = False
    granted: tuple[SlotRow, ...] = ()
    handed: Mapping[str, StepRecord] = (
        _NO_STEPS  # the hook steps written for waiters of the calling process, by slot id
    )
    claimed: tuple[RunRecord, ...] = ()  # runs the release's claimer took up (see Claimer)
    events: tuple[SlotEvent, ...] = ()  # what it did, for metrics and logs (see duro.rules._slots.SlotEvent)
    position: int | None = None  # a request that was queued: its place on entry (1: next)
