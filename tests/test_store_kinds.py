"""Each store kind told from sample URIs, its credentials moved and masked, and no other module telling a store
kind from a URI's prefix: what docs/architecture.md's "Adding a store kind" relies on."""
from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path

import pytest

from cruxlab.store.connection import SERVER_CHECKS, check_postgresql
from cruxlab.store.kinds import (KINDS, POSTGRESQL, SQLITE, TRACKING_SERVER, StoreKind, kind_of, packed_path,
                                 sqlite_file, store_file, store_folder)
from cruxlab.store.secrets import MASK, masked, move_credentials

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [  # uri, kind, port of its server, the file it is read from, the folder of this machine it writes into
    ("sqlite:////data/mlflow.db", SQLITE, None, Path("/data/mlflow.db"), Path("/data")),
    ("sqlite:////data/mlflow.db.gz", SQLITE, None, Path("/data/mlflow.db.gz"), Path("/data")),
    ("postgresql://crux@db/mlflow", POSTGRESQL, 5432, None, None),
    ("postgresql+psycopg://crux@db:6543/mlflow", POSTGRESQL, 6543, None, None),
    ("postgres://crux@db/mlflow", POSTGRESQL, 5432, None, None),
    ("http://127.0.0.1:5000", TRACKING_SERVER, 5000, None, None),
    ("https://mlflow.example.org", TRACKING_SERVER, 443, None, None),
    ("docs/cpu/mlflow.db.xz", None, None, Path("docs/cpu/mlflow.db.xz"), None),
    ("file:///tmp/mlruns", None, None, None, None),
]
PASSWORDS = {SQLITE: None, POSTGRESQL: "postgresql://crux:s3cret@db/mlflow",
             TRACKING_SERVER: "https://alice:s3cret@mlflow.example.org"}
"""A URI with a password for each kind that takes one; None for a kind without credentials."""


@pytest.mark.parametrize("uri, kind, port, file, folder", SAMPLES)
def test_each_kind_is_told_from_its_uri(uri, kind, port, file, folder):
    assert kind_of(uri) is kind
    assert (kind.port(uri) if kind else None) == port
    assert (port is not None) == bool(kind and kind.server)  # a server's disk is the server's: no folder here
    assert store_file(uri) == file and store_folder(uri) == folder
    assert (packed_path(uri) is not None) == uri.endswith((".gz", ".xz"))
    assert sqlite_file(uri) == (file if uri.startswith("sqlite:") else None)


def test_every_kind_has_samples_and_credentials_said():
    assert {kind for _, kind, *_ in SAMPLES} >= set(KINDS)
    assert set(PASSWORDS) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_a_password_in_a_uri_moves_to_its_kinds_variable_and_is_masked(kind, monkeypatch):
    uri = PASSWORDS[kind]
    if uri is None:
        assert kind.password_variable is None
        return
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in kind.credential_variables})
    kept = move_credentials(uri)
    assert "s3cret" not in kept and kind_of(kept) is kind
    assert os.environ[kind.password_variable] == "s3cret"
    assert masked(f"opening {uri}: refused") == f"opening {uri.replace('s3cret', MASK)}: refused"
    assert masked("the password is s3cret") == f"the password is {MASK}"


PREFIX_TEST = re.compile(r"""(startswith|removeprefix)\([^)]*(["'](sqlite:|postgres|https?:)|SQLITE|POSTGRESQL|SERVERS)"""
                         r"""|endswith\([^)]*["']\.(gz|xz)["']""")
"""A prefix test of a store's URI (``uri.startswith("sqlite:///")``, ``uri.startswith(SERVERS)``), or of a packed
store's suffix."""


def test_no_other_module_tells_a_store_kind_from_a_prefix():
    found = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "cruxlab").rglob("*.py"))
             if path.name != "kinds.py"
             for number, line in enumerate(path.read_text().splitlines(), 1) if PREFIX_TEST.search(line)]
    assert found == [], "ask cruxlab.store.kinds instead"


def test_the_recipe_names_what_there_is():
    recipe = (ROOT / "docs" / "architecture.md").read_text().split("**Adding a store kind**")[1].split("\n\n")[1]
    assert set(re.findall(r"`(\w+)=", recipe)) <= {field.name for field in fields(StoreKind)}
    assert all((ROOT / path).is_file() for path in re.findall(r"`([\w/]+\.py)`", recipe))
    assert "SERVER_CHECKS" in recipe and SERVER_CHECKS[POSTGRESQL] is check_postgresql
    assert all(name in recipe for name in ("KINDS", "SAMPLES", "PASSWORDS"))
