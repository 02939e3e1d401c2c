"""Compression quality: how many named entities of the messages survive a summary.

An "entity" is a capitalised word (``Postgres``, ``Alice``, ``AGFS``) or a
code-like token (``user_id``, ``db.commit()``, ``src/app.py``, anything in
backticks). A word capitalised only because it starts a sentence ("Use
PostgreSQL ...") is not one, unless the same word is also capitalised
mid-sentence. The ratio is the share of the messages' distinct entities that
still occur in the overview; 1.0 when the messages name none.

Every pass here is linear in the length of the text, whatever it holds (a
summarizer runs on untrusted content of up to a million characters): the text
is cut into tokens by one regular expression that never backtracks, and each
token is classified by plain string tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_BACKTICKED = re.compile(r"`([^`\n]{1,80})`")
# A maximal run of word characters, dots and slashes, with an optional "()"
# after it: each character is consumed once; the optional tail never backtracks.
_TOKEN = re.compile(r"[\w./]+(?:\(\))?")
_SENTENCE_END = frozenset(".!?:\n")
_EDGE_PUNCTUATION = "./"
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


def _is_code_like(token: str) -> bool:
    """``a.b``, ``src/app.py``, ``snake_case``, ``call()``: identifiers, paths, calls."""
    if token.endswith("()"):
        return len(token) > 2
    if not (token[0].isalpha() or token[0] == "_"):
        return False
    if "." in token or "/" in token:
        # Every part between separators must be a word (no "a..b", no trailing dot).
        parts = token.replace("/", ".").split(".")
        return len(parts) > 1 and all(parts)
    head, underscore, tail = token.partition("_")
    return bool(underscore and head.isalpha() and head.isascii() and tail)


def _is_capitalised(token: str) -> bool:
    return (
        len(token) > 1
        and token.isascii()
        and token.isalnum()
        and "A" <= token[0] <= "Z"
        and token not in _STOPWORDS
    )


def _starts_sentence(text: str, start: int) -> bool:
    """Whether the token at ``start`` is the first word of a sentence."""
    index = start - 1
    while index >= 0 and text[index] in " \t\"'([{*-":
        index -= 1
    return index < 0 or text[index] in _SENTENCE_END


def extract_entities(text: str) -> set[str]:
    """Capitalised and code-like tokens of ``text`` (see the module docstring)."""
    found = {m.group(1).strip() for m in _BACKTICKED.finditer(text)}
    initial: set[str] = set()  # plain capitalised words seen only at a sentence start
    named: set[str] = set()
    for match in _TOKEN.finditer(text):
        raw = match.group(0)
        if raw.endswith("()"):
            token = raw.lstrip(_EDGE_PUNCTUATION)
        else:
            token = raw.strip(_EDGE_PUNCTUATION)
        if not token:
            continue
        if _is_code_like(token):
            found.add(token)
            continue
        if not _is_capitalised(token):
            continue
        plain = token[1:].islower() or token[1:].isdigit()  # "Use", not "AGFS"/"PostgreSQL"
        if plain and _starts_sentence(text, match.start() + raw.index(token)):
            initial.add(token)
        else:
            named.add(token)
    # A plain word seen only at sentence starts is left out (``initial``); one
    # also capitalised mid-sentence is in ``named`` already.
    found |= named
    return {f for f in found if f}


def entity_retention_ratio(sources: Iterable[str], overview: str) -> float:
    """Share of the sources' entities that occur in ``overview`` (rounded to 4 places)."""
    # One text, one sentence per source at least: a word capitalised mid-sentence
    # in one message counts where another message starts a sentence with it.
    entities = extract_entities("\n".join(sources))
    if not entities:
        return 1.0
    kept = sum(1 for e in entities if e in overview)
    return round(kept / len(entities), 4)


_WORD = re.compile(r"[^\W\d_]{2,}")
# Function words (a subset of the Snowball project's English stop list):
# they carry no fact of their own, so a summary that drops them loses nothing.
_COMMON = frozenset(w.lower() for w in _STOPWORDS) | {
    *("the", "and", "for", "with", "this", "that", "have", "has", "had", "was", "were", "are"),
    *("you", "your", "yours", "our", "ours", "not", "but", "can", "will", "would", "could"),
    *("should", "shall", "may", "might", "must", "there", "their", "they", "them", "then"),
    *("than", "from", "into", "onto", "about", "what", "when", "which", "who", "whom", "how"),
    *("why", "all", "any", "some", "just", "also", "very", "please", "is", "am", "be", "been"),
    *("being", "do", "does", "did", "doing", "of", "in", "on", "at", "to", "by", "as", "or"),
    *("if", "so", "it", "its", "itself", "we", "us", "he", "him", "his", "she", "her", "hers"),
    *("me", "my", "mine", "an", "no", "nor", "too", "only", "own", "same", "such", "each"),
    *("both", "few", "more", "most", "other", "these", "those", "here", "where", "while"),
    *("after", "before", "above", "below", "up", "down", "out", "off", "over", "under"),
    *("again", "further", "once", "because", "until", "against", "between", "through"),
    *("during", "ourselves", "yourself", "yourselves", "himself", "herself", "themselves"),
}


def information_words(text: str) -> set[str]:
    """The informative words of ``text``, each as its stem: lowercased words of 2+ letters,
    function words left out, word forms folded by the Snowball English stemmer (Porter2),
    so "uses", "used" and "use" are one word."""
    words = {m.group(0).lower() for m in _WORD.finditer(text)} - _COMMON
    if not words:
        return set()
    stemmer = _stemmer()  # one per call: a stemmer object keeps state while it works
    return {stemmer.stemWord(w) for w in words}


def _stemmer() -> Any:
    # Imported on first use: loading the stemmers costs some 20 ms, which a CLI that
    # never commits should not pay at startup.
    from snowballstemmer.english_stemmer import EnglishStemmer

    return EnglishStemmer()


def information_retention_ratio(sources: Iterable[str], overview: str) -> float:
    """Share of the sources' informative words (as stems) that the overview keeps (rounded
    to 4 places); 1.0 when the sources have none. Wider than entity retention: any content
    word counts, whatever its form (docs/concepts.md defines it)."""
    words: set[str] = set()
    for text in sources:
        words |= information_words(text)
    if not words:
        return 1.0
    kept = information_words(overview)
    return round(len(words & kept) / len(words), 4)
