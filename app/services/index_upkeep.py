"""When the embedded index rebuilds its HNSW graph: the decision, apart from the build.

The index (app/stores/qdrant_edge.py) builds the graph off to the side and asks `due`
after each upsert, at open and during a purge; a Qdrant server builds its own and never
asks (app/stores/qdrant_server.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.stores.vectors import VectorIndex


@dataclass(frozen=True, slots=True)
class GraphUpkeep:
    """A build once the points written since the last one reach `min_points` and
    `fraction` of the index: until then they are searched brute force, in the shard's
    small appendable segment, and a build costs minutes of a core (docs/architecture.md).
    `min_points` 0: never, every search brute force."""

    min_points: int
    fraction: float

    def keep(self, index: VectorIndex) -> None:
        index.keep_graph(self.due)

    def due(self, points: int, unbuilt: int) -> bool:
        return self.min_points > 0 and unbuilt >= max(self.min_points, self.fraction * points)
