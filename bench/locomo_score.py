"""LoCoMo answer scoring: the official scorer and E-mem's variant.

Official (snap-research/LoCoMo ``task_eval/evaluation.py``, ``eval_question_answering``):

- normalise: drop ``,``; lowercase; strip ASCII punctuation (``string.punctuation``);
  replace the words a/an/the/and by spaces; collapse whitespace — in that order;
- Porter-stem every token (nltk's ``PorterStemmer``, default mode) and take the
  token-multiset F1;
- category 1: split gold and prediction on ``,``; mean over gold parts of the best F1
  against any predicted part;
- categories 2 and 4: F1 of the whole strings; category 3: gold is the text before ``;``;
- category 5: 1 if the lowercased prediction contains "not mentioned" or
  "no information available", else 0 (the gold answer is not read).

E-mem (dog-last/E-mem ``evaluation/locomo/utils.py`` and ``eval_locomo.py``): lowercase,
delete every ``[^\\w\\s]`` character, drop a/an/the (not "and"), no stemming, no comma split,
no ``;`` cut; when either side has no tokens the score is 1 if both are empty, else 0;
category 5 is scored by F1 against "Not mentioned in the conversation", except for the
items that carry a real answer next to the adversarial one (two in conv-26), which E-mem
scores against that answer.

Report the official scorer first and E-mem's as a secondary column (REFERENCE.md).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "ADVERSARIAL_CATEGORY",
    "CATEGORIES",
    "EMEM_NOT_MENTIONED",
    "Scorer",
    "OFFICIAL_ABSTAIN_PHRASES",
    "ScoreSummary",
    "aggregate",
    "emem_f1",
    "emem_normalize",
    "official_f1",
    "official_normalize",
    "token_f1",
]

CATEGORIES = (1, 2, 3, 4, 5)  # 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial
MULTI_HOP_CATEGORY = 1
OPEN_DOMAIN_CATEGORY = 3
ADVERSARIAL_CATEGORY = 5
OFFICIAL_ABSTAIN_PHRASES = ("no information available", "not mentioned")
EMEM_NOT_MENTIONED = "Not mentioned in the conversation"
STEM_CACHE_SIZE = 1 << 16

_PUNCT = frozenset(string.punctuation)
_OFFICIAL_DROP_WORDS = re.compile(r"\b(a|an|the|and)\b")
_EMEM_DROP_WORDS = re.compile(r"\b(a|an|the)\b")
_EMEM_NON_WORD = re.compile(r"[^\w\s]")


@lru_cache(maxsize=1)
def _stemmer():
    # NOTE: imported lazily so that loading this module stays cheap.
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=STEM_CACHE_SIZE)
def _stem(token: str) -> str:
    return _stemmer().stem(token)


def official_normalize(text: str) -> str:
    """LoCoMo's ``normalize_answer``: ``official_normalize("The Cat, and a Dog!") == "cat dog"``"""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _OFFICIAL_DROP_WORDS.sub(" ", text)
    return " ".join(text.split())


def emem_normalize(text: str) -> str:
    """E-mem's ``normalize_answer``: ``emem_normalize("The cat and a dog!") == "cat and dog"``"""
    text = _EMEM_NON_WORD.sub("", str(text).lower())
    text = _EMEM_DROP_WORDS.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    """Multiset F1 of two token lists: ``token_f1(["a", "b"], ["b", "c", "d"]) == 0.4``"""
    same = sum((Counter(prediction_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(prediction_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _official_tokens(text: str) -> list[str]:
    return [_stem(w) for w in official_normalize(text).split()]


def _official_pair_f1(prediction: str, gold: str) -> float:
    return token_f1(_official_tokens(prediction), _official_tokens(gold))


def official_f1(prediction: str, answer: str, category: int) -> float:
    """Score one prediction with the official LoCoMo rules for its category."""
    prediction, answer = str(prediction), str(answer)
    if category == ADVERSARIAL_CATEGORY:
        lowered = prediction.lower()
        return float(any(phrase in lowered for phrase in OFFICIAL_ABSTAIN_PHRASES))
    if category == MULTI_HOP_CATEGORY:
        predictions = [p.strip() for p in prediction.split(",")]
        golds = [g.strip() for g in answer.split(",")]
        return sum(max(_official_pair_f1(p, g) for p in predictions) for g in golds) / len(golds)
    if category == OPEN_DOMAIN_CATEGORY:
        answer = answer.split(";")[0].strip()
    elif category not in CATEGORIES:
        raise ValueError(f"unknown LoCoMo category {category!r}; expected one of {CATEGORIES}")
    return _official_pair_f1(prediction, answer)


def emem_f1(prediction: str, answer: str, category: int) -> float:
    """Score one prediction the way E-mem's evaluation does.

    For category 5 pass the file's ``answer`` ("" when absent, as the loader gives it): the
    reference is that answer when there is one, else :data:`EMEM_NOT_MENTIONED`.
    """
    if category not in CATEGORIES:
        raise ValueError(f"unknown LoCoMo category {category!r}; expected one of {CATEGORIES}")
    reference = str(answer)
    if category == ADVERSARIAL_CATEGORY and not reference:
        reference = EMEM_NOT_MENTIONED
    pred_tokens = emem_normalize(prediction).split()
    gold_tokens = emem_normalize(reference).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return token_f1(pred_tokens, gold_tokens)


# (prediction, answer, category) -> score in [0, 1]; official_f1 and emem_f1 fit.
Scorer = Callable[[str, str, int], float]


@dataclass(frozen=True)
class ScoreSummary:
    """Per-category means and micro averages; a mean over no items is ``nan``."""

    per_category: dict[int, float]
    counts: dict[int, int]
    overall: float
    overall_without_adversarial: float
    n: int

    def as_dict(self) -> dict:
        return {
            "per_category": dict(self.per_category),
            "counts": dict(self.counts),
            "overall": self.overall,
            "overall_without_adversarial": self.overall_without_adversarial,
            "n": self.n,
        }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def aggregate(scored: Iterable[tuple[int, float]]) -> ScoreSummary:
    """Aggregate ``(category, score)`` pairs: per-category means, overall micro averages.

    ``aggregate([(1, 1.0), (1, 0.0), (5, 1.0)])``: category 1 → 0.5, category 5 → 1.0,
    overall 2/3, overall without category 5 → 0.5.
    """
    by_cat: dict[int, list[float]] = {}
    for category, score in scored:
        by_cat.setdefault(int(category), []).append(float(score))
    everything = [s for scores in by_cat.values() for s in scores]
    non_adversarial = [s for c, scores in by_cat.items() if c != ADVERSARIAL_CATEGORY for s in scores]
    return ScoreSummary(
        per_category={c: _mean(by_cat[c]) for c in sorted(by_cat)},
        counts={c: len(by_cat[c]) for c in sorted(by_cat)},
        overall=_mean(everything),
        overall_without_adversarial=_mean(non_adversarial),
        n=len(everything),
    )
