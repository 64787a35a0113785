"""Durability under kills, reduced for CI (the full 5,000-turn run with a node kill: ``python -m bench.chaos``).

Four client threads ingest 300 turns for 6 users over HTTP while a random tier / router / assistant actor
is SIGKILLed every 1.5 s; unacknowledged batches are resent with the same turn ids. Every acknowledged turn
must then be in its user's tier memory and episodic stream, and every closed segment on an assistant actor;
none may be stored twice or be in only one of the two.
"""

from __future__ import annotations

from bench import chaos
from core.config import load_config
from tests.integration.conftest import ADMIN_KEY, service_args


def test_no_acknowledged_turn_is_lost_while_actors_are_killed(service):
    config = load_config("cpu", service_args()["config"])
    result = chaos.run(service, config, turns=300, kill_every=1.5, tenants=6, writers=4,
                       data=config.data.locomo_path, prefix="chaos", api_key=ADMIN_KEY)
    print(f"\nchaos: {result}")
    assert result["turns_acked"] == 300
    assert result["kills"] >= 2, result
    assert result["lost"] == 0 and result["turns_found"] == 300, result
    assert result["missing_segments"] == 0, result  # every closed segment reached an assistant actor
    assert result["stored_twice"] == 0 and result["half_applied"] == 0, result  # resends applied exactly once
