"""Packing the context window into a token budget (pure; the tokenizer is passed in).

The invariant callers rely on: the rendered `text` never counts more than `budget` tokens.
Items are chosen with per-item counts (cheap, batched), then the whole text is counted once
more, exactly, because BPE counts are not additive across joins; while it is over, the
least valuable item goes. The system prompt and the last user message are never dropped:
if they alone do not fit, the budget is too small and the caller says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Counter = Callable[[Sequence[str]], list[int]]

HEAD_SYSTEM = "## Instructions"
HEAD_MEMORIES = "## Relevant memories"
HEAD_RECENT = "## Recent conversation"

# Share of the free budget that recent turns may take before memories are packed; what
# memories leave unused flows back to older turns.
RECENT_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Item:
    """One line of the context: `text` is exactly what gets rendered."""

    key: int
    text: str


@dataclass(slots=True)
class Packed:
    system_prompt: str
    memories: list[Item]
    recent: list[Item]
    text: str
    tokens: dict[str, int]
    dropped: dict[str, int] = field(default_factory=dict)


class BudgetTooSmall(Exception):
    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(f"the system prompt and the last user message need {needed} tokens")
        self.needed = needed
        self.budget = budget


def render(system_prompt: str, memories: Sequence[Item], recent: Sequence[Item]) -> str:
    blocks: list[str] = []
    if system_prompt:
        blocks.append(f"{HEAD_SYSTEM}\n{system_prompt}")
    if memories:
        blocks.append(HEAD_MEMORIES + "\n" + "\n".join(f"- {m.text}" for m in memories))
    if recent:
        blocks.append(HEAD_RECENT + "\n" + "\n".join(r.text for r in recent))
    return "\n\n".join(blocks)


def pack(
    *,
    system_prompt: str,
    memories: Sequence[Item],
    recent: Sequence[Item],
    required_recent: int | None,
    budget: int,
    count: Counter,
) -> Packed:
    """Fit `system_prompt`, `memories` (best first) and `recent` (oldest first) in `budget`.

    `required_recent` is the index in `recent` of the message that must stay (the last
    user message), or None.
    """
    required = [recent[required_recent]] if required_recent is not None else []
    base_text = render(system_prompt, [], required)
    base = count([base_text])[0] if base_text else 0
    if base > budget:
        raise BudgetTooSmall(base, budget)

    mem_costs = count([f"- {m.text}" for m in memories]) if memories else []
    recent_costs = count([r.text for r in recent]) if recent else []
    # Separators and headers: a newline is one token; a section header a handful.
    head_mem, head_recent = count([HEAD_MEMORIES, HEAD_RECENT])
    free = budget - base

    # Recent turns newest first, up to their share.
    chosen_recent: set[int] = {required_recent} if required_recent is not None else set()
    order = [i for i in range(len(recent) - 1, -1, -1) if i != required_recent]
    spent_recent = 0
    if not required and recent:
        spent_recent += head_recent + 2
    share = int(free * RECENT_SHARE)
    pending_recent: list[int] = []
    for i in order:
        cost = recent_costs[i] + 1
        if spent_recent + cost <= share:
            chosen_recent.add(i)
            spent_recent += cost
        else:
            pending_recent.append(i)
    free -= spent_recent

    chosen_mem: list[int] = []
    if memories:
        spent = head_mem + 2
        for i, cost in enumerate(mem_costs):
            if spent + cost + 1 <= free:
                chosen_mem.append(i)
                spent += cost + 1
        if chosen_mem:
            free -= spent

    for i in sorted(pending_recent, reverse=True):  # the rest, newest first, no gaps
        cost = recent_costs[i] + 1
        if cost > free:
            break
        chosen_recent.add(i)
        free -= cost
    # Keep the recent turns contiguous: a gap would misrepresent the conversation.
    newest_gap = _contiguous_from_end(chosen_recent, len(recent), required_recent)
    chosen_recent = {i for i in chosen_recent if i >= newest_gap or i == required_recent}

    mem_items = [memories[i] for i in chosen_mem]
    recent_items = [recent[i] for i in sorted(chosen_recent)]
    text = render(system_prompt, mem_items, recent_items)
    total = count([text])[0]
    while total > budget:
        if mem_items:
            mem_items.pop()
        else:
            removable = [r for r in recent_items if not required or r is not required[0]]
            if not removable:  # cannot happen: the base fit, but stay safe
                break
            recent_items.remove(removable[0])
        text = render(system_prompt, mem_items, recent_items)
        total = count([text])[0]

    sections = [
        f"{HEAD_SYSTEM}\n{system_prompt}" if system_prompt else "",
        render("", mem_items, []),
        render("", [], recent_items),
    ]
    sys_t, mem_t, rec_t = count(sections)
    return Packed(
        system_prompt=system_prompt,
        memories=mem_items,
        recent=recent_items,
        text=text,
        tokens={
            "system_prompt": sys_t if system_prompt else 0,
            "working_memory": 0,
            "profile": 0,
            "summaries": 0,
            "memories": mem_t if mem_items else 0,
            "recent_messages": rec_t if recent_items else 0,
            "total": total,
        },
        dropped={
            "memories": len(memories) - len(mem_items),
            "recent_messages": len(recent) - len(recent_items),
        },
    )


def _contiguous_from_end(chosen: set[int], n: int, required: int | None) -> int:
    """The smallest index i such that every index in [i, n) except `required` is chosen."""
    i = n
    while i > 0 and (i - 1 in chosen or i - 1 == required):
        i -= 1
    return i
