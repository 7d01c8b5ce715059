"""How many unfinished runs each (workflow, version) has: the faces' view of versions that coexist
(the API's and Studio's workflows page), so a version with runs in flight is seen before its code
is removed, and a version no worker has (its runs wait ``pending``) is seen at all.
"""

from __future__ import annotations

from ._connection import StorePart
from ._tables import ACTIVE_SQL

# One GROUP BY over the namespace's unfinished runs, whose condition repeats the partial indexes'
# term for term: on SQLite a range of ``duro_runs_claim (namespace, status, owner)`` (one range per
# active status), on PostgreSQL ``duro_runs_active (namespace, created_at, id) WHERE status IN
# (active)``. Either way it reads the unfinished runs only, never a finished one; the workflow and
# version come from the table rows (no index holds them: the count is over in-flight runs, which a
# worker bounds, so covering them is not worth a wider index on every write).
UNFINISHED_BY_VERSION = (
    "SELECT workflow, version, count(*) FROM duro_runs "
    f"WHERE namespace = :namespace AND status IN {ACTIVE_SQL} "
    "GROUP BY workflow, version"
)


class VersionRows(StorePart):
    """The unfinished runs of each version."""

    def unfinished_by_version(self, namespace: str) -> dict[tuple[str, str], int]:
        """``{(workflow, version): unfinished runs}`` of ``namespace`` (pending, running, suspended,
        blocked), in one query; a pair with no unfinished run is left out."""
        with self.db.single_read() as conn:
            rows = self.db.run_text(conn, UNFINISHED_BY_VERSION, {"namespace": namespace}).fetchall()
        return {(workflow, version): count for workflow, version, count in rows}
