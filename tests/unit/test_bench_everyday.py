"""The issue 40 instruments: the everyday set and the held-out bilingual set are well formed
(every id they name exists, the languages they claim are the languages written), and
bench/everyday.py scores a ranking as its docstring says, without a server."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bilingual  # noqa: E402
import everyday  # noqa: E402


def lang(text: str) -> str:
    return "zh" if len(re.findall(r"[\u4e00-\u9fff]", text)) >= 2 else "en"


def test_everyday_set_is_well_formed() -> None:
    _, items = everyday.load(BENCH / "data" / "everyday.json")
    assert len({it.id for it in items}) == len(items)
    answerable = [it for it in items if it.answer_turn is not None]
    never = [it for it in items if it.answer_turn is None]
    assert len(answerable) >= 150
    assert len(never) >= 30
    counts = Counter(it.language for it in answerable)
    assert set(counts) == {"en", "zh", "cross"}
    assert min(counts.values()) >= 45
    assert sum(1 for it in answerable if it.superseded_turn is not None) >= 15
    for it in items:
        assert 2 <= len(it.turns) <= 4, it.id
        assert {t["role"] for t in it.turns} <= {"user", "assistant"}, it.id
        if it.answer_turn is None:
            assert it.category == "never", it.id
            continue
        answer = it.turns[it.answer_turn]
        assert answer["role"] == "user", it.id
        assert it.answer_turn not in it.filler_turns, it.id
        asked, written = lang(it.question), lang(answer["content"])
        if it.language == "cross":
            assert asked != written, it.id
        else:
            assert asked == written == it.language, it.id
        if it.superseded_turn is not None:
            assert it.category == "updated", it.id
            assert it.superseded_turn < it.answer_turn, it.id


def test_the_sets_helpers_wrote_are_well_formed() -> None:
    """everyday2 … everyday12: every index a turn, one answer that is no filler, an update
    after what it replaces, a cross-language question in the other language than the
    history; at least 150 answerable questions a set (112 in everyday12, the review's
    probes)."""
    paths = sorted((BENCH / "data").glob("everyday[0-9]*.json"))
    assert len(paths) >= 10
    for path in paths:
        _, items = everyday.load(path)
        assert len({it.id for it in items}) == len(items), path.name
        least = 100 if path.name == "everyday12.json" else 150
        assert sum(1 for it in items if it.answer_turn is not None) >= least, path.name
        for it in items:
            n = len(it.turns)
            assert all(0 <= k < n for k in it.filler_turns), it.id
            if it.answer_turn is None:
                assert it.category == "never", it.id
                continue
            assert 0 <= it.answer_turn < n, it.id
            assert it.answer_turn not in it.filler_turns, it.id
            if it.language == "cross":  # the history's language ("沪A·8K2M5" is no one's)
                history = " ".join(t["content"] for t in it.turns)
                assert lang(it.question) != lang(history), it.id
            if it.superseded_turn is not None:
                assert it.superseded_turn < it.answer_turn, it.id


def test_bilingual_dev2_is_held_out_and_well_formed() -> None:
    path = BENCH / "data" / "bilingual_dev2.json"
    doc, questions = bilingual.load(path)
    assert "not used for tuning" in doc["description"]
    messages = {
        m["id"]: m["content"]
        for c in doc["conversations"]
        for s in c["sessions"]
        for m in s["messages"]
    }
    first = json.loads((BENCH / "data" / "bilingual_dev.json").read_text())
    assert not {c["user_id"] for c in doc["conversations"]} & {
        c["user_id"] for c in first["conversations"]
    }
    assert len(questions) >= 150
    assert sum(1 for q in questions if q.languages in ("zh-en", "en-zh")) >= 40
    assert {q.category for q in questions} == set(bilingual.CATEGORIES)
    for q in questions:
        for mid in (*q.evidence, *q.superseded, *q.filler):
            assert mid in messages, (q.id, mid)
        if q.category == "no_match":
            assert not q.evidence, q.id
            assert q.languages == lang(q.question), q.id
            continue
        assert q.languages == f"{lang(q.question)}-{lang(messages[q.evidence[0]])}", q.id


def item(turns: list[str], answer: int | None, fillers: list[int]) -> everyday.Item:
    return everyday.Item(
        "x",
        "en",
        "fact",
        [{"role": "user", "content": t} for t in turns],
        "Where do I live?",
        answer,
        None,
        fillers,
    )


def test_everyday_scores_a_ranking() -> None:
    it = item(["I moved to Lisbon last May.", "How do you like it?", "Love it"], 0, [1])
    # The filler first, the answer second (matched by its text, with another id).
    filler_first = everyday.Ranked(
        [["x-t1"], ["seq:9"]],
        ["assistant: How do you like it?", "user: I moved to Lisbon last May."],
        [0.4, 0.1],
    )
    assert everyday.answer_rank(it, filler_first) == 2
    assert everyday.fillers_above(it, filler_first) == 1
    hidden = everyday.Ranked([], [], [])
    first = everyday.Ranked([["x-t0"]], ["user: I moved to Lisbon last May."], [0.12])
    m = everyday.evaluate([it], {"defaults": {"x": hidden}, "floor_off": {"x": first}})
    assert m["en"]["defaults"]["hit@1"] == 0
    assert m["en"]["defaults"]["empty"] == 1
    assert m["en"]["floor_off"]["hit@1"] == 1
    assert m["en"]["hidden_by_floor"] == 1
    assert m["all"]["fillers_above_answer"]["total"] == 0
    never = item(["hi"], None, [])
    never.id = "n"
    m = everyday.evaluate([never], {"defaults": {"n": hidden}, "floor_off": {"n": first}})
    assert m["never_mentioned"]["defaults"]["empty"] == 1
