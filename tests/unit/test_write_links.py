"""Write-side dedup and safe updates: worked examples through the tier core (never a lost fact)."""

import numpy as np
import pytest

from core.config import TierMemoryConfig
from cores.durable_cores import DurableTiers
from cores.tenant_tiers import TenantTiers
from memory.write_links import Known, content_words, details, fact_slots, judge

DIM = 8


def unit(*xs: float) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[: len(xs)] = xs
    return v / np.linalg.norm(v)


def offer(core, ids, texts, vectors, speaker="Mel"):
    return core.add("u", ids, texts, np.stack(vectors), [0.5] * len(ids), [{"speaker": speaker} for _ in ids])


def test_fact_slots_and_guards():
    assert fact_slots("I just moved to Boston, and I'm 31 years old!") == {"home": "boston", "age": "31"}
    assert fact_slots("I live in New York with my wife") == {"home": "new york"}
    assert fact_slots("I work as a nurse at the hospital") == {"job": "nurse"}
    assert fact_slots("My favourite food is pad thai.") == {"favourite food": "pad thai"}
    assert fact_slots("I just joined a gym last week!") == {}  # joining a group is no employer
    assert fact_slots("That sounds great!") == {}
    assert details("I met Anna in Paris on 3 May.") == {"anna", "paris", "3", "may"}
    assert content_words("I live in Boston.") == {"live", "boston"}


def test_judge_prefers_an_update_and_needs_the_same_speaker():
    old = Known("m1", "I live in New York.", "Mel", 0.8, {"home": "new york"})
    link = judge("I moved to Boston.", "Mel", {"home": "boston"}, [old], {"home": old}, 0.9)
    assert link is not None and (link.kind, link.target, link.slot) == ("supersedes", "m1", "home")
    twin = Known("m2", "I love hiking.", "Jo", 0.99, {})
    assert judge("I love hiking.", "Mel", {}, [twin], {}, 0.9) is None  # another speaker's memory is theirs


def test_duplicate_is_a_noop_with_a_pointer_and_unrelated_is_added():
    core = TenantTiers(TierMemoryConfig(), DIM)
    first = offer(core, ["a"], ["I love hiking in the mountains."], [unit(1, 0)])
    assert first.stored == 1 and first.links == [None]
    again = offer(core, ["b", "c"], ["I love hiking in the mountains!", "My sister is a nurse."],
                  [unit(1, 0.05), unit(0, 1)])
    assert again.stored == 1
    assert again.links[0] == {"kind": "duplicate", "target": "a", "similarity": pytest.approx(0.9988, abs=1e-3)}
    assert again.links[1] is None
    assert core.get("u", "b") is None and core.get("u", "c") is not None
    # similar vector, but a new word (or name) is news: stored
    more = offer(core, ["d"], ["I love hiking in the mountains with Anna."], [unit(1, 0.02)])
    assert more.links == [None] and core.get("u", "d") is not None
    # a duplicate inside one batch points at the batch's earlier turn
    batch = offer(core, ["e", "f"], ["We adopted a cat.", "We adopted a cat."], [unit(0, 0, 1), unit(0, 0, 1)])
    assert batch.links == [None, {"kind": "duplicate", "target": "e", "similarity": pytest.approx(1.0)}]


def test_update_adds_with_supersedes_and_keeps_the_old_fact_as_history(tmp_path):
    core = DurableTiers(TierMemoryConfig(), DIM, journal_dir=tmp_path)
    offer(core, ["ny"], ["I live in New York."], [unit(1, 1)])
    offer(core, ["x"], ["Work was busy today."], [unit(0, 0, 1)])
    report = offer(core, ["bos"], ["I just moved to Boston!"], [unit(1, -1)])
    assert report.stored == 1 and report.links == [{"kind": "supersedes", "target": "ny", "slot": "home",
                                                    "similarity": 0.0}]
    new, old = core.get("u", "bos"), core.get("u", "ny")
    assert new.metadata["supersedes"] == "ny" and new.metadata["facts"] == {"home": "boston"}
    assert old is not None and old.metadata["superseded_by"] == "bos"  # never a delete without an add
    # the same statement again is a duplicate of the newest fact, not another update
    again = offer(core, ["bos2"], ["I just moved to Boston!"], [unit(1, -1)])
    assert again.links[0]["kind"] == "duplicate" and again.links[0]["target"] == "bos"
    # a journal replay decides the same way
    restarted = DurableTiers(TierMemoryConfig(), DIM, journal_dir=tmp_path)
    assert restarted.get("u", "ny").metadata["superseded_by"] == "bos"
    assert restarted.get("u", "bos2") is None and len(restarted.list("u")[0]) == 3


def test_dedup_can_be_switched_off():
    core = TenantTiers(TierMemoryConfig(dedup={"enabled": False}), DIM)
    offer(core, ["a"], ["Same words."], [unit(1)])
    report = offer(core, ["b"], ["Same words."], [unit(1)])
    assert report.stored == 1 and report.links == [None]


def test_a_resent_write_is_stored_again_not_called_its_own_duplicate():
    core = TenantTiers(TierMemoryConfig(), DIM)
    offer(core, ["a", "b"], ["I live in Denver.", "Nice weather."], [unit(1), unit(0, 1)])
    again = offer(core, ["a", "b"], ["I live in Denver.", "Nice weather."], [unit(1), unit(0, 1)])
    assert again.links == [None, None] and again.stored == 2 and len(core.list("u")[0]) == 2
