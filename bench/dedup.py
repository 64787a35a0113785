"""Write-side dedup and safe updates (memory/write_links.py) on a generated stream and on LoCoMo train:

    python -m bench.dedup [--seed 0] [--conversations 10] [--turns 120] [--calibrate] [--locomo]

Generated stream: per conversation two speakers, each with
fact slots (home, employer, job, pet, favourite food, age), talk in turns of these planted kinds —
``fact`` (a slot's first statement), ``event`` (a new event with its own names), ``filler`` (chit-chat),
``exact`` (an earlier turn of the same speaker again, word for word), ``paraphrase`` (an earlier fact in other
words, same value), ``update`` (a slot's new value, phrased in ways the slot rules may or may not know) and
``near_miss`` (the other speaker's version of a fact, or the same sentence frame with other names). Every
turn is rendered and embedded as the service does (``[date] speaker: text``, MiniLM) and offered to the tier
core (``TenantTiers.add``) in batches of 8, as admitted turns.

Scores: ``duplicate_precision`` / ``duplicate_recall`` (flagged duplicate vs planted exact + paraphrase;
filler repeated word for word counts as planted exact), ``update_precision`` / ``update_recall`` (a
``supersedes`` link to the planted older memory), ``facts_lost`` (turns that carry something not stored yet —
fact, event, update, near_miss — that were not stored, plus superseded memories that are gone; must be 0),
``storage_saved`` (share of offered turns not stored). ``--calibrate`` sweeps ``tiers.dedup.duplicate_similarity``
on this seed (use one that is never evaluated, e.g. 1). ``--locomo``: the train conversations offered turn by
turn (store-all), with the flagged share and the gold evidence turns that were not stored (a LoCoMo QA run with
dedup on is not part of this benchmark). Last line: JSON per BENCH.md.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, setup_logging
from core.config import load_config
from cores.tenant_tiers import TenantTiers
from memory.segmenter import render_turn
from pipeline.write_path import format_date_time

CITIES = ["Boston", "Denver", "Seattle", "Austin", "Chicago", "Portland", "Atlanta", "Phoenix", "Madison", "Tucson",
          "Raleigh", "Omaha", "Toronto", "Dublin", "Lisbon", "Osaka"]
EMPLOYERS = ["Acme Robotics", "Globex", "Initech", "Hooli", "Vandelay Industries", "Stark Labs", "Wayne Foods",
             "Umbrella Health", "Soylent Farms", "Cyberdyne"]
JOBS = ["nurse", "teacher", "software engineer", "chef", "photographer", "accountant", "carpenter", "pharmacist",
        "graphic designer", "librarian"]
PETS = ["Rex", "Luna", "Milo", "Bella", "Oscar", "Daisy", "Pepper", "Max", "Ziggy", "Nala"]
FOODS = ["pad thai", "sushi", "lasagna", "tacos", "ramen", "paella", "pho", "falafel", "dumplings", "risotto"]
NAMES = ["Ava", "Ben", "Cara", "Dev", "Elena", "Femi", "Gus", "Hana", "Ivan", "June", "Kofi", "Lena", "Marco",
         "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tess"]
PLACES = ["the lake", "Mount Tam", "the farmers market", "the science museum", "Riverside Park", "the old mill",
          "Cedar Point", "the botanical garden", "the jazz club", "the climbing gym"]
ACTIVITIES = ["went hiking at {place} with {friend}", "had a picnic at {place} with {friend}",
              "took {friend} to {place}", "spent the afternoon at {place} with {friend}",
              "ran into {friend} at {place}"]
FILLER = ["That sounds great!", "Haha, really?", "Oh wow.", "I totally get that.", "Thanks for sharing!",
          "How have you been?", "Good to hear from you.", "Same here, honestly.", "That's so cool!", "Ha, nice."]

# (slot, first-statement templates, paraphrase templates, update templates); {v} is the value
SLOTS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "home": (["I live in {v}.", "I live in {v} these days, it's nice."],
             ["{v} is where I live.", "Home for me is {v}."],
             ["I just moved to {v}!", "I relocated to {v} last month.", "We packed up and now live in {v}."]),
    "employer": (["I work at {v}.", "I work for {v} as of this year."],
                 ["{v} is where I work.", "My employer is {v}."],
                 ["I just joined {v}!", "I started at {v} this week.", "New chapter: {v} hired me."]),
    "job": (["I work as a {v}.", "I'm working as a {v} right now."],
            ["My job? I'm a {v}.", "Being a {v} is my job."],
            ["I became a {v} this spring.", "My new job is {v}.", "I switched careers, {v} now."]),
    "pet": (["My dog is named {v}.", "I have a dog named {v}."],
            ["{v} is my dog.", "Our dog {v} says hi."],
            ["I adopted a puppy named {v}.", "We got a kitten called {v}."]),
    "favourite food": (["My favorite food is {v}.", "My favourite food is {v}, hands down."],
                       ["Nothing beats {v} for me.", "I could eat {v} every day."],
                       ["My favorite food is {v} now.", "Lately {v} is my favourite thing to eat."]),
    "age": (["I'm {v} years old.", "I am {v} years old."],
            ["At {v}, I feel great.", "Being {v} is fun."],
            ["I just turned {v}!", "I turned {v} yesterday."]),
}
VALUES = {"home": CITIES, "employer": EMPLOYERS, "job": JOBS, "pet": PETS, "favourite food": FOODS,
          "age": [str(a) for a in range(24, 61)]}
KINDS = ("fact", "event", "filler", "exact", "paraphrase", "update", "near_miss")
WEIGHTS = (0.16, 0.2, 0.16, 0.12, 0.12, 0.12, 0.12)
CARRIES = {"fact", "event", "update", "near_miss"}  # turns with something not stored yet


@dataclass
class Planted:
    id: str
    speaker: str
    text: str
    date_time: str
    kind: str
    target: str | None = None  # duplicate: the turn it repeats; update: the older memory of the slot
    frame: str | None = None  # event / near_miss: the sentence frame the names went into
    slot: str | None = None  # fact / update / paraphrase: the fact slot it states


def current(p: Planted, held: dict[str, tuple[str, str]]) -> bool:
    """Whether a planted turn still holds: it states no slot, or the slot's latest statement is this turn."""
    return p.slot is None or held.get(p.slot, (None, None))[1] == p.id


def generate(seed: int, conversations: int, turns: int) -> list[tuple[str, list[Planted]]]:
    """Planted streams, one per conversation (tenant): see the module docstring."""
    rng = random.Random(seed)
    out = []
    for c in range(conversations):
        speakers = rng.sample(NAMES, 2)
        held: dict[str, dict[str, tuple[str, str]]] = {s: {} for s in speakers}  # slot -> (value, turn id)
        ever: dict[str, set[tuple[str, str]]] = {s: set() for s in speakers}  # (slot, value) a speaker ever held
        said: dict[str, list[Planted]] = {s: [] for s in speakers}
        stream: list[Planted] = []
        start = datetime(2023, 1, 1, 9, 0) + timedelta(days=rng.randrange(300))
        for n in range(turns):
            speaker = speakers[n % 2]
            other = speakers[(n + 1) % 2]
            when = format_date_time(start + timedelta(hours=5 * n))
            tid = f"c{c}-t{n}"
            kind = rng.choices(KINDS, WEIGHTS)[0]
            mine, free = held[speaker], [s for s in SLOTS if s not in held[speaker]]
            if kind in ("paraphrase", "update") and not mine:
                kind = "fact"
            if kind == "exact" and not [q for q in said[speaker] if q.kind in CARRIES and current(q, mine)]:
                kind = "event"
            if kind == "fact" and not free:
                kind = "update"
            if kind == "near_miss" and not held[other]:
                kind = "event"
            if kind == "fact":
                slot = rng.choice(free)
                value = rng.choice(VALUES[slot])
                text = rng.choice(SLOTS[slot][0]).format(v=value)
                mine[slot] = (value, tid)
                p = Planted(tid, speaker, text, when, "fact", slot=slot)
            elif kind == "paraphrase":
                slot = rng.choice(sorted(mine))
                value, source = mine[slot]
                p = Planted(tid, speaker, rng.choice(SLOTS[slot][1]).format(v=value), when, "paraphrase", source,
                            slot=slot)
            elif kind == "update":
                slot = rng.choice(sorted(mine))
                old, source = mine[slot]
                value = rng.choice([v for v in VALUES[slot] if (slot, v) not in ever[speaker]])
                mine[slot] = (value, tid)
                p = Planted(tid, speaker, rng.choice(SLOTS[slot][2]).format(v=value), when, "update", source,
                            slot=slot)
            elif kind == "exact":  # NOTE: of a turn that is still true (not a fact its speaker has since changed)
                earlier = rng.choice([q for q in said[speaker] if q.kind in CARRIES and current(q, mine)])
                p = Planted(tid, speaker, earlier.text, when, "exact", earlier.target if earlier.kind == "exact"
                            else earlier.id)
            elif kind == "near_miss":
                if rng.random() < 0.5:  # the other speaker's fact, said by this one with their own value
                    slot = rng.choice(sorted(held[other]))
                    value = rng.choice([v for v in VALUES[slot] if v != held[other][slot][0]
                                        and (slot, v) not in ever[speaker]])
                    text = rng.choice(SLOTS[slot][0]).format(v=value)
                    if slot in mine:  # it also updates this speaker's own slot
                        p = Planted(tid, speaker, text, when, "update", mine[slot][1], slot=slot)
                    else:
                        p = Planted(tid, speaker, text, when, "near_miss", slot=slot)
                    mine[slot] = (value, tid)
                else:  # the frame of one of this speaker's events, with other names
                    frames = [q.frame for q in said[speaker] if q.frame] or ACTIVITIES
                    frame = rng.choice(frames)
                    act = frame.format(place=rng.choice(PLACES), friend=rng.choice(NAMES))
                    p = Planted(tid, speaker, f"Last weekend I {act}.", when, "near_miss", frame=frame)
            elif kind == "event":
                frame = rng.choice(ACTIVITIES)
                act = frame.format(place=rng.choice(PLACES), friend=rng.choice(NAMES))
                p = Planted(tid, speaker, f"Last weekend I {act}.", when, "event", frame=frame)
            else:
                text = rng.choice(FILLER)
                first = next((q for q in said[speaker] if q.text == text), None)
                p = Planted(tid, speaker, text, when, "filler" if first is None else "exact",
                            None if first is None else (first.target or first.id))
            if p.kind in ("event", "near_miss") and any(q.text == p.text for q in said[speaker]):
                first = next(q for q in said[speaker] if q.text == p.text)
                p.kind, p.target = "exact", first.target or first.id
            if p.slot is not None and p.kind != "paraphrase":
                ever[speaker].add((p.slot, mine[p.slot][0]))
            said[speaker].append(p)
            stream.append(p)
        out.append((f"gen-{c}", stream))
    return out


def offer(core: TenantTiers, tenant: str, turns: Sequence[Any], vectors: np.ndarray, batch: int = 8
          ) -> list[dict[str, Any] | None]:
    """Offer every turn as admitted, in stream order and batches; returns each turn's write link."""
    links: list[dict[str, Any] | None] = []
    for start in range(0, len(turns), batch):
        part = turns[start : start + batch]
        report = core.add(tenant, [t.id for t in part], [t.text for t in part], vectors[start : start + len(part)],
                          [0.5] * len(part), [{"speaker": t.speaker} for t in part])
        links += report.links
    return links


def score(streams: Sequence[tuple[str, list[Planted]]], links: Sequence[Sequence[dict[str, Any] | None]],
          core: TenantTiers) -> dict[str, Any]:
    dup_tp = dup_pred = dup_gold = upd_tp = upd_pred = upd_gold = lost = offered = stored = 0
    by_kind: dict[str, dict[str, int]] = {k: {"n": 0, "duplicate": 0, "supersedes": 0} for k in KINDS}
    for (tenant, stream), per_turn in zip(streams, links, strict=True):
        for p, link in zip(stream, per_turn, strict=True):
            offered += 1
            kind = link["kind"] if link else None
            by_kind[p.kind]["n"] += 1
            if kind:
                by_kind[p.kind][kind] += 1
            planted_dup = p.kind in ("exact", "paraphrase")
            dup_gold += planted_dup
            dup_pred += kind == "duplicate"
            dup_tp += planted_dup and kind == "duplicate"
            upd_gold += p.kind == "update"
            upd_pred += kind == "supersedes"
            upd_tp += p.kind == "update" and kind == "supersedes" and link["target"] == p.target
            if kind != "duplicate":
                stored += 1
            elif p.kind in CARRIES:
                lost += 1
            if p.kind == "update" and core.get(tenant, p.target) is None:
                lost += 1  # an update must never remove the older memory
    return {
        "turns": offered,
        "duplicate_precision": dup_tp / dup_pred if dup_pred else 0.0,
        "duplicate_recall": dup_tp / dup_gold if dup_gold else 0.0,
        "update_precision": upd_tp / upd_pred if upd_pred else 0.0,
        "update_recall": upd_tp / upd_gold if upd_gold else 0.0,
        "facts_lost": lost,
        "storage_saved": 1 - stored / offered if offered else 0.0,
        "by_kind": by_kind,
    }


def run_generated(cfg: Any, embedder: Any, streams: Sequence[tuple[str, list[Planted]]],
                  vectors: Sequence[np.ndarray]) -> dict[str, Any]:
    core = TenantTiers(cfg.tiers, embedder.dim)
    links = [offer(core, tenant, stream, vecs) for (tenant, stream), vecs in zip(streams, vectors, strict=True)]
    return score(streams, links, core)


def run_locomo(cfg: Any, embedder: Any) -> dict[str, Any]:
    from corpora.locomo import load_locomo, split

    convs = split(load_locomo(cfg.data.locomo_path), "train")
    core = TenantTiers(cfg.tiers, embedder.dim)
    flagged = {"duplicate": 0, "supersedes": 0}
    offered = evidence_dropped = evidence = 0
    examples: list[dict[str, str]] = []
    for conv in tqdm(convs, desc="LoCoMo train", file=sys.stderr):
        turns = [Planted(t.dia_id, t.speaker, t.text, t.date_time, "") for t in conv.turns]
        vecs = embedder.encode([render_turn(t) for t in turns])
        links = offer(core, conv.sample_id, turns, vecs)
        cited = {d for q in conv.questions for d in q.evidence}
        by_id = {t.id: t for t in turns}
        for t, link in zip(turns, links, strict=True):
            offered += 1
            evidence += t.id in cited
            if link:
                flagged[link["kind"]] += 1
                if link["kind"] == "duplicate" and t.id in cited:
                    evidence_dropped += 1
                if len(examples) < 12:
                    examples.append({"kind": link["kind"], "turn": f"{t.speaker}: {t.text}",
                                     "target": f"{by_id[link['target']].speaker}: {by_id[link['target']].text}"})
    return {"conversations": len(convs), "turns": offered, "duplicates": flagged["duplicate"],
            "updates": flagged["supersedes"], "storage_saved": flagged["duplicate"] / offered,
            "evidence_turns": evidence, "evidence_not_stored": evidence_dropped, "examples": examples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="generator seed (0 is evaluated; calibrate on another)")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--turns", type=int, default=120, help="turns per generated conversation")
    parser.add_argument("--calibrate", action="store_true", help="sweep tiers.dedup.duplicate_similarity")
    parser.add_argument("--locomo", action="store_true", help="also offer LoCoMo's train conversations")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_config()
    from serve.embedder import Embedder

    embedder = Embedder(cfg.embedder)
    streams = generate(args.seed, args.conversations, args.turns)
    vectors = [embedder.encode([render_turn(t) for t in stream]) for _, stream in
               tqdm(streams, desc="embedding", file=sys.stderr)]
    summary: dict[str, Any] = {"seed": args.seed, "conversations": args.conversations,
                               "duplicate_similarity": cfg.tiers.dedup.duplicate_similarity}
    if args.calibrate:
        sweep = []
        for t in (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97):
            c = cfg.model_copy(deep=True)
            c.tiers.dedup.duplicate_similarity = t
            r = run_generated(c, embedder, streams, vectors)
            sweep.append({"duplicate_similarity": t, **{k: v for k, v in r.items() if k != "by_kind"}})
            print(f"threshold {t:.2f}: dup P {r['duplicate_precision']:.3f} R {r['duplicate_recall']:.3f}, "
                  f"facts lost {r['facts_lost']}", file=sys.stderr)
        summary["sweep"] = sweep
    summary.update(run_generated(cfg, embedder, streams, vectors))
    if args.locomo:
        summary["locomo_train"] = run_locomo(cfg, embedder)
    emit_json(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
