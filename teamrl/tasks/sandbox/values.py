"""Plain data across the sandbox boundary: a tagged JSON form of Python's builtin values.

Untrusted code hands back what it computed as data, never as objects: :func:`encode` accepts only
values whose type *is* one of the builtins below (a subclass of ``int`` with its own ``__eq__`` is
refused), :func:`decode` rebuilds only builtins, and :func:`strict_equal` compares with the types
(``1``, ``1.0`` and ``True`` differ; so do a list and a tuple). So an "always equal" object cannot
leave the sandbox, and nothing the sandbox sends can run code on the trusted side.

This module imports nothing at its top: its source is also the first part of the programs that run
inside the sandbox (``teamrl.tasks.sandbox.calls``), where every import costs start-up time.
"""

from __future__ import annotations

from typing import Any

MAX_NODES = 100_000  # values, containers included, in one encoded value
MAX_TEXT = 1 << 20  # characters of str / bytes in one encoded value
MAX_DEPTH = 100  # containers nested in one encoded value
# an int whose decimal text Python will write (repr refuses past 4,300 digits, so a report would fail)
MAX_INT_BITS = 14_000
# members of one set or dict: building one of ints that share a hash costs n^2 / 2 comparisons
MAX_HASHED = 5_000


class UnsupportedValue(ValueError):
    """A value that is not plain data (or is too large to be sent back)."""


def encode(value: Any, max_nodes: int = MAX_NODES, max_text: int = MAX_TEXT) -> Any:
    """The JSON-able tagged form of ``value``: ``None``/``bool``/``int``/``float``/``str``/``bytes``,
    ``list``/``tuple``/``dict``/``set``/``frozenset`` of those, by exact type (dicts in their order,
    sets sorted); raises
    :class:`UnsupportedValue` otherwise (deep values are handled without recursion)."""
    budget = [max_nodes, max_text]

    def leaf(x: Any) -> Any:
        kind = type(x)
        if x is None or kind is bool:
            return x
        if kind is int:
            # JSON numbers past 2**53 lose precision in other readers, and a huge int's text is costly.
            if abs(x) < 2**53:
                return x
            if x.bit_length() > MAX_INT_BITS:
                raise UnsupportedValue(f"an integer of more than {MAX_INT_BITS} bits")
            return {"int": hex(x)}
        if kind is float:
            return x if x - x == 0.0 else {"float": repr(x)}  # inf - inf and nan - nan are nan
        if kind is str or kind is bytes:
            budget[1] -= len(x)
            if budget[1] < 0:
                raise UnsupportedValue(f"more than {max_text} characters of text to send back")
            return x if kind is str else {"bytes": x.hex()}
        raise UnsupportedValue(f"a value of type {kind.__name__} is not plain data")

    containers: dict[type, str] = {
        list: "list",
        tuple: "tuple",
        set: "set",
        frozenset: "frozenset",
        dict: "dict",
    }
    # An explicit stack instead of recursion: (value, the list its encoded form goes into).
    root: list[Any] = []
    stack: list[tuple[Any, list[Any], int]] = [(value, root, 0)]
    while stack:
        x, out, depth = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise UnsupportedValue(f"more than {max_nodes} values to send back")
        tag = containers.get(type(x))
        if tag is None:
            out.append(leaf(x))
            continue
        if depth >= MAX_DEPTH:
            raise UnsupportedValue(f"containers nested deeper than {MAX_DEPTH}")
        if tag in ("set", "frozenset", "dict") and len(x) > MAX_HASHED:
            raise UnsupportedValue(f"a {tag} of more than {MAX_HASHED} members")
        items: list[Any] = []
        out.append({tag: items})
        members = [k_v for pair in x.items() for k_v in pair] if tag == "dict" else list(x)
        # pushed in reverse so they pop in order
        stack.extend((member, items, depth + 1) for member in reversed(members))
    encoded = root[0]
    return _canonical(encoded)


def _canonical(encoded: Any) -> Any:
    """Sets' members in a fixed order, so equal sets encode to equal JSON (dicts keep their order,
    which code can observe)."""
    stack = [encoded]
    pending: list[list[Any]] = []
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ((tag, items),) = node.items()
            if isinstance(items, list):
                stack.extend(items)
                if tag in ("set", "frozenset"):
                    pending.append(items)
    for items in reversed(pending):  # inner sets before the sets holding them
        items.sort(key=_sort_key)
    return encoded


def _sort_key(encoded: Any) -> str:
    return repr(encoded)  # the tagged form holds only dicts of one key, lists, str, int, float, bool, None


def _by_key(items: list[Any]) -> list[Any]:
    pairs = sorted(zip(items[::2], items[1::2], strict=True), key=lambda kv: _sort_key(kv[0]))
    return [x for pair in pairs for x in pair]


def dumps(value: Any) -> str:
    """``value`` encoded and written as one line of JSON."""
    import json

    return json.dumps(encode(value), separators=(",", ":"))


_LEAF_TAGS = {"int", "float", "bytes"}
_CONTAINERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "dict": dict}


def decode(encoded: Any, max_nodes: int = MAX_NODES) -> Any:
    """The builtin value of a tagged form; raises :class:`UnsupportedValue` on anything malformed."""
    count = 0

    def node(x: Any, depth: int) -> Any:
        nonlocal count
        count += 1
        if count > max_nodes:
            raise UnsupportedValue(f"more than {max_nodes} values")
        if depth > MAX_DEPTH:
            raise UnsupportedValue(f"containers nested deeper than {MAX_DEPTH}")
        if type(x) is int and x.bit_length() > MAX_INT_BITS:
            raise UnsupportedValue(f"an integer of more than {MAX_INT_BITS} bits")
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is not dict or len(x) != 1:
            raise UnsupportedValue(f"malformed value {str(x)[:80]!r}")
        ((tag, payload),) = x.items()
        if tag in _LEAF_TAGS:
            if type(payload) is not str:
                raise UnsupportedValue(f"malformed {tag} {str(payload)[:80]!r}")
            if tag == "int" and len(payload) > MAX_INT_BITS // 4 + 3:  # '-0x' and the hex digits
                raise UnsupportedValue(f"an integer of more than {MAX_INT_BITS} bits")
            try:
                if tag == "int":
                    integer = int(payload, 16)
                    if integer.bit_length() <= MAX_INT_BITS:
                        return integer
                    raise UnsupportedValue(f"an integer of more than {MAX_INT_BITS} bits")
                if tag == "bytes":
                    return bytes.fromhex(payload)
                number = float(payload)
            except UnsupportedValue:
                raise
            except ValueError:
                raise UnsupportedValue(f"malformed {tag} {payload[:80]!r}") from None
            if number - number == 0.0:
                raise UnsupportedValue(f"a finite float {payload[:80]!r} in the non-finite form")
            return number
        kind = _CONTAINERS.get(tag)
        if kind is None or type(payload) is not list:
            raise UnsupportedValue(f"malformed value {str(x)[:80]!r}")
        if kind in (set, frozenset, dict) and len(payload) > MAX_HASHED * (2 if kind is dict else 1):
            raise UnsupportedValue(f"a {tag} of more than {MAX_HASHED} members")
        members = [node(m, depth + 1) for m in payload]
        try:
            if kind is dict:
                if len(members) % 2:
                    raise UnsupportedValue("a dict with an odd number of keys and values")
                return dict(zip(members[::2], members[1::2], strict=True))
            return kind(members)
        except TypeError:  # an unhashable set member or dict key
            raise UnsupportedValue(f"an unhashable member in a {tag}") from None

    return node(encoded, 0)


def loads(text: str) -> Any:
    """The inverse of :func:`dumps`; raises :class:`UnsupportedValue` on anything malformed."""
    import json

    try:
        encoded = json.loads(text)
    except (ValueError, RecursionError):
        raise UnsupportedValue(f"not JSON: {text[:80]!r}") from None
    return decode(encoded)


def strict_equal(a: Any, b: Any, abs_tol: float = 0.0) -> bool:
    """Equality that also compares types, recursively: ``1 != 1.0 != True``, ``[1] != (1,)``.

    Floats are equal when ``abs(a - b) <= abs_tol`` (exactly equal with the default 0) or both are
    NaN. Sets and dict keys compare as encoded data (exact); values that are not plain data are
    never equal to anything."""
    try:
        left, right = encode(a), encode(b)
    except UnsupportedValue:
        return False
    return _equal_encoded(left, right, abs_tol)


def _equal_encoded(a: Any, b: Any, abs_tol: float) -> bool:
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if type(x) is float:
            if not (x == y or abs(x - y) <= abs_tol):
                return False
        elif type(x) is not dict:
            if x != y:
                return False
        else:
            ((tag, items_x),) = x.items()
            ((tag_y, items_y),) = y.items()
            if tag != tag_y:
                return False
            if tag in ("list", "tuple", "dict"):
                if len(items_x) != len(items_y):
                    return False
                if tag == "dict":  # as mappings: the keys exactly, in any order; the values below
                    items_x, items_y = _by_key(items_x), _by_key(items_y)
                    if items_x[::2] != items_y[::2]:
                        return False
                stack.extend(zip(items_x, items_y, strict=True))
            elif items_x != items_y:  # set members, big ints, bytes, inf / nan (nan equals nan as data)
                return False
    return True
