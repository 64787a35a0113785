"""The three stateful cores with their journaling declared (``actors/durable.py``), without Ray:
``actors/remote.py`` wraps these classes as actors, and the unit tests run exactly these classes."""

from actors.durable import durable
from actors.tenant_assistants import TenantAssistants
from actors.tenant_episodes import TenantEpisodes
from actors.tenant_tiers import TenantTiers

DROP = ("drop_tenant",)  # deleting a user compacts the journal at once

DurableTiers = durable(TenantTiers, ("add", "delete", "update", "import_tenant"), compacting=DROP,
                       unchanged_when_falsy=("delete", "update"))
DurableEpisodes = durable(TenantEpisodes, ("append", "delivered", "set_summary", "forget", "import_tenant"),
                          compacting=DROP, unchanged_when_falsy=("delivered", "set_summary", "forget"))
DurableAssistants = durable(TenantAssistants, ("add", "forget"), compacting=DROP, unchanged_when_falsy=("forget",))
