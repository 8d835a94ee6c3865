"""The compact segmenter cuts as jieba does over its own dictionary: the sparse vectors
already stored were made by jieba, and a query must find their terms."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from functools import cache
from pathlib import Path

import jieba
import jieba.posseg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import rewrite
from app.core.segmenter import CompactTokenizer

ROOT = Path(__file__).resolve().parents[2]

SENTENCES = [
    "我下个月要去北京出差，顺便吃北京烤鸭。",
    "航班改成周五下午三点，不再是周四了。",
    "她在上海交通大学读研究生，专业是计算机科学与技术。",
    "小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
    "我们把预订换成了靠窗的双人桌，取消了原来的包间",
    "结婚的和尚未结婚的",
    "他说的确实在理",
    "工信处女干事每月经过下属科室都要亲口交代24口交换机等技术性器件的安装工作",
    "永和服装饰品有限公司",
    "我爱Python和机器学习，也喜欢看《三体》",
    "玛丽亚明天到，记得去机场接她",
    "",
    "嗯",
    "好的好的好的好的好的好的好的好的好的好的好的",
]


@cache
def reference() -> jieba.Tokenizer:
    tok = jieba.Tokenizer()
    tok.initialize()
    return tok


@cache
def compact() -> CompactTokenizer:
    tok = CompactTokenizer()
    tok.initialize()
    return tok


def _corpus() -> list[str]:
    texts = list(SENTENCES)
    data = json.loads((ROOT / "bench/data/bilingual_dev.json").read_text(encoding="utf-8"))

    def walk(node: object) -> None:
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    rng = random.Random(7)
    han = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(6000))
    texts += [han[i : i + rng.randint(2, 200)] for i in range(0, len(han), 120)]
    return texts


def test_search_mode_and_accurate_mode_cut_as_jieba_does() -> None:
    # With the dictionary's longest words too: the prefix search is cut at their length.
    longest = sorted((w for w, n in reference().FREQ.items() if n > 0), key=len)[-30:]
    corpus = _corpus() + [f"我们{w}的{w[:-1]}" for w in longest]
    assert sum(any("\u4e00" <= c <= "\u9fff" for c in t) for t in corpus) > 150
    for text in corpus:
        assert compact().lcut_for_search(text) == reference().lcut_for_search(text), text
        assert compact().lcut(text) == reference().lcut(text), text
        assert compact().lcut(text, HMM=False) == reference().lcut(text, HMM=False), text


@cache
def _words() -> list[str]:
    return sorted(w for w, n in reference().FREQ.items() if n > 0 and len(w) > 1)[::6]


@settings(max_examples=150)
@given(st.data())
def test_runs_of_dictionary_words_and_their_pieces_cut_as_jieba_does(data: st.DataObject) -> None:
    # Dictionary words, and their halves, back to back: where longest-match ties and the
    # HMM's unknown runs are decided.
    words = _words()
    pieces = data.draw(
        st.lists(st.tuples(st.integers(0, len(words) - 1), st.booleans()), min_size=1, max_size=12)
    )
    text = "".join(
        words[i][: max(1, len(words[i]) // 2)] if half else words[i] for i, half in pieces
    )
    assert compact().lcut_for_search(text) == reference().lcut_for_search(text)


def test_the_service_tagger_tags_as_jiebas_own_over_its_dictionary() -> None:
    theirs = jieba.posseg.POSTokenizer(reference())
    ours = rewrite._pos_tagger()
    assert isinstance(ours.tokenizer, CompactTokenizer)
    for text in SENTENCES + _corpus()[-3:]:
        assert [(p.word, p.flag) for p in ours.cut(text)] == [
            (p.word, p.flag) for p in theirs.cut(text)
        ], text
    tags = compact().word_tags()
    for word, tag in theirs.word_tag_tab.items():  # every word of the dictionary
        assert tags.get(word, "x") == tag, word
    assert len(tags) == len(theirs.word_tag_tab)
    assert tags.get("鸭烤京北", "x") == "x"


def test_counts_read_as_jiebas_freq_for_every_word_and_no_other_text() -> None:
    freq = reference().FREQ
    counts = compact().FREQ
    words = [w for w, n in freq.items() if n > 0]
    assert len(counts) == len(words)
    for word in random.Random(3).sample(sorted(words), 5000):
        assert counts.get(word) == counts[word] == freq[word], word
        assert word in counts
    # jieba keeps a word's proper prefixes at 0 for its DAG scan; read as jieba's callers
    # read them (is the count non-zero?), they and any other text are not words.
    prefixes = [w for w, n in freq.items() if n == 0][:2000]
    for text in [*prefixes, "", "Lisbon", "鸭烤京北", "\U0001f600"]:
        assert not freq.get(text), text
        assert not counts.get(text), text
        assert text not in counts, text
        assert counts.get(text, 1) == 1
    with pytest.raises(KeyError):
        counts["鸭烤京北"]
    assert compact().total == reference().total


def test_the_dictionary_is_static() -> None:
    with pytest.raises(NotImplementedError):
        compact().add_word("斯特拉塔", 10)
    with pytest.raises(NotImplementedError):
        CompactTokenizer().initialize("/tmp/another-dict.txt")
    assert compact().lcut("斯特拉塔") == reference().lcut("斯特拉塔")


def test_the_service_never_loads_jiebas_own_dictionary() -> None:
    """Segmenting, and the part-of-speech tagger of a Chinese rewrite, go through the
    compact dictionary: jieba's default (~60 MiB) stays unbuilt."""
    code = (
        "import jieba\n"
        "from app.core import rewrite, terms\n"
        "terms.warm_up()\n"
        "assert terms.tokenize('我下个月去北京出差') == ['下个月', '去', '北京', '出差']\n"
        "assert rewrite.unknown_entities('玛丽亚明天到', '') == ['玛丽亚']\n"
        "assert not jieba.dt.initialized, 'jieba built its own dictionary'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
