"""bench.cluster's reading of the replica's Server-Timing steps, and bench.two_nodes' table."""

from bench.cluster import step_medians
from bench.two_nodes import markdown, tenant_turns


def test_step_medians_take_each_steps_longest_run_and_the_time_outside_the_replica():
    timed = [(0.030, {"embed": [8.0], "tier.search": [2.0], "app": [12.0]}),
             (0.050, {"embed": [10.0], "tier.search": [1.0, 4.0], "app": [20.0]}),
             (0.040, {})]  # a response without the header counts for nothing
    steps = step_medians(timed)
    assert steps == {"app": 16.0, "embed": 9.0, "outside_app": 24.0, "tier.search": 3.0}


def test_two_nodes_turns_are_distinct_and_the_table_names_both_nodes():
    turns = tenant_turns("user-001", 12)
    assert len({t["text"] for t in turns}) == 12 and all("user-001" in t["text"] for t in turns)
    steps = {"embed": 7.0, "tier.search": 2.0, "router.route": 2.5, "app": 12.0}
    table = markdown({
        "actors_per_node": {"head": ["tier-0", "router-0"], "worker": ["tier-1", "router-1"]},
        "tier_tenants": {"tier-0": 3, "tier-1": 5}, "tier_searches_served": {"tier-0": 30, "tier-1": 50},
        "tier_searches_sent": {"tier-0": 30, "tier-1": 50}, "router_tenants": {"router-0": 4, "router-1": 4},
        "searches_per_node": {"head": 30, "worker": 50}, "search_p50_ms": {"head": 20.0, "worker": 23.0},
        "search_steps_p50_ms": {"head": steps, "worker": steps}, "ingest_turns_per_s": 40.0})
    assert "tier-1: tenants / searches answered (sent) | 5 / 50 (50)" in table and "on the worker" in table
