"""Admission by CPU cost (:mod:`service.admission.cost`): a request's CPU-seconds from its
numbers, ``elements × (compute + encode) + json_ints × 400 ns + 1 ms``, worked by hand for each
format and precision (exact tables at 30 ns an element; JSON at 70 ns, base64 JSON 15, PNG 40,
binary 5); the whole milliseconds the budget counts; and the words of the 413 and the 429."""

from __future__ import annotations

import pytest

from service.admission.cost import CpuCost, CpuOverloaded, cost_message, estimate_cost


@pytest.mark.parametrize(
    ("fmt", "base64", "kind", "seconds"),
    [
        ("json", False, "json", 2e6 * (30 + 70) * 1e-9 + 0.001),  # 0.201
        ("json", True, "json-base64", 2e6 * (30 + 15) * 1e-9 + 0.001),  # 0.091
        ("png", False, "png", 2e6 * (30 + 40) * 1e-9 + 0.001),  # 0.141
        ("safetensors", False, "binary", 2e6 * (30 + 5) * 1e-9 + 0.001),  # 0.071
        ("npy", False, "binary", 2e6 * (30 + 5) * 1e-9 + 0.001),
        ("raw", False, "binary", 2e6 * (30 + 5) * 1e-9 + 0.001),
    ],
)
def test_an_exact_table_by_format(fmt: str, base64: bool, kind: str, seconds: float) -> None:
    cost = estimate_cost(2_000_000, {"precision": "exact"}, fmt, base64=base64)
    assert cost.seconds == pytest.approx(seconds, rel=1e-12)
    assert (cost.fmt, cost.precision, cost.engine, cost.elements) == (
        kind,
        "exact",
        None,
        2_000_000,
    )


def test_an_engines_own_arithmetic_and_a_json_token_batch() -> None:
    # llama.cpp's float32 emulation is priced at 40 ns an element (its Engine.compute_ns)
    cost = estimate_cost(10**6, {"precision": "engine", "engine": "llama.cpp"}, "raw")
    assert cost.seconds == pytest.approx(10**6 * (40 + 5) * 1e-9 + 0.001, rel=1e-12)
    assert cost.engine == "llama.cpp"
    # an engine named without precision "engine" computes the exact table
    exact = estimate_cost(10**6, {"engine": "llama.cpp"}, "raw")
    assert exact.seconds == pytest.approx(10**6 * (30 + 5) * 1e-9 + 0.001, rel=1e-12)
    tokens = estimate_cost(0, {}, "json", json_ints=250_000)
    assert tokens.seconds == pytest.approx(250_000 * 400e-9 + 0.001, rel=1e-12)  # 0.101


def test_millis_round_and_are_at_least_one() -> None:
    def millis(seconds: float) -> int:
        return CpuCost(seconds, 0, "exact", None, "json", False).millis

    assert [millis(s) for s in (0.0, 0.0004, 0.0015, 0.201, 18.9)] == [1, 1, 2, 201, 18900]


def test_the_413_names_the_cost_and_what_it_is_made_of() -> None:
    cost = estimate_cost(
        600_000_000, {"precision": "engine", "engine": "vllm"}, "safetensors", streamed=True
    )
    assert cost_message(cost, 10) == (
        "this request would cost about 21.0 CPU-seconds (600000000 elements, precision engine, "
        "engine vllm, binary, streamed), over the limit of 10 CPU-seconds a request "
        "(POSENC_MAX_REQUEST_CPU_SECONDS); ask for fewer positions or dimensions, a binary "
        "format, or precision exact"
    )


def test_the_429_counts_in_cpu_seconds() -> None:
    refusal = CpuOverloaded(
        limit=8000, requested=2500, in_flight=7000, queued=3, waited=1.5, retry_after=2
    )
    assert refusal.detail == (
        "overloaded: this request would cost about 2.5 CPU-seconds and 7.0 are in flight, over "
        "POSENC_MAX_INFLIGHT_CPU_SECONDS=8; waited 1.50 s (POSENC_QUEUE_TIMEOUT) with 3 other "
        "request(s) queued; retry after 2 s"
    )
