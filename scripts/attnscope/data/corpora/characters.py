"""Whether a text the user typed shows anything (imports nothing heavy: the workflow checks
the config's texts with it before any job)."""

from __future__ import annotations

import unicodedata

# Unicode categories that show nothing: spaces, line and paragraph separators, control
# characters, and format characters (zero-width spaces and joiners, direction marks)
INVISIBLE = ("Zs", "Zl", "Zp", "Cc", "Cf")


def visible(text: str) -> bool:
    """Whether `text` has a character outside the categories INVISIBLE."""
    return any(unicodedata.category(c) not in INVISIBLE for c in text)
