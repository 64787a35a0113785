"""The capacity model (``cluster/capacity.py``): memory- and CPU-bound plans, costs from a bench.scale result."""

from __future__ import annotations

import json

import pytest

from cluster.capacity import GIB, MIB, NodeSpec, ShardCosts, Workload, main, plan

COSTS = ShardCosts(bytes_per_memory=4096, bytes_per_tenant=0, search_ms=4.0, embed_ms=6.0, insert_ms=2.0,
                   max_memory_fraction=0.5)
NODE = NodeSpec(cpus=8, memory_gb=32, target_utilisation=0.5)  # 16 GB for 8 shards: 2 GB = 524,288 memories each


def scale_result() -> dict:
    return {"sizes": [{"memories": 1000, "search_p50_ms": 1.0, "search_p95_ms": 2.0, "search_with_embed_p50_ms": 9.0,
                       "insert_per_s": 900.0, "rss_mb": 400.0, "snapshot_mb": 1.0, "restart_s": 0.1},
                      {"memories": 100_000, "search_p50_ms": 3.0, "search_p95_ms": 5.0,
                       "search_with_embed_p50_ms": 11.0, "insert_per_s": 500.0, "rss_mb": 800.0, "snapshot_mb": 90.0,
                       "restart_s": 2.0},
                      {"memories": 10_000, "search_p50_ms": 2.0, "search_p95_ms": 3.0, "search_with_embed_p50_ms": 10.0,
                       "insert_per_s": 800.0, "rss_mb": 440.0, "snapshot_mb": 9.0, "restart_s": 0.5}],
            "tenants": {"tenants": 1000, "memories": 50_000, "rss_mb": 700.0, "rss_mb_per_tenant": 0.5,
                        "search_p50_ms": 2.5, "restart_s": 1.0},
            "embed_p50_ms": 8.0}


def test_memory_bound():
    # 10,000 users x 1,000 memories x 4 kB = 38.1 GB: 20 shards of 2 GB; 3 nodes of 16 GB for shards
    p = plan(Workload(users=10_000, memories_per_user=1000, queries_per_s=10), COSTS, NODE)
    assert (p.tier_shards, p.nodes, p.bound) == (20, 3, "memory")
    assert p.memory_gb_total == pytest.approx(10_000 * 1000 * 4096 / GIB, abs=0.1)
    assert p.cpu_cores_needed == pytest.approx(0.1)


def test_cpu_bound_counts_searches_embeddings_and_writes():
    # 1,000 q/s x 10 ms + 500 w/s x 2 ms = 11 busy cores; 22 shards at 50%; 3 nodes of 8 cores
    p = plan(Workload(users=100, memories_per_user=100, queries_per_s=1000, writes_per_s=500), COSTS, NODE)
    assert (p.cpu_cores_needed, p.tier_shards, p.nodes, p.bound) == (11.0, 22, 3, "cpu")
    busier = plan(Workload(users=100, memories_per_user=100, queries_per_s=1000, writes_per_s=500), COSTS,
                  NodeSpec(cpus=8, memory_gb=32, target_utilisation=1.0))
    assert busier.tier_shards == 11


def test_an_idle_tiny_workload_still_gets_a_shard_and_a_node():
    p = plan(Workload(users=1, memories_per_user=0, queries_per_s=0), COSTS, NODE)
    assert (p.tier_shards, p.nodes) == (1, 1)


def test_from_scale_bench_reads_the_two_largest_sizes():
    costs = ShardCosts.from_scale_bench(scale_result())
    per_memory = (800.0 - 440.0) * MIB / 90_000  # the two largest, whatever the order in the list
    assert costs.bytes_per_memory == pytest.approx(per_memory)
    assert costs.bytes_per_tenant == pytest.approx(0.5 * MIB - 50 * per_memory)
    assert (costs.search_ms, costs.embed_ms, costs.insert_ms) == (3.0, 8.0, 2.0)
    assert ShardCosts.from_scale_bench(scale_result(), search_ms=9.0).search_ms == 9.0


def test_from_scale_bench_floors_the_tenant_overhead_and_refuses_what_it_cannot_use():
    r = scale_result()
    r["tenants"]["rss_mb_per_tenant"] = 0.001
    assert ShardCosts.from_scale_bench(r).bytes_per_tenant == 0.0
    r["sizes"] = r["sizes"][:1]
    with pytest.raises(ValueError, match="two different sizes"):
        ShardCosts.from_scale_bench(r)
    flat = scale_result()
    flat["sizes"][1]["rss_mb"] = 300.0
    with pytest.raises(ValueError, match="did not grow"):
        ShardCosts.from_scale_bench(flat)
    with pytest.raises(ValueError, match="embed_p50_ms"):
        ShardCosts.from_scale_bench({"sizes": [], "tenants": {}})


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="users"):
        Workload(users=0, memories_per_user=1, queries_per_s=1)
    with pytest.raises(ValueError, match="target_utilisation"):
        NodeSpec(cpus=4, memory_gb=8, target_utilisation=1.5)
    with pytest.raises(ValueError, match="max_memory_fraction"):
        ShardCosts(bytes_per_memory=1, bytes_per_tenant=0, search_ms=1, embed_ms=1, insert_ms=1,
                   max_memory_fraction=0)


def test_cli_with_a_scale_json_and_with_explicit_costs(tmp_path, capsys):
    path = tmp_path / "scale.out"
    path.write_text("progress...\n" + json.dumps(scale_result()) + "\n")
    common = ["--users", "1000", "--memories-per-user", "100", "--qps", "50", "--node-cpus", "4",
              "--node-memory-gb", "16"]
    out = main([*common, "--scale-json", str(path)])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == out
    assert out["inputs"]["costs"]["search_ms"] == 3.0 and out["bound"] in ("cpu", "memory")
    explicit = main([*common, "--bytes-per-memory", "4096", "--bytes-per-tenant", "0", "--search-ms", "4",
                     "--embed-ms", "6", "--insert-ms", "2"])
    assert explicit["cpu_cores_needed"] == 0.5 and explicit["tier_shards"] == 1
    with pytest.raises(SystemExit):
        main([*common, "--search-ms", "4"])
    assert "--bytes-per-memory" in capsys.readouterr().err
