"""An error said in the user's terms: what went wrong, in one line, and where in the user's own code it was raised.

A PINN job runs the user's code (a problem's function, its residuals) inside
crux and JAX, so a traceback holds dozens of frames of which one or two are the
user's. :func:`raised_at` picks the innermost of those: the deepest frame that is
neither crux's (the library's, or the lab's around it that the same distribution
installs) nor an installed library's (nor Python's own), as ``heat2d.py:12``;
:func:`failure_line` says the error with it.
"""
from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

OWN_PACKAGES = ("crux", "cruxlab", "hydra_plugins.crux_sweeper")
"""The packages of crux's distribution: their frames are never the user's, wherever they are installed from."""
LIBRARY_FOLDERS = tuple(Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib", "purelib",
                                                                                 "platlib"))


def is_users(filename: str, module: str = "") -> bool:
    """Whether a frame's file is the user's code: a real file of a module not crux's, outside the installed
    libraries and Python.

    Args:
        filename: the frame's file.
        module: the frame's module (``__name__``), "" where unknown.

    Returns:
        True for the user's code.
    """
    if module.partition(".")[0] in OWN_PACKAGES[:2] or module.startswith(OWN_PACKAGES[2]):
        return False
    path = Path(filename)
    if not path.is_file():
        return False  # <frozen ...>, <string>, a lambda typed at a prompt
    path = path.resolve()
    return not any(path.is_relative_to(folder) for folder in LIBRARY_FOLDERS)


def shown_path(filename: str) -> str:
    """A file as messages show it.

    Args:
        filename: a file's path.

    Returns:
        Its resolved path, relative to the working directory when it lies below it.
    """
    path = Path(filename).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else os.fspath(path)


def raised_at(error: BaseException) -> str | None:
    """Where the user's code raised ``error``.

    Args:
        error: a raised exception.

    Returns:
        ``file:line`` of the innermost frame of its traceback that is the user's code (a user's file's
        ``SyntaxError``: its line), or None when it passed through none (crux refused something on its own).
    """
    frames = [(frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(error.__traceback__)
              if is_users(frame.f_code.co_filename, frame.f_globals.get("__name__", ""))]
    if not frames and isinstance(error, SyntaxError) and error.filename and is_users(error.filename):
        return f"{shown_path(error.filename)}:{error.lineno}"
    return f"{shown_path(frames[-1][0])}:{frames[-1][1]}" if frames else None


def failure_line(error: BaseException) -> str:
    """``error`` in one line, for a run's record.

    Args:
        error: a raised exception.

    Returns:
        Its message, and where the user's code raised it with the error's type
        (``ZeroDivisionError: division by zero (heat2d.py:12)``); crux's own refusals are their message alone.
    """
    text = " ".join(str(error).split()) or type(error).__name__
    where = raised_at(error)
    return f"{type(error).__name__}: {text} ({where})" if where else text
