"""An error said in the user's terms: what went wrong, in one line, and where in the user's own code it was raised.

A PINN job runs the user's code (a problem's function, its residuals) inside
crux and JAX, so a traceback holds dozens of frames of which one or two are the
user's. :func:`raised_at` picks the innermost of those: the deepest frame that is
neither crux's nor an installed library's (nor Python's own), as
``heat2d.py:12``; :func:`failure_line` says the error with it.
"""
from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

CRUX_FOLDER = Path(__file__).resolve().parent
LIBRARY_FOLDERS = tuple(Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib", "purelib",
                                                                                 "platlib"))


def is_users(filename: str) -> bool:
    """Whether ``filename`` is the user's code: a real file outside crux, the installed libraries and Python."""
    path = Path(filename)
    if not path.is_file():
        return False  # <frozen ...>, <string>, a lambda typed at a prompt
    path = path.resolve()
    return not any(path.is_relative_to(folder) for folder in (CRUX_FOLDER, *LIBRARY_FOLDERS))


def shown_path(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it, else as it is."""
    path = Path(filename).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else os.fspath(path)


def raised_at(error: BaseException) -> str | None:
    """``file:line`` of the innermost frame of ``error``'s traceback that is the user's code, or None when it
    passed through none (crux refused something on its own)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if is_users(frame.filename)]
    if not frames and isinstance(error, SyntaxError) and error.filename and is_users(error.filename):
        return f"{shown_path(error.filename)}:{error.lineno}"
    return f"{shown_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else None


def failure_line(error: BaseException) -> str:
    """``error`` in one line: its message, and where the user's code raised it with the error's type
    (``ZeroDivisionError: division by zero (heat2d.py:12)``); crux's own refusals are their message alone."""
    text = " ".join(str(error).split()) or type(error).__name__
    where = raised_at(error)
    return f"{type(error).__name__}: {text} ({where})" if where else text
