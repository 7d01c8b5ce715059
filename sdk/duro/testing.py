"""What a test environment needs of duro beyond its public names (the duro harness uses these; so
may other test runners): ``EngineCrash`` (raise it at a checkpoint to crash the engine), ``hooks``
(an engine's private :class:`EngineHooks`), ``run_store_inline``, ``LimitConfig``. Time and project
helpers shared with the dev server are in :mod:`duro.tooling`.
"""

from . import Engine
from ._errors import EngineCrash
from ._hooks import EngineHooks
from .definitions._config import LimitConfig


def hooks(engine: Engine) -> EngineHooks:
    """The private hooks of an engine: how a test environment changes the way it runs (store calls
    inline, sync steps inline, numbered run ids, crash points, local grants, the target of its
    handles). See :class:`duro._hooks.EngineHooks`; not for production use. Set ``inline_store``
    before entering the engine (``run_store_inline``); the others take effect at once."""
    return engine._hooks  # the one reader of this private attribute


def run_store_inline(engine: Engine) -> None:
    """Make ``engine`` call its store on the event loop instead of in threads: deterministic, for a
    private store no other process can lock or stall (the harness's in-memory SQLite, under a
    simulated clock). Never for a shared database: a locked file would stall the whole loop. Call it
    before entering the engine."""
    if engine.worker is not None:
        raise RuntimeError("run_store_inline: call it before entering the engine")
    hooks(engine).inline_store = True


__all__ = ["EngineCrash", "EngineHooks", "LimitConfig", "hooks", "run_store_inline"]
