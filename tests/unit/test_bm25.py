"""BM25 backends: the sparse-matrix index against rank-bm25 (the reference), both idf variants."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from core.config import RouterConfig
from memory.bm25 import RankBM25Index, SparseBM25Index, make_tokenizer, tokenize

CORPUS = [
    "[8 May, 2023] Caroline: I went to the LGBTQ support group yesterday.",
    "[8 May, 2023] Melanie: Painting a sunrise over the lake, my kids love it.",
    "[9 May, 2023] Caroline: My ticket number is ZX-4471, booked for Paris.",
    "[9 May, 2023] Melanie: The kids and I went camping by the lake again.",
    "[9 May, 2023] Caroline: Counseling and mental health careers interest me.",
    "",
]
QUERIES = [
    "ticket ZX-4471", "lake kids camping", "support group Caroline", "May", "nothing matches", "",
    "kids kids",
]


def make(cls, idf: str, **overrides):
    cfg = RouterConfig(bm25_idf=idf, **overrides)
    return cls(k1=cfg.bm25_k1, b=cfg.bm25_b, idf=cfg.bm25_idf, epsilon=cfg.bm25_epsilon)


def both(idf: str, docs: list[str]):
    ref, fast = make(RankBM25Index, idf), make(SparseBM25Index, idf)
    ref.add(docs)
    fast.add(docs)
    return ref, fast


def test_tokenizer_options():
    question = "What paintings did Melanie make?"
    assert make_tokenizer()(question) == tokenize(question) == ["what", "paintings", "did", "melanie", "make"]
    assert make_tokenizer("questions")(question) == ["paintings", "melanie", "make"]
    assert make_tokenizer("questions", stem=True)(question) == ["paint", "melani", "make"]
    # Stemming lets an inflected question term reach the document's form.
    stemmed = SparseBM25Index(k1=1.5, b=0.75, idf="lucene", epsilon=0.25, tokenizer=make_tokenizer(stem=True))
    plain = make(SparseBM25Index, "lucene")
    for index in (stemmed, plain):
        index.add(["Melanie paints sunsets", "Caroline went hiking"])
    assert stemmed.scores("painting")[0] > 0 and plain.scores("painting")[0] == 0


def test_tokenize():
    assert tokenize("The code is ZX-4471, I said!") == ["code", "zx", "4471", "said"]
    assert tokenize("What did Caroline do on 8 May?") == ["what", "did", "caroline", "do", "may"]
    assert tokenize("") == []


@pytest.mark.parametrize("idf", ["lucene", "okapi"])
def test_small_corpus_agrees_with_rank_bm25(idf):
    ref, fast = both(idf, CORPUS)
    assert len(ref) == len(fast) == len(CORPUS)
    for q in QUERIES:
        expected = ref.scores(q)
        got = fast.scores(q)
        assert got.shape == (len(CORPUS),)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # The exact code scores only where it occurs.
    s = fast.scores("ZX-4471")
    assert np.argmax(s) == 2 and s[2] > 0 and np.count_nonzero(s) == 1


def test_lucene_value_by_hand():
    docs = ["apple banana", "apple cherry cherry", "durian"]
    index = make(SparseBM25Index, "lucene")
    index.add(docs)
    n, df, k1, b = 3, 1, 1.5, 0.75
    avgdl = (2 + 3 + 1) / 3
    idf = max(math.log(1 + (n - df + 0.5) / (df + 0.5)), 0.25)
    tf, dl = 2, 3
    expected = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
    assert index.scores("cherry")[1] == pytest.approx(expected, rel=1e-12)
    assert index.scores("cherry")[[0, 2]].tolist() == [0.0, 0.0]


def test_okapi_negative_idf_uses_epsilon_times_mean():
    # 'common' is in 3 of 4 docs: log(1.5) - log(3.5) < 0, replaced by 0.25 * mean idf.
    docs = ["common alpha", "common beta", "common gamma", "delta"]
    ref, fast = both("okapi", docs)
    np.testing.assert_allclose(fast.scores("common"), ref.scores("common"), rtol=1e-12)
    assert fast.scores("common")[0] > 0  # mean idf is positive here, so is the floor


def random_docs(rng: random.Random, n: int, vocab: list[str]) -> list[str]:
    weights = [1 / (r + 1) for r in range(len(vocab))]  # Zipf-like: some words in most docs
    return [" ".join(rng.choices(vocab, weights, k=rng.randint(0, 40))) for _ in range(n)]


@pytest.mark.parametrize("idf", ["lucene", "okapi"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_corpus_agrees_incrementally(idf, seed):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(300)]
    ref, fast = make(RankBM25Index, idf), make(SparseBM25Index, idf)
    for _ in range(4):  # segments arrive over time: add, query, add more, query again
        docs = random_docs(rng, rng.randint(1, 60), vocab)
        ref.add(docs)
        fast.add(docs)
        for _ in range(25):
            q = " ".join(rng.choices(vocab[:120], k=rng.randint(1, 6)))
            expected, got = ref.scores(q), fast.scores(q)
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
            # Same ranking (ties broken by document order in both).
            key = np.round(expected, 9)
            assert np.array_equal(np.lexsort((np.arange(len(key)), -key)),
                                  np.lexsort((np.arange(len(key)), -np.round(got, 9))))


@pytest.mark.parametrize("cls", [RankBM25Index, SparseBM25Index])
def test_incremental_equals_batch(cls):
    docs = random_docs(random.Random(7), 50, [f"w{i}" for i in range(80)])
    once, stepwise = make(cls, "lucene"), make(cls, "lucene")
    once.add(docs)
    for i in range(0, 50, 7):
        stepwise.add(docs[i : i + 7])
    for q in ["w1 w2", "w50 w3 w3", "w79"]:
        np.testing.assert_allclose(stepwise.scores(q), once.scores(q), rtol=1e-12)


@pytest.mark.parametrize("cls", [RankBM25Index, SparseBM25Index])
def test_empty_index_and_empty_docs(cls):
    index = make(cls, "okapi")
    assert index.scores("anything").shape == (0,)
    index.add(["", "the a of"])  # nothing but stop words
    assert index.scores("anything").tolist() == [0.0, 0.0]


def test_config_parameters_are_used():
    docs = ["apple apple apple banana", "apple"]
    plain, flat = make(SparseBM25Index, "lucene"), make(SparseBM25Index, "lucene", bm25_b=0.0)
    plain.add(docs)
    flat.add(docs)
    assert not np.allclose(plain.scores("apple"), flat.scores("apple"))


@pytest.mark.parametrize("cls", [RankBM25Index, SparseBM25Index])
def test_replacing_and_removing_documents_equals_building_without_them(cls):
    rng = random.Random(3)
    docs = random_docs(rng, 20, [f"w{i}" for i in range(40)])
    docs[5] += " secretword"
    edited = make(cls, "lucene")
    edited.add(docs)
    edited.replace(5, "w1 w2 w3")  # the only document with "secretword"
    edited.replace(9, None)
    edited.replace(0, None)
    want = [d for i, d in enumerate(docs) if i not in (0, 9)]
    want[4] = "w1 w2 w3"
    fresh = make(cls, "lucene")
    fresh.add(want)
    assert len(edited) == len(fresh) == 18
    for q in ["w1 w2", "w30 w3 w3", "secretword", "w39 w0"]:
        np.testing.assert_allclose(edited.scores(q), fresh.scores(q), rtol=1e-12)
    if cls is SparseBM25Index:  # nothing of a removed text stays in the vocabulary
        assert "secretword" not in edited._vocab and sorted(edited._vocab) == sorted(fresh._vocab)


@pytest.mark.parametrize("idf", ["lucene", "okapi"])
def test_term_idf_is_the_idf_the_scores_use(idf):
    ref, fast = both(idf, CORPUS)
    query = "kids lake ZX-4471 unknownword"
    got, expected = fast.term_idf(query), ref.term_idf(query)
    assert got.keys() == expected.keys() == set(tokenize(query))
    assert got == pytest.approx(expected, rel=1e-12) and got["unknownword"] == 0.0
    assert got["zx"] > got["kids"] > 0  # rarer terms weigh more
    fast.replace(2, None)  # the only document with the ticket number goes: so does its idf
    assert fast.term_idf("ZX-4471") == {"zx": 0.0, "4471": 0.0}
    assert make(SparseBM25Index, idf).term_idf("kids") == {"kids": 0.0}
