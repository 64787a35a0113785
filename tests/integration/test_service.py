"""The whole service end to end over HTTP on a real local Ray + Serve (two nodes, see conftest)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from core import timings
from core.config import load_config
from corpora.locomo import load_locomo
from memory.time_expressions import ground
from tests.integration.conftest import ADMIN_KEY, NAMESPACE, SPANS, auth_headers, service_args

USER = "conv-26"
TURNS = 40


@pytest.fixture(scope="module")
def client(service):
    with httpx.Client(base_url=service, timeout=300, headers=auth_headers(ADMIN_KEY)) as c:
        yield c


@pytest.fixture(scope="module")
def conversation():
    convs = {c.sample_id: c for c in load_locomo(load_config().data.locomo_path)}
    return convs[USER].turns[:TURNS]


@pytest.fixture(scope="module")
def ingested(client, conversation):
    """The first 40 turns of a LoCoMo train conversation, posted in batches of 16."""
    results = []
    for start in range(0, len(conversation), 16):
        batch = conversation[start : start + 16]
        body = {"user_id": USER, "session_id": "s1", "turns": [
            {"id": t.dia_id, "speaker": t.speaker, "text": t.text, "timestamp": t.timestamp.isoformat(),
             "date_time": t.date_time} for t in batch]}
        r = client.post("/v1/turns", json=body)
        assert r.status_code == 200, r.text
        results.append(r.json())
    return results


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"]), body
    return body["error"]


def test_ingest_acknowledges_every_turn_and_closes_segments(ingested, conversation, client):
    ids = [res["id"] for batch in ingested for res in batch["results"]]
    assert ids == [t.dia_id for t in conversation]
    assert all(res["admitted"] and res["type"] for batch in ingested for res in batch["results"])
    assert sum(b["segments_closed"] for b in ingested) >= 3  # 160-token segments over 40 turns
    listed = client.get("/v1/memories", params={"user_id": USER, "limit": 1000}).json()
    assert listed["total"] == TURNS  # L1 holds 20; the rest moved to L2, none evicted (L2: 200)
    assert {m["tier"] for m in listed["memories"]} == {"l1", "l2"}
    assert sorted(m["id"] for m in listed["memories"]) == sorted(ids)


def test_search_finds_a_turn_by_its_content_in_either_tier(ingested, conversation, client):
    for turn in (conversation[0], conversation[-1]):  # the first one lives in L2 by now
        r = client.post("/v1/search", json={"user_id": USER, "query": turn.text, "k": 5})
        assert r.status_code == 200, r.text
        body = r.json()
        assert turn.dia_id in [m["id"] for m in body["memories"]]
        hit = next(m for m in body["memories"] if m["id"] == turn.dia_id)
        assert hit["text"] == turn.text and hit["metadata"]["speaker"] == turn.speaker
        assert hit["path"] == ("l1" if hit["tier"] == "l1" else "gate")
        assert body["segments"], "the router activates segments for the query"
        assert all(set(s["paths"]) <= {"global", "vec", "kw", "newest", "open"} for s in body["segments"])
        steps = timings.parse(r.headers["server-timing"])  # where the time went, through Serve's proxy
        assert {"embed", "tier.search", "router.route", "app"} <= set(steps)
        assert max(steps["tier.search"] + steps["router.route"] + steps["embed"]) <= steps["app"][0]


def test_ask_answers_from_verbatim_evidence_with_a_token_bill(ingested, conversation, client):
    r = client.post("/v1/ask", json={"user_id": USER, "question": "What did Caroline research?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"].strip()
    # the turn as posted, word for word, with its relative dates grounded on its session date (episodic.ground_dates)
    lines = {t.dia_id: f"[{t.date_time}] {t.speaker}: {ground(t.text, t.timestamp.date())}" for t in conversation}
    assert body["evidence"], "assistants returned evidence from the routed segments"
    for e in body["evidence"]:
        assert e["content"] == lines[e["turn_id"]]  # verbatim, never paraphrased
    tokens = body["tokens"]
    assert tokens["assistants"]["prompt"] > 0 and tokens["master"]["prompt"] > 0
    assert tokens["total"] == tokens["assistants"]["total"] + tokens["master"]["total"]


def test_tenants_do_not_see_each_other(ingested, client):
    r = client.post("/v1/turns", json={"user_id": "someone-else", "turns": [
        {"id": "D1:1", "speaker": "Zed", "text": "My password hint is the blue heron."}]})
    assert r.status_code == 200
    other = client.post("/v1/search", json={"user_id": "someone-else", "query": "Caroline support group"}).json()
    assert [m["id"] for m in other["memories"]] == ["D1:1"]
    assert other["memories"][0]["text"] == "My password hint is the blue heron."
    mine = client.get("/v1/memories/D1:1", params={"user_id": USER}).json()
    assert mine["metadata"]["speaker"] != "Zed"
    assert client.delete("/v1/users/someone-else").json()["memories"] == 1
    assert client.get("/v1/memories", params={"user_id": USER, "limit": 1}).json()["total"] == TURNS


@pytest.mark.parametrize(("method", "path", "body", "status", "param"), [
    ("post", "/v1/turns", {"user_id": "bad id!", "turns": [{"speaker": "a", "text": "b"}]}, 422, "user_id"),
    ("post", "/v1/turns", {"user_id": "u", "turns": []}, 422, "turns"),
    ("post", "/v1/turns", {"user_id": "u", "turns": [{"speaker": "a", "text": "x" * 8001}]}, 422, "turns.0.text"),
    ("post", "/v1/turns", {"user_id": "u", "turns": [{"speaker": "a", "text": "b", "mood": 1}]}, 422, "turns.0.mood"),
    ("post", "/v1/turns", {"user_id": "u", "turns": [{"speaker": "a", "text": "b", "timestamp": "noon"}]}, 422,
     "turns.0.timestamp"),
    ("post", "/v1/turns", {"user_id": "u", "turns": [{"id": "x", "speaker": "a", "text": "b"}] * 2}, 409, "turns"),
    ("post", "/v1/search", {"user_id": USER, "query": "q", "k": 0}, 422, "k"),
    ("post", "/v1/search", {"user_id": USER, "query": ""}, 422, "query"),
    ("post", "/v1/ask", {"user_id": USER, "question": "q", "kind": "adversarial"}, 422, "kind"),
    ("post", "/v1/ask", {"user_id": USER, "question": "q", "category": 4}, 422, "category"),
    ("get", "/v1/memories/no-such-id?user_id=" + USER, None, 404, "memory_id"),
    ("delete", "/v1/memories/no-such-id?user_id=" + USER, None, 404, "memory_id"),
    ("get", "/v1/memories", None, 422, "user_id"),
    ("get", "/v1/nowhere", None, 404, None),
    ("post", "/v1/turns", {"user_id": "u", "metadata": {"speaker": "x"}, "turns": [{"speaker": "a", "text": "b"}]},
     422, "metadata"),
    ("post", "/v1/search", {"user_id": "u", "query": "q", "filters": {"since": "2024-01-02", "until": "2024-01-01"}},
     422, "filters"),
    ("post", "/v1/search", {"user_id": "u", "query": "q", "filters": {"agent_id": "a"}}, 422, "filters.agent_id"),
    ("get", "/v1/memories?user_id=u&metadata=not-json", None, 400, "metadata"),
    ("get", "/v1/memories?user_id=u&since=2024-01-02&until=2024-01-01", None, 400, "since"),
    ("delete", "/v1/memories?user_id=u", None, 400, "agent_id"),
    ("put", "/v1/memories/no-such-id", {"user_id": "u", "text": "x"}, 404, "memory_id"),
    ("put", "/v1/memories/no-such-id", {"user_id": "u"}, 422, "text"),
    ("get", "/v1/memories/no-such-id/history?user_id=u", None, 404, "memory_id"),
])
def test_bad_requests_get_4xx_with_an_error_body_and_change_nothing(ingested, client, method, path, body, status,
                                                                    param):
    before = client.get("/v1/memories", params={"user_id": "u", "limit": 1}).json()["total"]
    r = client.request(method.upper(), path, json=body)
    assert r.status_code == status, r.text
    err = error_of(r)
    assert err["param"] == param and err["message"], err
    assert client.get("/v1/memories", params={"user_id": "u", "limit": 1}).json()["total"] == before == 0


def test_malformed_json_is_a_422(client):
    r = client.post("/v1/turns", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and error_of(r)["type"] == "invalid_request_error"


def test_delete_one_memory_removes_it_from_tiers_and_segments(ingested, conversation, client):
    victim = conversation[5].dia_id
    r = client.delete(f"/v1/memories/{victim}", params={"user_id": USER})
    assert r.status_code == 200 and r.json()["memories"] == 1 and r.json()["turns"] >= 1
    assert client.get(f"/v1/memories/{victim}", params={"user_id": USER}).status_code == 404
    hits = client.post("/v1/search", json={"user_id": USER, "query": conversation[5].text, "k": 20}).json()
    assert victim not in [m["id"] for m in hits["memories"]]
    assert all(victim not in s["turn_ids"] for s in hits["segments"] if "open" in s["paths"])


def test_health_metrics_and_openapi(ingested, client):
    health = client.get("/v1/health").json()
    assert health["status"] == "ok" and len(health["actors"]) == 5 and all(health["actors"].values())
    metrics = client.get("/metrics").text
    assert 'engram_requests_total{route="/v1/turns",status="200"}' in metrics
    assert "engram_admissions_total" in metrics
    spec = client.get("/openapi.json").json()
    assert {"/v1/turns", "/v1/search", "/v1/ask", "/v1/memories", "/v1/health"} <= set(spec["paths"])


def test_a_new_driver_reattaches_to_the_named_actors(ingested, ray_cluster):
    """A separate driver process finds the tenant's memories through the actors' names alone."""
    overrides = json.dumps(service_args()["config"])
    code = (
        "import json, ray\n"
        "from core.config import load_config\n"
        "from serve.topology import Topology\n"
        f"ray.init(address='{ray_cluster.address}', namespace='elsewhere', log_to_driver=False)\n"
        f"topo = Topology.connect(load_config('cpu', json.loads({overrides!r})))\n"
        f"items, total = ray.get(topo.tier_for('{USER}').list.remote('{USER}', 0, 1000))\n"
        "print(json.dumps({'total': total, 'namespace': topo.config.cluster.namespace}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=ray_cluster.env)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"total": TURNS - 1, "namespace": NAMESPACE}  # one was deleted above


def test_turns_with_and_without_a_time_zone_mix_in_one_answer(client):
    """Naive times (LoCoMo's) and defaulted ones (now, UTC) end up in one evidence list: both are UTC."""
    r = client.post("/v1/turns", json={"user_id": "clock", "turns": [
        {"id": "a", "speaker": "Ann", "text": "My bike is in the blue shed.", "timestamp": "2023-05-08T13:56:00"},
        {"id": "b", "speaker": "Ann", "text": "The blue shed key is under the mat.",
         "timestamp": "2023-05-09T10:00:00+02:00"},
        {"id": "c", "speaker": "Ann", "text": "I moved the bike to the blue shed again."}]})
    assert r.status_code == 200, r.text
    r = client.post("/v1/ask", json={"user_id": "clock", "question": "Where is the bike?"})
    assert r.status_code == 200, r.text
    stored = {m["id"]: m["metadata"]["timestamp"] for m in
              client.get("/v1/memories", params={"user_id": "clock"}).json()["memories"]}
    assert stored["a"] == "2023-05-08T13:56:00+00:00" and stored["b"] == "2023-05-09T08:00:00+00:00"
    assert stored["c"].endswith("+00:00")
    assert client.delete("/v1/users/clock").status_code == 200


def test_a_repeat_is_a_noop_pointing_at_the_memory_and_an_update_supersedes_the_old_fact(client):
    r = client.post("/v1/turns", json={"user_id": "mover", "turns": [
        {"id": "ny", "speaker": "Ann", "text": "I live in New York."},
        {"id": "chat", "speaker": "Ann", "text": "Work was busy today."}]})
    assert r.status_code == 200, r.text
    r = client.post("/v1/turns", json={"user_id": "mover", "turns": [
        {"id": "again", "speaker": "Ann", "text": "I live in New York!"},
        {"id": "bos", "speaker": "Ann", "text": "I just moved to Boston."},
        {"id": "other", "speaker": "Bo", "text": "I live in New York."}]})  # another speaker's fact is theirs
    assert r.status_code == 200, r.text
    results = {x["id"]: x for x in r.json()["results"]}
    assert not results["again"]["admitted"] and results["again"]["duplicate_of"] == "ny"
    assert results["bos"]["admitted"] and results["bos"]["supersedes"] == "ny"
    assert results["other"]["admitted"] and results["other"]["duplicate_of"] is None
    memories = {m["id"]: m for m in client.get("/v1/memories", params={"user_id": "mover"}).json()["memories"]}
    assert set(memories) == {"ny", "chat", "bos", "other"}  # the old fact stays, as history
    assert memories["ny"]["metadata"]["superseded_by"] == "bos" and memories["bos"]["metadata"]["supersedes"] == "ny"
    assert client.delete("/v1/users/mover").status_code == 200


def test_scopes_filters_updates_and_history_over_http(client):
    """agent_id / run_id scope every read; filters and a threshold narrow a search; PUT keeps the old text as
    history; DELETE /v1/memories removes one scope and nothing else."""
    def post(agent, run, turns, **extra):
        r = client.post("/v1/turns", json={"user_id": "scoped", "agent_id": agent, "run_id": run, **extra,
                                           "turns": turns})
        assert r.status_code == 200, r.text

    post("coach", "r1", [{"id": "c1", "speaker": "Ann", "text": "My marathon training starts in June.",
                          "timestamp": "2023-05-08T10:00:00"},
                         {"id": "c2", "speaker": "Ann", "text": "I run ten kilometres every Sunday.",
                          "timestamp": "2023-05-09T10:00:00"}], metadata={"project": "fitness"})
    post("chef", "r2", [{"id": "f1", "speaker": "Ann", "text": "My favourite dish is mushroom risotto.",
                         "timestamp": "2024-02-01T10:00:00"},
                        {"id": "f2", "speaker": "Ann", "text": "I run a small supper club on Sundays.",
                         "timestamp": "2024-02-02T10:00:00"}])

    def search(**body):
        r = client.post("/v1/search", json={"user_id": "scoped", "query": "What does Ann do on Sundays?", "k": 10,
                                            **body})
        assert r.status_code == 200, r.text
        return r.json()

    assert {m["id"] for m in search()["memories"]} == {"c1", "c2", "f1", "f2"}
    coach = search(agent_id="coach")
    assert {m["id"] for m in coach["memories"]} == {"c1", "c2"}
    assert all(m["agent_id"] == "coach" and m["run_id"] == "r1" for m in coach["memories"])
    assert {t for seg in coach["segments"] for t in seg["turn_ids"]} <= {"c1", "c2"}
    assert {m["id"] for m in search(filters={"metadata": {"project": "fitness"}})["memories"]} == {"c1", "c2"}
    assert {m["id"] for m in search(filters={"since": "2024-01-01T00:00:00Z"})["memories"]} == {"f1", "f2"}
    assert search(run_id="r2", agent_id="coach")["memories"] == []
    every = search()["memories"]
    cut = max(m["score"] for m in every)
    assert [m["score"] >= cut for m in search(threshold=cut)["memories"]] == [True]

    r = client.post("/v1/ask", json={"user_id": "scoped", "question": "What does Ann do on Sundays?",
                                     "agent_id": "chef"})
    assert r.status_code == 200, r.text
    assert {e["turn_id"] for e in r.json()["evidence"]} <= {"f1", "f2"}

    listed = client.get("/v1/memories", params={"user_id": "scoped", "run_id": "r1",
                                                "metadata": '{"speaker": "Ann"}', "until": "2023-05-09T00:00:00"})
    assert [m["id"] for m in listed.json()["memories"]] == ["c1"] and listed.json()["total"] == 1
    assert listed.json()["memories"][0]["event_time"].startswith("2023-05-08T10:00:00")

    r = client.put("/v1/memories/c2", json={"user_id": "scoped", "text": "I run twelve kilometres every Sunday."})
    assert r.status_code == 200, r.text
    assert r.json()["text"].startswith("I run twelve") and r.json()["updated_at"] and r.json()["agent_id"] == "coach"
    history = client.get("/v1/memories/c2/history", params={"user_id": "scoped"}).json()
    assert [(v["version"], v["event"], v["text"][:12]) for v in history["versions"]] == [
        (1, "ADD", "I run ten ki"), (2, "UPDATE", "I run twelve")]
    top = search(query="twelve kilometres", agent_id="coach")["memories"][0]
    assert top["id"] == "c2" and top["text"].startswith("I run twelve")

    r = client.delete("/v1/memories", params={"user_id": "scoped", "agent_id": "coach"})
    assert r.status_code == 200, r.text
    assert r.json()["memories"] == 2 and r.json()["turns"] >= 2
    assert {m["id"] for m in search()["memories"]} == {"f1", "f2"}
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/v1/memories/{memory_id}"]) == {"get", "put", "delete"}
    assert set(paths["/v1/memories/{memory_id}/history"]) == {"get"} and set(paths["/v1/memories"]) == {"get", "delete"}
    assert client.delete("/v1/users/scoped").status_code == 200


def test_one_ask_is_one_span_tree_with_ids_and_tokens_and_no_user_text(client):
    question = "Where does Ann keep the purple kayak?"
    r = client.post("/v1/turns", json={"user_id": "traced", "turns": [
        {"id": "k1", "speaker": "Ann", "text": "The purple kayak hangs in the garage."},
        {"id": "k2", "speaker": "Ann", "text": "I paddled the purple kayak on Sunday."}]})
    assert r.status_code == 200, r.text
    r = client.post("/v1/ask", json={"user_id": "traced", "question": question})
    assert r.status_code == 200, r.text
    reply = r.json()
    spans = [json.loads(line) for line in SPANS.read_text().splitlines()]
    root = [s for s in spans if s["name"] == "POST /v1/ask" and s["attributes"]["engram.user_id"] == "traced"][-1]
    tree = [s for s in spans if s["trace_id"] == root["trace_id"]]
    children = {s["name"] for s in tree if s["parent_id"] == root["span_id"]}
    assert children == {"embed", "router.route", "assistants.extract", "master.answer"}, children
    master_span = next(s for s in tree if s["name"] == "master.answer")
    master = master_span["attributes"]
    assert master["engram.evidence_turn_ids"] == [e["turn_id"] for e in reply["evidence"]]
    # the master deployment's calls to its model pool join the trace (the context crosses the Serve call)
    calls = [s for s in tree if s["name"] == "llm.generate"]
    assert calls and all(c["parent_id"] == master_span["span_id"] for c in calls)
    assert sum(c["attributes"]["engram.prompt_tokens"] for c in calls) == reply["tokens"]["master"]["prompt"]
    assert master["engram.prompt_tokens"] == reply["tokens"]["master"]["prompt"]
    assert root["attributes"]["engram.prompt_tokens"] == (reply["tokens"]["assistants"]["prompt"]
                                                         + reply["tokens"]["master"]["prompt"])
    assert all(s["end_ns"] >= s["start_ns"] >= root["start_ns"] for s in tree)
    assert "kayak" not in json.dumps(tree)  # ids and counts only, never user text (tracing.record_text)
    write = [s for s in spans if s["name"] == "POST /v1/turns" and s["attributes"]["engram.user_id"] == "traced"]
    names = {s["name"] for s in spans if s["trace_id"] == write[-1]["trace_id"]}
    assert {"embed", "admission", "tier.add", "router.append"} <= names
    assert client.delete("/v1/users/traced").status_code == 200
