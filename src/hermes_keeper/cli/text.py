"""Text another program wrote (ids, titles, sources, messages, file and process names), made
safe for a terminal. Every human renderer prints such text through :func:`term` or
:func:`cell`; ``--json`` output keeps it exact.
"""

from __future__ import annotations

import os
import re

from rich.text import Text

#: C0 and C1 controls (ESC starts the terminal's escape sequences; U+0085 is NEL), DEL, the
#: Unicode line and paragraph separators (U+2028, U+2029: a line break to many terminals and
#: pagers), and the bidi marks, overrides and isolates that show text in another order than it is.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


#: The few typographic characters the keeper prints itself, for a terminal that is not UTF-8.
_ASCII = str.maketrans(
    {"\u00b7": "-", "\u2026": "...", "\u2192": "->", "\u2013": "-", "\u2014": "-", "\u00d7": "x"}
)


def ascii_only() -> bool:
    """The locale is not UTF-8 (``LANG=C``, ``LC_ALL=C``, none at all as under cron): print no box
    characters, no bullets, no ellipsis. The first of ``LC_ALL``, ``LC_CTYPE``, ``LANG`` that is
    set decides, as POSIX says; an ``LC_CTYPE=C.UTF-8`` beside a C ``LANG`` is Python's own
    coercion of the C locale (PEP 538), not the user's choice."""
    env = os.environ
    for var in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = env.get(var)
        if not value or (var == "LC_CTYPE" and value == "C.UTF-8" and env.get("LANG", "C") in ("C", "POSIX")):
            continue
        return not re.search("utf-?8", value, re.IGNORECASE)
    return True


def ascii_text(text: str) -> str:
    """``text`` in ASCII: the keeper's own bullets and ellipses spelt out, anything else escaped."""
    return text.translate(_ASCII).encode("ascii", "backslashreplace").decode("ascii")


def term(value) -> str:
    """``value`` as printable text: controls as ``\\x1b``-style escapes, bytes that were not
    UTF-8 (kept by ``surrogateescape``) as U+FFFD. ``None`` is empty."""
    if value is None:
        return ""
    text = str(value)
    if not text.isascii():
        text = text.encode("utf-8", "surrogateescape" if _escaped_bytes(text) else "replace").decode(
            "utf-8", "replace"
        )
    text = _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return ascii_text(text) if not text.isascii() and ascii_only() else text


def _escaped_bytes(text: str) -> bool:
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


def cell(value) -> Text:
    """:func:`term` for rich tables and prints: shown as it is, never read as markup."""
    return Text(term(value))
