"""``engram demo``'s shipped conversation and its choice of source; nothing here starts Ray (``demo.run`` is
replaced), and no test needs LoCoMo (a missing or a tiny stand-in file)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from cluster import cli, demo
from corpora.demo import load_demo
from corpora.locomo import LoCoMoNotFoundError, load_locomo, parse_session_datetime
from serve.schemas import TurnIn


@pytest.fixture(scope="module")
def conv():
    return load_demo()


def _question(conv, kind: str):
    (q,) = [q for q in conv.questions if q.kind == kind]
    return q


def _said(conv, *ids: str) -> str:
    turns = {t.dia_id: t for t in conv.turns}
    assert set(ids) <= set(turns)
    return " ".join(turns[i].text for i in ids)


# ---------------------------------------------------------------- the shipped conversation


def test_shipped_conversation_is_small_two_speakers_and_dated_sessions(conv) -> None:
    assert conv.sample_id == "demo" and len(conv.speakers) == 2
    assert 40 <= len(conv.turns) <= 80  # small: ingest on CPU runs at about 10 turns/s
    assert {t.speaker for t in conv.turns} == set(conv.speakers)
    assert len(conv.sessions) in (3, 4)
    starts = [s.start for s in conv.sessions]
    assert starts == sorted(starts) and len({s.date() for s in starts}) == len(starts)  # each session its own day
    for s in conv.sessions:
        turns = [t for t in conv.turns if t.session == s.number]
        assert turns and turns[0].timestamp == s.start
        assert all(t.timestamp.date() == s.start.date() for t in turns)
    stamps = [t.timestamp for t in conv.turns]
    assert stamps == sorted(stamps) and [t.index for t in conv.turns] == list(range(len(conv.turns)))
    assert len({t.dia_id for t in conv.turns}) == len(conv.turns)
    for t in conv.turns:  # what the API takes, with the times as the models see them (LoCoMo's style)
        TurnIn(id=t.dia_id, speaker=t.speaker, text=t.text, timestamp=t.timestamp, date_time=t.date_time)
        assert parse_session_datetime(t.date_time) == t.timestamp.replace(second=0)


def test_shipped_conversation_has_a_fact_that_changes(conv) -> None:
    q = _question(conv, "changed")
    assert q.answer.startswith("Bristol") and q.old_answer == "Leeds"
    sessions = {t.dia_id: t.session for t in conv.turns}
    first, last = min(sessions[e] for e in q.evidence), max(sessions[e] for e in q.evidence)
    assert first < last  # said first, changed in a later session
    early = " ".join(t.text for t in conv.turns if t.session == first)
    late = " ".join(t.text for t in conv.turns if t.session == last)
    assert "Leeds" in early and "Bristol" not in early and "moved into a flat in Bristol" in late


def test_shipped_conversation_has_a_temporal_question_its_turns_answer(conv) -> None:
    q = _question(conv, "temporal")
    assert q.question.startswith("When") and q.answer == "19 May 2024"
    said = _said(conv, *q.evidence)
    assert "19th of May" in said and "three weeks ago" in said
    # the relative mention agrees with the date: said on 9 June 2024, three weeks after 19 May
    (relative,) = [t for t in conv.turns if t.dia_id in q.evidence and "three weeks ago" in t.text]
    assert (relative.timestamp.date() - datetime(2024, 5, 19).date()).days == 21


def test_shipped_conversation_asks_about_something_never_said(conv) -> None:
    q = _question(conv, "not_said")
    assert q.evidence == [] and q.answer.lower().startswith("not in memory")
    assert q.question == "What does Tom do for a living?"
    tom = " ".join(t.text.lower() for t in conv.turns if t.speaker == "Tom")
    assert not any(word in tom for word in ("my job", "i work", "for a living", "my office", "my boss"))


def test_every_question_names_real_turns_and_kinds_are_distinct(conv) -> None:
    assert 3 <= len(conv.questions) <= 4
    assert [q.kind for q in conv.questions][:3] == ["changed", "temporal", "not_said"]  # `--questions 3` keeps them
    ids = {t.dia_id for t in conv.turns}
    assert all(set(q.evidence) <= ids for q in conv.questions)


@pytest.mark.parametrize("broken, message", [
    (lambda d: d["questions"][0].update(kind="opinion"), "unknown question kind"),
    (lambda d: d["questions"][0]["evidence"].append("D9:99"), "names no turn"),
    (lambda d: d["sessions"][1].update(start="2024-01-01T00:00:00"), "starts before"),
    (lambda d: d["sessions"][0]["turns"][3].update(timestamp="2024-03-02T10:00:00"), "out of order"),
    (lambda d: d["sessions"][0]["turns"][0].update(speaker="Zoe"), "two speakers"),
])
def test_a_malformed_demo_file_is_refused(broken, message) -> None:
    from importlib import resources

    doc = json.loads(resources.files("corpora").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    broken(doc)
    with pytest.raises(ValueError, match=message):
        load_demo(json.dumps(doc))


# ---------------------------------------------------------------- engram demo: which conversation


@pytest.fixture
def started(monkeypatch) -> list:
    """``demo.run`` replaced: what it was given, and nothing started."""
    calls: list = []
    monkeypatch.setattr(demo, "run", lambda source, config, timeout_s: calls.append(source) or 0)
    return calls


def test_demo_uses_the_shipped_conversation_without_any_dataset(started, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ENGRAM_DATA__LOCOMO_PATH", str(tmp_path / "absent" / "locomo10.json"))
    assert cli.main(["demo"]) == 0
    (source,) = started
    assert source.user_id == "demo" and len(source.turns) == len(load_demo().turns)
    assert [q.question for q in source.questions] == [q.question for q in load_demo().questions]
    assert source.questions[0].tag == "a fact that changed (was: Leeds)" and source.expected_label == "expected"
    posted = list(demo.locomo_batches(source.turns, source.user_id, demo.DEFAULT_BATCH))
    assert [s for _, s, _ in posted] == ["session_1", "session_2", "session_3", "session_4"]  # one batch a session
    assert sum(len(turns) for _, _, turns in posted) == len(source.turns)

    assert cli.main(["demo", "--questions", "2"]) == 0
    assert [q.tag.split(" (")[0] for q in started[1].questions] == ["a fact that changed", "when"]


def test_demo_locomo_missing_file_is_one_line_and_exit_2(started, monkeypatch, tmp_path, capsys) -> None:
    missing = tmp_path / "absent" / "locomo10.json"
    monkeypatch.setenv("ENGRAM_DATA__LOCOMO_PATH", str(missing))
    for argv in (["demo", "--locomo"], ["demo", "--locomo", "conv-30"], ["demo", "--conversation", "conv-26"]):
        assert cli.main(argv) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1 and "Traceback" not in captured.err and captured.out == ""
        assert lines[0].startswith(f"error: LoCoMo not found at {missing};")
        assert "ENGRAM_DATA__LOCOMO_PATH" in lines[0] and "github.com/snap-research/locomo" in lines[0]
    assert started == []  # refused before anything started


def _tiny_locomo(path: Path) -> Path:
    """Two LoCoMo-shaped conversations of two turns (the real file's form, none of its text)."""
    samples = []
    for sample_id in ("conv-a", "conv-b"):
        conversation = {"speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023",
                        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I paint."},
                                      {"speaker": "Bo", "dia_id": "D1:2", "text": "I row."}]}
        qa = [{"question": f"{sample_id} q{c}", "answer": f"a{c}", "evidence": ["D1:1"], "category": c}
              for c in (4, 2, 1, 4)]
        samples.append({"sample_id": sample_id, "conversation": conversation, "qa": qa})
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


def test_demo_locomo_when_configured(started, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("ENGRAM_DATA__LOCOMO_PATH", str(_tiny_locomo(tmp_path / "locomo10.json")))
    assert cli.main(["demo", "--locomo", "conv-b"]) == 0
    source = started[-1]
    assert source.user_id == "conv-b" and [t.text for t in source.turns] == ["I paint.", "I row."]
    assert [(q.tag, q.question) for q in source.questions] == [
        ("multi-hop", "conv-b q1"), ("temporal", "conv-b q2"), ("single-hop", "conv-b q4")]
    assert source.expected_label == "LoCoMo's answer"

    assert cli.main(["demo", "--locomo", "conv-zz"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "conv-zz" in err and "conv-a, conv-b" in err
    assert len(started) == 1


def test_demo_flags() -> None:
    parse = cli.build_parser().parse_args
    assert (parse(["demo"]).locomo, parse(["demo"]).questions) == (False, None)
    assert (parse(["demo", "--locomo"]).locomo, parse(["demo", "--locomo"]).conversation) == (True, "conv-26")
    assert parse(["demo", "--locomo", "conv-30"]).conversation == "conv-30"
    assert (parse(["demo", "--conversation", "conv-41"]).locomo, parse(["demo", "--conversation", "conv-41"])
            .conversation) == (True, "conv-41")


# ---------------------------------------------------------------- a missing LoCoMo file elsewhere


def test_ingest_locomo_missing_file_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    missing = tmp_path / "nope.json"
    transport_used = []

    def transport(request):  # never reached
        transport_used.append(request)
        raise AssertionError("no request expected")

    import httpx

    code = cli.main(["--url", "http://engram.test", "ingest", "locomo", "conv-26", "--data", str(missing)],
                    transport=httpx.MockTransport(transport))
    assert code == 2 and transport_used == []
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [captured.err.strip()] and "Traceback" not in captured.err
    assert captured.err.startswith(f"error: LoCoMo not found at {missing}; pass --data or set data.locomo_path")
    assert "github.com/snap-research/locomo" in captured.err


def test_load_locomo_missing_file_raises_the_one_line_error(tmp_path) -> None:
    with pytest.raises(LoCoMoNotFoundError, match=r"^LoCoMo not found at .*nope\.json; set data\.locomo_path") as exc:
        load_locomo(tmp_path / "nope.json")
    assert isinstance(exc.value, FileNotFoundError) and "\n" not in str(exc.value)
