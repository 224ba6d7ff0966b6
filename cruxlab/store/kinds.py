"""The kinds of tracking store crux works with, each told from its URI: what every other module asks of a URI.

A SQLite file (``sqlite:///PATH``) lies on this machine, in a folder whose disk
crux checks for room; a PostgreSQL server (``postgresql://USER@HOST/DB``) and a
tracking server (``http(s)://HOST:PORT``) are reached over the network, their
disks being their servers'; a packed store (``mlflow.db.gz`` or ``.xz``, plain or
as ``sqlite:///``) is read from a copy unpacked (:mod:`cruxlab.report.packed`).
Each kind says where its client takes credentials from the environment, which
:mod:`cruxlab.store.secrets` moves them to and masks. A new kind is one more
:class:`StoreKind` in :data:`KINDS` (docs/architecture.md, "Adding a store kind").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

PACKED_SUFFIXES = (".gz", ".xz")
"""The suffixes of a packed store's file (:data:`cruxlab.report.packed.OPENERS` reads each)."""


@dataclass(frozen=True)
class StoreKind:
    """One kind of store: its ``name`` in messages, the URI ``prefixes`` it is told by, whether a ``server`` holds
    it (its disk then being the server's), the default port of each URL scheme it is reached on, and the environment
    variables its client reads credentials from: ``user_variable`` (None: the user stays in the URI),
    ``password_variable`` (None: credentials are not moved out of its URI) and any ``token_variables``."""

    name: str
    prefixes: tuple[str, ...]
    server: bool
    ports: tuple[tuple[str, int], ...] = ()
    user_variable: str | None = None
    password_variable: str | None = None
    token_variables: tuple[str, ...] = ()

    def recognises(self, uri: str) -> bool:
        """Whether ``uri`` names a store of this kind."""
        return uri.startswith(self.prefixes)

    def port(self, uri: str) -> int | None:
        """The port of the server of ``uri``: its own, else its scheme's default; None where it has neither."""
        parts = urlsplit(uri)
        return parts.port or dict(self.ports).get(parts.scheme)

    @property
    def credential_variables(self) -> tuple[str, ...]:
        """Every environment variable its client may take a credential from."""
        return tuple(v for v in (self.user_variable, self.password_variable, *self.token_variables) if v)


SQLITE = StoreKind("SQLite file", ("sqlite:///",), server=False)
POSTGRESQL = StoreKind("PostgreSQL server",
                       ("postgresql://", "postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"),
                       server=True, ports=(("postgresql", 5432), ("postgres", 5432), ("postgresql+psycopg", 5432),
                                           ("postgresql+psycopg2", 5432)),
                       password_variable="PGPASSWORD")
TRACKING_SERVER = StoreKind("tracking server", ("http://", "https://"), server=True,
                            ports=(("http", 80), ("https", 443)), user_variable="MLFLOW_TRACKING_USERNAME",
                            password_variable="MLFLOW_TRACKING_PASSWORD", token_variables=("MLFLOW_TRACKING_TOKEN",))
KINDS = (SQLITE, POSTGRESQL, TRACKING_SERVER)
"""Every kind of store that crux writes runs to and reads them from, told apart by their prefixes."""


def kind_of(uri: str) -> StoreKind | None:
    """The kind of store ``uri`` names; None for any other (MLflow may still take it: it is then passed on as is)."""
    return next((kind for kind in KINDS if kind.recognises(uri)), None)


def is_tracking_server(uri: str) -> bool:
    """Whether ``uri`` is a tracking server's (``http://`` or ``https://``)."""
    return TRACKING_SERVER.recognises(uri)


def sqlite_uri(path: Path | str) -> str:
    """The URI of the SQLite store in the file ``path``."""
    return f"{SQLITE.prefixes[0]}{path}"


def sqlite_file(uri: str) -> Path | None:
    """The file of the SQLite store of ``uri`` (as written in it, not resolved); None for any other store."""
    return Path(uri[len(SQLITE.prefixes[0]):]) if SQLITE.recognises(uri) else None


def store_folder(uri: str) -> Path | None:
    """The folder of this machine that the store of ``uri`` writes into (a SQLite file's); None for a store on a
    server."""
    path = sqlite_file(uri)
    return path.parent if path is not None else None


def packed_path(uri: str) -> Path | None:
    """The file of a packed store (``sqlite:///PATH.gz`` or a path ending in ``.gz`` or ``.xz``); None for any
    other URI."""
    path = uri[len(SQLITE.prefixes[0]):] if SQLITE.recognises(uri) else uri
    return Path(path) if "://" not in path and path.endswith(PACKED_SUFFIXES) else None


def store_file(uri: str) -> Path | None:
    """The file a store of ``uri`` is read from, packed or SQLite; None for a store on a server."""
    return packed_path(uri) or sqlite_file(uri)
