"""The intrinsic importance heuristic (`app.core.importance`), English and Chinese."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.importance import FILLER, blend, intrinsic


@pytest.mark.parametrize(
    "text", ["ok", "ok thanks!", "lol", "haha", "好的", "嗯嗯", "谢谢！", "哈哈哈", "got it"]
)
def test_filler_is_near_zero(text: str) -> None:
    assert intrinsic(text) == FILLER


@pytest.mark.parametrize(
    ("high", "low"),
    [
        ("I prefer aisle seats on flights.", "The weather was nice."),
        ("我喜欢靠过道的座位。", "今天天气不错。"),
        ("I decided to move to Berlin next year.", "Berlin is a city."),
        ("我们决定明年搬到柏林。", "柏林是一个城市。"),
        ("My name is Ana and I work at a bakery.", "There is a bakery."),
        ("我叫小王，住在上海。", "上海很大。"),
        ("Remember: the door code is 4512.", "The door is red."),
        ("记住，门禁密码是4512。", "门是红色的。"),
    ],
)
def test_durable_first_person_facts_rank_above_neutral_statements(high: str, low: str) -> None:
    assert intrinsic(high) > intrinsic(low) + 0.2


def test_an_explicit_remember_is_near_the_top() -> None:
    assert intrinsic("Please remember that I am allergic to peanuts.") >= 0.9
    assert intrinsic("请记住我对花生过敏。") >= 0.9


@given(st.text(max_size=300))
def test_intrinsic_lies_in_unit_interval(text: str) -> None:
    assert 0.0 <= intrinsic(text) <= 1.0


def test_an_llm_rating_leads_but_the_heuristic_keeps_it_honest() -> None:
    assert blend("ok", None) == FILLER
    assert blend("ok", 1.0) < blend("I am allergic to peanuts.", 1.0)
    assert blend("The weather was nice.", 0.9) > intrinsic("The weather was nice.")


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("I am going to Berlin next month.", "我下个月要去柏林。"),
        ("Last week we went to the beach.", "上周我们去了海边。"),
        ("I'll see the dentist tomorrow.", "我明天要去看牙医。"),
        ("Yesterday I finished the report.", "我昨天写完了报告。"),
    ],
)
def test_a_plan_or_a_date_counts_the_same_in_either_language(english: str, chinese: str) -> None:
    """The same statement, English or Chinese, is rated alike: recall weighs importance, so
    a cue missing in one language ranked its turns below the other's."""
    assert intrinsic(chinese) == intrinsic(english)
    assert intrinsic(chinese) > intrinsic("The weather was nice.")
