"""Sparse term weights for Chinese and English."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.core import terms


def test_english_is_lowercased_stemmed_and_stopworded() -> None:
    assert terms.tokenize("The Cats were RUNNING to their groups!") == ["cat", "run", "group"]


def test_chinese_is_segmented_into_words() -> None:
    tokens = terms.tokenize("我喜欢吃北京烤鸭")
    assert "北京" in tokens
    assert "烤鸭" in tokens
    assert "的" not in terms.tokenize("我的猫")
    # A part of a compound finds the compound.
    doc = terms.document_vector("我喜欢吃北京烤鸭")
    assert set(terms.query_vector("烤鸭").indices) <= set(doc.indices)


def test_chinese_pronouns_and_question_words_are_not_terms_as_in_english() -> None:
    """A Chinese question shares 我 with nearly every turn its user wrote, as an English one
    would share "my" if it were a term: both lists drop them, so a question about something
    never mentioned matches nothing by them."""
    assert terms.tokenize("我的牙医叫什么？") == ["牙医", "叫"]
    assert terms.tokenize("What is my dentist's name?") == ["dentist", "name"]
    assert terms.tokenize("我们什么时候去厦门？") == ["去", "厦门"]
    assert terms.tokenize("他有几个孩子？") == ["孩子"]
    assert not set(terms.query_vector("我搬到哪个城市了？").indices) & set(
        terms.document_vector("我很喜欢这里的海鲜。").indices
    )


def test_mixed_text_keeps_both_languages() -> None:
    tokens = terms.tokenize("明天在Lisbon开会meeting")
    assert "lisbon" in tokens
    assert "meet" in tokens
    assert "开会" in tokens


def test_document_and_query_share_term_ids() -> None:
    doc = terms.document_vector("I adopted a puppy in Lisbon")
    query = terms.query_vector("puppies Lisbon")
    assert set(query.indices) <= set(doc.indices)
    assert query.values == [1.0] * len(query.indices)


def test_context_terms_weigh_less_than_the_turn() -> None:
    vec = terms.document_vector("yes it was great", ["did you like the concert"])
    weights = dict(zip(vec.indices, vec.values, strict=True))
    assert weights[terms.term_id("concert")] < weights[terms.term_id("great")]


def test_repeated_terms_saturate() -> None:
    once = terms.document_vector("pizza")
    many = terms.document_vector("pizza pizza pizza pizza pizza pizza pizza pizza")
    assert many.values[0] > once.values[0]
    assert many.values[0] < (terms.BM25_K1 + 1)


@given(st.text(max_size=200))
def test_vectors_are_well_formed(text: str) -> None:
    vec = terms.document_vector(text)
    assert vec.indices == sorted(set(vec.indices))
    assert all(0 <= i < 2**31 for i in vec.indices)
    assert all(v > 0 for v in vec.values)
    assert len(vec.indices) == len(vec.values)
