"""Offline extraction (app/core/entities.py): what first-person turns state, in English and
Chinese, and nothing from questions, wishes, negations or other people's words."""

from __future__ import annotations

import pytest

from app.core.entities import USER, Extraction, extract, kind_of, resolve


def triples(found: Extraction) -> set[tuple[str, str, str]]:
    return {(f.subject, f.predicate, f.object) for f in found.facts}


def names(found: Extraction) -> set[str]:
    return {m.name for m in found.mentions}


def test_the_issue_turns() -> None:
    english = extract("My sister Clara lives in Toronto and works at Shopify.")
    assert triples(english) == {
        (USER, "sister", "Clara"),
        ("Clara", "lives_in", "Toronto"),
        ("Clara", "works_at", "Shopify"),
    }
    assert names(english) == {"Clara", "Toronto", "Shopify"}
    chinese = extract("我妹妹晓棠在南京读研。")
    assert triples(chinese) == {(USER, "sister", "晓棠"), ("晓棠", "studies_in", "南京")}
    assert names(chinese) == {"晓棠", "南京"}
    diet = extract("I am vegetarian and allergic to peanuts.")
    assert triples(diet) == {(USER, "diet", "vegetarian"), (USER, "allergic_to", "peanuts")}
    assert {f.statement for f in diet.facts} == {
        "The user is vegetarian.",
        "The user is allergic to peanuts.",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I live in Lisbon.", {(USER, "lives_in", "Lisbon")}),
        ("I moved to Porto last month.", {(USER, "lives_in", "Porto")}),
        ("我住在上海。", {(USER, "lives_in", "上海")}),
        ("我搬到了杭州。", {(USER, "lives_in", "杭州")}),
        ("My partner's name is Tomas.", {(USER, "partner", "Tomas")}),
        ("We adopted a beagle called Pixel.", {(USER, "owns", "Pixel")}),
        ("My dog Pixel hates the vacuum.", {(USER, "owns", "Pixel")}),
        ("我的狗叫豆豆。", {(USER, "owns", "豆豆")}),
        ("我对花生过敏。", {(USER, "allergic_to", "花生")}),
        ("我吃素。", {(USER, "diet", "vegetarian")}),
        ("I don't eat pork.", {(USER, "avoids", "pork")}),
        ("I can't stand cilantro.", {(USER, "dislikes", "cilantro")}),
        ("I prefer tea over coffee.", {(USER, "prefers", "tea")}),
        ("我不喜欢香菜。", {(USER, "dislikes", "香菜")}),
        (
            "I speak Portuguese and a little French.",
            {(USER, "speaks", "Portuguese"), (USER, "speaks", "French")},
        ),
        ("我会说英语和法语。", {(USER, "speaks", "英语"), (USER, "speaks", "法语")}),
        (
            "I'm a nurse at St Mary's Hospital.",
            {(USER, "works_as", "nurse"), (USER, "works_at", "St Mary's Hospital")},
        ),
        (
            "我住在上海，在腾讯做产品经理。",
            {
                (USER, "lives_in", "上海"),
                (USER, "works_at", "腾讯"),
                (USER, "works_as", "产品经理"),
            },
        ),
        (
            "My sister Clara moved to Toronto. She works at Shopify.",
            {
                (USER, "sister", "Clara"),
                ("Clara", "lives_in", "Toronto"),
                ("Clara", "works_at", "Shopify"),
            },
        ),
        ("Clara is my sister.", {(USER, "sister", "Clara")}),
        ("晓棠也叫Xiaotang。", {("晓棠", "also_known_as", "Xiaotang")}),
        (
            "My colleague Su Rui (Rui) joined last week.",
            {(USER, "colleague", "Su Rui"), ("Su Rui", "also_known_as", "Rui")},
        ),
    ],
)
def test_first_person_statements(text: str, expected: set[tuple[str, str, str]]) -> None:
    assert triples(extract(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        # questions
        "Does my brother still live in Madrid?",
        "Can you recommend a restaurant in Porto?",
        "你知道南京有什么好吃的吗？",
        "我是不是对花生过敏？",
        # wishes, plans, hypotheticals
        "If I moved to Berlin I would need a new job.",
        "I'm thinking about moving to Vancouver.",
        "I'd love to live in Kyoto someday.",
        "如果我搬到深圳，工作会更好找吗？",
        "我打算明年搬到广州。",
        # negations
        "I don't live in Paris anymore.",
        "I never lived in London.",
        "I'm not allergic to anything.",
        "我不住在北京。",
        "我没在百度工作过。",
        "我不对花生过敏。",
        # other people's words, other people's relatives
        "My friend said she lives in Paris now.",
        "Clara told me she works at Google now.",
        "她说她住在西安。",
        "小明说我住在杭州。",
        "Tom is my sister's husband.",
        "My sister's dog Rex is huge.",
        # nothing stated
        "Thanks, that was really helpful!",
        "I like that idea.",
        "I love you, thanks for the help.",
        "我喜欢你。",
    ],
)
def test_nothing_from_what_is_no_statement_of_the_user(text: str) -> None:
    assert extract(text).facts == ()


def test_my_friends_sister_is_not_my_sister() -> None:
    found = extract("My friend's sister Clara is a doctor.")
    assert all(f.subject != USER for f in found.facts)
    found = extract("我朋友的妹妹晓雨在复旦读书。")
    assert (USER, "sister", "晓雨") not in triples(found)
    assert (USER, "friend", "晓雨") not in triples(found)


def test_kinds() -> None:
    assert kind_of(USER, "sister") == "family"
    assert kind_of(USER, "colleague") == "people"
    assert kind_of(USER, "lives_in") == "residence"
    assert kind_of("Clara", "lives_in") == "others"
    assert kind_of("晓棠", "also_known_as") == "alias"
    found = extract("My sister Clara lives in Toronto.")
    only_family = found.only(["family"])
    assert triples(only_family) == {(USER, "sister", "Clara")}
    assert names(only_family) == {"Clara"}  # Toronto is named by no kept relation


def test_free_mentions_only_when_on() -> None:
    found = extract("Yesterday I had lunch with Marco at Nopa.")
    assert found.facts == ()
    assert names(found) == {"Marco", "Nopa"}
    assert names(found.only(["family", "residence"])) == set()
    assert names(found.only(["mentions"])) == {"Marco", "Nopa"}


def test_names_resolve_to_the_users_entities() -> None:
    known = {"su rui": "Su Rui", "晓棠": "晓棠", "xiaotang": "晓棠"}
    found = resolve(extract("My colleague Rui lives in Shanghai."), known)
    assert triples(found) == {(USER, "colleague", "Su Rui"), ("Su Rui", "lives_in", "Shanghai")}
    found = resolve(extract("My sister Xiaotang moved to Nanjing."), known)
    assert (USER, "sister", "晓棠") in triples(found)
    # Two people with that word in their name: no guess.
    ambiguous = {"su rui": "Su Rui", "li rui": "Li Rui"}
    found = resolve(extract("My colleague Rui lives in Shanghai."), ambiguous)
    assert (USER, "colleague", "Rui") in triples(found)
