"""Packing the context window into a token budget (pure; the tokenizer is passed in).

The context is a list of `Section`s, rendered in the order given as headed blocks, filled
in order of priority. The invariant callers rely on: the rendered `text` never counts more
than `budget` tokens. Items are chosen with per-item counts (cheap, batched), then the whole
text is counted once more, exactly, because BPE counts are not additive across joins; while
it is over, an item of the least important section goes; when it is under by what the line
counts overstated, the items are chosen again with that given back (`_fill_up`). Required
items (the system prompt, the last user message) are never dropped. A required item of a
section that is not `whole` may be cut instead: when the required items alone do not fit,
its middle is elided (head and tail kept, `… [n tokens elided] …` between them) until they
do, and `Packed.truncated` says which. Only when the `whole` items and the bare minimum of
the others (their prefix and an ellipsis) do not fit is the budget too small, and the caller
says so.

Stored text is data, never the service's own structure: `set_off` makes it one item's lines
(its further lines indented, a line that would open with `#` escaped), so that every line
starting at the margin, and every heading, is the service's (docs/security.md). The packer
counts items as given, so it is applied before packing and every count stays exact.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

Counter = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True, slots=True)
class Item:
    """One line of the context: `text` is exactly what gets rendered (after the bullet).

    `prefix`: how many leading characters survive any elision (a speaker's `user: `).
    `group`: a line of the service's own (a memory's day) rendered above the first of a run
    of kept items that share it, instead of on each; "" for none. Never stored text.
    """

    key: int
    text: str
    prefix: int = 0
    group: str = ""


ELLIPSIS = "…"

# The indent of a stored item's lines after its first, and the characters that, opening a
# line (after its spaces), are escaped: `#` (a heading) and the escape itself, so that
# `restore` undoes `set_off` exactly.
INDENT = "  "
_ESCAPED = ("#", "\\")


def set_off(text: str) -> str:
    """Stored `text` as the lines of one item: its lines after the first indented, and a
    backslash before a line's first character when that is `#` or `\\`. Any line break
    Python knows (`str.splitlines`: also `\\r`, `\\x0b`, U+2028 ...) becomes `\\n`."""
    lines = text.splitlines()
    for n, line in enumerate(lines):
        body = line.lstrip()
        if body.startswith(_ESCAPED):
            line = f"{line[: len(line) - len(body)]}\\{body}"
        lines[n] = line if n == 0 else INDENT + line
    return "\n".join(lines)


def restore(text: str) -> str:
    """`set_off`'s lines after the first back as stored (an item's part after its first
    line's start, e.g. an elided message's excerpt after the speaker)."""
    first, *rest = text.split("\n")
    lines = [first]
    for line in rest:
        line = line.removeprefix(INDENT)
        body = line.lstrip()
        if body.startswith("\\"):
            line = line[: len(line) - len(body)] + body[1:]
        lines.append(line)
    return "\n".join(lines)


def elision_mark(tokens: int) -> str:
    return f"… [{tokens} tokens elided] …"


def elide(item: Item, keep: int, count: Counter) -> Item:
    """`item` with only `keep` characters of its body (after the prefix) left, half from the
    head and half from the tail, and a mark saying how many tokens went between them."""
    body = len(item.text) - item.prefix
    if keep >= body:
        return item
    head_end = item.prefix + keep - keep // 2
    tail_start = len(item.text) - keep // 2
    head, tail = item.text[:head_end], item.text[tail_start:]
    mark = elision_mark(count([item.text[head_end:tail_start]])[0])
    # A head cut just after a line break would start the mark's line unindented, where it
    # could pass for a line of the context's own (a set-off text's lines start indented).
    head_join = INDENT if head.endswith("\n") else " " if head_end > item.prefix else ""
    tail_join = " " if tail else ""
    return Item(item.key, f"{head}{head_join}{mark}{tail_join}{tail}", item.prefix)


class BudgetTooSmall(Exception):
    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(f"the required items alone need {needed} tokens")
        self.needed = needed
        self.budget = budget


@dataclass(frozen=True, slots=True)
class Section:
    """One headed block of the context, packed by `priority` (lower fills first, goes last).

    - `items` are in the order they are rendered: a ranked list best first, a conversation
      oldest first. Each renders as one line, `bullet + text`, under `head`.
    - `required`: the index of an item that is never dropped (the last user message); its
      middle is elided when the base does not fit, down to at most `share` of what the
      budget leaves after the rest of the base (so the other sections keep room).
      `whole`: every item is required and never cut (the system prompt). Required items
      form the base; a budget smaller than the base at its shortest raises `BudgetTooSmall`.
    - `share`: in its priority turn the section takes at most this share of the budget left
      after the base; once every section has had its turn, it takes what they left.
    - `lead`: in its priority turn the section holds at most this many items, its required
      ones included (and takes at most its `share`); the rest wait, as a share's do.
    - `after`: the priority at which a section held to a `share` or `lead` takes what it
      held back (None: once every section has had its turn).
    - `conversation`: filled newest first and kept as one unbroken run up to the newest
      item (plus the required one): a gap would misrepresent the conversation. Otherwise an
      item that does not fit is skipped and a smaller one after it may still fit.
    - `fill`: the order the items are offered in, when it is not the order they are
      rendered in (memories chosen best first, rendered grouped by day).
    - `twins`: item index -> the index of an item of the section `twin_of` that says the
      same (a recalled memory that is one of the recent turns): the two are never both
      kept, and the other section's item wins (a turn counts once).
    """

    name: str
    items: Sequence[Item]
    priority: int
    head: str
    bullet: str = ""
    required: int | None = None
    whole: bool = False
    share: float | None = None
    conversation: bool = False
    lead: int | None = None
    after: int | None = None
    fill: Sequence[int] | None = None
    twin_of: str | None = None
    twins: Mapping[int, int] = field(default_factory=dict)

    def held(self) -> bool:
        """Held back in its priority turn, by a share or a lead."""
        return self.share is not None or self.lead is not None

    def required_items(self) -> frozenset[int]:
        if self.whole:
            return frozenset(range(len(self.items)))
        return frozenset() if self.required is None else frozenset((self.required,))


@dataclass(slots=True)
class Packed:
    kept: dict[str, list[Item]]  # per section, in the order given
    text: str
    tokens: dict[str, int]  # per section, then `total` = the count of `text`
    dropped: dict[str, int]  # per section that can lose items (not `whole` ones)
    truncated: dict[str, list[int]]  # keys of the items kept with their middle elided


def _cuttable(sections: Sequence[Section]) -> list[tuple[int, int]]:
    """(section, item) of the required items that may lose their middle: not `whole` ones."""
    return [
        (k, s.required) for k, s in enumerate(sections) if s.required is not None and not s.whole
    ]


def render(sections: Sequence[Section], kept: Sequence[Sequence[int]]) -> str:
    """The sections with the items at `kept` (ascending indices), non-empty ones only."""
    blocks = (_block(s, k) for s, k in zip(sections, kept, strict=True))
    return "\n\n".join(b for b in blocks if b)


def _block(section: Section, kept: Sequence[int]) -> str:
    if not kept:
        return ""
    lines: list[str] = []
    group = ""
    for i in kept:
        item = section.items[i]
        if item.group and item.group != group:
            lines.append(item.group)
        group = item.group
        lines.append(section.bullet + item.text)
    body = "\n".join(lines)
    return f"{section.head}\n{body}" if section.head else body


def pack(sections: Sequence[Section], *, budget: int, count: Counter) -> Packed:
    """Fit `sections` (in the order they are rendered) into `budget` tokens."""
    _check(sections)
    required = [s.required_items() for s in sections]
    base_text = render(sections, [sorted(r) for r in required])
    base = count([base_text])[0] if base_text else 0
    cut, fraction = _Cut(sections, count), 1.0
    if base > budget:
        sections, base, fraction = _cut_required(sections, required, cut, base, budget)
    order = sorted(range(len(sections)), key=lambda k: sections[k].priority)
    # A cut last message takes back what the others leave (below), as it did before the
    # second choice: it is what the model answers.
    refill = fraction == 1.0
    kept, text, total = _fill_up(sections, required, order, budget, base, count, refill)
    if fraction < 1 and total < budget:  # what the others left goes back to the cut items
        fraction = cut.largest(kept, budget, fraction)
        sections = cut.at(fraction)
        text = render(sections, kept)
        total = count([text])[0]
    blocks = [_block(s, kept[k]) for k, s in enumerate(sections)]
    counts = count(blocks) if blocks else []
    tokens = {s.name: counts[k] if kept[k] else 0 for k, s in enumerate(sections)}
    tokens["total"] = total
    return Packed(
        kept={s.name: [s.items[i] for i in kept[k]] for k, s in enumerate(sections)},
        text=text,
        tokens=tokens,
        dropped=_dropped(sections, kept),
        truncated=cut.truncated(fraction) if fraction < 1 else {},
    )


def _fill_up(
    sections: Sequence[Section],
    required: list[frozenset[int]],
    order: list[int],
    budget: int,
    base: int,
    count: Counter,
    refill: bool = True,
) -> tuple[list[list[int]], str, int]:
    """The items kept, the text and its count: chosen by their lines' counts, then chosen
    again with what those counts overstated given back, when the text came out short
    (`refill`). The shares stay those of the first choice: what is given back is the
    memories' overstatement mostly, not room for more turns.

    A line counted alone costs more than it does in the text, where its newline and its
    bullet merge into one token with the words around them: ~1.4 tokens a memory line, so a
    4,000-token context of ~100 memories was left ~150 tokens short of its budget, room for
    four more memories (bench/README.md, issue 40: "Evidence in one context call")."""
    count = _remembering(count)  # the second choice counts no line again
    free = budget - base
    chosen, spent = _choose(sections, required, order, free, count)
    kept = [sorted(c) for c in chosen]
    text, total, trimmed = _drop_while_over(sections, kept, required, order, budget, count)
    overstated = spent - (total - base)
    if not refill or trimmed or overstated <= 0 or total >= budget:
        return kept, text, total
    again, _ = _choose(sections, required, order, free + overstated, count, shared=free)
    more = [sorted(c) for c in again]
    more_text, more_total, _ = _drop_while_over(sections, more, required, order, budget, count)
    if more_total <= total:
        return kept, text, total
    return more, more_text, more_total


def _remembering(count: Counter) -> Counter:
    """`count`, each distinct text counted once."""
    seen: dict[str, int] = {}

    def counted(texts: Sequence[str]) -> list[int]:
        new = [t for t in dict.fromkeys(texts) if t not in seen]
        if new:
            seen.update(zip(new, count(new), strict=True))
        return [seen[t] for t in texts]

    return counted


def _dropped(sections: Sequence[Section], kept: Sequence[Sequence[int]]) -> dict[str, int]:
    """Per section that can lose items, those left out for the budget: not an item left out
    because its twin is shown."""
    where = {s.name: k for k, s in enumerate(sections)}
    out: dict[str, int] = {}
    for k, s in enumerate(sections):
        if s.whole:
            continue
        shown = set(kept[where[s.twin_of]]) if s.twin_of in where else set()
        mine = set(kept[k])
        twinned = sum(1 for i, twin in s.twins.items() if twin in shown and i not in mine)
        out[s.name] = len(s.items) - len(mine) - twinned
    return out


def _cut_required(
    sections: Sequence[Section], required: list[frozenset[int]], cut: _Cut, base: int, budget: int
) -> tuple[Sequence[Section], int, float]:
    """The required items alone are over the budget: the sections with those items cut, the
    base's new cost and the fraction the cut items keep."""
    # Cut to the bare minimum, the required items must fit, or the budget is too small.
    # Then they keep as much as fits within their sections' tightest share of what the
    # rest of the base leaves; what the other sections leave comes back at the end.
    base_kept = [sorted(r) for r in required]
    minimal = min(base, cut.cost(-1.0, base_kept))
    if not cut.cuttable or minimal > budget:
        raise BudgetTooSmall(minimal, budget)
    shares = [x for k, _ in cut.cuttable if (x := sections[k].share) is not None]
    target = minimal + int((budget - minimal) * min(shares, default=1.0))
    fraction = cut.largest(base_kept, target, -1.0)
    return cut.at(fraction), cut.cost(fraction, base_kept), fraction


def _choose(
    sections: Sequence[Section],
    required: list[frozenset[int]],
    order: list[int],
    free: int,
    count: Counter,
    shared: int | None = None,
) -> tuple[list[set[int]], int]:
    """The items each section keeps, by priority, within the `free` tokens the required ones
    leave: a section held to a share or a lead first takes up to it, and gets more only from
    what the others left (at its `after` priority, or once all have had their turn). With
    the tokens they were counted to cost. `shared`: the tokens the shares are of (`free`
    unless given)."""
    fill = _Fill(sections, required, free, count, free if shared is None else shared)
    rank = {k: n for n, k in enumerate(order)}
    steps: list[tuple[float, int, int, int]] = [
        (sections[k].priority, 0, rank[k], k) for k in order
    ]
    steps += [
        (math.inf if (a := sections[k].after) is None else a, 1, rank[k], k)
        for k in order
        if sections[k].held()
    ]
    for _, rest, _, k in sorted(steps):
        if rest:
            fill.rest(k)
        else:
            fill.turn(k)
    return fill.done(), free - fill.free


class _Fill:
    """`_choose`'s state: what each section has chosen, what it holds back, the budget left."""

    def __init__(
        self,
        sections: Sequence[Section],
        required: list[frozenset[int]],
        free: int,
        count: Counter,
        shared: int,
    ) -> None:
        self.sections = sections
        self.required = required
        self.free = free
        self.after_base = shared  # what the shares are of
        self.optional = [
            [i for i in range(len(s.items)) if i not in required[k]] for k, s in enumerate(sections)
        ]
        self.costs = _costs(sections, self.optional, count)
        groups = sorted({it.group for s in sections for it in s.items if it.group})
        self.group_costs = dict(zip(groups, count(groups) if groups else [], strict=True))
        # A header costs its tokens plus its line breaks; a line its tokens plus one newline.
        self.heads = count([s.head for s in sections]) if sections else []
        self.chosen = [set(r) for r in required]
        # Per section, how many chosen items each group holds: a group's line is paid for
        # by its first item only (kept as counts, not searched for: it is asked per item).
        self.opened = [
            collections.Counter(s.items[i].group for i in r if s.items[i].group)
            for s, r in zip(sections, required, strict=True)
        ]
        self.pending: list[list[int]] = [[] for _ in sections]
        self.names = {s.name: k for k, s in enumerate(sections)}

    def offered(self, k: int) -> list[int]:
        s, optional = self.sections[k], self.optional[k]
        if s.fill is not None:
            allowed = set(optional)
            return [i for i in s.fill if i in allowed]
        return optional[::-1] if s.conversation else optional

    def cost(self, k: int, i: int) -> int:
        group = self.sections[k].items[i].group
        opened = group and self.opened[k][group] > 0
        return self.costs[k][i] + 1 + (self.group_costs[group] + 1 if group and not opened else 0)

    def twin_kept(self, k: int, i: int) -> bool:
        s = self.sections[k]
        twin = s.twins.get(i)
        return (
            twin is not None
            and s.twin_of is not None
            and twin in self.chosen[self.names[s.twin_of]]
        )

    def take(self, k: int, i: int, cost: int) -> None:
        self.chosen[k].add(i)
        if group := self.sections[k].items[i].group:
            self.opened[k][group] += 1
        self.free -= cost
        name = self.sections[k].name
        for m, s in enumerate(self.sections):  # its twins elsewhere go, and give back theirs
            if s.twin_of == name:
                for j in [j for j in self.chosen[m] if s.twins.get(j) == i]:
                    self.chosen[m].discard(j)
                    if group := s.items[j].group:
                        self.opened[m][group] -= 1
                    self.free += self.costs[m][j] + 1

    def turn(self, k: int) -> None:
        s = self.sections[k]
        head = self.heads[k] + 2 if s.head and not self.required[k] else 0
        offered = [i for i in self.offered(k) if not self.twin_kept(k, i)]
        if not s.held():
            took = False
            for i in offered:
                c = self.cost(k, i) + (0 if took else head)
                if c <= self.free:
                    self.take(k, i, c)
                    took = True
                elif s.conversation:
                    break
            return
        cap = self.free if s.share is None else min(int(self.after_base * s.share), self.free)
        spent = head if s.items and not self.required[k] else 0
        self.free -= spent
        taken = len(self.required[k])
        held = False  # a conversation's older turns wait behind one held back: a gap
        for i in offered:  # would drop them at the end (`done`), their tokens unused
            c = self.cost(k, i)
            if not held and (s.lead is None or taken < s.lead) and spent + c <= cap:
                self.take(k, i, c)
                spent, taken = spent + c, taken + 1
            else:
                self.pending[k].append(i)
                held = s.conversation

    def rest(self, k: int) -> None:
        """What a held section held back, as far as the budget left goes."""
        for i in self.pending[k]:
            if self.twin_kept(k, i):
                continue
            c = self.cost(k, i)
            if c > self.free:
                if self.sections[k].conversation:
                    break
                continue
            self.take(k, i, c)

    def done(self) -> list[set[int]]:
        """The choice, each conversation cut to its unbroken newest run (what that cuts
        goes back to `free`, so that the tokens spent are those of what is kept)."""
        for k, s in enumerate(self.sections):
            if s.conversation:
                start = _unbroken_run_start(self.chosen[k], len(s.items), self.required[k])
                kept = {i for i in self.chosen[k] if i >= start or i in self.required[k]}
                self.free += sum(self.costs[k][i] + 1 for i in self.chosen[k] - kept)
                self.chosen[k] = kept
        return self.chosen


def _drop_while_over(
    sections: Sequence[Section],
    kept: list[list[int]],
    required: list[frozenset[int]],
    order: list[int],
    budget: int,
    count: Counter,
) -> tuple[str, int, bool]:
    """The text of `kept` (changed in place), its count within the budget, and whether an
    item had to go for it."""
    # Per-item counts are estimates (BPE counts do not add up across joins): count the
    # whole text and, while it is over, drop from the least important section first: its
    # oldest turn, or the item offered last (`fill`: a memory, the least relevant kept).
    text = render(sections, kept)
    total = count([text])[0]
    trimmed = False
    while total > budget:
        for k in reversed(order):
            removable = [i for i in kept[k] if i not in required[k]]
            if removable:
                kept[k].remove(_last_offered(sections[k], removable))
                trimmed = True
                break
        else:  # cannot happen: the base fits; stay safe
            break
        text = render(sections, kept)
        total = count([text])[0]
    return text, total, trimmed


def _last_offered(section: Section, removable: Sequence[int]) -> int:
    """Of `removable` (ascending), the item a trim drops first."""
    if section.conversation:
        return removable[0]
    if section.fill is None:
        return removable[-1]
    rank = {i: n for n, i in enumerate(section.fill)}
    return max(removable, key=lambda i: rank.get(i, len(rank)))


class _Cut:
    """The cuttable required items of `sections`, each keeping the same fraction of its
    body: -1 is the bare minimum (prefix and an ellipsis), 0 the prefix and the elision
    mark, 1 the whole item."""

    def __init__(self, sections: Sequence[Section], count: Counter) -> None:
        self.sections = sections
        self.count = count
        self.cuttable = _cuttable(sections)

    def at(self, fraction: float) -> list[Section]:
        out = list(self.sections)
        for k, i in self.cuttable:
            item = self.sections[k].items[i]
            body = len(item.text) - item.prefix
            if fraction >= 0:
                cut = elide(item, int(body * fraction), self.count)
            elif body <= len(ELLIPSIS):
                cut = item
            else:
                cut = Item(item.key, item.text[: item.prefix] + ELLIPSIS, item.prefix)
            items = list(out[k].items)
            items[i] = cut
            out[k] = replace(out[k], items=items)
        return out

    def cost(self, fraction: float, kept: Sequence[Sequence[int]]) -> int:
        text = render(self.at(fraction), kept)
        return self.count([text])[0] if text else 0

    def largest(self, kept: Sequence[Sequence[int]], target: int, lo: float) -> float:
        """The largest fraction, from `lo` (known to fit) up, whose rendering of `kept`
        counts at most `target`. BPE counts are nearly monotone in it, and the exact count
        of each candidate decides, so a non-monotone step only costs a few characters."""
        if lo < 0:
            if self.cost(0.0, kept) > target:
                return lo
            lo = 0.0
        hi = 1.0
        longest = max(len(self.sections[k].items[i].text) for k, i in self.cuttable)
        while (hi - lo) * longest > 1:  # to the character
            mid = (lo + hi) / 2
            if self.cost(mid, kept) <= target:
                lo = mid
            else:
                hi = mid
        return lo

    def truncated(self, fraction: float) -> dict[str, list[int]]:
        cut = self.at(fraction)
        out: dict[str, list[int]] = {}
        for k, i in self.cuttable:
            if cut[k].items[i] != self.sections[k].items[i]:
                out.setdefault(self.sections[k].name, []).append(self.sections[k].items[i].key)
        return out


def _check(sections: Sequence[Section]) -> None:
    names = [s.name for s in sections]
    if len(set(names)) != len(names) or "total" in names:
        raise ValueError(f"section names must be unique and not 'total': {names}")
    for s in sections:
        if s.required is not None and not 0 <= s.required < len(s.items):
            raise ValueError(f"section {s.name!r}: required index {s.required} out of range")
        if s.share is not None and not 0 <= s.share <= 1:
            raise ValueError(f"section {s.name!r}: share {s.share} not in [0, 1]")


def _costs(
    sections: Sequence[Section], optional: Sequence[Sequence[int]], count: Counter
) -> list[dict[int, int]]:
    """Token counts of every optional line, in one batch."""
    where = [(k, i) for k, idx in enumerate(optional) for i in idx]
    lines = [sections[k].bullet + sections[k].items[i].text for k, i in where]
    counts = count(lines) if lines else []
    costs: list[dict[int, int]] = [{} for _ in sections]
    for (k, i), n in zip(where, counts, strict=True):
        costs[k][i] = n
    return costs


def _unbroken_run_start(chosen: set[int], n: int, required: frozenset[int]) -> int:
    """The smallest index i such that every index in [i, n) is chosen or required."""
    i = n
    while i > 0 and (i - 1 in chosen or i - 1 in required):
        i -= 1
    return i
