"""``posenc check`` and ``posenc diff`` without a service (docs/testing.md).

``check`` exits 0 when the named engine matches the file within ``--atol`` and 1 otherwise,
printing the matches and ``/v1/configs/check``'s diagnosis; bad arguments exit 2. The tables in
the files are the closed form of tests/references.py (correct, or with a mistake planted).
``diff`` prints each pair's largest difference, equal to ``/v1/configs/compare``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from posenc import cli
from posenc.core import codec
from posenc.explain.engine_pairs import compare_pairs
from posenc.facts.model_configs import model_config
from posenc.testing import reference_rotation
from tests.references import rope_cos_sin, rope_inv_freq

QWEN = model_config("qwen2.5-7b")  # base 1e6, head_dim 128, half layout
GGUF = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "gguf" / "qwen2.5-7b.gguf"


def _table(positions, base: float = 1e6) -> tuple[np.ndarray, np.ndarray]:
    cos, sin = rope_cos_sin(positions, rope_inv_freq(128, base), "half")
    return cos.astype(np.float32), sin.astype(np.float32)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN))
    return path


def test_a_correct_npz_exits_0(tmp_path: Path, config: Path, capsys) -> None:
    cos, sin = _table(range(64))
    np.savez(tmp_path / "rope.npz", cos=cos, sin=sin)
    assert cli.main(["check", str(tmp_path / "rope.npz"), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "RoPE table matches transformers (exact) within atol 1e-06" in out
    assert "best match: transformers (exact)" in out
    assert cli.main(["check", str(tmp_path / "rope.npz"), "--config", str(config),
                     "--engine", "vllm"]) == 0  # fmt: skip


def test_a_wrong_base_exits_1_and_names_it(tmp_path: Path, config: Path, capsys) -> None:
    cos, sin = _table(range(64), base=1e4)
    np.save(tmp_path / "rope.npy", np.stack([cos, sin]))
    assert cli.main(["check", str(tmp_path / "rope.npy"), "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "RoPE table differs from transformers (exact)" in out
    assert "diagnosis (/v1/configs/check): wrong_base" in out


def test_positions_in_the_file(tmp_path: Path, config: Path) -> None:
    positions = np.array([0, 7, 4096, 30_000])
    cos, sin = _table(positions)
    np.savez(tmp_path / "t.npz", cos=cos, sin=sin, positions=positions)
    assert cli.main(["check", str(tmp_path / "t.npz"), "--config", str(config)]) == 0
    assert cli.main(["check", str(tmp_path / "t.npz"), "--config", str(config), "--seq-len", "4"]) == 1  # fmt: skip


def test_atol_decides(tmp_path: Path, config: Path) -> None:
    """transformers' float32 angles: 1 at 1e-6 against exact, 0 with a looser --atol, 0 as its
    own precision."""
    cos, sin = rope_cos_sin([100_000, 200_000], rope_inv_freq(128, 1e6), "half")
    np.savez(tmp_path / "t.npz", cos=cos.astype(np.float32) + 1e-4, sin=sin.astype(np.float32))
    args = ["check", str(tmp_path / "t.npz"), "--config", str(config), "--positions", "100000,200000"]  # fmt: skip
    assert cli.main(args) == 1
    assert cli.main([*args, "--atol", "1e-3"]) == 0


def test_safetensors_with_its_request_and_a_preset(tmp_path: Path, capsys) -> None:
    positions = [0, 5, 4096]
    cos, sin = _table([p + 1 for p in positions])
    body = codec.encode_safetensors(
        {"cos": torch.from_numpy(cos), "sin": torch.from_numpy(sin)},
        {"request": json.dumps({"positions": positions})},
    )
    (tmp_path / "t.safetensors").write_bytes(body)
    assert cli.main(["check", str(tmp_path / "t.safetensors"), "--preset", "qwen2.5-7b"]) == 1
    assert "positions_off_by_one" in capsys.readouterr().out
    # the file's request names the model; arguments given win over it
    body = codec.encode_safetensors(
        {"cos": torch.from_numpy(cos), "sin": torch.from_numpy(sin)},
        {"request": json.dumps({"preset": "qwen2.5-7b", "positions": [p + 1 for p in positions]})},
    )
    (tmp_path / "t.safetensors").write_bytes(body)
    assert cli.main(["check", str(tmp_path / "t.safetensors")]) == 0
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN))
    argv = ["check", str(tmp_path / "t.safetensors"), "--config", str(config)]
    assert cli.main(argv) == 0
    assert cli.main([*argv, "--positions", ",".join(str(p) for p in positions)]) == 1


def test_rotations_and_a_gguf(tmp_path: Path, capsys) -> None:
    q = torch.randn(16, 2, 128, generator=torch.Generator().manual_seed(0))
    good = reference_rotation(q, preset="qwen2.5-7b", seq_len=16)
    np.savez(tmp_path / "good.npz", q_in=q.numpy(), q_out=good)
    np.savez(tmp_path / "bad.npz", q_in=q.numpy(), q_out=q.numpy())
    assert cli.main(["check", str(tmp_path / "good.npz"), "--gguf", str(GGUF),
                     "--engine", "llama.cpp"]) == 0  # fmt: skip
    assert cli.main(["check", str(tmp_path / "bad.npz"), "--preset", "qwen2.5-7b"]) == 1
    out = capsys.readouterr().out
    assert "rotation differs from transformers (exact)" in out and "not_rotated" in out


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--preset", "no-such-model"], 2),
        ([], 2),  # no model
        (["--preset", "qwen2.5-7b", "--seq-len", "3"], 1),  # 8 rows in the file: no match
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, argv: list[str], code: int) -> None:
    cos, sin = _table(range(8))
    np.savez(tmp_path / "t.npz", cos=cos, sin=sin)
    got: object
    try:
        got = cli.main(["check", str(tmp_path / "t.npz"), *argv])
    except SystemExit as exc:  # argparse's usage errors
        got = exc.code
    assert got == code


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    (tmp_path / "t.npz").write_bytes(b"not a zip")
    assert cli.main(["check", str(tmp_path / "t.npz"), "--preset", "qwen2.5-7b"]) == 2
    (tmp_path / "t.txt").write_text("x")
    assert cli.main(["check", str(tmp_path / "t.txt"), "--preset", "qwen2.5-7b"]) == 2


def test_diff_prints_each_pair_as_compare_answers(tmp_path: Path, capsys) -> None:
    config = model_config("llama-3.1-8b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    png = tmp_path / "d.png"
    argv = ["diff", "--config", str(path), "--engines", "vllm", "llama.cpp",
            "transformers:engine", "--seq-len", "2048", "--png", str(png)]  # fmt: skip
    assert cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    engines = ["vllm", "llama.cpp", {"engine": "transformers", "precision": "engine"}]
    answer = compare_pairs(config, engines, seq_len=2048)
    heads = [line for line in lines if not line.startswith("  ")]
    assert len(heads) == 3
    for line, pair in zip(heads, answer["pairs"], strict=True):
        largest = max(pair["cos"]["max_abs_diff"], pair["sin"]["max_abs_diff"])
        assert line.startswith(f"{pair['a']} vs {pair['b']}: largest |difference| {largest:.3g}")
    with Image.open(png) as image:
        assert image.size[0] > 0
    assert cli.main(["diff", "--config", str(path), "--engines", "vllm"]) == 2
