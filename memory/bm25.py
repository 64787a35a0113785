"""BM25 over a growing corpus, for the router's keyword path (E-mem's P_kw).

Two interchangeable backends behind :class:`BM25Index`, with the same formula so their
scores agree to float rounding:

- :class:`RankBM25Index` wraps rank-bm25's ``BM25Okapi`` (pure-Python loops over every document
  per query — fine for tests, too slow for the hot path);
- :class:`SparseBM25Index` keeps a scipy sparse matrix of per-(doc, term) BM25 weights and
  answers a query with one sparse mat-vec.

Score of document d for a query q (a token list; repeated tokens count again, as in
rank-bm25 and E-mem)::

    sum over t in q:  idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))

idf, with N documents and df(t) of them holding t (terms absent from the corpus score 0):

- ``"okapi"`` (rank-bm25 ``BM25Okapi``, exactly): ``log(N - df + 0.5) - log(df + 0.5)``; every
  negative value (t in more than half of the documents) becomes ``epsilon * mean idf``, the mean
  taken over the whole vocabulary before the replacement. On tiny corpora that mean is itself
  negative, and so are the scores.
- ``"lucene"`` (E-mem's ``BM25Scorer``): ``max(log(1 + (N - df + 0.5) / (df + 0.5)), epsilon)``,
  always positive. rank-bm25 has no such class; :class:`RankBM25Index` overrides
  ``BM25Okapi._calc_idf`` for it.

Tokens (E-mem's router tokenizer without jieba): lowercase ``\\w+`` runs, minus a small English
stop list and one-character ASCII tokens. :func:`make_tokenizer` adds two options E-mem's code
lacks: question words as stop words (every question has them, no answer needs them) and Porter
stemming (nltk), which together lift routing recall on LoCoMo's train split at every segment size
(docs/results/2026-11-29-episodic.md).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np
from rank_bm25 import BM25Okapi
from scipy import sparse

from core.config import RouterConfig

__all__ = [
    "BM25Factory", "BM25Index", "BM25_SETTINGS", "IdfKind", "QUESTION_WORDS", "RankBM25Index", "STOP_WORDS",
    "SparseBM25Index", "StopList", "bm25_index", "line_terms", "make_tokenizer", "tokenize",
]

IdfKind = Literal["lucene", "okapi"]
StopList = Literal["emem", "questions"]
Tokenizer = Callable[[str], list[str]]

# E-mem's router stop list (create_multilingual_tokenizer, English part).
STOP_WORDS = frozenset(
    "a an and are as at be by for from has he in is it its of on or that the to was were will with "
    "i me my you your we they them their this these".split()
)
# Question and auxiliary words: in nearly every question, never what the answer turns on.
QUESTION_WORDS = frozenset(
    "what which who whom whose where when why how did does do have had would could about".split()
)
STOP_LISTS: dict[str, frozenset[str]] = {"emem": STOP_WORDS, "questions": STOP_WORDS | QUESTION_WORDS}
_WORD_RE = re.compile(r"\w+")


def tokenize(text: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """Lowercase word tokens without stop words or 1-char ASCII tokens.

    ``tokenize("The code is ZX-4471, I said!") == ["code", "zx", "4471", "said"]``
    """
    return [
        t for t in _WORD_RE.findall(text.lower()) if t not in stop_words and not (len(t) == 1 and t.isascii())
    ]


@functools.cache
def porter() -> Callable[[str], str]:
    """nltk's Porter stemmer (what LoCoMo's scorer stems with), each word's stem cached."""
    from nltk.stem import PorterStemmer

    return functools.lru_cache(maxsize=200_000)(PorterStemmer().stem)


def make_tokenizer(stop_words: StopList = "emem", stem: bool = False) -> Tokenizer:
    """The BM25 tokenizer for a stop list and stemming choice (defaults: E-mem's code).

    ``make_tokenizer("questions", stem=True)("What paintings did Mel paint?") == ["paint", "mel", "paint"]``
    """
    stops = STOP_LISTS[stop_words]
    if not stem:
        return functools.partial(tokenize, stop_words=stops)
    return StemmedTokenizer(stops)


class StemmedTokenizer:
    """:func:`tokenize`, then Porter stems (memoised). Picklable: the stemmer is rebuilt after unpickling."""

    def __init__(self, stop_words: Any) -> None:
        self.stop_words = stop_words
        self._stem: Callable[[str], str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"stop_words": self.stop_words, "_stem": None}

    def __call__(self, text: str) -> list[str]:
        if self._stem is None:
            self._stem = porter()
        return [self._stem(t) for t in tokenize(text, self.stop_words)]


class BM25Index(Protocol):
    """Raw BM25 scores over documents added in order: higher = more relevant.

    Scores are not normalised; 0 means no query term occurs in the document (only okapi idf on a
    tiny corpus can make a score negative). ``scores`` returns one float64 per document added so
    far, in add order; an empty index returns an empty array.
    """

    def add(self, docs: Sequence[str]) -> None: ...

    def replace(self, i: int, doc: str | None) -> None:
        """Document ``i`` becomes ``doc``; ``None`` removes it (later documents move up one). Nothing of the old
        text stays in the index (terms no document uses any more leave the vocabulary)."""

    def scores(self, query: str) -> np.ndarray: ...

    def term_idf(self, query: str) -> dict[str, float]:
        """The idf each of the query's terms has in the scores (a term no document holds: 0)."""

    def __len__(self) -> int: ...


class _LuceneBM25(BM25Okapi):
    """``BM25Okapi`` with E-mem's idf: ``max(log(1 + (N - df + 0.5) / (df + 0.5)), epsilon)``."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = max(math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5)), self.epsilon)


class RankBM25Index:
    """rank-bm25 backend: keeps the tokenised corpus and rebuilds ``BM25Okapi`` after an add."""

    def __init__(
        self, *, k1: float, b: float, idf: IdfKind, epsilon: float, tokenizer: Tokenizer = tokenize
    ) -> None:
        self.k1, self.b, self.idf, self.epsilon = k1, b, idf, epsilon
        self.tokenizer = tokenizer
        self._corpus: list[list[str]] = []
        self._bm25: BM25Okapi | None = None

    def __len__(self) -> int:
        return len(self._corpus)

    def add(self, docs: Sequence[str]) -> None:
        self._corpus.extend(self.tokenizer(d) for d in docs)
        self._bm25 = None  # NOTE: N, df and avgdl all change; rebuilt lazily at the next query.

    def replace(self, i: int, doc: str | None) -> None:
        if doc is None:
            del self._corpus[i]
        else:
            self._corpus[i] = self.tokenizer(doc)
        self._bm25 = None

    def scores(self, query: str) -> np.ndarray:
        if not any(self._corpus):  # empty corpus or no tokens: BM25Okapi would divide by zero
            return np.zeros(len(self._corpus))
        return np.asarray(self._built().get_scores(self.tokenizer(query)), dtype=np.float64)

    def term_idf(self, query: str) -> dict[str, float]:
        if not any(self._corpus):
            return dict.fromkeys(self.tokenizer(query), 0.0)
        idf = self._built().idf
        return {t: float(idf.get(t, 0.0)) for t in self.tokenizer(query)}

    def _built(self) -> BM25Okapi:
        if self._bm25 is None:
            cls = _LuceneBM25 if self.idf == "lucene" else BM25Okapi
            self._bm25 = cls(self._corpus, k1=self.k1, b=self.b, epsilon=self.epsilon)
        return self._bm25


class SparseBM25Index:
    """Sparse-matrix backend: term counts grow row by row; BM25 weights are rebuilt after an add.

    A query is its term counts over the vocabulary; its scores are ``W[:, terms] @ counts``.
    """

    def __init__(
        self, *, k1: float, b: float, idf: IdfKind, epsilon: float, tokenizer: Tokenizer = tokenize
    ) -> None:
        self.k1, self.b, self.idf, self.epsilon = k1, b, idf, epsilon
        self.tokenizer = tokenizer
        self._vocab: dict[str, int] = {}
        self._indptr: list[int] = [0]
        self._indices: list[int] = []
        self._counts: list[int] = []
        self._weights: sparse.csc_array | None = None
        self._term_idf = np.zeros(0)  # per vocabulary term, rebuilt with the weights

    def __len__(self) -> int:
        return len(self._indptr) - 1

    def add(self, docs: Sequence[str]) -> None:
        for doc in docs:
            for term, count in Counter(self.tokenizer(doc)).items():
                self._indices.append(self._vocab.setdefault(term, len(self._vocab)))
                self._counts.append(count)
            self._indptr.append(len(self._indices))
        self._weights = None  # NOTE: N, df and avgdl all change; rebuilt lazily at the next query.

    def replace(self, i: int, doc: str | None) -> None:
        start, stop = self._indptr[i], self._indptr[i + 1]
        terms = Counter(self.tokenizer(doc)) if doc is not None else Counter()
        new_indices = [self._vocab.setdefault(t, len(self._vocab)) for t in terms]
        self._indices[start:stop] = new_indices
        self._counts[start:stop] = list(terms.values())
        shift = len(new_indices) - (stop - start)
        tail = [p + shift for p in self._indptr[i + 1 :]]
        self._indptr[i + 1 :] = tail[1:] if doc is None else tail
        # NOTE: drop the terms no document holds any more: the vocabulary must not keep a removed text's words
        used = sorted(set(self._indices))
        if len(used) < len(self._vocab):
            remap = {old: new for new, old in enumerate(used)}
            self._vocab = {t: remap[j] for t, j in self._vocab.items() if j in remap}
            self._indices = [remap[j] for j in self._indices]
        self._weights = None

    def scores(self, query: str) -> np.ndarray:
        n = len(self)
        counts = Counter(t for t in self.tokenizer(query) if t in self._vocab)
        if n == 0 or not self._counts or not counts:
            return np.zeros(n)
        weights = self._weights if self._weights is not None else self._build()
        cols = np.fromiter((self._vocab[t] for t in counts), dtype=np.int64, count=len(counts))
        q = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        return np.asarray(weights[:, cols] @ q, dtype=np.float64)

    def term_idf(self, query: str) -> dict[str, float]:
        terms = self.tokenizer(query)
        if not len(self) or not self._counts:
            return dict.fromkeys(terms, 0.0)
        if self._weights is None or len(getattr(self, "_term_idf", ())) != len(self._vocab):  # NOTE: older snapshots
            self._build()
        return {t: float(self._term_idf[j]) if (j := self._vocab.get(t)) is not None else 0.0 for t in terms}

    def _idf(self, df: np.ndarray, n_docs: int) -> np.ndarray:
        if self.idf == "lucene":
            return np.maximum(np.log(1 + (n_docs - df + 0.5) / (df + 0.5)), self.epsilon)
        idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        return np.where(idf < 0, self.epsilon * idf.mean(), idf)

    def _build(self) -> sparse.csc_array:
        n, vocab = len(self), len(self._vocab)
        indptr = np.asarray(self._indptr, dtype=np.int64)
        indices = np.asarray(self._indices, dtype=np.int64)
        tf = np.asarray(self._counts, dtype=np.float64)
        rows = np.repeat(np.arange(n), np.diff(indptr))
        doc_len = np.bincount(rows, weights=tf, minlength=n)
        avgdl = doc_len.sum() / n
        idf = self._term_idf = self._idf(np.bincount(indices, minlength=vocab).astype(np.float64), n)
        norm = self.k1 * (1 - self.b + self.b * doc_len / avgdl)
        data = idf[indices] * tf * (self.k1 + 1) / (tf + norm[rows])
        self._weights = sparse.csr_array((data, indices, indptr), shape=(n, vocab)).tocsc()
        return self._weights


# Called as ``factory(k1=..., b=..., idf=..., epsilon=..., tokenizer=...)`` (either backend above).
BM25Factory = Callable[..., BM25Index]
# The router settings an index built by :func:`bm25_index` reads (what a baseline that borrows it depends on).
BM25_SETTINGS = ("bm25_k1", "bm25_b", "bm25_idf", "bm25_epsilon", "bm25_stop_words", "bm25_stem")


def line_terms(config: RouterConfig) -> Callable[[str], list[str]]:
    """The router's BM25 tokenizer (stop words, stemming): the words a question and a line share."""
    return make_tokenizer(config.bm25_stop_words, config.bm25_stem)


def bm25_index(config: RouterConfig, factory: BM25Factory = SparseBM25Index) -> BM25Index:
    """An empty BM25 index with the router's settings (the router's keyword paths and the plain-RAG baseline)."""
    return factory(
        k1=config.bm25_k1, b=config.bm25_b, idf=config.bm25_idf, epsilon=config.bm25_epsilon,
        tokenizer=line_terms(config),
    )
