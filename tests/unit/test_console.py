"""The web console's page (serve/console.html) holds together: every element its script looks up exists, and its
API calls are relative (so it works under a Serve route prefix). The browser test is
tests/integration/test_console.py."""

from __future__ import annotations

import re

from serve.ingress import CONSOLE_HTML


def test_every_element_the_script_uses_exists() -> None:
    used = set(re.findall(r'\$\("([a-z-]+)"\)', CONSOLE_HTML))
    defined = set(re.findall(r'id="([a-z-]+)"', CONSOLE_HTML))
    assert used and used <= defined, used - defined


def test_api_calls_are_relative_and_carry_the_key() -> None:
    paths = re.findall(r'api\("(?:GET|POST|PUT|DELETE)", [`"]([^`"]+)', CONSOLE_HTML)
    assert paths and all(p.startswith("v1/") for p in paths), paths
    assert {"v1/health", "v1/turns", "v1/ask", "v1/search"} <= set(paths)
    assert '"Authorization"] = "Bearer " + key' in CONSOLE_HTML and "sessionStorage" in CONSOLE_HTML
