"""Packing: `tokens.total <= token_budget`, always, with a real BPE tokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import packing
from app.core.tokens import TokenCounter

count = TokenCounter("o200k_base")
texts = st.lists(
    st.sampled_from([*"abc xyz 你好世界，。!?\n", "hello", " world", "数据"]),
    min_size=1,
    max_size=60,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    system=st.text(max_size=200),
    memories=st.lists(texts, max_size=12),
    recent=st.lists(texts, max_size=12),
    budget=st.integers(1, 600),
    data=st.data(),
)
def test_total_never_exceeds_the_budget(
    system: str, memories: list[str], recent: list[str], budget: int, data: st.DataObject
) -> None:
    required = data.draw(st.none() | st.integers(0, len(recent) - 1)) if recent else None
    if required is not None:
        base = count([packing.render(system, [], [packing.Item(0, recent[required])])])[0]
    else:
        base = count([packing.render(system, [], [])])[0] if system else 0
    if base > budget:
        with pytest.raises(packing.BudgetTooSmall):
            packing.pack(
                system_prompt=system,
                memories=[],
                recent=[packing.Item(i, t) for i, t in enumerate(recent)],
                required_recent=required,
                budget=budget,
                count=count,
            )
        return
    packed = packing.pack(
        system_prompt=system,
        memories=[packing.Item(i, t) for i, t in enumerate(memories)],
        recent=[packing.Item(i, t) for i, t in enumerate(recent)],
        required_recent=required,
        budget=budget,
        count=count,
    )
    assert packed.tokens["total"] == count([packed.text])[0] <= budget
    if required is not None:
        assert recent[required] in [r.text for r in packed.recent]
    assert packed.dropped["memories"] == len(memories) - len(packed.memories)
    # Memories keep their rank order; recent turns keep the conversation's order.
    assert [m.key for m in packed.memories] == sorted(m.key for m in packed.memories)
    assert [r.key for r in packed.recent] == sorted(r.key for r in packed.recent)


def test_recent_turns_are_a_contiguous_newest_run() -> None:
    recent = [packing.Item(i, f"turn {i} " + "word " * 20) for i in range(10)]
    packed = packing.pack(
        system_prompt="sys", memories=[], recent=recent, required_recent=9, budget=120, count=count
    )
    keys = [r.key for r in packed.recent]
    assert keys == list(range(keys[0], 10))
    assert len(keys) < 10


def test_too_small_for_the_required_parts() -> None:
    with pytest.raises(packing.BudgetTooSmall):
        packing.pack(
            system_prompt="You are a careful assistant.",
            memories=[],
            recent=[packing.Item(0, "user: a question that must stay")],
            required_recent=0,
            budget=5,
            count=count,
        )


def test_memories_and_recent_share_the_budget() -> None:
    memories = [packing.Item(i, f"memory {i} " + "fact " * 10) for i in range(20)]
    recent = [packing.Item(i, f"turn {i} " + "chat " * 10) for i in range(20)]
    packed = packing.pack(
        system_prompt="",
        memories=memories,
        recent=recent,
        required_recent=19,
        budget=300,
        count=count,
    )
    assert packed.memories
    assert len(packed.recent) > 1
