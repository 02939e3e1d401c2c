"""The tool-usage fold: per session and tool, calls, outcomes and tokens.

Usage comes from the tool-call data on ``MessageAdded`` events. Counts only
ever grow, so the fold produces *increments* (``UsageCounts``) that are added
to whatever is stored already: stats carried over from before are merged,
never overwritten. A fork starts with no usage of its own (the origin's calls
stay counted on the origin). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from chatledger.projections.audit import EventFacts


@dataclass(slots=True)
class UsageCounts:
    """Counters of one tool in one session (an increment, or a stored total)."""

    call_count: int = 0
    success_count: int = 0
    fail_count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def merge(self, other: UsageCounts) -> UsageCounts:
        """Add ``other`` into these counts (in place) and return them."""
        self.call_count += other.call_count
        self.success_count += other.success_count
        self.fail_count += other.fail_count
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        return self


UsageKey = tuple[UUID, str]


def fold_usage(increments: dict[UsageKey, UsageCounts], facts: EventFacts) -> None:
    """Add the tool call reported by ``facts`` (if any) to ``increments`` in place."""
    message = facts.message
    if message is None or message.tool_name is None:
        return
    key = (facts.session_id, message.tool_name)
    counts = increments.get(key)
    if counts is None:
        counts = increments[key] = UsageCounts()
    counts.call_count += 1
    if message.tool_status == "success":
        counts.success_count += 1
    else:
        counts.fail_count += 1
    counts.prompt_tokens += message.prompt_tokens
    counts.completion_tokens += message.completion_tokens
