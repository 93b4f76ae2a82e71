"""SORT order and THREAD trees over messages' keys (RFC 5256 sections 3 and 4, RFC 5957).

Pure functions of :class:`~mailstore.sortcache.MessageKeys`: no store access.  Every order
ends with the message sequence number (RFC 5256 3: "the sort order is by message sequence
number" for ties), which is the UID order.

Where RFC 5256 leaves a choice:

* The sent date of a message with no readable Date field is its INTERNALDATE (RFC 5256 2.2).
* REFERENCES step 1B: a message's existing parent is broken even when the link to its last
  reference is not made because it would make a loop (Dovecot does the same).
* A Message-ID that is missing, has no ``<...@...>`` form, or repeats an earlier message's is
  replaced by a unique one (step 1), so such a message can still be a thread of its own.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import threading
from collections.abc import Iterable, Sequence

from .sortcache import MessageKeys

SORT_KEYS = ("ARRIVAL", "CC", "DATE", "FROM", "SIZE", "SUBJECT", "TO", "DISPLAYFROM",
             "DISPLAYTO")
"""Sort keys of RFC 5256 3 and RFC 5957 3 (REVERSE is a modifier, not a key)."""


def sent_date(entry: MessageKeys) -> float:
    """RFC 5256 2.2: the Date field, or the INTERNALDATE when it has none that parses."""
    date = entry.keys.date
    return entry.arrival if date is None else date


def _key_function(name: str, entries: dict[int, MessageKeys]):
    if name == "ARRIVAL":
        return lambda u: entries[u].arrival
    if name == "DATE":
        return lambda u: sent_date(entries[u])
    if name == "SIZE":
        return lambda u: entries[u].size
    attribute = {"CC": "cc", "FROM": "from_", "TO": "to", "SUBJECT": "subject",
                 "DISPLAYFROM": "display_from", "DISPLAYTO": "display_to"}[name]
    return lambda u: getattr(entries[u].keys, attribute)


def sort_uids(entries: dict[int, MessageKeys], uids: Sequence[int],
              criteria: Sequence[tuple[str, bool]]) -> list[int]:
    """``uids`` (ascending, those without keys left out) in the order of ``criteria``: pairs of
    a key from :data:`SORT_KEYS` and whether it is REVERSEd, most significant first."""
    order = [u for u in uids if u in entries]
    # Stable sorts from the least significant criterion to the most: ties keep the order of
    # the previous pass, and in the end that of the UIDs (sequence numbers).  ``reverse=True``
    # keeps equal items in their order too, so REVERSE does not reverse the tie-break.
    for name, reverse in reversed(criteria):
        order.sort(key=_key_function(name, entries), reverse=reverse)
    return order


def insert_sorted(order: list[int], new: Sequence[int], keys_of,
                  criteria: Sequence[tuple[str, bool]]) -> list[int]:
    """``order`` (in the order of ``criteria``, as :func:`sort_uids` gives it) with the UIDs
    ``new`` put where :func:`sort_uids` would put them, in place; those without keys (gone)
    are left out.  ``keys_of(uids)`` gives the :class:`MessageKeys` of ascending ``uids`` by
    UID; it is asked for the new messages and for the few already placed that a binary search
    compares them with (O(log n) each), so keeping a sorted result up to date (a CONTEXT=SORT
    update, RFC 5267 4.3.3) costs neither a full sort nor the keys of every message.

    The comparison is :func:`sort_uids`'s: criteria most significant first, REVERSE ones
    descending, ties by UID ascending (RFC 5256 3) -- also under REVERSE."""
    entries = _LazyKeys(keys_of)
    entries.update(keys_of(sorted(new)))
    functions = [(_key_function(name, entries), reverse) for name, reverse in criteria]

    def compare(a: int, b: int) -> int:
        for function, reverse in functions:
            ka, kb = function(a), function(b)
            if ka != kb:
                return (1 if reverse else -1) if ka < kb else (-1 if reverse else 1)
        return (a > b) - (a < b)
    key = functools.cmp_to_key(compare)
    for uid in sorted((u for u in new if u in entries), key=key):
        bisect.insort(order, uid, key=key)
    return order


class _LazyKeys(dict):
    """Keys read on first use, one message at a time, through ``keys_of``."""

    def __init__(self, keys_of):
        super().__init__()
        self.keys_of = keys_of

    def __missing__(self, uid: int) -> MessageKeys:
        found = self.keys_of([uid])
        self.update(found)
        return found[uid]  # KeyError for a message gone meanwhile: it has no place


# -- threads --------------------------------------------------------------------------------------

_gc_lock = threading.Lock()
_gc_holders = 0
_gc_was_enabled = False


@contextlib.contextmanager
def _without_cyclic_gc():
    """The cyclic garbage collector paused while a tree is built: 100,000 new nodes trigger
    full collections that walk every object in the process (the sort-key cache included), a
    quarter to a third of a REFERENCES run when measured.  The trees leave no cycles behind
    (parent links are cleared at the end), so nothing waits for the collector; it is resumed
    when the last thread that paused it is done."""
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()

class Node:
    """A thread node: a message (``uid``) or a dummy (``uid`` None) standing for a message
    that was referred to but is not among those threaded."""

    __slots__ = ("uid", "parent", "children")

    def __init__(self, uid: int | None = None):
        self.uid = uid
        self.parent: Node | None = None
        self.children: list[Node] = []

    def __repr__(self) -> str:
        return f"Node({self.uid}, {self.children!r})"


def render(threads: Iterable[Node]) -> bytes:
    """The THREAD response data (RFC 5256 4): one parenthesised list per thread, a message's
    only child after it, several children each in parentheses, a dummy as its children.
    Iterative: a thread can be as deep as a mailbox is large."""
    out: list[bytes] = []
    for thread in threads:
        out.append(b"(")
        stack: list = [b")", thread]
        while stack:
            item = stack.pop()
            if isinstance(item, bytes):
                out.append(item)
                continue
            node = item
            if node.uid is not None:
                if out[-1] != b"(":
                    out.append(b" ")
                out.append(b"%d" % node.uid)
                if len(node.children) == 1:
                    stack.append(node.children[0])
                    continue
                if node.children:
                    out.append(b" ")
            for child in reversed(node.children):
                stack += [b")", child, b"("]
    return b"".join(out)


def _date_key(entries: dict[int, MessageKeys]):
    dates = {uid: (sent_date(entry), uid) for uid, entry in entries.items()}

    def key(node: Node):
        if node.uid is not None:
            return dates[node.uid]
        # A dummy sorts as its first child (its children are sorted first).
        while node.uid is None and node.children:
            node = node.children[0]
        return (0.0, 0) if node.uid is None else dates[node.uid]
    return key


def orderedsubject(entries: dict[int, MessageKeys], uids: Sequence[int]) -> list[Node]:
    """THREAD=ORDEREDSUBJECT (RFC 5256 4): messages grouped by base subject, each group a
    thread whose first message (by sent date) is the parent of the others; threads in the
    order of their first message's sent date."""
    order = sort_uids(entries, uids, [("SUBJECT", False), ("DATE", False)])
    threads: list[Node] = []
    last_subject = None
    for uid in order:
        subject = entries[uid].keys.subject
        if threads and subject == last_subject:
            threads[-1].children.append(Node(uid))  # (no parent link: no cycle)
        else:
            threads.append(Node(uid))
            last_subject = subject
    threads.sort(key=_date_key(entries))
    return threads


def references(entries: dict[int, MessageKeys], uids: Sequence[int]) -> list[Node]:
    """THREAD=REFERENCES (RFC 5256 4), steps 1 to 6.  The nodes returned have no parent
    links (only children), so the trees hold no reference cycles."""
    with _without_cyclic_gc():
        return _references(entries, uids)


def _references(entries: dict[int, MessageKeys], uids: Sequence[int]) -> list[Node]:
    uids = [u for u in uids if u in entries]
    table: dict[str, Node] = {}
    nodes: list[Node] = []

    def node_of(message_id: str) -> Node:
        node = table.get(message_id)
        if node is None:
            node = table[message_id] = Node()
            nodes.append(node)
        return node

    def reaches(node: Node, ancestor: Node) -> bool:
        """Whether ``ancestor`` is ``node`` or above it."""
        while node is not None:
            if node is ancestor:
                return True
            node = node.parent
        return False

    def link(parent: Node, child: Node) -> None:
        child.parent = parent
        parent.children.append(child)

    def unlink(child: Node) -> None:
        child.parent.children.remove(child)
        child.parent = None

    # (1) Nodes for every message and every id it refers to.
    for uid in uids:
        keys = entries[uid].keys
        message_id = keys.message_id
        node = table.get(message_id) if message_id is not None else None
        if node is None or node.uid is not None:
            # (1) No valid id, or a duplicate of one already used: a unique node of its own.
            node = Node(uid)
            nodes.append(node)
            if message_id is not None and message_id not in table:
                table[message_id] = node
        else:
            node.uid = uid
        refs = keys.references
        # (1A) Link the references in order, never changing an existing parent, never
        # making a loop.
        for parent_id, child_id in zip(refs, refs[1:], strict=False):
            parent, child = node_of(parent_id), node_of(child_id)
            # Only a node with children can be above another (a loop needs one).
            if child.parent is None and parent is not child and not (
                    child.children and reaches(parent, child)):
                link(parent, child)
        # (1B) The message is a child of its last reference (or of nothing).
        # An existing parent (from an earlier message's References) goes even when the new
        # link would make a loop and is not made (the message's own id last, say), as the
        # RFC's order of the two actions reads and as Dovecot does.
        parent = node_of(refs[-1]) if refs else None
        if parent is not node.parent:
            if node.parent is not None:
                unlink(node)
            if parent is not None and parent is not node and not (
                    node.children and reaches(parent, node)):
                link(parent, node)

    # (2) The root set; (3) dummies pruned.
    roots = _prune([n for n in nodes if n.parent is None], root=True)
    date_key = _date_key(entries)
    # (4) Roots by sent date (a dummy's children first, so it sorts as its first child).
    for root in roots:
        if root.uid is None:
            root.children.sort(key=date_key)
    roots.sort(key=date_key)
    # (5) Roots with the same base subject gathered.
    roots = _gather_subjects(roots, entries)
    # (6) Every set of siblings by sent date, children before their parents' siblings.
    _sort_tree(roots, date_key)
    for node in nodes:
        node.parent = None
    return roots


def _prune(children: list[Node], root: bool) -> list[Node]:
    """RFC 5256 4 step 3: dummies without children go; a dummy's children take its place,
    except at the root where that would make more than one new root."""
    out: list[Node] = []
    for child in children:
        if child.children:  # (most roots are single messages: nothing below to prune)
            _prune_node(child)
    for child in children:
        if child.uid is None:
            if not child.children:
                continue
            if not root or len(child.children) == 1:
                for grandchild in child.children:
                    grandchild.parent = child.parent
                out.extend(child.children)
                continue
        out.append(child)
    return out


def _prune_node(top: Node) -> None:
    """Step 3 below ``top``: post-order, iteratively."""
    order: list[Node] = []
    stack = [top]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children)
    for node in reversed(order):  # children before parents
        if not node.children:
            continue
        kept: list[Node] = []
        for child in node.children:
            if child.uid is None:
                if not child.children:
                    continue
                for grandchild in child.children:
                    grandchild.parent = node
                kept.extend(child.children)
            else:
                kept.append(child)
        node.children = kept


def _subject_of(node: Node, entries: dict[int, MessageKeys]) -> tuple[str, bool, bool]:
    """(base subject, is a reply, is a dummy) of a root (a dummy: of its first child)."""
    dummy = node.uid is None
    if dummy:
        node = node.children[0]
    keys = entries[node.uid].keys
    return keys.subject, keys.reply, dummy


def _gather_subjects(roots: list[Node], entries: dict[int, MessageKeys]) -> list[Node]:
    """RFC 5256 4 step 5: one thread per base subject among the roots."""
    info = {id(root): _subject_of(root, entries) for root in roots}
    table: dict[str, Node] = {}
    for root in roots:  # (5B)
        subject, reply, dummy = info[id(root)]
        if not subject:
            continue
        held = table.get(subject)
        if held is None:
            table[subject] = root
            continue
        _, held_reply, held_dummy = info[id(held)]
        if (dummy and not held_dummy) or (held_reply and not reply and not held_dummy):
            table[subject] = root
    out: list[Node] = []
    where: dict[int, int] = {}      # id(root kept in out) -> its index there
    replaced: dict[int, Node] = {}  # id(table root not yet reached) -> the dummy in its place
    for root in roots:  # (5C)
        if id(root) in replaced:  # merged with a root before it: the dummy holding both
            where[id(replaced[id(root)])] = len(out)
            out.append(replaced[id(root)])
            continue
        subject, reply, dummy = info[id(root)]
        held = table.get(subject) if subject else None
        if held is None or held is root:
            where[id(root)] = len(out)
            out.append(root)
            continue
        _, held_reply, held_dummy = info[id(held)]
        if dummy and held_dummy:
            for child in root.children:
                child.parent = held
            held.children.extend(root.children)
        elif held_dummy and not dummy:
            root.parent = held
            held.children.append(root)
        elif reply and not held_reply:
            root.parent = held
            held.children.append(root)
        else:
            group = Node()
            for member in (held, root):
                member.parent = group
                group.children.append(member)
            table[subject] = group
            info[id(group)] = (subject, held_reply, True)  # as its first child, ``held``
            # The new dummy takes the held root's place in the root list.
            position = where.pop(id(held), None)
            if position is not None:
                out[position] = group
                where[id(group)] = position
            else:
                replaced[id(held)] = group
    return out


def _sort_tree(roots: list[Node], date_key) -> None:
    order: list[Node] = []
    stack = [node for node in roots if node.children]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(child for child in node.children if child.children)
    for node in reversed(order):  # children sorted before their parent's siblings are
        if len(node.children) > 1:
            node.children.sort(key=date_key)
    roots.sort(key=date_key)


__all__ = ["SORT_KEYS", "Node", "orderedsubject", "references", "render", "sent_date",
           "sort_uids"]
