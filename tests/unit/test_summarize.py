"""The extractive summariser and the period maths, without I/O: fixed small vectors for the
selection, a character counter for tokens."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime

from app.core import periods
from app.core.summarize import (
    Sentence,
    centrality,
    extractive,
    is_filler,
    render,
    select,
    sentences_of,
    split_sentences,
)


def chars(texts: Sequence[str]) -> list[int]:
    return [len(t) for t in texts]


def test_sentences_split_on_chinese_and_english_ends() -> None:
    text = (
        "我住在上海。我喜欢猫！你呢？ I moved to Berlin in 2021. It was 3.5 hours away! Ok?"
        "\n新的一行"
    )
    assert split_sentences(text) == [
        "我住在上海。",
        "我喜欢猫！",
        "你呢？",
        "I moved to Berlin in 2021.",
        "It was 3.5 hours away!",
        "Ok?",
        "新的一行",
    ]
    assert split_sentences("e.g. this stays whole") == ["e.g. this stays whole"]


def test_filler_is_skipped_unless_everything_is_filler() -> None:
    for filler in ["好的", "好的。", "Thanks!", "OK, thanks.", "嗯嗯", "Sounds good", "谢谢！"]:
        assert is_filler(filler), filler
    for fact in ["我住上海", "I love Paris", "I am 30", "我的车险明年三月到期。"]:
        assert not is_filler(fact), fact
    said = sentences_of([("user", "好的。我明天去北京出差。"), ("assistant", "Thanks!")])
    assert said == [Sentence("我明天去北京出差。", "user")]
    assert sentences_of([("user", "好的")]) == [Sentence("好的", "user")]


def test_centrality_prefers_the_common_theme() -> None:
    vectors = [[1.0, 0.0], [0.9, 0.1], [0.95, 0.05], [0.0, 1.0]]
    c = centrality(vectors)
    assert c.index(min(c)) == 3
    assert all(-1.0 <= x <= 1.0 for x in c)


def test_mmr_picks_the_other_topic_over_a_near_duplicate() -> None:
    # Three near-identical sentences about A, one about B, one between: with room for two,
    # the second pick is not another A.
    vectors = [
        [1.0, 0.0, 0.0],
        [0.99, 0.01, 0.0],
        [0.98, 0.02, 0.0],
        [0.0, 1.0, 0.0],
        [0.6, 0.6, 0.1],
    ]
    picked = select(vectors, [10] * 5, cap=22)
    assert len(picked) == 2
    assert sum(1 for i in picked if i in (0, 1, 2)) == 1
    assert picked == sorted(picked)  # time order


def test_selection_respects_the_cap_and_skips_what_does_not_fit() -> None:
    vectors = [[1.0, 0.0], [0.9, 0.2], [0.2, 0.9]]
    assert select(vectors, [50, 5, 5], cap=12) == [1, 2]
    assert select(vectors, [50, 50, 50], cap=10) == []
    assert select([], [], cap=10) == []


def test_render_prefixes_speakers_only_when_there_are_several() -> None:
    two = [
        Sentence("我住在上海。", "user"),
        Sentence("我喜欢猫。", "user"),
        Sentence("Nice.", "assistant"),
    ]
    assert render(two) == "user: 我住在上海。我喜欢猫。 / assistant: Nice."
    assert render([Sentence("我住在上海。", "user"), Sentence("I like it.", "user")]) == (
        "我住在上海。I like it."
    )
    assert render([Sentence("One fact."), Sentence("Another fact.")]) == "One fact. Another fact."


def test_extractive_stays_within_the_cap_on_the_rendered_text() -> None:
    sentences = [
        Sentence(f"Sentence number {i} about things.", "user" if i % 2 else "assistant")
        for i in range(8)
    ]
    vectors = [[1.0, i / 10, 0.0] for i in range(8)]
    for cap in (1, 20, 60, 120, 1000):
        text = extractive(sentences, vectors, cap, chars)
        assert len(text) <= cap
        assert text
    assert extractive([], [], 50, chars) == ""


def test_periods_are_local_days_and_iso_weeks() -> None:
    shanghai = periods.zone("Asia/Shanghai")
    day = periods.period("daily", date(2024, 6, 5), shanghai)
    assert day.start == datetime(2024, 6, 4, 16, tzinfo=UTC)
    assert day.end == datetime(2024, 6, 5, 16, tzinfo=UTC)
    week = periods.period("weekly", date(2024, 6, 5), shanghai)  # a Wednesday
    assert week.first_day == date(2024, 6, 3)
    assert (week.end - week.start).days == 7
    # A daylight-saving day is 23 hours long.
    berlin = periods.zone("Europe/Berlin")
    spring = periods.period("daily", date(2024, 3, 31), berlin)
    assert (spring.end - spring.start).total_seconds() == 23 * 3600
    now = datetime(2024, 6, 5, 17, tzinfo=UTC)  # 01:00 on Thursday in Shanghai
    assert periods.latest_closed("daily", now, shanghai).first_day == date(2024, 6, 5)
    assert periods.latest_closed("weekly", now, shanghai).first_day == date(2024, 5, 27)
    assert periods.period("daily", date(2024, 6, 5), shanghai).closed(now)


def test_unknown_timezones_fall_back_to_utc() -> None:
    for bad in ["Mars/Olympus", "", 42, None, "../etc/passwd"]:
        assert periods.zone(bad).key == "UTC"


def test_ids_and_hashes_are_deterministic() -> None:
    start = datetime(2024, 6, 3, tzinfo=UTC)
    a = periods.summary_id("t", "u", "daily", start)
    assert a == periods.summary_id("t", "u", "daily", start)
    assert a != periods.summary_id("t", "u", "weekly", start)
    h = periods.source_hash("daily", ["s#1", "s#2"])
    assert h == periods.source_hash("daily", ["s#1", "s#2"])
    assert h != periods.source_hash("daily", ["s#1", "s#2", "s#3"])
    assert periods.job_key("u", "daily", date(2024, 6, 3)) == "u:daily@2024-06-03"
    assert periods.job_key("u", "essence", None) == "u:essence"
