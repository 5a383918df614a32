"""The owner's web search provider, as rows of `settings`: which one, SearXNG's address, and
the key sealed with the app's key (sealed.py), as a plugin's secret is: no page shows it again."""
from __future__ import annotations

from ..tools.search_providers import KINDS, SearchProvider
from .rows import Base

KEY = "web_search.key"  # what the provider's key is sealed as: never stored as typed


class WebSearch(Base):
    def search_provider(self) -> SearchProvider | None:
        """The provider the owner chose, its key opened; None when none is (web search is off)."""
        rows = self.settings("web_search.")
        kind = rows.get("web_search.kind", "")
        if kind not in KINDS:
            return None
        stored = rows.get("web_search.key", "")
        return SearchProvider(kind, rows.get("web_search.address", ""), self.seal(KEY).open(stored) if stored else "")

    def search_key_saved(self) -> bool:
        return bool(self.settings("web_search.key").get("web_search.key"))

    def choose_search_provider(self, kind: str, address: str = "", key: str | None = None) -> None:
        """Keep the owner's choice ('' for none); `key` None keeps the key saved, '' forgets it."""
        values = {"web_search.kind": kind, "web_search.address": address}
        if key is not None:
            values["web_search.key"] = self.seal(KEY).seal(key)
        self.set_settings(values)
