"""The master (E-mem): merges the assistants' evidence, cuts it to the window, orders it by time, and answers
in a short phrase. A plain class: ``serve.deployments.MasterService`` hosts it on the model pool.

The evidence lines are sorted oldest first and headed "Evidence, oldest first:" (a longer note that later lines
hold the latest state spent tokens of every prompt and answered no better on the dev set:
docs/results/2026-12-05-episodic.md). With ``episodic.master_dates`` ``day`` the lines of one day stand under one
heading ("8 May 2023:") without their own "[1:56 pm on 8 May, 2023]" headers, which Qwen's tokenizer reads digit
by digit, so they cost every line many tokens; the window is filled by what is shown.
Instructions depend on the question's kind (``inference.question_kind.QuestionKind``), as in E-mem's final answer
step; a question asked without a kind hint is answered as the kind ``predict_kind`` reads from its words (a question
that offers its answers, "a beach or the mountains?", is a phrase question, not a yes/no one):

- temporal questions are answered with a date: the model picks the evidence line that dates the
  event (a constrained choice) and the answer is the first date grounded in that line ("we met yesterday
  [7 May 2023]", ``episodic.ground_dates``), else the line's own date, written "7 May 2023";
- the rest get a short phrase, shown how by one worked example of their kind (``episodic.answer_examples``) and
  cleaned of what small models wrap answers in: echoed prompt headers, line numbers and dates, a speaker's name,
  loops, a restated question ("Melanie realized that self-care ..." -> "self-care ..."), every sentence after
  the first (a list keeps its items), trailing punctuation; with ``episodic.answer_form`` ``snap`` the cleaned
  answer becomes the evidence span closest to it, with ``extract`` a one-phrase answer is chosen among the
  evidence's short phrases (``inference.answer_spans``).

With no evidence at all the answer is "Not mentioned in the conversation" and no model call is made.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from core.config import EpisodicConfig
from core.evidence import Evidence, by_score, dedupe_evidence
from core.generation import GenerationEngine, GenerationRequest, TokenBill
from inference.answer_spans import candidate_spans, snap
from inference.question_kind import FACT, INFERENCE, LIST, TEMPORAL, QuestionKind, is_yes_no, predict_kind
from memory.segmenter import estimate_tokens, split_header
from memory.time_expressions import day_text, grounded_values

SYSTEM = (
    "You answer questions about a long conversation using only the evidence lines given. "
    "Answer with a short phrase, not a sentence."
)
INSTRUCTIONS: dict[QuestionKind, str] = {
    LIST: "Answer with a short phrase; if several things are asked for, list them separated by commas.",
    TEMPORAL: "Which evidence line tells when this happened? Reply with its number.",
    INFERENCE: "Answer with a short phrase. If it is a yes/no question, start with 'Likely yes' or 'Likely no'.",
    FACT: "Answer with a short phrase copied from the evidence.",
}
# One worked example per kind that gets a free answer (a train-split conversation, lines shortened), sent as an
# earlier chat turn with its answer (``episodic.answer_examples``): a small model copies the form of an answer
# shown (a few words taken from the evidence) far better than it follows an instruction.
EXAMPLES: dict[QuestionKind, tuple[tuple[str, ...], str, str]] = {
    LIST: (("[2:32 pm on 29 January, 2023] Jon: I've been looking at different places for the studio. Oh, I've been to "
         "Paris yesterday [28 January 2023]! It was sooo cool.",
         "[10:04 am on 19 June, 2023] Jon: Still working on my biz. Took a short trip last week to Rome to clear my "
         "mind a little."),
        "Which cities has Jon visited?", "Paris, Rome"),
    INFERENCE: (("[4:04 pm on 20 January, 2023] Jon: I'm starting a dance studio 'cause I'm passionate about dancing.",
         "[2:35 pm on 16 March, 2023] Gina: I'm passionate about fashion trends, so a clothing store was a perfect "
         "match."),
        "Do Jon and Gina start businesses out of what they love?", "Likely yes"),
    FACT: (("[2:32 pm on 29 January, 2023] Jon: Yeah, good flooring's crucial. I'm after Marley flooring, which is "
            "what dance studios usually use.",),
        "What kind of flooring is Jon looking for in his dance studio?", "Marley flooring"),
}
# NOTE: the margin holds the system prompt, evidence header, instruction and chat template with room to spare
# (counted with SmolLM2's tokenizer for every kind; the question is counted apart); each evidence line adds "[12] "
# and a newline.
PROMPT_MARGIN_TOKENS = 160
LINE_OVERHEAD_TOKENS = 6


format_date = day_text  # the answers' date style: format_date(datetime(2023, 5, 7, 13, 56)) == '7 May 2023'


def dialogue_order(evidence: Evidence) -> tuple[datetime, list[str | int]]:
    """Sort key: time, then the turn id with its numbers compared as numbers (turns of one session share
    their time in imported transcripts), so ``D3:9`` comes before ``D3:10``.

    >>> [e.turn_id for e in sorted([Evidence("D3:10", "", datetime(2023, 5, 7), 0),
    ...                             Evidence("D3:9", "", datetime(2023, 5, 7), 0)], key=dialogue_order)]
    ['D3:9', 'D3:10']
    """
    parts = re.split(r"(\d+)", evidence.turn_id)  # text, number, text, ...: alike positions compare alike
    return evidence.timestamp, [int(p) if i % 2 else p for i, p in enumerate(parts)]


_ECHO = re.compile(r"^(evidence|question)\b.*:\s*$", re.I)  # the prompt's own headers, echoed
_LEAD = re.compile(
    r"^\s*(?:(?i:answer)\s*:|\[\d+\]|\d+[.)]\s|[-*\u2022]|\[[^\]]*\d{4}\]|\d{1,2} [A-Z][a-z]+ \d{4}:(?=\s)"
    r"|[A-Z][\w'-]*(?: [A-Z][\w'-]*)?:(?=\s))\s*"
)  # "Answer:", "[3]", "1.", "- ", "[1:56 pm on 8 May, 2023]", "8 May 2023:", "Caroline:" at the start of the answer
_YES_NO = re.compile(r"^((?:likely )?(?:yes|no))\b(?:[\s:,.;!-]|$)", re.I)
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\]]{3})[.!?](?:\s|$)")


def cut_repeat(text: str, n: int = 3) -> str:
    """``text`` up to where a run of ``n`` words starts again (small models loop).

    >>> cut_repeat("She is a cat, a cat. She is a cat. She is")
    'She is a cat, a cat.'
    """
    words = text.split()
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - n + 1):
        gram = tuple(w.lower().strip(".,!?;:") for w in words[i : i + n])
        if gram in seen:
            return " ".join(words[:i])
        seen.add(gram)
    return text


_LINKS = frozenset("a an the that is are was were be been has have had by to of for as it".split())


def _stem(word: str) -> str:
    """A crude stem to compare an answer's words with the question's: 'raised' ~ 'raise', 'races' ~ 'race'."""
    w = re.sub(r"[^\w]", "", word.lower())
    return re.sub(r"(ing|ed|es|e|s|d)$", "", w) if len(w) > 4 else w


def drop_restated(answer: str, question: str) -> str:
    """``answer`` without the words it opens with that restate the question (small models answer in a sentence
    that repeats it); the whole answer when nothing would be left.

    >>> drop_restated("The charity race raised awareness for mental health", "What did the charity race raise "
    ...               "awareness for?")
    'mental health'
    >>> drop_restated("Melanie", "Who is Melanie?")
    'Melanie'
    """
    asked = {_stem(w) for w in question.split()}
    words = answer.split()
    i = 0
    while i < len(words) and (_stem(words[i]) in asked or words[i].lower() in _LINKS):
        i += 1
    if i == len(words) or not any(_stem(w) in asked and w.lower() not in _LINKS for w in words[:i]):
        return answer  # nothing left, or only link words ("a pottery class"): as it is
    while words[i - 1].lower() in ("a", "an", "the"):  # keep the answer's own article
        i -= 1
    return " ".join(words[i:])


def clean_answer(text: str, *, sentence: bool = True) -> str:
    """The first line that is not an echo of the prompt's headers, without what small models put before an answer
    ('Answer:', a line number, an evidence line's date, a speaker's name), cut where it starts to repeat itself,
    at its first sentence's end (with ``sentence``), without quotes or a final full stop.

    >>> clean_answer("Answer: Caroline: a pottery class.")
    'a pottery class'
    >>> clean_answer("Evidence, oldest first:\\n[1] [9:49 am on 27 January, 2023] Deborah: yoga and old photos. I")
    'yoga and old photos'
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not _ECHO.match(line.strip())]
    line = lines[0] if lines else ""
    while (stripped := _LEAD.sub("", line, count=1)) != line:
        line = stripped
    if yes_no := _YES_NO.match(line):  # "Likely yes: Evan: Hey Sam! ..." -> "Likely yes"
        return yes_no.group(1)
    line = cut_repeat(line)
    if sentence and (end := _SENTENCE_END.search(line)):
        line = line[: end.start()]
    return line.strip().rstrip(".").strip().strip('"').strip()


@dataclass
class MasterAnswer:
    text: str
    evidence: list[Evidence]
    bill: TokenBill
    raw: str = ""  # what the model wrote, before the answer was cleaned (a chosen line's number for a date)


def example_kind(question: str, kind: QuestionKind) -> QuestionKind:
    """Which worked example a question is shown: an inference question asked as a phrase ("What fields would
    she pursue?") is shown the phrase example, not the yes/no one."""
    return FACT if kind == INFERENCE and not is_yes_no(question) else kind


def prompt_budget(max_model_len: int, answer_max_tokens: int) -> int:
    """Tokens the master's evidence and question may take in one prompt."""
    return max_model_len - answer_max_tokens - PROMPT_MARGIN_TOKENS


def split_day(line: str) -> tuple[str | None, str]:
    """A stored line -> (the day of its header, written "8 May 2023"; the line without its header);
    ``(None, line)`` for a line without a header.

    >>> split_day("[1:56 pm on 8 May, 2023] Caroline: Hi!")
    ('8 May 2023', 'Caroline: Hi!')
    """
    date_time, rest = split_header(line)
    return (None if date_time is None else date_time.rpartition(" on ")[2].replace(",", "")), rest


def fit_evidence(evidence: Sequence[Evidence], question: str, budget: int,
                 count: Callable[[str], int], by_day: bool = False) -> list[Evidence]:
    """The longest prefix of ``evidence`` whose lines (and the question) fit ``budget`` tokens; ``by_day``: the
    lines as ``episodic.master_dates: day`` shows them, without their headers, plus one heading per day."""
    left = budget - count(question)
    out: list[Evidence] = []
    days: set[str | None] = {None}
    for e in evidence:
        if by_day:
            day, body = split_day(e.content)
            left -= count(body) + LINE_OVERHEAD_TOKENS + (0 if day in days else count(day) + 2)
            days.add(day)
        else:
            left -= count(e.content) + LINE_OVERHEAD_TOKENS
        if left < 0:
            break
        out.append(e)
    return out


def token_counter(engine: GenerationEngine) -> Callable[[str], int]:
    """Token count with the engine's tokenizer (the estimate of the segmenter when it has none)."""
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        return estimate_tokens

    @functools.lru_cache(maxsize=1 << 16)  # NOTE: fit() counts the same turn lines for every question
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    return count


class Master:
    """Answers from evidence: :meth:`answer` merges the evidence of many assistants (best score first, each turn
    once, at most ``episodic.master_evidence`` lines), cuts it to the model's window, orders it in dialogue
    order and makes one engine call per question (:meth:`respond`; a batch of questions is one engine batch).

    ``count`` counts tokens with the engine model's tokenizer (default: the engine's own tokenizer, else an
    estimate); the prompt budget is the engine's window less the answer's tokens and the prompt's frame.
    """

    def __init__(self, engine: GenerationEngine, config: EpisodicConfig,
                 count: Callable[[str], int] | None = None) -> None:
        self.engine = engine
        self.max_tokens = config.answer_max_tokens
        self.max_evidence = config.master_evidence
        self.not_mentioned = config.not_mentioned
        self.answer_form = config.answer_form
        self.by_day = config.master_dates == "day"
        self.count = count or token_counter(engine)
        self.examples = EXAMPLES if config.answer_examples else {}
        # NOTE: the longest worked example is taken from every question's budget, so the cut does not depend on kind
        shown = [sum(self.count(m["content"]) for m in self.example_messages(kind, kind)) for kind in self.examples]
        self.budget = prompt_budget(engine.max_model_len, config.answer_max_tokens) - max(shown, default=0)

    # -- choosing the evidence -----------------------------------------------------------------
    def fit(self, evidence: Sequence[Evidence], question: str) -> list[Evidence]:
        """The longest prefix of ``evidence`` that fits the prompt budget with ``question``."""
        return fit_evidence(evidence, question, self.budget, self.count, self.by_day)

    def select(self, question: str, evidence: Sequence[Evidence]) -> list[Evidence]:
        """Assistants' evidence (in routing order) -> what the master reads: best score first (stable), each turn
        once, the first ``master_evidence`` lines, cut to the window."""
        kept = dedupe_evidence(by_score(evidence))[: self.max_evidence]
        return self.fit(kept, question)

    def answer(self, question: str, evidence: Sequence[Evidence], kind: QuestionKind | None = None) -> MasterAnswer:
        """Select the evidence, then answer from it (as ``kind``; default: the kind the question's words suggest)."""
        return self.respond(question, self.select(question, evidence), kind)

    # -- answering -----------------------------------------------------------------------------
    def evidence_lines(self, evidence: Sequence[Evidence]) -> str:
        """The numbered lines (in the order given); with ``master_dates: day`` a heading starts each day's lines
        and the lines lose their headers."""
        if not self.by_day:
            return "\n".join(f"[{i}] {e.content}" for i, e in enumerate(evidence, start=1))
        out: list[str] = []
        last: str | None = None
        for i, e in enumerate(evidence, start=1):
            day, body = split_day(e.content)
            if day is not None and day != last:
                out.append(f"{day}:")
            last = day
            out.append(f"[{i}] {body}")
        return "\n".join(out)

    def prompt(self, question: str, evidence: Sequence[Evidence], kind: QuestionKind) -> str:
        lines = self.evidence_lines(evidence)  # the caller orders them
        return f"Evidence, oldest first:\n{lines}\n\nQuestion: {question}\n{INSTRUCTIONS[kind]}"

    def example_messages(self, shown_kind: QuestionKind, kind: QuestionKind) -> list[dict[str, str]]:
        """The worked example of ``shown_kind`` as an earlier user turn (prompted as ``kind``) and its answer; none
        when that kind has no example or examples are off."""
        if (example := self.examples.get(shown_kind)) is None:
            return []
        lines, question, answer = example
        shown = [Evidence("", line, datetime.min, -1) for line in lines]
        return [{"role": "user", "content": self.prompt(question, shown, kind)},
                {"role": "assistant", "content": answer}]

    def request(self, question: str, evidence: Sequence[Evidence], kind: QuestionKind) -> GenerationRequest:
        messages = [{"role": "system", "content": SYSTEM},
                    *self.example_messages(example_kind(question, kind), kind),
                    {"role": "user", "content": self.prompt(question, evidence, kind)}]
        # NOTE: every request states max_tokens, so the caller's prompt budget (window - max_tokens) holds.
        if kind == TEMPORAL:
            return GenerationRequest(messages=messages, choice=[str(i) for i in range(1, len(evidence) + 1)],
                                     max_tokens=self.max_tokens)
        if self.extracts(question, kind) and (spans := candidate_spans(question, [e.content for e in evidence])):
            return GenerationRequest(messages=messages, choice=spans, max_tokens=self.max_tokens)
        return GenerationRequest(messages=messages, max_tokens=self.max_tokens)

    def extracts(self, question: str, kind: QuestionKind) -> bool:
        """Whether the answer is chosen among the evidence's phrases (``answer_form: extract``): one-phrase kinds
        (not dates, lists or yes/no questions)."""
        return self.answer_form == "extract" and kind in (INFERENCE, FACT) and not is_yes_no(question)

    def respond_batch(self, items: Sequence[tuple[str, Sequence[Evidence], QuestionKind | None]]) -> list[MasterAnswer]:
        """(question, chosen evidence, kind or None) per question -> answers, one engine batch. The evidence is
        read as given (already cut to the window), in dialogue order; a question without a kind is answered as
        the kind its words suggest."""
        items = [(q, ev, predict_kind(q) if k is None else QuestionKind(k)) for q, ev, k in items]
        ordered = [sorted(ev, key=dialogue_order) for _, ev, _ in items]
        todo = [i for i, ev in enumerate(ordered) if ev]
        requests = [self.request(items[i][0], ordered[i], items[i][2]) for i in todo]
        results = self.engine.generate(requests) if requests else []
        out = [MasterAnswer(self.not_mentioned, [], TokenBill()) for _ in items]
        for i, req, res in zip(todo, requests, results, strict=True):
            kind, evidence = items[i][2], ordered[i]
            if kind == TEMPORAL:  # the chosen line's grounded date ("yesterday [7 May 2023]"), else its own date
                line = evidence[int(res.text.strip()) - 1]
                text = next(iter(grounded_values(line.content)), None) or format_date(line.timestamp)
            elif self.extracts(items[i][0], kind) and req.choice:  # one of the evidence's phrases, as chosen
                text = res.text
            else:  # a list keeps every item; the rest end at their first sentence; no restated question
                text = clean_answer(res.text, sentence=kind != LIST)
                text = (text if _YES_NO.match(text) else drop_restated(text, items[i][0])) or self.not_mentioned
                if self.answer_form != "free" and text != self.not_mentioned and not _YES_NO.match(text):
                    text = snap(text, [e.content for e in evidence], items=kind == LIST)
            out[i] = MasterAnswer(text, evidence, res.bill, res.text)
        return out

    def respond(self, question: str, evidence: Sequence[Evidence], kind: QuestionKind | None = None) -> MasterAnswer:
        """Answer from ``evidence`` as chosen (no selection, no cut)."""
        return self.respond_batch([(question, evidence, kind)])[0]
