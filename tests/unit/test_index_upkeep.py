"""When the embedded index's graph is due (app/services/index_upkeep.py): the decision alone,
from the counts the index hands it; the build itself is tests/integration/test_index_build.py."""

from __future__ import annotations

from app.services.index_upkeep import GraphUpkeep


def test_a_build_is_due_once_the_unbuilt_points_reach_both_thresholds() -> None:
    upkeep = GraphUpkeep(min_points=200, fraction=0.2)
    assert not upkeep.due(points=250, unbuilt=199)  # under the minimum
    assert upkeep.due(points=250, unbuilt=200)
    assert not upkeep.due(points=5000, unbuilt=999)  # under a fifth of the index
    assert upkeep.due(points=5000, unbuilt=1000)


def test_no_minimum_means_no_graph_however_many_points_wait() -> None:
    upkeep = GraphUpkeep(min_points=0, fraction=0.0)
    assert not upkeep.due(points=10**6, unbuilt=10**6)
