"""A conversation's messages as a tree: which versions a turn has, and the path that is shown.

Every message has a parent (None for a first turn) and remembers which of its children is
shown; the conversation remembers which first turn is. The shown path follows those choices
from the root down to a leaf. A choice that names no child (a file edited by hand, a child
that is gone) falls back to the newest child, so a path is always found.

Pure functions over (id, parent_id, shown_child_id) nodes: app.history reads the rows, this
module walks them, and both the window and the exporter use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class Node(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def parent_id(self) -> int | None: ...

    @property
    def shown_child_id(self) -> int | None: ...


N = TypeVar("N", bound=Node)


@dataclass(frozen=True)
class Version:
    """Where a message stands among its siblings: `index` (0-based) of `count`."""
    index: int
    count: int
    siblings: tuple[int, ...]  # the ids of all versions, oldest first


def children_of(nodes: Iterable[N]) -> dict[int | None, list[N]]:
    """Each parent's children, oldest (lowest id) first; None holds the first turns."""
    out: dict[int | None, list[N]] = {}
    for node in sorted(nodes, key=lambda n: n.id):
        out.setdefault(node.parent_id, []).append(node)
    return out


def _shown(children: Sequence[N], choice: int | None) -> N:
    return next((c for c in children if c.id == choice), children[-1])


def shown_path(nodes: Iterable[N], shown_root_id: int | None) -> list[N]:
    """The messages shown, first turn to leaf."""
    kids = children_of(nodes)
    path: list[N] = []
    choice = shown_root_id
    level = kids.get(None, [])
    while level:
        node = _shown(level, choice)
        path.append(node)
        choice = node.shown_child_id
        level = kids.get(node.id, [])
    return path


def versions(nodes: Iterable[N]) -> dict[int, Version]:
    """Every message's place among its siblings (the "< 2/3 >" of the window)."""
    out: dict[int, Version] = {}
    for siblings in children_of(nodes).values():
        ids = tuple(s.id for s in siblings)
        for i, s in enumerate(siblings):
            out[s.id] = Version(i, len(ids), ids)
    return out


def descendants(nodes: Iterable[N], message_id: int) -> set[int]:
    """The ids below `message_id` (not itself)."""
    kids = children_of(nodes)
    out: set[int] = set()
    todo = [message_id]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.add(child.id)
            todo.append(child.id)
    return out
