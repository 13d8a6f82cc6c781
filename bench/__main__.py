"""``python -m bench``: posenc against the seed baseline and the transport ceiling, on loopback.

Starts posenc (``python -m service``) and the baseline (``uvicorn bench.baseline:app``) as
subprocesses on free loopback ports, waits until both answer, then measures with one persistent
httpx client per server pair, alternating the two sides request by request so that background
load hits both alike. Each figure is the median wall time of a whole request (send, compute,
receive every byte) after a warm-up, over a bounded count within a bounded time.

Cases and targets:

- sinusoidal 2048x768 JSON: posenc vs the seed baseline (``tolist()`` JSON), >= 50x faster;
- sinusoidal 2048x768 raw and safetensors: posenc vs the ceiling sending the same bytes, <= 1.1x;
- sinusoidal 128x64 JSON: posenc vs the same response bytes prebuilt, <= 1.3x;
- embed 32 rows x 512 tokens, default model, raw and safetensors: posenc vs ceiling, <= 1.5x;
- throughput (req/s) of the 128x64 case with 8 concurrent keep-alive clients, ``--workers 1``
  and ``--workers 2`` (and the ceiling for reference);
- peak RSS (``VmHWM``) of the service's processes over the run.

``--cold`` runs the cold-path cases instead (``bench/cold.py``): a new table every request,
a streamed 512 MiB RoPE table, distinct requests from 8 clients, an npy request body.

``--quick`` cuts repetitions; ``--out FILE`` writes the results as markdown (anything below the
notes marker in an existing FILE is kept, so hand-written analysis survives a rerun).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench import harness
from bench.harness import (
    JSON,
    NOTES_MARKER,
    RAW,
    ROOT,
    SAFETENSORS,
    Call,
    Results,
    Row,
    Server,
    _body,
    _ids,
    _server_timing,
    compare,
    load_average,
    log,
    paired_ratio,
    peak_rss_kib,
    same_bytes,
    start_posenc,
    start_posenc_and_baseline,
    stop,
    throughput,
    wait_ready,
)


def run(args: argparse.Namespace) -> Results:
    res = Results()
    q = args.quick
    want = set(args.only.split(",")) if args.only else None

    def wanted(case: str) -> bool:
        if want is None:  # the embed JSON baseline takes ~1 min: only when asked for
            return case != "embed_json"
        return case in want

    res.loads.append(f"start: {load_average()}")
    servers: list[Server] = []
    try:
        posenc, baseline, default = start_posenc_and_baseline(res, servers)
        client = httpx.Client(timeout=120.0, limits=httpx.Limits(max_keepalive_connections=4))

        def posenc_call(path: str, body: bytes, accept: str) -> Callable[[int], Call]:
            return lambda i: Call(posenc.url + path, body, accept)

        def ceiling_for(name: str, r: httpx.Response, body: bytes) -> Callable[[int], Call]:
            store_ceiling(name, r)
            return lambda i: Call(f"{baseline.url}/ceiling/{name}", body, r.headers["content-type"])

        def store_ceiling(name: str, r: httpx.Response) -> None:
            """Make the ceiling answer ``name`` with posenc's response: body and headers."""
            own = {"content-type", "content-length", "date", "server"}  # set by the server
            headers = {k: v for k, v in r.headers.items() if k.lower() not in own}
            put = client.put(
                f"{baseline.url}/ceiling/{name}",
                content=r.content,
                headers={
                    "content-type": r.headers["content-type"],
                    "x-ceiling-headers": json.dumps(headers),
                },
            )
            put.raise_for_status()

        sin_path = "/v1/encodings/sinusoidal"
        big = _body({"seq_len": 2048, "d_model": 768})
        small = _body({"seq_len": 128, "d_model": 64})

        # 1. big JSON against the seed baseline
        if wanted("sin_big_json"):
            log("sinusoidal 2048x768 JSON: posenc vs baseline")
            tp, tb, r = compare(
                client,
                posenc_call(sin_path, big, JSON),
                lambda i: Call(baseline.url + sin_path, big, JSON),
                warmup=1,
                reps=3 if q else 5,
                budget_s=30 if q else 60,
            )
            ratio = paired_ratio(tb, tp)
            res.rows.append(
                Row(
                    "sinusoidal 2048x768 JSON",
                    tp.median_s * 1e3,
                    "seed baseline",
                    tb.median_s * 1e3,
                    ratio,
                    ">= 50x faster",
                    ratio >= 50,
                    f"{len(r.content) / 1e6:.1f} MB; {_server_timing(r)}",
                )
            )

        # 1b. for information: the same JSON against a baseline whose handler keeps its return
        # annotation (FastAPI then serialises with pydantic-core), and against the ceiling
        if wanted("sin_big_json_info"):
            log("sinusoidal 2048x768 JSON: posenc vs typed baseline and vs ceiling")
            tp, tb, r = compare(
                client,
                posenc_call(sin_path, big, JSON),
                lambda i: Call(baseline.url + "/typed" + sin_path, big, JSON),
                warmup=1,
                reps=3 if q else 5,
                budget_s=20 if q else 40,
            )
            res.rows.append(
                Row(
                    "sinusoidal 2048x768 JSON",
                    tp.median_s * 1e3,
                    "baseline, annotated return",
                    tb.median_s * 1e3,
                    paired_ratio(tb, tp),
                    "(info, x faster)",
                    None,
                    "pydantic-core serialiser",
                )
            )
            tp, tc, r = compare(
                client,
                posenc_call(sin_path, big, JSON),
                ceiling_for("sin_big_json", r, big),
                warmup=2,
                reps=10 if q else 30,
                budget_s=10 if q else 20,
                check=same_bytes,
            )
            res.rows.append(
                Row(
                    "sinusoidal 2048x768 JSON",
                    tp.median_s * 1e3,
                    "ceiling, same bytes",
                    tc.median_s * 1e3,
                    paired_ratio(tp, tc),
                    "(info)",
                    None,
                    f"{len(r.content) / 1e6:.1f} MB",
                )
            )

        # 2. big binary against the ceiling
        for fmt, media in (("raw", RAW), ("safetensors", SAFETENSORS)):
            case = f"sin_big_{fmt}"
            if not wanted(case):
                continue
            log(f"sinusoidal 2048x768 {fmt}: posenc vs ceiling")
            first = posenc_call(sin_path, big, media)(0).send(client)
            tp, tc, r = compare(
                client,
                posenc_call(sin_path, big, media),
                ceiling_for(case, first, big),
                warmup=3,
                reps=15 if q else 40,
                budget_s=10 if q else 25,
                check=same_bytes,
            )
            ratio = paired_ratio(tp, tc)
            res.rows.append(
                Row(
                    f"sinusoidal 2048x768 {fmt}",
                    tp.median_s * 1e3,
                    "ceiling, same bytes",
                    tc.median_s * 1e3,
                    ratio,
                    "<= 1.1x",
                    ratio <= 1.1,
                    f"{len(r.content) / 1e6:.2f} MB; {_server_timing(r)}",
                )
            )

        # 3. small JSON against the same bytes prebuilt
        if wanted("sin_small_json"):
            log("sinusoidal 128x64 JSON: posenc vs ceiling")
            first = posenc_call(sin_path, small, JSON)(0).send(client)
            tp, tc, r = compare(
                client,
                posenc_call(sin_path, small, JSON),
                ceiling_for("sin_small_json", first, small),
                warmup=20,
                reps=100 if q else 400,
                budget_s=10 if q else 20,
                check=same_bytes,
            )
            ratio = paired_ratio(tp, tc)
            res.rows.append(
                Row(
                    "sinusoidal 128x64 JSON",
                    tp.median_s * 1e3,
                    "ceiling, same bytes",
                    tc.median_s * 1e3,
                    ratio,
                    "<= 1.3x",
                    ratio <= 1.3,
                    f"{len(r.content) / 1e3:.1f} kB; {_server_timing(r)}",
                )
            )

        # 4. embed, default model, binary, against the ceiling
        ids = _ids(32, 512, int(default["vocab_size"]), seed=0)
        embed_body = _body({"input_ids": ids})
        for fmt, media in (("raw", RAW), ("safetensors", SAFETENSORS)):
            case = f"embed_{fmt}"
            if not wanted(case):
                continue
            log(f"embed 32x512 {fmt}: posenc vs ceiling")
            first = posenc_call("/v1/embed", embed_body, media)(0).send(client)
            tp, tc, r = compare(
                client,
                posenc_call("/v1/embed", embed_body, media),
                ceiling_for(case, first, embed_body),
                warmup=3,
                reps=10 if q else 30,
                budget_s=10 if q else 25,
                check=same_bytes,
            )
            ratio = paired_ratio(tp, tc)
            res.rows.append(
                Row(
                    f"embed 32x512 {fmt}",
                    tp.median_s * 1e3,
                    "ceiling, same bytes",
                    tc.median_s * 1e3,
                    ratio,
                    "<= 1.5x",
                    ratio <= 1.5,
                    f"{len(r.content) / 1e6:.1f} MB; {_server_timing(r)}",
                )
            )

        # 4b. embed with fresh token ids on every request (no response cache can help)
        if wanted("embed_fresh"):
            log("embed 32x512 raw, fresh ids per request: posenc vs ceiling (same size)")
            n = (10 if q else 30) + 3
            bodies = [
                _body({"input_ids": _ids(32, 512, int(default["vocab_size"]), s)})
                for s in range(1, n + 1)
            ]
            store_ceiling(
                "embed_fresh", Call(posenc.url + "/v1/embed", embed_body, RAW).send(client)
            )
            tp, tc, r = compare(
                client,
                lambda i: Call(posenc.url + "/v1/embed", bodies[i % n], RAW),
                lambda i: Call(f"{baseline.url}/ceiling/embed_fresh", bodies[i % n], RAW),
                warmup=3,
                reps=n - 3,
                budget_s=10 if q else 25,
            )
            ratio = paired_ratio(tp, tc)
            res.rows.append(
                Row(
                    "embed 32x512 raw, fresh ids",
                    tp.median_s * 1e3,
                    "ceiling, same size",
                    tc.median_s * 1e3,
                    ratio,
                    "(info)",
                    None,
                    f"{len(r.content) / 1e6:.1f} MB; {_server_timing(r)}",
                )
            )

        # 4c. embed JSON against the seed baseline (information only)
        if wanted("embed_json"):
            log("embed 32x512 JSON: posenc vs baseline")
            tp, tb, r = compare(
                client,
                posenc_call("/v1/embed", embed_body, JSON),
                lambda i: Call(baseline.url + "/v1/embed", embed_body, JSON),
                warmup=0,
                reps=3,
                budget_s=0,
            )
            ratio = paired_ratio(tb, tp)
            res.rows.append(
                Row(
                    "embed 32x512 JSON",
                    tp.median_s * 1e3,
                    "seed baseline",
                    tb.median_s * 1e3,
                    ratio,
                    "(info, x faster)",
                    None,
                    f"{len(r.content) / 1e6:.1f} MB; {_server_timing(r)}",
                )
            )
        client.close()
        res.loads.append(f"after latency cases: {load_average()}")

        # 5. throughput, 8 clients, small case
        duration = 2.0 if q else 5.0
        if wanted("throughput"):
            log(f"throughput: ceiling, 8 clients, {duration:.0f} s")
            rps, errors, lat = throughput(
                baseline.port, "/ceiling/sin_small_json", small, JSON, 8, duration
            )
            res.extra.append(
                (
                    "throughput 128x64 JSON, 8 clients, ceiling (1 process)",
                    f"{rps:.0f} req/s, median latency {lat * 1e3:.2f} ms, {errors} errors",
                )
            )
            log(f"throughput: posenc --workers 1, 8 clients, {duration:.0f} s")
            rps, errors, lat = throughput(posenc.port, sin_path, small, JSON, 8, duration)
            res.extra.append(
                (
                    "throughput 128x64 JSON, 8 clients, posenc --workers 1",
                    f"{rps:.0f} req/s, median latency {lat * 1e3:.2f} ms, {errors} errors",
                )
            )
        peaks = peak_rss_kib(posenc.proc.pid)
        res.extra.append(("peak RSS, posenc --workers 1 (whole run above)", _fmt_peaks(peaks)))
        stop(baseline)
        stop(posenc)

        if wanted("throughput"):
            posenc2 = start_posenc(2)
            servers.append(posenc2)
            wait_ready(posenc2, "/readyz")
            # make sure both workers are up and have the table cached
            with httpx.Client(timeout=30) as c2:
                for _ in range(20):
                    Call(posenc2.url + sin_path, small, JSON).send(c2)
            log(f"throughput: posenc --workers 2, 8 clients, {duration:.0f} s")
            rps, errors, lat = throughput(posenc2.port, sin_path, small, JSON, 8, duration)
            res.extra.append(
                (
                    "throughput 128x64 JSON, 8 clients, posenc --workers 2",
                    f"{rps:.0f} req/s, median latency {lat * 1e3:.2f} ms, {errors} errors",
                )
            )
            peaks = peak_rss_kib(posenc2.proc.pid)
            res.extra.append(("peak RSS, posenc --workers 2 (throughput run)", _fmt_peaks(peaks)))
            stop(posenc2)
        res.loads.append(f"end: {load_average()}")
    finally:
        for s in servers:
            stop(s)
    return res


def _fmt_peaks(peaks: dict[int, int]) -> str:
    parts = [f"{kib / 1024:.0f} MiB" for kib in peaks.values()]
    total = sum(peaks.values()) / 1024
    if len(parts) == 1:
        return parts[0]
    return f"{total:.0f} MiB over {len(parts)} processes ({', '.join(parts)})"


# --------------------------------------------------------------------------- reporting


def _verdict(met: bool | None) -> str:
    return "—" if met is None else ("met" if met else "**missed**")


def table(res: Results) -> list[str]:
    lines = [
        "| case | posenc (median ms) | compared with | its median ms | ratio | target | verdict | notes |",
        "| --- | ---: | --- | ---: | ---: | --- | --- | --- |",
    ]
    for r in res.rows:
        lines.append(
            f"| {r.case} | {r.posenc_ms:.2f} | {r.other} | {r.other_ms:.2f} "
            f"| {r.ratio:.{2 if r.ratio >= 10 else 3}f}x "
            f"| {r.target} | {_verdict(r.met)} | {r.note} |"
        )
    if res.extra:
        lines += ["", "| measure | figure |", "| --- | --- |"]
        lines += [f"| {what} | {fig} |" for what, fig in res.extra]
    return lines


def machine() -> list[str]:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    import torch

    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        except OSError:
            return ""
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "service", "posenc")
    return [
        f"- code: commit {commit}"
        + (" plus uncommitted changes in service/ or posenc/" if dirty else ""),
        f"- machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {cpu}, "
        f"{mem_kib / 1024 / 1024:.1f} GiB memory",
        f"- python {platform.python_version()}, torch {torch.__version__}, httpx {httpx.__version__}",
    ]


def write_markdown(path: Path, res: Results, argv: list[str], started: dt.datetime) -> None:
    notes = ""
    if path.exists():
        old = path.read_text()
        if NOTES_MARKER in old:
            notes = old.split(NOTES_MARKER, 1)[1].lstrip("\n")
    lines = [
        "# posenc benchmark results",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- command: `{shlex.join(argv)}`",
        *machine(),
        f"- posenc device: {res.device}",
        f"- load average (1, 5, 15 min): {'; '.join(res.loads)}",
        "- each figure: median wall time of a whole request over loopback (persistent httpx "
        "client, warm-up first, posenc and the other side alternated request by request); "
        "ratio: the median of the back-to-back pairs' ratios, as the target states it "
        "(baseline/posenc for 'faster', posenc/ceiling otherwise)",
        "",
        *table(res),
        "",
        NOTES_MARKER,
        "",
        notes,
    ]
    path.write_text("\n".join(lines).rstrip() + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (about 1 minute)")
    parser.add_argument("--out", type=Path, help="write the results as markdown to this file")
    parser.add_argument(
        "--only",
        help="comma-separated cases (default: all but embed_json): sin_big_json, "
        "sin_big_json_info, sin_big_raw, sin_big_safetensors, sin_small_json, embed_raw, "
        "embed_safetensors, embed_fresh, embed_json, throughput",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="run the cold-path cases of bench/cold.py instead (--only picks among "
        "cold_sin_raw, rope_stream, distinct_small, embed_npy, embed_text)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="with --cold: run the cold cases this many times, each with fresh servers, and say "
        "in how many runs in a row every target was met",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="serve posenc as `uvicorn MODULE:ATTR` instead of `python -m service` "
        "(to measure a candidate change; PYTHONPATH reaches the module)",
    )
    args = parser.parse_args(argv)
    harness.POSENC_APP = args.app  # read by start_posenc
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    if args.cold:
        from bench.cold import run_cold

        streak = best = 0
        for k in range(args.runs):
            res = run_cold(args)
            met = all(r.met is not False for r in res.rows)
            streak = streak + 1 if met else 0
            best = max(best, streak)
            if args.runs > 1:
                print(f"\nrun {k + 1} of {args.runs}: {'every target met' if met else 'missed'}")
                print("\n".join(table(res)))
        if args.runs > 1:
            print(f"\nruns in a row meeting every target: {best} of {args.runs}")
            res.extra.append(("runs in a row meeting every target", f"{best} of {args.runs}"))
    else:
        res = run(args)
    print("\n".join(table(res)))
    print(f"\nload average: {'; '.join(res.loads)}; took {time.monotonic() - t0:.0f} s")
    if args.out:
        write_markdown(args.out, res, ["python", "-m", "bench", *(argv or sys.argv[1:])], started)
        log(f"wrote {args.out}")
    missed = [r.case for r in res.rows if r.met is False]
    print("targets missed: " + (", ".join(missed) if missed else "none"))
    return 0


def _sigterm(signum: int, frame: object) -> None:  # pragma: no cover
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _sigterm)  # so the finally block stops the servers
    sys.exit(main())
