"""service.json_slices: json.loads's value and errors, parsed in slices (issue 39).

Every document here is parsed by ``json.loads`` and by :func:`loads_counted` with slices of a
few bytes, so that every container, string and number is cut somewhere: the value must be the
same (NaN and big ints included), and so must the error (its class, message and character
position). The documents are random (seeded) JSON with escapes, surrogate pairs, multi-byte
UTF-8 and brackets inside strings, then damaged: a byte deleted, a byte inserted, the end cut.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from service import json_slices
from service.json_slices import MAX_DEPTH, SLICE_BYTES, TooManyContainers, loads, loads_counted

ATOMS = ["0", "-12", "3.5e2", "1e400", "true", "false", "null", "NaN", "-Infinity", "1" * 25]
CHARS = ["a", "é", "\\n", "\\\\", '\\"', "\\u00e9", "\\ud83d\\ude00", "€", "😀", " ", "[", "{"]
CHARS += [",", ":", "]", "}", "x" * 40]


def _document(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth > 3 or roll < 0.35:
        if rng.random() < 0.5:
            return rng.choice(ATOMS)
        return '"' + "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 30))) + '"'

    def ws() -> str:
        return rng.choice(["", " ", "\n  "])

    if roll < 0.65:
        items = [_document(rng, depth + 1) for _ in range(rng.randint(0, 8))]
        return "[" + ws() + ("," + ws()).join(items) + ws() + "]"
    members = [
        f'{ws()}"{"".join(rng.choice(CHARS) for _ in range(rng.randint(0, 5)))}"{ws()}:{ws()}'
        + _document(rng, depth + 1)
        for _ in range(rng.randint(0, 8))
    ]
    return "{" + ",".join(members) + ws() + "}"


def _damaged(rng: random.Random, doc: bytes) -> bytes:
    at = rng.randrange(len(doc))
    how = rng.random()
    if how < 0.3:
        return doc[:at] + doc[at + 1 :]
    if how < 0.6:
        return doc[:at] + bytes([rng.choice(b'[]{},:"\\ax\x01\xff')]) + doc[at:]
    if how < 0.8:
        return doc[:at]
    return doc + rng.choice([b" x", b",", b"]", b" "])


def _outcome(parse: Callable[[bytes], Any], raw: bytes) -> tuple[Any, ...]:
    try:
        return ("value", json.dumps(parse(raw), allow_nan=True))
    except json.JSONDecodeError as exc:
        return ("JSONDecodeError", exc.msg, exc.pos)
    except UnicodeDecodeError as exc:
        return ("UnicodeDecodeError", exc.start, exc.end, exc.reason)
    except RecursionError:
        return ("RecursionError",)
    except ValueError as exc:
        return ("ValueError", str(exc))


def _corpus(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        doc = _document(rng).encode("utf-8", "surrogatepass")
        docs.append(_damaged(rng, doc) if rng.random() < 0.5 and doc else doc)
    return docs


def _first_of_loads(raw: bytes, size: int) -> object:
    return loads_counted(raw, size)[0]


@pytest.mark.parametrize("seed", range(4))
def test_sliced_parse_gives_json_loads_value_or_error(seed: int) -> None:
    for doc in _corpus(seed, 60):
        want = _outcome(json.loads, doc)
        for size in (16, 64):
            got = _outcome(partial(_first_of_loads, size=size), doc)
            assert got == want, (size, doc[:300])


@pytest.mark.parametrize(
    "doc",
    [
        b"",
        b"   \n",
        b"[1, 2,]",
        b'{"a": 1,}',
        b"[1 2]",
        b'{"a" 1}',
        b"[1,,2]",
        b"[" + b" " * 100 + b"]",
        b"[" + b"1," * 40 + b"}",
        b'"' + b"a" * 100,
        b'"' + b"a" * 100 + b"\x01" + b'"',
        b'"' + b"a" * 100 + b"\\q" + b'"',
        b'["' + b"\\ud83d\\ude00" * 20 + b'"]',
        b"[" + b"7" * 5000 + b"]",
        b"12345678901234567890 x",
        "\ufeff[1, 2, 3]".encode("utf-8"),
        '{"é": ["€", 1.5]}'.encode("utf-16"),
        '["\u00e9"]'.encode("utf-32-le"),
        b'["ok", "\xff\xfe"]',
    ],
)
def test_edges_give_json_loads_value_or_error(doc: bytes) -> None:
    want = _outcome(json.loads, doc)
    for size in (8, 16, 64):
        assert _outcome(partial(_first_of_loads, size=size), doc) == want


def test_nesting_past_the_limit_is_a_recursion_error() -> None:
    deep = b"[" * MAX_DEPTH + b"1" + b"]" * MAX_DEPTH
    assert loads(deep, 64) == json.loads(deep)  # the limit itself is read
    with pytest.raises(RecursionError):
        loads(b"[" + deep + b"]", 64)
    with pytest.raises(RecursionError):  # small enough to be one slice: the limit holds too
        loads(b'{"a": ' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1))


def test_a_large_body_is_parsed_in_calls_of_at_most_a_slice() -> None:
    """The mechanism that frees the GIL: no ``json.loads`` call on more than SLICE_BYTES."""
    body = b'{"input_ids": [[' + b",".join([b"12345"] * 400_000) + b'], [1, 2]], "x": "y"}'
    value, calls = loads_counted(body)
    assert value == json.loads(body)
    assert max(calls) <= SLICE_BYTES + 2
    assert len(calls) >= len(body) // SLICE_BYTES
    assert sum(calls) >= len(body) - 64  # every byte parsed once, brackets aside


def test_the_gil_is_offered_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """``time.sleep(0)`` after every slice: a waiting thread (the event loop) runs there."""
    slept: list[float] = []
    monkeypatch.setattr(json_slices.time, "sleep", slept.append)
    body = b"[" + b",".join([b'"abc"'] * 100_000) + b"]"
    _value, calls = loads_counted(body, 4096)
    assert len(slept) >= len(calls) - 1 > 100


def _containers(text: bytes) -> int:
    """The arrays and objects of a JSON text, read one character at a time (duplicate keys
    included: their values are parsed, then dropped)."""
    count, in_string, escaped = 0, False, False
    for char in text.decode("utf-8", "surrogatepass"):
        if escaped:
            escaped = False
        elif in_string:
            escaped, in_string = char == "\\", char != '"'
        elif char == '"':
            in_string = True
        elif char in "[{":
            count += 1
    return count


@pytest.mark.parametrize("seed", range(2))
def test_containers_are_counted_exactly(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """A text of exactly MAX_CONTAINERS arrays and objects is read, one more is refused, with
    brackets inside strings not counted: the random corpus, cut into slices of 16 bytes."""
    docs = [d for d in _corpus(seed, 60) if _outcome(json.loads, d)[0] == "value" and len(d) > 16]
    assert len(docs) > 10
    for doc in docs:
        count = _containers(doc)
        if not count:
            continue
        monkeypatch.setattr(json_slices, "MAX_CONTAINERS", count)
        assert _outcome(partial(_first_of_loads, size=16), doc) == _outcome(json.loads, doc)
        monkeypatch.setattr(json_slices, "MAX_CONTAINERS", count - 1)
        with pytest.raises(TooManyContainers) as refused:
            loads(doc, 16)
        assert refused.value.limit == count - 1 and refused.value.count == count


def test_too_many_containers_stops_the_parse_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 MiB of ``[[],[],...]`` (5.6 M lists) is refused after the limit, not after the body."""
    monkeypatch.setattr(json_slices, "MAX_CONTAINERS", 10_000)
    body = b"[" + b",".join([b"[]"] * 1_000_000) + b"]"
    with pytest.raises(TooManyContainers, match="more than 10000 arrays and objects") as refused:
        loads_counted(body)
    assert 10_000 < refused.value.count < 10_000 + SLICE_BYTES // 3 + 2
    strings = b"[" + b",".join([b'"[[[[{{{{"'] * 100_000) + b"]"  # brackets in strings: none
    assert loads(strings) == json.loads(strings)
    assert not isinstance(refused.value, ValueError)  # not an unreadable body: a 413
