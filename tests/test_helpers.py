"""tests/helpers.py's ports under pytest-xdist: each worker hands out ports of its own block,
below Linux's ephemeral range, each one free when handed out."""

from __future__ import annotations

import socket

import pytest

from tests import helpers
from tests.helpers import HOST, PORT_BASE, PORT_BLOCK, free_port


@pytest.mark.parametrize("worker", [0, 1, 7])
def test_a_worker_takes_ports_of_its_own_block(
    worker: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
    start = PORT_BASE + worker * PORT_BLOCK
    ports = [free_port() for _ in range(5)]
    assert all(start <= p < start + PORT_BLOCK for p in ports), ports
    assert len(set(ports)) == 5, ports  # never the same one twice in a row
    assert start + PORT_BLOCK <= 32768  # below the kernel's ephemeral range


def test_a_port_taken_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    start = PORT_BASE + 3 * PORT_BLOCK
    taken = start + helpers._next_port[0] % PORT_BLOCK  # the port the next call would try first
    with socket.socket() as s:
        s.bind((HOST, taken))
        s.listen()
        got = free_port()
    assert got == start + (taken - start + 1) % PORT_BLOCK  # the next one of the block


def test_without_xdist_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    port = free_port()
    with socket.socket() as s:
        s.bind((HOST, port))  # free: nothing listens there
