"""What one's account page and the People page show, whichever form answered: the
theme, the password, one's files, one's tokens this month (usage.py), one's agents' memories,
one's API keys (accounts.py, api_keys.py), the people with their files, and who may use the API."""
from __future__ import annotations

from typing import Any

from litestar import Request, Response

from ..accounts.api_keys import EXPIRIES, MODES, ApiKeys
from ..accounts.invitations import DAYS_DEFAULT, DAYS_OFFERED, STATE_WORDS, Invitations
from ..accounts.rules import Accounts
from ..tables import NAME_MAX, ROLE_WORDS, THEMES
from ..tools.search_providers import KINDS
from . import render
from .toolkit import me, worker
from .usage import own_usage


def api_base(request: Request) -> str:
    """Where the API is, as the person reached this page (behind a proxy: as it forwarded)."""
    scheme = "https" if request.headers.get("x-forwarded-proto", "").lower() == "https" else request.url.scheme
    return f"{scheme}://{request.url.netloc}/v1"


def account_view(request: Request, status_code: int = 200, **context: Any) -> Response:
    """The account page; `context` says what a form left to show (an error, a note, a new key)."""
    s = worker(request)
    person = me(request)
    keys = ApiKeys(s.store)
    agents = s.store.agents(person.id)
    shown: dict[str, Any] = {"error": "", "changed": False, "saved": "", "theme_error": "", "key_error": "",
                             "key_saved": "", "new_key": "", "key_name": "", "key_expiry": "", "key_agent": ""}
    return render.page(request, "account.html", status_code=status_code, themes=THEMES,
                       keys=keys.of(person), api_open=keys.settings().allows(person), api_base=api_base(request),
                       agents=agents, agent_names={a.id: a.name for a in agents}, expiries=EXPIRIES,
                       memory_counts=s.store.memory_counts(person.id), used=s.store.person_files(person.id),
                       storage_max=s.config.storage_max, name_max=NAME_MAX, usage=own_usage(s.store, person.id),
                       **(shown | context))


def people_view(request: Request, status_code: int = 200, **context: Any) -> Response:
    """The People page (each person with their role and how much of their room for files they
    use, the invitations, and for the owner who may use the API and web search); `context` as
    for the account page."""
    s = worker(request)
    shown: dict[str, Any] = {"name": "", "error": "", "saved": "", "api_error": "", "api_saved": "", "search_error": "",
                             "search_saved": "", "search_typed": None, "role_error": "", "invite_error": "",
                             "invite_typed": {"days": DAYS_DEFAULT, "role": "member", "note": ""}}
    chosen = s.store.search_provider()
    return render.page(request, "people.html", status_code=status_code, people=Accounts(s.store).all(),
                       search=chosen, search_kinds=KINDS, search_key_saved=s.store.search_key_saved(),
                       name_max=NAME_MAX, api=ApiKeys(s.store).settings(), modes=MODES, used=s.store.files_by_person(),
                       storage_max=s.config.storage_max, invitations=Invitations(s.store).listed(),
                       days_offered=DAYS_OFFERED, states=STATE_WORDS, roles=ROLE_WORDS, **(shown | context))
