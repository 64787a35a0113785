"""The three stateful cores with their journaling declared (``cores/durable.py``), without Ray:
``actors/remote.py`` wraps these classes as actors, and the unit tests run exactly these classes."""

from cores.durable import durable
from cores.tenant_assistants import TenantAssistants
from cores.tenant_episodes import TenantEpisodes
from cores.tenant_tiers import TenantTiers

DROP = ("drop_tenant",)  # deleting a user compacts the journal at once

DurableTiers = durable(TenantTiers, ("add", "delete", "update", "import_tenant"), compacting=DROP,
                       unchanged_when_falsy=("delete", "update"))
DurableEpisodes = durable(TenantEpisodes, ("append", "delivered", "set_summary", "forget", "import_tenant"),
                          compacting=DROP, unchanged_when_falsy=("delivered", "set_summary", "forget"))
DurableAssistants = durable(TenantAssistants, ("add", "forget"), compacting=DROP, unchanged_when_falsy=("forget",))
