"""Credentials kept off the screen and out of every file a command writes.

A store's password can come in a URI (``postgresql://mlflow:PASSWORD@host/db``,
by ``MLFLOW_TRACKING_URI`` or ``tracking.uri=``) or by the environment (MLflow's
``MLFLOW_TRACKING_PASSWORD`` and ``MLFLOW_TRACKING_TOKEN``, PostgreSQL's
``PGPASSWORD``). Hydra saves every override and the composed config of every job
(``multirun.yaml``, ``.hydra/``), and crux records them in MLflow, so a password
must not stay in the URI crux works with: :func:`move_credentials` moves a
PostgreSQL password into ``PGPASSWORD`` of the process, where PostgreSQL's client
library reads it, and the user and password of a tracking server's URI
(``http://alice:PASSWORD@host:5000``, which MLflow accepts) into
``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``, where MLflow's
client reads them; the jobs the process starts inherit them, and the URI is left
without them (:func:`without_credentials`, which writes nothing). :func:`masked`
is what every message goes through.
"""
from __future__ import annotations

import os
import re
from typing import Callable
from urllib.parse import unquote

from cruxlab.store.kinds import KINDS, POSTGRESQL, TRACKING_SERVER, kind_of

PASSWORD_VARIABLE = POSTGRESQL.password_variable
"""Where PostgreSQL's client library (libpq, under psycopg) takes a password that its URI leaves out."""
SERVER_VARIABLES = (TRACKING_SERVER.user_variable, TRACKING_SERVER.password_variable)
"""Where MLflow's client takes the user and password of a tracking server (HTTP basic authentication)."""
SECRET_VARIABLES = tuple(dict.fromkeys(name for kind in KINDS
                                       for name in (kind.password_variable, *kind.token_variables) if name))
"""Every store kind's password and token variables: their values are masked wherever they show."""
MASK = "***"
SHORTEST_SECRET = 4
"""Values of :data:`SECRET_VARIABLES` shorter than this are not searched for: masking ``a`` would garble the text."""
_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^/:@\s'\"]*:)[^@/\s'\"]*@", re.IGNORECASE)
_URI_OVERRIDE = re.compile(r"^(?P<head>[+~]{0,2}tracking\.uri=)(?P<quote>['\"]?)(?P<uri>.*)(?P=quote)$")


def masked(text: str) -> str:
    """``text`` with the password of any URI in it (``postgresql://mlflow:***@host/db``) and the value of any of
    :data:`SECRET_VARIABLES` set in the environment replaced by ``***``."""
    text = _PASSWORD.sub(rf"\g<head>{MASK}@", text)
    for name in SECRET_VARIABLES:
        value = os.environ.get(name, "")
        if len(value) >= SHORTEST_SECRET:
            text = text.replace(value, MASK)
    return text


def without_credentials(uri: str) -> str:
    """``uri`` without the credentials :func:`move_credentials` moves; the environment is left as it is."""
    return _credentials(uri)[0]


def move_credentials(uri: str) -> str:
    """Move the credentials of ``uri`` into the environment, and return ``uri`` without them: for a PostgreSQL
    store the password goes to ``$PGPASSWORD``, the user staying in the URI; for a tracking server the user and
    password go to :data:`SERVER_VARIABLES`, both leaving the URI. Any other URI is returned as it is, the
    environment untouched (a password in it is masked wherever crux shows the URI)."""
    kept, variables = _credentials(uri)
    os.environ.update(variables)
    return kept


def _credentials(uri: str) -> tuple[str, dict[str, str]]:
    """``uri`` without its credentials, and the environment variables that take them (none where it has none)."""
    found, kind = _PASSWORD.match(uri), kind_of(uri)
    if found is None or kind is None or kind.password_variable is None:
        return uri, {}
    user_part = found.group("head")
    password = unquote(uri[len(user_part):found.end() - 1])
    if kind.user_variable is None:
        return user_part[:-1] + "@" + uri[found.end():], {kind.password_variable: password}
    scheme, user = user_part[:-1].split("://", 1)
    return f"{scheme}://{uri[found.end():]}", {kind.user_variable: unquote(user), kind.password_variable: password}


def move_override_credentials(arguments: list[str]) -> list[str]:
    """Move the credentials of every ``tracking.uri=`` override in command-line ``arguments`` into the environment
    (:func:`move_credentials`), and return the arguments without them: done before Hydra saves them."""
    return _each_override(arguments, move_credentials)


def overrides_without_credentials(arguments: list[str]) -> list[str]:
    """Command-line ``arguments`` with every ``tracking.uri=`` override's credentials left out
    (:func:`without_credentials`), for what is shown or recorded; the environment is left as it is."""
    return _each_override(arguments, without_credentials)


def _each_override(arguments: list[str], strip: Callable[[str], str]) -> list[str]:
    """``arguments``, the URI of every ``tracking.uri=`` override replaced by what ``strip`` makes of it."""
    kept = []
    for argument in arguments:
        override = _URI_OVERRIDE.match(argument)
        if override is not None:
            argument = f"{override['head']}{override['quote']}{strip(override['uri'])}{override['quote']}"
        kept.append(argument)
    return kept


def credential_variables(uri: str) -> list[str]:
    """The environment variables, set in this process, that hold the credentials the store of ``uri`` is reached
    with: what a command printed for the user to run again needs set in the user's shell (its values are never
    shown)."""
    kind = kind_of(uri)
    return [name for name in (kind.credential_variables if kind else ()) if os.environ.get(name)]


def needed_to_run(uri: str) -> str:
    """What a command printed for the user to run against the store of ``uri`` needs besides its words:
    ``" with PGPASSWORD set to the store's password"`` where the store takes credentials from the
    environment (:func:`credential_variables`, named, never shown), else nothing."""
    needed = credential_variables(uri)
    what = "password" if needed == [PASSWORD_VARIABLE] else "credentials"
    return f" with {' and '.join(needed)} set to the store's {what}" if needed else ""
