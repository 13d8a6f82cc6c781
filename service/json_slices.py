"""JSON text parsed in slices: :func:`json.loads`'s value and errors, no C call over a slice.

``json.loads`` is one C call that holds the GIL from the first byte to the last: 0.3-2.3 s for
16 MiB (``POSENC_MAX_BODY_BYTES``) of numbers or keys on a 2-core machine, and while it runs the
event loop's thread cannot run either, whichever thread made the call (issue 39: ``/healthz``
held 0.3-3.6 s). :func:`loads` gives the same value, and the same ``JSONDecodeError`` (message
and character position), ``UnicodeDecodeError`` or ``RecursionError``, with every C call on at
most :data:`SLICE_BYTES` of the text; between calls the GIL is free.

How: the bytes are indexed with numpy, one window of :data:`SLICE_BYTES` at a time (quotes not
escaped, the string state, the nesting depth relative to the window's start). A container is
cut at its top-level commas into runs of children of at most a window, and each run is parsed by
``json.loads`` inside a bracket of its container's kind (``[run]`` or ``{run}``), the results
joined (``list.extend``, ``dict.update``: duplicate keys keep their first place and last value,
as ``json.loads`` does). A child longer than a window is parsed the same way, one level down; a
long string is cut between characters (never inside an escape, a surrogate pair or a UTF-8
sequence) and its parts joined. Any error is ``json.loads``'s own, for the same context: the
failing run, or a few bytes rebuilt around a structural mistake, parsed by ``json.loads`` with
its position moved to the body's.

Nesting is refused past :data:`MAX_DEPTH` containers (a ``RecursionError``, as ``json.loads``
gives past Python's recursion limit, which depended on how deep the caller's stack was), and a
text of more than :func:`max_containers` arrays and objects in all (:data:`MAX_CONTAINERS`, or the
service's ``POSENC_MAX_JSON_CONTAINERS``) is refused as it is parsed
(:class:`TooManyContainers`, a 413 in the service): every cost of a parsed body grows with its
containers, not its bytes (16 MiB of ``[[],[],...]`` is 5.6 M lists, 450 MB of Python objects;
the garbage collector walked them in 1.5 s, freeing them took 0.3 s, each a C call holding the
GIL), and no request of the service needs that many: 262,144 vectors of 32 numbers are already
over 16 MiB of JSON.
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: The most bytes of JSON text that one ``json.loads`` call parses (about 5 ms of numbers).
SLICE_BYTES = 1 << 17
#: The deepest nesting of arrays and objects read; deeper is a ``RecursionError``.
MAX_DEPTH = 512
#: The most arrays and objects a text parsed in slices may hold by default; more is
#: :class:`TooManyContainers` (the service's ``POSENC_MAX_JSON_CONTAINERS``: :func:`container_limit`).
MAX_CONTAINERS = 1 << 18
#: The limit of the text being parsed in this context; None: :data:`MAX_CONTAINERS`.
_CONTAINER_LIMIT: ContextVar[int | None] = ContextVar("posenc_json_containers", default=None)


@contextmanager
def container_limit(limit: int) -> Iterator[None]:
    """Texts parsed inside this block (in this context, and on the worker threads it hands work
    to, which run in a copy of it) hold at most ``limit`` arrays and objects. The service sets
    ``POSENC_MAX_JSON_CONTAINERS`` around each request (:mod:`service.body_limit`)."""
    token = _CONTAINER_LIMIT.set(limit)
    try:
        yield
    finally:
        _CONTAINER_LIMIT.reset(token)


def max_containers() -> int:
    """The most arrays and objects a text parsed here may hold (:func:`container_limit`)."""
    limit = _CONTAINER_LIMIT.get()
    return MAX_CONTAINERS if limit is None else limit


class TooManyContainers(Exception):
    """A JSON text of more than ``limit`` arrays and objects (``count``: those read when it was
    refused). Not a ``ValueError``: the text may be valid JSON, it is too costly to hold."""

    def __init__(self, count: int, limit: int) -> None:
        self.count, self.limit = count, limit
        super().__init__(
            f"the JSON body holds more than {limit} arrays and objects (the most one may "
            f"hold; {count} read when it was refused); send fewer rows per request, or the "
            "arrays as safetensors or npy"
        )


_WS = frozenset(b" \t\n\r")
_QUOTE, _BACKSLASH, _COMMA, _COLON = 34, 92, 44, 58
_OPEN, _CLOSE = (91, 123), (93, 125)  # [ {  and  ] }
_SCALAR_END = frozenset(b' \t\n\r,:]}[{"')


class _Window:
    """One window ``[start, stop)`` of the text, indexed: which bytes are escaped (inside a
    string), which quotes are real, which bytes are outside strings, and the depth after each
    byte relative to the window's start (outside strings)."""

    def __init__(
        self, raw: bytes, buf: NDArray[np.uint8], start: int, stop: int, in_string: bool
    ) -> None:
        w = buf[start:stop]
        self.start, self.bytes = start, w
        opens = (w == 91) | (w == 123)
        closes = (w == 93) | (w == 125)
        if in_string or raw.find(b'"', start, stop) >= 0 or raw.find(b"\\", start, stop) >= 0:
            index = np.arange(len(w))
            last_other = np.maximum.accumulate(np.where(w == _BACKSLASH, -1, index))
            run_before = np.zeros(len(w), dtype=np.int64)  # backslashes just before each byte
            run_before[1:] = index[:-1] - last_other[:-1]
            self.escaped = (run_before % 2) == 1
            self.quote = (w == _QUOTE) & ~self.escaped
            inside = (np.cumsum(self.quote) + int(in_string)) % 2 == 1
            self.outside = ~inside & ~self.quote
            opens &= self.outside
            closes &= self.outside
        else:  # numbers, brackets and commas only: the common large body, indexed faster
            self.escaped = self.quote = np.zeros(len(w), dtype=bool)
            self.outside = np.ones(len(w), dtype=bool)
        self.opens = opens
        step = opens.astype(np.int32)
        step -= closes
        self.depth = np.cumsum(step)

    def sub(self, offset: int) -> _Window | None:
        """The window from ``offset`` on (just after an opening bracket), its depths relative to
        there; None when nothing is left."""
        if offset >= len(self.bytes):
            return None
        sub = object.__new__(_Window)
        sub.start, sub.bytes = self.start + offset, self.bytes[offset:]
        sub.escaped, sub.quote = self.escaped[offset:], self.quote[offset:]
        sub.outside, sub.opens = self.outside[offset:], self.opens[offset:]
        sub.depth = self.depth[offset:] - self.depth[offset - 1]
        return sub

    def first(self, mask: NDArray[np.bool_]) -> int:
        """The first index where ``mask`` holds, or -1."""
        hits = np.flatnonzero(mask)
        return int(hits[0]) if len(hits) else -1


class _Doc:
    """The text being parsed (UTF-8 bytes) and the slices parsed so far (``calls``: the size of
    every ``json.loads`` call, for the tests)."""

    def __init__(self, raw: bytes, slice_bytes: int) -> None:
        self.raw = raw
        self.buf = np.frombuffer(raw, dtype=np.uint8)
        self.n = len(raw)
        self.slice = slice_bytes
        self.calls: list[int] = []
        self.containers = 0  # arrays and objects read so far
        self.max_containers = max_containers()

    def count(self, more: int) -> None:
        """``more`` arrays and objects read; :class:`TooManyContainers` past the limit."""
        self.containers += more
        if self.containers > self.max_containers:
            raise TooManyContainers(self.containers, self.max_containers)

    # -------------------------------------------------------------------- parsing one slice

    def load(self, start: int, stop: int, opener: str = "", closer: str = "") -> Any:
        """``json.loads(opener + text[start:stop] + closer)``, its error moved to the text."""
        piece = self.raw[start:stop].decode("utf-8", "surrogatepass")
        self.calls.append(stop - start)
        try:
            value = json.loads(opener + piece + closer)
        except json.JSONDecodeError as exc:
            raise self.moved(exc, start, len(opener)) from None
        time.sleep(0)  # the GIL to whoever waits for it (the event loop)
        return value

    def charpos(self, at: int) -> int:
        """The character position of byte ``at`` (UTF-8 continuation bytes not counted)."""
        follow = 0
        for lo in range(0, at, self.slice * 8):
            part = self.buf[lo : min(at, lo + self.slice * 8)]
            follow += int(np.count_nonzero((part & 0xC0) == 0x80))
        return at - follow

    def moved(self, exc: json.JSONDecodeError, start: int, shift: int) -> json.JSONDecodeError:
        """``exc`` (of a text whose byte ``start`` was its character ``shift``) as the error of
        the whole text."""
        pos = self.charpos(start) + exc.pos - shift
        return _error(exc.msg, self.raw, pos)

    def fail(self, prefix: str, at: int) -> json.JSONDecodeError:
        """``json.loads``'s error for the text from ``at`` on, in the context that ``prefix``
        rebuilds (``"[0"``: after an array's item...): a few bytes past the next token are
        enough, the whitespace before it counted as one space."""
        token = self.skip_ws(at)
        snippet = self.raw[token : min(self.n, token + 64)].decode("utf-8", "replace")
        space = " " if token > at else ""
        try:
            json.loads(prefix + space + snippet)
        except json.JSONDecodeError as exc:
            rel = exc.pos - len(prefix)
            if space and rel >= 1:
                return _error(exc.msg, self.raw, self.charpos(token) + rel - 1)
            return _error(exc.msg, self.raw, self.charpos(at) + rel)
        return _error("Expecting value", self.raw, self.charpos(token))

    def skip_ws(self, at: int) -> int:
        """The first byte at or after ``at`` that is not JSON whitespace (``n`` at the end)."""
        while at < self.n:
            part = self.buf[at : at + self.slice]
            other = np.flatnonzero((part != 32) & (part != 9) & (part != 10) & (part != 13))
            if len(other):
                return at + int(other[0])
            at += len(part)
        return self.n

    # -------------------------------------------------------------------- values

    def value(self, at: int, depth: int) -> tuple[Any, int]:
        """The value starting at byte ``at`` (not whitespace), ``depth`` deep, and the byte
        after it. (Containers call :meth:`container` themselves: one Python frame a level.)"""
        first = self.raw[at]
        if first in _OPEN:
            return self.container(at, depth + 1)
        if first == _QUOTE:
            return self.string(at)
        return self.scalar(at)

    def scalar(self, at: int) -> tuple[Any, int]:
        """A number or literal: up to the next whitespace or structural byte."""
        stop = at
        while stop < self.n:
            part = self.buf[stop : stop + self.slice]
            ends = np.flatnonzero(np.isin(part, list(_SCALAR_END)))
            if len(ends):
                stop += int(ends[0])
                break
            stop += len(part)
        if stop == at:  # ',' or ':' or a closing bracket where a value belongs
            raise _error("Expecting value", self.raw, self.charpos(at))
        return self.load(at, stop, "[", "]")[0], stop

    def string(self, at: int) -> tuple[str, int]:
        """The string whose opening quote is byte ``at``, cut into slices when long."""
        parts: list[str] = []
        start, size = at + 1, max(self.slice, 16)
        while True:
            stop = min(self.n, start + size)
            if stop < self.n and self.raw.find(b"\\", start, stop) < 0:  # no escape: bytes.find
                end = self.raw.find(b'"', start, stop)
                if end >= 0:
                    parts.append(self.load(start, end, '"', '"'))
                    return "".join(parts), end + 1
                cut = stop  # before a byte that starts a character
                while cut > start and self.raw[cut] & 0xC0 == 0x80:
                    cut -= 1
                if cut > start:
                    parts.append(self.load(start, cut, '"', '"'))
                    start = cut
                    continue
            window = _Window(self.raw, self.buf, start, stop, in_string=True)
            end = window.first(window.quote)
            if end >= 0:
                parts.append(self.load(start, start + end, '"', '"'))
                return "".join(parts), start + end + 1
            if stop == self.n:
                try:  # a control character or a bad escape is reported first, as json does
                    self.load(start, stop, '"')
                except json.JSONDecodeError as exc:
                    if not exc.msg.startswith("Unterminated string"):
                        raise
                raise _error("Unterminated string starting at", self.raw, self.charpos(at))
            cut = _string_cut(window)
            if cut <= 0:  # escapes all through a tiny window: a wider one
                size *= 2
                continue
            parts.append(self.load(start, start + cut, '"', '"'))
            start, size = start + cut, max(self.slice, 16)

    def container(self, at: int, depth: int, indexed: _Window | None = None) -> tuple[Any, int]:
        """The array or object opened at byte ``at``, ``depth`` deep (``indexed``: the window
        from ``at + 1`` on, when its parent has indexed it)."""
        if depth > MAX_DEPTH:
            raise RecursionError(f"JSON nested more than {MAX_DEPTH} deep")
        self.count(1)
        is_object = self.raw[at] == 123
        opener, closer = ("{", "}") if is_object else ("[", "]")
        after_item = '{"":0' if is_object else "[0"
        out: Any = {} if is_object else []
        add = out.update if is_object else out.extend
        start, first = at + 1, True
        while True:
            stop = min(self.n, start + self.slice)
            window = indexed or _Window(self.raw, self.buf, start, stop, in_string=False)
            indexed = None
            close = window.first(window.depth < 0)
            seen = window.depth if close < 0 else window.depth[:close]
            if len(seen) and depth + int(seen.max()) > MAX_DEPTH:
                raise RecursionError(f"JSON nested more than {MAX_DEPTH} deep")
            if close >= 0:
                end = start + close
                if self.skip_ws(start) == end:  # nothing after '[' or ','
                    if not first or self.raw[end] != ord(closer):
                        raise self.fail(opener if first else after_item + ",", start)
                    return out, end + 1
                self.count(int(np.count_nonzero(window.opens[:close])))
                add(self.load(start, end, opener, closer))
                if self.raw[end] != ord(closer):  # '[1}'
                    raise self.fail(after_item, end)
                return out, end + 1
            commas = np.flatnonzero((window.bytes == _COMMA) & window.outside & (window.depth == 0))
            if len(commas):
                cut = start + int(commas[-1])
                if self.skip_ws(start) == cut:  # an empty item: ",," or "[,"
                    raise self.fail(opener if first else after_item + ",", start)
                self.count(int(np.count_nonzero(window.opens[: cut - start])))
                add(self.load(start, cut, opener, closer))
                start, first = cut + 1, False
                continue
            # one item longer than the window: parsed on its own, one level down
            token = self.skip_ws(start)
            if token == self.n:
                raise self.fail(opener if first else after_item + ",", start)
            if self.raw[token] in b",]}":  # past a run of whitespace: the next window's
                start = token
                continue
            if is_object:
                if self.raw[token] != _QUOTE:
                    raise self.fail(opener if first else after_item + ",", start)
                key, token = self.key(token)
            # (a container is indexed from this window on: one Python frame a level)
            value, end = (
                self.container(token, depth + 1, window.sub(token + 1 - start))
                if self.raw[token] in _OPEN
                else self.value(token, depth)
            )
            if is_object:
                out[key] = value
            else:
                out.append(value)
            nxt = self.skip_ws(end)
            if nxt < self.n and self.raw[nxt] == _COMMA:
                start, first = nxt + 1, False
                continue
            if nxt < self.n and self.raw[nxt] == ord(closer):
                return out, nxt + 1
            raise self.fail(after_item, end)

    def key(self, at: int) -> tuple[str, int]:
        """An object member's key (its opening quote at byte ``at``), and where its value
        starts."""
        key, end = self.string(at)
        colon = self.skip_ws(end)
        if colon == self.n or self.raw[colon] != _COLON:
            raise self.fail('{""', end)
        token = self.skip_ws(colon + 1)
        if token == self.n:
            raise self.fail('{"":', colon + 1)
        return key, token


def _string_cut(window: _Window) -> int:
    """Where to cut a string's window (relative, > 0; -1 if nowhere): the last byte that starts
    a character (not a UTF-8 continuation byte), outside an escape, and not the low half of an
    escaped surrogate pair."""
    w = window.bytes
    n = len(w)
    starts = np.flatnonzero((w == _BACKSLASH) & ~window.escaped)  # escapes: \x or \uXXXX
    inside = np.zeros(n + 6, dtype=bool)
    inside[starts + 1] = True
    unicode = starts[(starts + 1 < n) & (w[np.minimum(starts + 1, n - 1)] == ord("u"))]
    for k in range(2, 6):
        inside[unicode + k] = True
    ok = ~inside[:n] & ((w & 0xC0) != 0x80)
    for s in unicode:  # a low surrogate escape stays with its high half
        if s + 3 >= n or (chr(w[s + 2]) in "dD" and chr(w[s + 3]) in "cdefCDEF"):
            ok[s] = False
    ok[0] = False
    cuts = np.flatnonzero(ok)
    return int(cuts[-1]) if len(cuts) else -1


def _error(msg: str, raw: bytes, pos: int) -> json.JSONDecodeError:
    """``json.JSONDecodeError(msg, doc, pos)`` without decoding the whole text for its line and
    column (counted in bytes: they differ from ``json``'s only after a non-ASCII character)."""
    exc = json.JSONDecodeError.__new__(json.JSONDecodeError)
    line = raw.count(b"\n", 0, pos) + 1
    column = pos - raw.rfind(b"\n", 0, pos)
    ValueError.__init__(exc, f"{msg}: line {line} column {column} (char {pos})")
    exc.msg, exc.doc, exc.pos, exc.lineno, exc.colno = msg, raw, pos, line, column  # type: ignore[assignment]
    return exc


def _utf8(raw: bytes, slice_bytes: int) -> bytes:
    """``raw`` checked as ``json.loads`` decodes it (the encoding its first bytes show, with
    ``surrogatepass``), one slice at a time; UTF-8 of the same text when it was another."""
    encoding = json.detect_encoding(raw)
    decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")
    parts: list[bytes] = []
    for lo in range(0, len(raw) or 1, slice_bytes * 8):
        pending = len(decoder.getstate()[0])
        part = raw[lo : lo + slice_bytes * 8]
        try:
            text = decoder.decode(part, final=lo + len(part) >= len(raw))
        except UnicodeDecodeError as exc:
            shift = lo - pending
            raise UnicodeDecodeError(
                exc.encoding, raw, exc.start + shift, exc.end + shift, exc.reason
            ) from None
        if encoding != "utf-8":
            parts.append(text.encode("utf-8", "surrogatepass"))
        time.sleep(0)
    return raw if encoding == "utf-8" else b"".join(parts)


def loads(raw: bytes, slice_bytes: int = SLICE_BYTES) -> Any:
    """``json.loads(raw)``: the same value or error, parsed in slices (module docstring)."""
    return loads_counted(raw, slice_bytes)[0]


def loads_counted(raw: bytes, slice_bytes: int = SLICE_BYTES) -> tuple[Any, list[int]]:
    """:func:`loads`, and the size of every ``json.loads`` call it made (tests)."""
    raw = _utf8(bytes(raw), slice_bytes)
    doc = _Doc(raw, slice_bytes)
    if len(raw) <= slice_bytes and raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        doc.calls.append(len(raw))
        return json.loads(raw.decode("utf-8", "surrogatepass")), doc.calls
    start = doc.skip_ws(0)
    if start == doc.n:
        raise doc.fail("", 0)
    if doc.raw[start] not in b'[{"':  # a number or literal: "Extra data" after it, as json says
        return doc.load(start, doc.n), doc.calls
    value, end = doc.value(start, 0)
    if doc.skip_ws(end) != doc.n:
        raise doc.fail("0", end)  # Extra data
    return value, doc.calls


__all__ = [
    "MAX_CONTAINERS",
    "MAX_DEPTH",
    "SLICE_BYTES",
    "TooManyContainers",
    "container_limit",
    "loads",
    "loads_counted",
    "max_containers",
]
