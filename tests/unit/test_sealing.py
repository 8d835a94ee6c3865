"""Sealing a user's text (app/core/sealing.py): it opens under its key and place only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core import sealing

KEY = bytes(range(32))
WHERE = sealing.place("acme", "ana", "7f0c", "content")


@given(st.binary(max_size=2000))
def test_a_sealed_value_opens_under_its_key_and_place(plaintext: bytes) -> None:
    token = sealing.seal(KEY, plaintext, WHERE)
    assert sealing.open_sealed(KEY, token, WHERE) == plaintext


def test_the_text_is_not_in_the_sealed_value_and_each_seal_differs() -> None:
    one = sealing.seal(KEY, b"MARKER-4711 my secret", WHERE)
    two = sealing.seal(KEY, b"MARKER-4711 my secret", WHERE)
    assert "MARKER" not in one
    assert one != two  # a fresh nonce each time


def test_another_key_does_not_open_it() -> None:
    token = sealing.seal(KEY, b"hello", WHERE)
    with pytest.raises(sealing.SealBroken):
        sealing.open_sealed(sealing.new_key(), token, WHERE)


@pytest.mark.parametrize(
    "where",
    [
        sealing.place("acme", "ana", "7f0c", "metadata"),  # another field
        sealing.place("acme", "ana", "7f0d", "content"),  # another point
        sealing.place("acme", "bob", "7f0c", "content"),  # another user
        sealing.place("acme/ana", "", "7f0c", "content"),  # the same characters, split apart
    ],
)
def test_it_does_not_open_in_another_place(where: bytes) -> None:
    token = sealing.seal(KEY, b"hello", WHERE)
    with pytest.raises(sealing.SealBroken):
        sealing.open_sealed(KEY, token, where)


def test_an_altered_value_does_not_open() -> None:
    import base64

    token = sealing.seal(KEY, b"hello world", WHERE)
    raw = bytearray(base64.b64decode(token.removeprefix(sealing.PREFIX)))
    for i in (0, 12, len(raw) - 1):  # the nonce, the ciphertext, the tag
        bad = bytearray(raw)
        bad[i] ^= 1
        altered = sealing.PREFIX + base64.b64encode(bytes(bad)).decode()
        with pytest.raises(sealing.SealBroken):
            sealing.open_sealed(KEY, altered, WHERE)
    for junk in ("hello", sealing.PREFIX + "!!", sealing.PREFIX + "AAAA"):
        with pytest.raises(sealing.SealBroken):
            sealing.open_sealed(KEY, junk, WHERE)


def test_within_is_place_for_a_point_and_a_field() -> None:
    pid = "3f2a0c7e-1111-2222-3333-444455556666"
    owner = sealing.place("acme/x", "ana b")
    assert sealing.within(owner, pid, "content") == sealing.place("acme/x", "ana b", pid, "content")


def test_a_tag_is_the_same_for_the_same_value_key_and_place_only() -> None:
    sealer = sealing.Sealer(KEY)
    same = sealer.tag(b'"gear"', WHERE)
    assert same == sealing.Sealer(KEY).tag(b'"gear"', WHERE)
    assert "gear" not in same
    assert same != sealer.tag(b'"food"', WHERE)
    assert same != sealer.tag(b'"gear"', sealing.place("acme", "bob", "7f0c", "content"))
    assert same != sealing.Sealer(sealing.new_key()).tag(b'"gear"', WHERE)


def test_a_keyed_term_id_is_never_a_plain_one_and_needs_the_key() -> None:
    sealer = sealing.Sealer(KEY)
    where = sealing.place("acme", "ana") + b"/sparse"
    plain = [0, 1, 12345, 2**31 - 1]  # term ids have 31 bits (app/core/terms.py)
    keyed = [sealer.term(i, where) for i in plain]
    assert all(k >= sealing.KEYED_TERM and k < 2**32 for k in keyed)
    assert keyed == [sealing.Sealer(KEY).term(i, where) for i in plain]
    assert len(set(keyed)) == len(plain)
    assert keyed != [sealing.Sealer(sealing.new_key()).term(i, where) for i in plain]
    other = sealing.place("acme", "bob") + b"/sparse"
    assert keyed != [sealer.term(i, other) for i in plain]
