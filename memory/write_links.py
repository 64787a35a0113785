"""Write-side dedup and safe updates: what an admitted turn is to the memories its speaker already has.

Per admitted turn (the tier core runs this inside ``add``, so the check and the insert are one step of the
actor and a journal replay decides the same way):

- **duplicate** -> the turn is not stored (a NOOP that points at the existing memory): the same speaker said
  the same thing before — equal normalised text, or a stored memory at cosine >= ``duplicate_similarity``
  that holds every name and number (:func:`details`) and every content word (:func:`content_words`) of the
  turn, and no fact slot that disagrees with it (a turn that adds a word adds something);
- **supersedes** -> the turn is stored with a link to the older memory of the same speaker whose fact slot
  it changes ("I moved to Boston" after "I live in New York"); the older memory stays, marked
  ``superseded_by``, retrievable as history. Nothing is ever deleted for an update.

Fact slots (:func:`fact_slots`) are a small documented rule set over first-person statements — where one
lives, works and as what, relationship status, age, a pet's name, a favourite thing — with the value
normalised (lower case, first clause). A turn without a slot can be a duplicate but never an update.
No Ray import here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

LinkKind = Literal["duplicate", "supersedes"]

_VALUE = r"(?P<value>[A-Za-z0-9][\w'&.-]*(?:\s+[\w'&.-]+){0,3})"  # up to four words, cut at clause ends below
# (slot, pattern) — the first-person statements whose value a later statement can change.
_SLOT_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((slot, re.compile(p, re.I)) for slot, p in (
    ("home", r"\bI(?:'m| am)? (?:now |still |currently )?(?:live|living|based|settled) in " + _VALUE),
    ("home", r"\bI (?:just |recently |finally )?(?:moved|relocated) (?:back )?to " + _VALUE),
    ("home", r"\bmy (?:new )?(?:home|place|apartment|house) is in " + _VALUE),
    ("employer", r"\bI(?:'m| am)? (?:now |still |currently )?(?:work|working) (?:at|for) " + _VALUE),
    # NOTE: not "I joined X": LoCoMo's speakers join groups, gyms and churches, not employers.
    ("employer", r"\bI (?:just )?(?:got a job at|started a new job at|started working at) " + _VALUE),
    ("job", r"\bI(?:'m| am)? (?:now |still |currently )?(?:work|working) as an? " + _VALUE),
    ("job", r"\bI (?:just )?(?:became|got a job as) an? " + _VALUE),
    ("job", r"\bmy (?:new )?job is " + _VALUE),
    ("relationship", r"\bI(?:'m| am) (?:now )?(?P<value>single|married|engaged|divorced|widowed|dating someone)\b"),
    ("relationship", r"\bI (?:just )?got (?P<value>married|engaged|divorced)\b"),
    ("age", r"\bI(?:'m| am) (?:now )?(?P<value>\d{1,3}) years? old\b"),
    ("age", r"\bI (?:just )?turned (?P<value>\d{1,3})\b"),
    ("pet", r"\bmy (?:dog|cat|pet|puppy|kitten)(?:'s name)? is (?:called |named )?" + _VALUE),
    ("pet", r"\bI (?:have|got|adopted) an? (?:new )?(?:dog|cat|puppy|kitten) (?:called|named) " + _VALUE),
))
_FAVOURITE = re.compile(r"\bmy (?:all-time |absolute )?favou?rite (?P<thing>[a-z]+(?: [a-z]+)?) (?:is|are) "
                        + _VALUE, re.I)
_CLAUSE_END = re.compile(r"\s*(?:[,.;:!?()]|\band\b|\bbut\b|\bbecause\b|\bsince\b|\bnow\b|\bwith\b|\bwhere\b|"
                         r"\bat\b|\bin\b|\bon\b|\bas\b|\bnear\b|\bfrom\b|"
                         r"\bwhich\b|\bso\b|\bfor\b|\bafter\b|\bbefore\b|\blast\b|\bthis\b|\bnext\b).*$", re.I)
_ARTICLE = re.compile(r"^(?:the|a|an|my)\s+", re.I)
_DETAIL = re.compile(r"(?<![\w'])(?:\d[\d.,:]*|[A-Z][a-z]+(?:[-'][A-Za-z]+)*)")
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|\n)\s*$")


def _clean(value: str) -> str:
    value = _CLAUSE_END.sub("", value.strip())
    return _ARTICLE.sub("", value).strip(" '\"").lower()


def fact_slots(text: str) -> dict[str, str]:
    """The fact slots a turn states, slot -> normalised value.

    >>> fact_slots("I just moved to Boston, and I'm 31 years old!")
    {'home': 'boston', 'age': '31'}
    >>> fact_slots("My favourite food is pad thai.")
    {'favourite food': 'pad thai'}
    """
    found: dict[str, str] = {}
    for slot, pattern in _SLOT_RULES:
        m = pattern.search(text)
        if m and slot not in found:
            value = _clean(m.group("value"))
            if value:
                found[slot] = value
    for m in _FAVOURITE.finditer(text):
        value = _clean(m.group("value"))
        if value:
            found.setdefault(f"favourite {m.group('thing').lower()}", value)
    return found


def details(text: str) -> set[str]:
    """Names and numbers of a turn (capitalised words not opening a sentence, digits), lower case: what a
    duplicate must not add. ``details("I met Anna in Paris on 3 May.") == {'anna', 'paris', '3', 'may'}``."""
    out = set()
    for m in _DETAIL.finditer(text):
        word = m.group(0)
        if word[0].isupper() and (word == "I" or _SENTENCE_START.search(text[: m.start()])):
            continue
        out.add(word.lower().rstrip(".,:"))
    return out


_STOP = frozenset(
    "a an the i i'm im me my mine we our us you your he she it its they them their is am are was were be been "
    "being do does did have has had to of in on at for with and or but so as by from this that these those "
    "just really very too also now then there here what which who oh".split()
)


def content_words(text: str) -> set[str]:
    """Lower-case words without stop words, a plural ``s`` cut: what a duplicate may not add.

    ``content_words("I live in Boston.") == {'live', 'boston'}``
    """
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _WORD.findall(text.lower())} - _STOP


def normalised(text: str) -> str:
    """Lower-case words only: ``normalised("I love  hiking!") == "i love hiking"``."""
    return " ".join(_WORD.findall(text.lower()))


@dataclass(frozen=True, slots=True)
class Known:
    """A memory (stored, or admitted earlier in the same write) as the judge sees it."""

    id: str
    text: str
    speaker: str | None
    similarity: float  # cosine to the incoming turn
    facts: dict[str, str]


@dataclass(frozen=True, slots=True)
class WriteLink:
    kind: LinkKind
    target: str
    similarity: float | None = None
    slot: str | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "target": self.target}
        if self.similarity is not None:
            out["similarity"] = round(float(self.similarity), 4)
        if self.slot is not None:
            out["slot"] = self.slot
        return out


def conflicts(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Slots both state with different values: ``conflicts({'home': 'boston'}, {'home': 'nyc'}) == ['home']``."""
    return [slot for slot, value in a.items() if slot in b and b[slot] != value]


def judge(text: str, speaker: str | None, facts: dict[str, str], neighbours: Iterable[Known],
          holders: dict[str, Known], duplicate_similarity: float) -> WriteLink | None:
    """What an admitted turn is: a duplicate of a neighbour, an update of a slot holder, or new (None).

    ``neighbours``: the speaker's most similar memories; ``holders``: for each slot the turn states, the
    speaker's latest memory stating that slot. An update wins over a duplicate (a changed value is news).
    """
    for slot, value in facts.items():
        held = holders.get(slot)
        if held is not None and held.facts.get(slot) != value:
            return WriteLink("supersedes", held.id, held.similarity, slot)
    key, own, words = normalised(text), details(text), content_words(text)
    best: Known | None = None
    for n in neighbours:
        if n.speaker != speaker:
            continue
        if normalised(n.text) == key:
            return WriteLink("duplicate", n.id, n.similarity)
        if (words and n.similarity >= duplicate_similarity and own <= details(n.text)
                and words <= content_words(n.text)
                and not conflicts(facts, n.facts)):
            if best is None or n.similarity > best.similarity:
                best = n
    return None if best is None else WriteLink("duplicate", best.id, best.similarity)


def latest_holders(memories: Sequence[Known], speaker: str | None, slots: Iterable[str]) -> dict[str, Known]:
    """For each slot, the last memory of ``memories`` (oldest first) by ``speaker`` that states it."""
    wanted, out = set(slots), {}
    for m in memories:
        if m.speaker == speaker:
            for slot in wanted & m.facts.keys():
                out[slot] = m
    return out
