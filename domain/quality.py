"""Compression quality: how many named entities of the messages survive a summary.

An "entity" is a capitalised word (``Postgres``, ``Alice``) or a code-like
token (``user_id``, ``db.commit()``, ``src/app.py``, anything in backticks).
The ratio is the share of the messages' distinct entities that still occur in
the overview; 1.0 when the messages name none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_BACKTICKED = re.compile(r"`([^`\n]{1,80})`")
_CODE_LIKE = re.compile(r"[A-Za-z_][\w]*(?:[./][\w]+)+(?:\(\))?|[A-Za-z]+_[\w]+|\w+\(\)")
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z0-9]+\b")
# Capitalised only because they start a sentence; not entities.
_STOPWORDS = frozenset(
    {
        *("I", "A", "An", "The", "This", "That", "These", "Those", "It", "Its"),
        *("We", "You", "He", "She", "They", "Our", "Your", "My", "And", "But"),
        *("Or", "So", "If", "Then", "When", "What", "Why", "How", "Where", "Who"),
        *("Yes", "No", "Ok", "Okay", "Please", "Thanks", "Thank", "Hello", "Hi"),
        *("Hey", "Sure", "Let", "Can", "Could", "Would", "Should", "Is", "Are"),
        *("Was", "Were", "Do", "Does", "Did", "Not", "Also", "Now", "Here", "There"),
        *("Of", "In", "On", "At", "For", "To", "With", "As", "By", "From", "Just"),
        *("Great", "Good", "Sorry", "Right", "Got", "Noted", "Done", "Perfect", "Fine"),
    }
)


def extract_entities(text: str) -> set[str]:
    """Capitalised and code-like tokens of ``text``."""
    found = {m.group(1).strip() for m in _BACKTICKED.finditer(text)}
    found.update(m.group(0) for m in _CODE_LIKE.finditer(text))
    found.update(w for w in _CAPITALISED.findall(text) if w not in _STOPWORDS)
    return {f for f in found if f}


def entity_retention_ratio(sources: Iterable[str], overview: str) -> float:
    """Share of the sources' entities that occur in ``overview`` (rounded to 4 places)."""
    entities: set[str] = set()
    for text in sources:
        entities |= extract_entities(text)
    if not entities:
        return 1.0
    kept = sum(1 for e in entities if e in overview)
    return round(kept / len(entities), 4)
