"""The ``posenc`` command: ``table`` files decode to the right values (closed forms and the
library), chunked computation with progress equals the one-shot tables, ``--url`` on a real
``python -m service`` gives the same values and bytes as local, bad arguments exit 2, and the
installed entry point (``.venv/bin/posenc``) and ``posenc serve`` work as processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

import posenc
from posenc import cli
from posenc.absolute.sinusoidal import sinusoidal_table
from posenc.relative_schemes.alibi import alibi_bias, alibi_slopes
from posenc.relative_schemes.relative import relative_bias, relative_bias_table, relative_buckets
from posenc.rope import RopeScaling, rope_cos_sin
from tests.helpers import clean_env, free_port
from tests.references import sinusoidal

ROOT = Path(__file__).resolve().parents[2]
POSENC = Path(sys.executable).parent / "posenc"


def run(*argv: object) -> int:
    return cli.main([str(a) for a in argv])


def meta_of(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata()["meta"])


# ------------------------------------------------------------------------------ local tables


def test_sinusoidal_npy_equals_formula_and_library(tmp_path: Path) -> None:
    out = tmp_path / "pe.npy"
    assert run("table", "sinusoidal", "--seq-len", 100, "--d-model", 32, "-o", out) == 0
    table = np.load(out)
    assert table.dtype == np.float32 and table.shape == (100, 32)
    np.testing.assert_allclose(table, sinusoidal(np.arange(100), 32), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(table, sinusoidal_table(seq_len=100, d_model=32).numpy())

    out = tmp_path / "pos.npy"
    args = ["--positions", "7,2,1000000", "--d-model", 8, "--layout", "concat", "--offset", 1]
    assert run("table", "sinusoidal", *args, "--dtype", "float64", "-o", out) == 0
    expected = sinusoidal_table([7, 2, 1000000], d_model=8, layout="concat", offset=1, dtype=torch.float64)  # fmt: skip
    np.testing.assert_array_equal(np.load(out), expected.numpy())


def test_rope_safetensors_holds_every_tensor_and_meta(tmp_path: Path) -> None:
    out = tmp_path / "rope.safetensors"
    assert run("table", "rope", "--preset", "llama-3.1-8b", "--seq-len", 16, "-o", out) == 0
    tensors = load_file(str(out))
    assert set(tensors) == {"cos", "sin", "inv_freq"}
    scaling = RopeScaling(
        type="llama3",
        factor=8.0,
        original_max_position_embeddings=8192,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
    )  # fmt: skip  (meta-llama/Llama-3.1-8B config.json)
    ref = rope_cos_sin(seq_len=16, rotary_dim=128, base=500000.0, scaling=scaling)
    for name in ("cos", "sin", "inv_freq"):
        torch.testing.assert_close(tensors[name], getattr(ref, name), rtol=0, atol=0)
    meta = meta_of(out)
    assert meta["attention_scaling"] == 1.0 and meta["scaling"]["type"] == "llama3"

    out = tmp_path / "partial.safetensors"
    scaling_json = '{"type": "linear", "factor": 2}'
    args = ["--head-dim", 16, "--rotary-dim", 8, "--layout", "interleaved", "--scaling", scaling_json]  # fmt: skip
    assert run("table", "rope", "--seq-len", 4, *args, "-o", out) == 0
    inv = 1e4 ** (-np.arange(0, 8, 2) / 8) / 2  # linear: frequencies divided by the factor
    angles = np.repeat(np.arange(4)[:, None] * inv[None, :], 2, axis=1)  # interleaved: θ0 θ0 θ1 …
    np.testing.assert_allclose(load_file(str(out))["cos"].numpy(), np.cos(angles), atol=1e-6)


def test_alibi_and_relative_files(tmp_path: Path) -> None:
    out = tmp_path / "alibi.safetensors"
    assert run("table", "alibi", "--num-heads", 8, "--seq-len", 4, "-o", out) == 0
    tensors = load_file(str(out))
    np.testing.assert_array_equal(tensors["slopes"].numpy(), 2.0 ** -np.arange(1, 9))
    i, j = np.arange(4)[:, None], np.arange(4)[None, :]
    slopes = 2.0 ** -np.arange(1, 9)[:, None, None]
    expected = np.where(j <= i, -slopes * (i - j), -np.inf).astype(np.float32)
    np.testing.assert_array_equal(tensors["bias"].numpy(), expected)

    out = tmp_path / "t5.safetensors"
    assert run("table", "relative", "--seq-len", 6, "--num-heads", 2, "--seed", 3, "-o", out) == 0
    tensors = load_file(str(out))
    rel = np.arange(6)[None, :] - np.arange(6)[:, None]  # j - i; all below max_exact = 8
    np.testing.assert_array_equal(
        tensors["buckets"].numpy(), np.where(rel > 0, 16, 0) + np.abs(rel)
    )
    torch.manual_seed(3)
    table = torch.nn.Embedding(32, 2).weight.detach()
    torch.testing.assert_close(tensors["bias"], table[tensors["buckets"]].permute(2, 0, 1))
    assert meta_of(out)["bucket_count"] == 32


def test_png_heatmap(tmp_path: Path) -> None:
    out = tmp_path / "alibi.png"
    assert run("table", "alibi", "--num-heads", 4, "--seq-len", 12, "--index", 2, "-o", out) == 0
    with Image.open(out) as image:
        assert image.format == "PNG" and min(image.size) > 32
        pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 8  # a heatmap, not a blank image


@pytest.mark.parametrize(
    ("kind", "args", "reference"),
    [
        (
            "sinusoidal",
            ["--seq-len", 300, "--d-model", 10, "--offset", 5],
            lambda: {"encoding": sinusoidal_table(seq_len=300, d_model=10, offset=5)},
        ),
        (
            "rope",  # dynamic scaling depends on max(positions)+1: every chunk must see 301
            ["--positions", ",".join(map(str, range(300, -1, -1))), "--head-dim", 8,
             "--scaling", '{"type": "dynamic", "factor": 2, "original_max_position_embeddings": 64}'],
            lambda: rope_cos_sin(
                list(range(300, -1, -1)), rotary_dim=8,
                scaling=RopeScaling(type="dynamic", factor=2.0, original_max_position_embeddings=64),
            ).__dict__,
        ),
        (
            "alibi",
            ["--num-heads", 6, "--seq-len", 40, "--key-len", 70],
            lambda: {"bias": alibi_bias(6, 40, 70), "slopes": alibi_slopes(6)},
        ),
        (
            "alibi",
            ["--num-heads", 3, "--seq-len", 50, "--mode", "symmetric", "--dtype", "float64"],
            lambda: {"bias": alibi_bias(3, 50, mode="symmetric", dtype=torch.float64)},
        ),
        (
            "relative",
            ["--seq-len", 40, "--key-len", 300, "--num-heads", 3, "--no-bidirectional"],
            lambda: {
                "buckets": (b := relative_buckets(40, 300, bidirectional=False)),
                "bias": relative_bias(b, relative_bias_table(32, 3)),
            },
        ),
        (
            "relative",
            ["--seq-len", 64, "--bucketing", "clip", "--max-distance", 9],
            lambda: {"buckets": relative_buckets(64, bucketing="clip", max_distance=9)},
        ),
    ],
)  # fmt: skip
def test_chunked_computation_with_progress_equals_one_shot(
    kind: str, args: list, reference, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(cli, "PROGRESS_ELEMENTS", 100)
    monkeypatch.setattr(cli, "CHUNK_ELEMENTS", 700)  # many chunks, with a ragged last one
    out = tmp_path / "t.safetensors"
    assert run("table", kind, *args, "-o", out) == 0
    err = capsys.readouterr().err
    assert f"posenc: {kind}" in err and "(100.0%)" in err and "done" in err
    tensors = load_file(str(out))
    for name, expected in reference().items():
        if isinstance(expected, torch.Tensor):
            torch.testing.assert_close(tensors[name], expected, rtol=0, atol=0, msg=name)
    # --quiet: same file, no progress
    assert run("table", kind, *args, "-q", "-o", tmp_path / "q.safetensors") == 0
    assert capsys.readouterr().err == ""
    quiet = load_file(str(tmp_path / "q.safetensors"))
    assert all(torch.equal(quiet[k], tensors[k]) for k in tensors)


# ------------------------------------------------------------------------------ bad arguments


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["table", "sinusoidal", "--seq-len", "4", "--d-model", "7", "-o", "x.npy"], "--d-model: d_model must be even, got 7"),
        (["table", "sinusoidal", "--seq-len", "4", "--d-model", "8", "-o", "x.csv"], "extension must be one of"),
        (["table", "sinusoidal", "--seq-len", "4", "--d-model", "8"], "-o/--output"),
        (["table", "sinusoidal", "--seq-len", "4", "--d-model", "8", "--num-heads", "2", "-o", "x.npy"], "unrecognized arguments: --num-heads"),
        (["table", "rope", "--seq-len", "4", "--head-dim", "8", "--scaling", "[1]", "-o", "x.npy"], "--scaling: must be a JSON object"),
        (["table", "rope", "--positions", "1,x", "--head-dim", "8", "-o", "x.npy"], "--positions: must be comma-separated integers"),
        (["table", "rope", "--seq-len", "4", "--preset", "nope", "-o", "x.npy"], "unknown preset 'nope'"),
        (["table", "rope", "--seq-len", "4", "--preset", "bloom-7b1", "-o", "x.npy"], "is of kind alibi, not rope"),
        (["table", "alibi", "--seq-len", "4", "-o", "x.npy"], "--num-heads: num_heads is required"),
        (["table", "alibi", "--num-heads", "2", "--seq-len", "5", "--key-len", "3", "-o", "x.npy"], "key_len must be >= seq_len"),
        (["table", "alibi", "--num-heads", "2", "--seq-len", "3", "--dtype", "bfloat16", "-o", "x.npy"], "npy has no bfloat16"),
        (["table", "relative", "--seq-len", "3", "--num-buckets", "3", "-o", "x.npy"], "num_buckets must be >= 4"),
        (["table", "cosine", "-o", "x.npy"], "invalid choice: 'cosine'"),
        (["table", "alibi", "--num-heads", "2", "--seq-len", "3", "--api-key", "k", "-o", "x.npy"], "--api-key: only meaningful with --url"),
    ],
)  # fmt: skip
def test_bad_arguments_exit_2_with_a_message(
    argv: list[str], message: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert (
        info.value.code == 0 and capsys.readouterr().out.strip() == f"posenc {posenc.__version__}"
    )


# ------------------------------------------------------------------------------ --url


@pytest.mark.parametrize(
    "argv",
    [
        ["sinusoidal", "--seq-len", "50", "--d-model", "12", "--base", "500"],
        ["rope", "--positions", "0,9,4096", "--head-dim", "16", "--rotary-dim", "8"],
        ["alibi", "--num-heads", "5", "--seq-len", "6", "--key-len", "9"],
        ["relative", "--seq-len", "7", "--num-heads", "2", "--bucketing", "clip"],
    ],
)
def test_url_gives_the_same_values_and_npy_bytes_as_local(
    argv: list[str], live_server: str, tmp_path: Path
) -> None:
    for ext in ("npy", "safetensors"):
        local, remote = tmp_path / f"local.{ext}", tmp_path / f"remote.{ext}"
        assert run("table", *argv, "-o", local) == 0
        assert run("table", *argv, "--url", live_server, "-o", remote) == 0
        if ext == "npy":
            assert remote.read_bytes() == local.read_bytes()
        else:
            a, b = load_file(str(local)), load_file(str(remote))
            assert list(a) == list(b)
            for name in a:
                torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
            remote_meta, local_meta = meta_of(remote), meta_of(local)
            assert {k: local_meta[k] for k in remote_meta} == remote_meta


def test_url_png_and_server_errors(live_server: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "remote.png"
    args = ["table", "alibi", "--num-heads", "4", "--seq-len", "8", "--url", live_server]
    assert run(*args, "--index", 1, "-o", out) == 0
    with Image.open(out) as image:
        assert image.format == "PNG"
    # The server's 422 (d_model odd) and 413 (too large) exit 2 with its detail.
    sinusoidal = ["table", "sinusoidal", "--seq-len"]
    assert run(*sinusoidal, 4, "--d-model", 7, "--url", live_server, "-o", tmp_path / "x.npy") == 2
    assert "d_model" in capsys.readouterr().err
    # (over POSENC_MAX_STREAM_ELEMENTS: tables up to it stream, tests/test_streaming.py)
    assert run(*sinusoidal, 2**22, "--d-model", 1024, "--url", live_server, "-o", tmp_path / "x.npy") == 2  # fmt: skip
    assert "2147483648" in capsys.readouterr().err
    assert not (tmp_path / "x.npy").exists()
    # Nothing listening: exit 1 after the client's retries.
    nowhere = f"http://127.0.0.1:{free_port()}"
    assert run(*sinusoidal, 4, "--d-model", 4, "--url", nowhere, "-o", tmp_path / "y.npy") == 1
    assert "failed after 3 attempt(s)" in capsys.readouterr().err


# ------------------------------------------------------------------------------ processes


@pytest.mark.slow  # two processes that import torch
def test_installed_entry_point(tmp_path: Path) -> None:
    assert POSENC.exists(), f"{POSENC} missing: run .venv/bin/pip install -e . --no-deps"
    out = tmp_path / "pe.npy"
    done = subprocess.run(
        [POSENC, "table", "sinusoidal", "--seq-len", "20", "--d-model", "6", "-o", out],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(out), sinusoidal(np.arange(20), 6), atol=1e-6)
    bad = subprocess.run([POSENC, "table", "rope", "-o", out], capture_output=True, text=True)
    assert bad.returncode == 2 and "head_dim is required" in bad.stderr


def test_serve_delegates_to_python_m_service(monkeypatch) -> None:
    """``posenc serve`` becomes ``python -m service`` (exec, no import of the service package)."""
    seen: list[list[str]] = []
    monkeypatch.setattr(cli.os, "execv", lambda path, argv: seen.append([path, *argv]))  # type: ignore[attr-defined]
    assert cli.main(["serve", "--port", "8123", "--workers", "2"]) == 0
    assert cli.main(["serve"]) == 0
    py = sys.executable
    assert seen == [
        [py, py, "-m", "service", "--port", "8123", "--workers", "2"],
        [py, py, "-m", "service"],
    ]
    # --log-level, as python -m service takes it
    seen.clear()
    assert cli.main(["serve", "--log-level", "debug"]) == 0
    assert seen == [[py, py, "-m", "service", "--log-level", "debug"]]


def test_a_local_table_too_large_for_memory_is_refused_before_allocating(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """``--seq-len 100000000 --d-model 768`` tried to allocate 307 GB before it exited: it is
    refused from the numbers (exit 2), and nothing is computed or written."""
    computed: list[str] = []
    monkeypatch.setattr(cli.resolve, "compute", lambda *a, **k: computed.append("whole"))  # type: ignore[attr-defined]
    monkeypatch.setattr(cli, "_compute_in_blocks", lambda *a, **k: computed.append("blocks"))
    out = tmp_path / "big.npy"
    with pytest.raises(SystemExit) as info:
        cli.main(["table", "sinusoidal", "--seq-len", "100000000", "--d-model", "768", "-o", str(out)])  # fmt: skip
    assert info.value.code == 2 and computed == [] and not out.exists()
    err = capsys.readouterr().err
    assert "76800000000 elements, over the limit of 2147483648" in err
    assert "286.1 GiB of float32" in err and "--url" in err
    # --max-elements sets the limit (here below a small table)
    with pytest.raises(SystemExit):
        cli.main(["table", "sinusoidal", "--seq-len", "8", "--d-model", "8", "--max-elements", "63", "-o", str(out)])  # fmt: skip
    assert computed == []


def test_help_gives_each_default_once(capsys) -> None:
    """``posenc table rope --help`` said "(default 10000 when neither preset nor config gives
    it) (default 10000.0)"."""
    with pytest.raises(SystemExit):
        cli.main(["table", "rope", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 10000.0)" not in text and "(default half)" not in text
    assert "rope_theta (default 10000 when neither preset nor config gives it)" in text
    assert "(default float32)" in text  # a field whose description gives none still gets it


def test_posenc_serve_process_answers(tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [POSENC, "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT, env=clean_env(POSENC_DEVICE="cpu"), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        from posenc.client import PosencClient

        with PosencClient(f"http://127.0.0.1:{port}") as client:
            client.wait_ready(timeout=120)
            slopes = client.alibi(num_heads=2, seq_len=1).slopes
        np.testing.assert_array_equal(slopes, [2.0**-4, 2.0**-8])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    # uvicorn shuts down cleanly on SIGTERM, then re-raises it (exit status -15).
    assert proc.returncode in (0, -signal.SIGTERM), (tmp_path / "serve.log").read_text()
    assert "Application shutdown complete" in (tmp_path / "serve.log").read_text()


# ------------------------------------------------------------------------- what a newcomer sees


def test_success_says_what_was_written_and_what_was_left_out(tmp_path: Path, capsys) -> None:
    npy, st = tmp_path / "r.npy", tmp_path / "r.safetensors"
    assert run("table", "rope", "--seq-len", 4, "--head-dim", 8, "-o", npy) == 0
    err = capsys.readouterr().err
    assert f"wrote {npy} (cos (4, 8) float32; sin, inv_freq: write .safetensors" in err
    assert run("table", "rope", "--seq-len", 4, "--head-dim", 8, "-o", st) == 0
    assert (
        "cos (4, 8) float32, sin (4, 8) float32, inv_freq (4,) float32)" in capsys.readouterr().err
    )
    assert run("table", "alibi", "--num-heads", 2, "--seq-len", 3, "-q", "-o", npy) == 0
    assert capsys.readouterr().err == ""


def test_safetensors_files_get_the_usual_mode(tmp_path: Path) -> None:
    """safetensors itself writes 0600; the CLI gives the file what open() would (umask 022)."""
    import os

    old = os.umask(0o022)
    try:
        out = tmp_path / "t.safetensors"
        assert run("table", "sinusoidal", "--seq-len", 2, "--d-model", 4, "-o", out) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o644


def test_api_key_comes_from_the_environment(tmp_path: Path, monkeypatch, capsys) -> None:
    """--url to a server with POSENC_API_KEY: the key is read from the environment too."""
    from tests.helpers import start_service, stop_service, wait_ready

    port = free_port()
    log = tmp_path / "server.log"
    proc = start_service(port, log, clean_env(POSENC_DEVICE="cpu", POSENC_API_KEY="s3cret"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        argv = ["table", "alibi", "--num-heads", "2", "--seq-len", "3", "--url", url]
        monkeypatch.delenv("POSENC_API_KEY", raising=False)
        assert run(*argv, "-o", tmp_path / "no-key.npy") == 1
        assert "HTTP 401" in capsys.readouterr().err
        monkeypatch.setenv("POSENC_API_KEY", "s3cret")
        assert run(*argv, "-o", tmp_path / "key.npy") == 0
        np.testing.assert_allclose(np.load(tmp_path / "key.npy")[1, 2, 0], -2 * 2.0**-8)
    finally:
        stop_service(proc)
