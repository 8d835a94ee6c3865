"""The section packer gives what the three-part packer gave, for the same three parts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import packing
from app.core.tokens import TokenCounter

count = TokenCounter("o200k_base")
texts = st.lists(
    st.sampled_from([*"abc xyz 你好世界，。!?\n", "hello", " world", "数据", "- ", "##"]),
    min_size=0,
    max_size=60,
).map("".join)


def three_sections(
    system: str, memories: list[str], recent: list[str], required: int | None
) -> list[packing.Section]:
    return [
        packing.Section(
            "system_prompt",
            [packing.Item(0, system)] if system else [],
            priority=0,
            head=packing.HEAD_SYSTEM,
            whole=True,
        ),
        packing.Section("working_memory", [], priority=2, head="## Working memory"),
        packing.Section("profile", [], priority=3, head="## About the user"),
        packing.Section("summaries", [], priority=5, head="## Earlier", conversation=True),
        packing.Section(
            "memories",
            [packing.Item(i, t) for i, t in enumerate(memories)],
            priority=4,
            head=packing.HEAD_MEMORIES,
            bullet="- ",
        ),
        packing.Section(
            "recent_messages",
            [packing.Item(i, t) for i, t in enumerate(recent)],
            priority=1,
            head=packing.HEAD_RECENT,
            required=required,
            share=packing.RECENT_SHARE,
            conversation=True,
        ),
    ]


def check_same(
    system: str, memories: list[str], recent: list[str], required: int | None, budget: int
) -> None:
    kwargs = {
        "system_prompt": system,
        "memories": [packing.Item(i, t) for i, t in enumerate(memories)],
        "recent": [packing.Item(i, t) for i, t in enumerate(recent)],
        "required_recent": required,
        "budget": budget,
        "count": count,
    }
    sections = three_sections(system, memories, recent, required)
    try:
        old = packing.pack(**kwargs)  # type: ignore[arg-type]
    except packing.BudgetTooSmall as exc:
        needed = exc.needed
        with pytest.raises(packing.BudgetTooSmall) as new_exc:
            packing.pack_sections(sections, budget=budget, count=count)
        assert new_exc.value.needed == needed
        return
    new = packing.pack_sections(sections, budget=budget, count=count)
    assert new.text == old.text
    assert new.tokens == old.tokens
    assert list(new.tokens) == list(old.tokens)
    assert new.kept["memories"] == old.memories
    assert new.kept["recent_messages"] == old.recent
    assert new.kept["system_prompt"] == ([packing.Item(0, system)] if system else [])
    assert {k: new.dropped[k] for k in old.dropped} == old.dropped


@settings(max_examples=500, deadline=None)
@given(
    system=st.text(max_size=200),
    memories=st.lists(texts, max_size=14),
    recent=st.lists(texts, max_size=14),
    budget=st.integers(1, 700),
    data=st.data(),
)
def test_same_as_the_three_part_packer(
    system: str, memories: list[str], recent: list[str], budget: int, data: st.DataObject
) -> None:
    required = data.draw(st.none() | st.integers(0, len(recent) - 1)) if recent else None
    check_same(system, memories, recent, required, budget)
