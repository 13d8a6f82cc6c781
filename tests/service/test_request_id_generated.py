"""Generated request ids (service.observability.request_id): 32 hex digits, unique, and a new sequence in a
forked child (without reading os.urandom for every id)."""

from __future__ import annotations

import re

import pytest

import service.observability.request_id as rid


def test_generated_ids_are_32_hex_digits_and_unique() -> None:
    ids = rid._Ids()
    got = [ids.new() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in got)
    assert len(set(got)) == len(got)
    # the digits are spread: every hex digit appears in every position over 20,000 ids
    for k in range(32):
        assert len({i[k] for i in got}) == 16


def test_a_forked_child_reseeds(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = rid._Ids()
    parent = [ids.new() for _ in range(3)]
    real = rid.os.getpid()
    monkeypatch.setattr(rid.os, "getpid", lambda: real + 1)  # as seen after a fork
    child = [ids.new() for _ in range(3)]
    assert not set(parent) & set(child)
