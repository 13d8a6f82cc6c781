"""Text in: /v1/tokenize, /v1/detokenize and ``text`` in /v1/embed and /v1/position-ids,
compared with Hugging Face ``tokenizers`` and transformers' ``AutoTokenizer`` on the same
model folder, in process and through a real uvicorn; folders in ``POSENC_MODELS``; the
built-in model's own tokenizer; ``POSENC_MAX_BODY_BYTES``.

The model folder is made here: a byte-level BPE tokenizer trained with ``tokenizers`` (special
tokens ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2 added by a template post-processor), a real
``model.safetensors`` (GPT-2 tensor names) and a ``config.json`` with ``pad_token_id`` 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.routes import text as text_routes
from tests.helpers import (
    FOLDER_POSITIONS as POSITIONS,
)
from tests.helpers import (
    GPT2_NAME,
    HOST,
    ApiClient,
    base64_tensor,
    clean_env,
    free_port,
    make_folder,
    start_service,
    stop_service,
    wait_ready,
)

WORDY = "wordy"  # the folder model, its table as large as its tokenizer's vocabulary
SMALL = "wordy-small"  # the same tokenizer over a table of 40 rows: text ids fall outside

TEXTS = [
    "Hello world, positions count from zero.",
    "héllo wörld — 日本語 🎉 rotary",
    "",
    "  spaces around  ",
    "a literal <s> and </s> in the text",
    "tabs\tand\nnewlines\x00",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("text-models")
    return {WORDY: make_folder(root, WORDY), SMALL: make_folder(root, SMALL, vocab=40)}


@pytest.fixture(scope="module")
def models_env(folders: dict[str, Path], gpt2_file: Path) -> str:
    return f"{WORDY}={folders[WORDY]},{SMALL}={folders[SMALL]},{GPT2_NAME}={gpt2_file}"


@pytest.fixture(scope="module")
def reference(folders: dict[str, Path]):  # type: ignore[no-untyped-def]
    """(tokenizers.Tokenizer, transformers AutoTokenizer) of the folder."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    folder = folders[WORDY]
    return Tokenizer.from_file(str(folder / "tokenizer.json")), AutoTokenizer.from_pretrained(
        str(folder)
    )


@pytest.fixture(scope="module")
def inprocess(models_env: str) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    with TestClient(create_app(Settings(device="cpu", models=models_env))) as client:
        yield client


@pytest.fixture(scope="module")
def live(models_env: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    port = free_port()
    log = tmp_path_factory.mktemp("live-text") / "service.log"
    env = clean_env(POSENC_DEVICE="cpu", POSENC_MODELS=models_env)
    proc = start_service(port, log, env)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log)
        with httpx.Client(base_url=url, timeout=60) as client:
            yield client
    finally:
        stop_service(proc)


@pytest.fixture(params=["inprocess", "uvicorn"])
def api(request: pytest.FixtureRequest) -> httpx.Client:
    return request.getfixturevalue("inprocess" if request.param == "inprocess" else "live")


# ---------------------------------------------------------------------------------------------
# /v1/models and folders
# ---------------------------------------------------------------------------------------------


def test_models_say_which_read_text_and_folder_pad_token(api: httpx.Client, reference) -> None:  # type: ignore[no-untyped-def]
    models = {m["name"]: m for m in api.get("/v1/models").json()["models"]}
    assert models[WORDY]["tokenizer"] is True
    assert models["posenc-base"]["tokenizer"] is True
    assert models[GPT2_NAME]["tokenizer"] is False
    assert models[WORDY]["pad_token_id"] == 0  # its config's
    assert models[WORDY]["vocab_size"] == reference[0].get_vocab_size()
    assert models[SMALL]["vocab_size"] == 40
    assert models[WORDY]["max_positions"] == POSITIONS


def test_folder_pad_token_is_null_without_one_in_its_config(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    folder = make_folder(tmp_path, "nopad")
    config = json.loads((folder / "config.json").read_text())
    del config["pad_token_id"]
    (folder / "config.json").write_text(json.dumps(config))
    with TestClient(create_app(Settings(device="cpu", models=f"nopad={folder}"))) as client:
        model = client.get("/v1/models/nopad").json()
        assert model["pad_token_id"] is None and model["tokenizer"] is True
        # padded slots of a text request then hold 0
        r = client.post("/v1/position-ids", json={"text": ["Hello world", ""], "model": "nopad"})
        ids = np.array(r.json()["tensors"]["input_ids"]["data"])
        assert (ids[1, 2:] == 0).all() and ids[1, :2].tolist() == [1, 2]


# ---------------------------------------------------------------------------------------------
# /v1/tokenize and /v1/detokenize against tokenizers and AutoTokenizer
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("special", [True, False])
def test_tokenize_equals_encode_batch_and_autotokenizer(
    api: httpx.Client, reference, special: bool
) -> None:  # type: ignore[no-untyped-def]
    tok, hf = reference
    r = api.post(
        "/v1/tokenize", json={"text": TEXTS, "model": WORDY, "add_special_tokens": special}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    want = tok.encode_batch(TEXTS, add_special_tokens=special)
    assert body["input_ids"] == [e.ids for e in want]
    assert body["tokens"] == [e.tokens for e in want]
    assert body["offsets"] == [[list(o) for o in e.offsets] for e in want]
    theirs = hf(TEXTS, add_special_tokens=special, return_offsets_mapping=True)
    assert body["input_ids"] == theirs["input_ids"]
    assert body["offsets"] == [[list(o) for o in row] for row in theirs["offset_mapping"]]
    assert body["tokens"] == [hf.convert_ids_to_tokens(ids) for ids in body["input_ids"]]
    if special:  # the literal "<s>" in a text is the special token, as tokenizers reads it
        assert body["input_ids"][2] == [1, 2]  # the empty string: only the template's tokens
        assert body["input_ids"][4].count(1) == 2
    else:
        assert body["input_ids"][2] == []


def test_tokenize_a_single_string_is_one_row(api: httpx.Client, reference) -> None:  # type: ignore[no-untyped-def]
    tok, _ = reference
    r = api.post("/v1/tokenize", json={"text": "héllo 🎉", "model": WORDY})
    assert r.json()["input_ids"] == [tok.encode("héllo 🎉").ids]


@pytest.mark.parametrize("path", ["/v1/embed", "/v1/position-ids"])
def test_text_as_one_string_is_one_row_everywhere(api: httpx.Client, reference, path: str) -> None:  # type: ignore[no-untyped-def]
    """API 1.3: ``text`` is a string or a list in every endpoint that takes it."""
    tok, _ = reference
    one = api.post(path + "?format=safetensors", json={"text": "héllo 🎉", "model": WORDY})
    listed = api.post(path + "?format=safetensors", json={"text": ["héllo 🎉"], "model": WORDY})
    assert one.status_code == 200, one.text
    assert one.content == listed.content
    ids = api.post(path, json={"text": "héllo 🎉", "model": WORDY}).json()["tensors"]["input_ids"]
    assert ids["data"] == [tok.encode("héllo 🎉").ids]


@pytest.mark.parametrize("skip", [True, False])
def test_detokenize_equals_decode_batch_and_autotokenizer(
    api: httpx.Client, reference, skip: bool
) -> None:  # type: ignore[no-untyped-def]
    tok, hf = reference
    rows = [e.ids for e in tok.encode_batch(TEXTS)] + [[]]
    r = api.post(
        "/v1/detokenize", json={"input_ids": rows, "model": WORDY, "skip_special_tokens": skip}
    )
    assert r.status_code == 200, r.text
    got = r.json()["text"]
    assert got == tok.decode_batch(rows, skip_special_tokens=skip)
    assert got == hf.batch_decode(
        rows, skip_special_tokens=skip, clean_up_tokenization_spaces=False
    )
    if skip:
        assert got[:4] == TEXTS[:4]


@pytest.mark.parametrize(("row", "col", "token"), [(1, 2, None), (0, 0, -1), (2, 0, 10**12)])
def test_detokenize_unknown_id_is_422_naming_it(
    api: httpx.Client, reference, row: int, col: int, token: int | None
) -> None:  # type: ignore[no-untyped-def]
    rows = [[5, 6, 7], [8, 9, 10], [11]]
    rows[row][col] = reference[0].get_vocab_size() if token is None else token  # one past
    r = api.post("/v1/detokenize", json={"input_ids": rows, "model": WORDY})
    assert r.status_code == 422, r.text
    assert f"input_ids[{row}][{col}]" in r.json()["detail"]
    assert r.json()["field"] == f"input_ids[{row}][{col}]"


def test_a_model_without_a_tokenizer_is_422_naming_those_with_one(api: httpx.Client) -> None:
    for path, body in (
        ("/v1/tokenize", {"text": "hi", "model": GPT2_NAME}),
        ("/v1/detokenize", {"input_ids": [[1]], "model": GPT2_NAME}),
        ("/v1/embed", {"text": ["hi"], "model": GPT2_NAME}),
        ("/v1/position-ids", {"text": ["hi"], "model": GPT2_NAME}),
    ):
        r = api.post(path, json=body)
        assert r.status_code == 422, (path, r.text)
        detail = r.json()["detail"]
        assert "no tokenizer" in detail and GPT2_NAME in detail, detail
        for name in ("posenc-base", WORDY, SMALL):
            assert name in detail, (path, detail)


def test_unknown_model_and_bad_bodies_are_422(inprocess: httpx.Client) -> None:
    for path, body, where in (
        ("/v1/tokenize", {"text": "hi", "model": "wordie"}, "wordy"),  # did you mean
        ("/v1/tokenize", {"text": []}, "text"),
        ("/v1/tokenize", {"text": [1]}, "text"),
        ("/v1/tokenize", {"txt": "hi"}, "txt"),
        ("/v1/embed", {"text": 5}, "text"),
        ("/v1/detokenize", {"input_ids": []}, "input_ids"),
        ("/v1/detokenize", {"input_ids": [["a"]]}, "input_ids"),
        ("/v1/embed", {"text": ["a"], "input_ids": [[1]]}, "exactly one"),
        ("/v1/embed", {"model": WORDY}, "exactly one"),
        ("/v1/position-ids", {"text": ["a"], "input_ids": [[1]]}, "exactly one"),
        ("/v1/position-ids", {}, "exactly one"),
    ):
        r = inprocess.post(path, json=body)
        assert r.status_code == 422, (path, body, r.text)
        assert where in r.text, (path, r.text)


def test_a_lone_surrogate_is_422_not_500(inprocess: httpx.Client) -> None:
    raw = b'{"text": ["ok", "bad \\ud800 half"], "model": "wordy"}'
    for path in ("/v1/tokenize", "/v1/embed", "/v1/position-ids"):
        r = inprocess.post(path, content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, (path, r.text)


# ---------------------------------------------------------------------------------------------
# text in /v1/embed and /v1/position-ids: the same as the tokenizer's ids sent as input_ids
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("special", [True, False])
def test_embed_text_equals_embed_of_its_ids(
    api: httpx.Client, reference, side: str, special: bool
) -> None:  # type: ignore[no-untyped-def]
    tok, hf = reference
    common = {"model": WORDY, "padding_side": side}
    r = api.post(
        "/v1/embed", json={"text": TEXTS, "add_special_tokens": special, **common},
        params={"format": "safetensors"},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    from safetensors.numpy import load

    got = load(r.content)
    rows = [e.ids for e in tok.encode_batch(TEXTS, add_special_tokens=special)]
    same = api.post(
        "/v1/embed", json={"input_ids": rows, **common}, params={"format": "safetensors"}
    )
    want = load(same.content)
    assert sorted(got) == sorted([*want, "input_ids"])
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    theirs = hf(TEXTS, add_special_tokens=special, padding=True, padding_side=side)
    assert got["input_ids"].dtype == np.int64
    assert got["input_ids"].tolist() == theirs["input_ids"]  # padded with the config's 0
    assert got["attention_mask"].tolist() == theirs["attention_mask"]


@pytest.mark.parametrize("side", ["right", "left"])
def test_position_ids_text_equals_position_ids_of_its_ids(
    api: httpx.Client, reference, side: str
) -> None:  # type: ignore[no-untyped-def]
    tok, hf = reference
    common = {"model": WORDY, "padding_side": side, "start": 2, "pad_position": 1}
    r = api.post("/v1/position-ids", json={"text": TEXTS, **common})
    assert r.status_code == 200, r.text
    body = r.json()
    rows = [e.ids for e in tok.encode_batch(TEXTS)]
    want = api.post("/v1/position-ids", json={"input_ids": rows, **common}).json()
    assert list(body["tensors"]) == ["position_ids", "attention_mask", "input_ids"]
    for name in ("position_ids", "attention_mask"):
        assert body["tensors"][name] == want["tensors"][name]
    theirs = hf(TEXTS, padding=True, padding_side=side)
    assert body["tensors"]["input_ids"]["data"] == theirs["input_ids"]
    assert body["tensors"]["attention_mask"]["data"] == theirs["attention_mask"]


def test_text_with_a_pad_token_id_is_the_ids_request_with_it(
    inprocess: httpx.Client, reference
) -> None:  # type: ignore[no-untyped-def]
    """pad_token_id marks tokens equal to it as padding, as with ids, and fills the padding."""
    tok, _ = reference
    rows = [e.ids for e in tok.encode_batch(TEXTS)]
    common = {"model": WORDY, "pad_token_id": 2}  # </s>: every row's last token
    text = inprocess.post("/v1/position-ids", json={"text": TEXTS, **common}).json()["tensors"]
    ids = inprocess.post("/v1/position-ids", json={"input_ids": rows, **common}).json()["tensors"]
    assert text["attention_mask"] == ids["attention_mask"]
    assert text["position_ids"] == ids["position_ids"]
    padded = np.array(text["input_ids"]["data"])
    assert padded[2, 2:].tolist() == [2] * (padded.shape[1] - 2)


def test_embed_text_ids_beyond_the_table_are_the_same_422(api: httpx.Client, reference) -> None:  # type: ignore[no-untyped-def]
    tok, _ = reference
    texts = ["Hello world", "héllo 🎉"]
    rows = [e.ids for e in tok.encode_batch(texts)]
    text = api.post("/v1/embed", json={"text": texts, "model": SMALL})
    ids = api.post("/v1/embed", json={"input_ids": rows, "model": SMALL})
    assert text.status_code == ids.status_code == 422
    assert text.json() == ids.json()
    assert "input_ids[" in text.json()["detail"]


def test_embed_text_positions_beyond_the_table_are_the_same_422(inprocess: httpx.Client) -> None:
    text = ["Hello world " * 40]
    r = inprocess.post("/v1/embed", json={"text": text, "model": WORDY})
    assert r.status_code == 422 and str(POSITIONS) in r.json()["detail"]


def test_embed_text_counts_toward_max_elements(models_env: str) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    # "Hello world" is <s> + 2 tokens + </s>: B=1, T=4 -> 4*16 + 3*4 = 76 elements with input_ids
    for limit, status in ((76, 200), (75, 413)):
        app = create_app(Settings(device="cpu", models=models_env, max_elements=limit))
        with TestClient(app) as client:
            r = client.post("/v1/embed", json={"text": ["Hello world"], "model": WORDY})
            assert r.status_code == status, (limit, r.text)
            if status == 413:
                assert r.json()["limit"] == limit and r.json()["requested"] == 76
            # tokenize: 4 elements per token (id, token, start, end); 4 tokens per text
            r = client.post("/v1/tokenize", json={"text": ["Hello world"] * 4, "model": WORDY})
            assert r.status_code == 200, r.text  # 64 elements
            r = client.post("/v1/tokenize", json={"text": ["Hello world"] * 5, "model": WORDY})
            assert r.status_code == 413 and r.json()["requested"] == 80, r.text


def test_embed_text_of_the_default_model(inprocess: httpx.Client) -> None:
    """posenc-base reads text with no download: one id per UTF-8 byte (byte + 1)."""
    text = ["héllo", "日"]  # 6 bytes, 3 bytes
    r = inprocess.post("/v1/embed", json={"text": text}, params={"encoding": "base64"})
    assert r.status_code == 200, r.text
    ids = base64_tensor(r.json(), "input_ids")
    want = [[b + 1 for b in t.encode()] for t in text]
    assert ids[0].tolist() == want[0] and ids[1].tolist() == [*want[1], 0, 0, 0]  # pad 0
    same = inprocess.post("/v1/embed", json={"input_ids": want}, params={"encoding": "base64"})
    np.testing.assert_array_equal(
        base64_tensor(r.json(), "embeddings"), base64_tensor(same.json(), "embeddings")
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(st.text(max_size=40), min_size=1, max_size=4))
def test_the_default_tokenizer_is_lossless(inprocess: httpx.Client, texts: list[str]) -> None:
    r = inprocess.post("/v1/tokenize", json={"text": texts})
    assert r.status_code == 200, r.text
    rows = r.json()["input_ids"]
    assert all(0 < i < 257 for row in rows for i in row)  # below vocab_size 32000
    assert [len(row) for row in rows] == [len(t.encode()) for t in texts]
    back = inprocess.post("/v1/detokenize", json={"input_ids": rows}).json()["text"]
    assert back == texts


# ---------------------------------------------------------------------------------------------
# POSENC_MAX_BODY_BYTES
# ---------------------------------------------------------------------------------------------

LIMIT = 4096


@pytest.fixture(scope="module")
def limited() -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    settings = Settings(device="cpu", max_body_bytes=LIMIT, allow_reload=True)  # reload: no key
    with TestClient(create_app(settings)) as client:
        yield client


def _post_paths(client: httpx.Client) -> list[str]:
    paths = client.get("/openapi.json").json()["paths"]
    return sorted(p for p, ops in paths.items() if "post" in ops)


def _big_json(size: int) -> bytes:
    return b'{"text": ["' + b"a" * size + b'"]}'


def _chunks(body: bytes) -> Iterator[bytes]:
    for i in range(0, len(body), 1000):
        yield body[i : i + 1000]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_413_on_every_endpoint(
    limited: httpx.Client, chunked: bool
) -> None:
    paths = _post_paths(limited)
    assert "/v1/tokenize" in paths and "/v1/embed" in paths and "/v1/configs/positions" in paths
    body = _big_json(3 * LIMIT)
    for path in paths:
        content = _chunks(body) if chunked else body
        r = limited.post(path, content=content, headers={"Content-Type": "application/json"})
        assert r.status_code == 413, (path, r.text)
        assert str(LIMIT) in r.json()["detail"] and r.json()["limit"] == LIMIT
        assert "POSENC_MAX_BODY_BYTES" in r.json()["detail"]


def test_a_body_at_the_limit_is_read(limited: httpx.Client) -> None:
    text = "a" * (LIMIT - len(b'{"text": [""]}'))
    body = json.dumps({"text": [text]}).encode()
    assert len(body) == LIMIT
    r = limited.post(
        "/v1/tokenize", content=_chunks(body), headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 200 and len(r.json()["input_ids"][0]) == len(text)


def test_an_npy_body_counts_against_the_body_limit(limited: httpx.Client) -> None:
    """Issue 39: one limit on every body, binary ones included (they once had only their
    POSENC_MAX_ELEMENTS bound, and a chunked one was read whole)."""
    import io

    def npy(rows: int) -> bytes:
        buf = io.BytesIO()
        np.save(buf, np.ones((rows, 64), dtype=np.int64))
        return buf.getvalue()

    for chunked in (False, True):
        big = npy(32)  # 16 kB, over the limit
        content = _chunks(big) if chunked else big
        r = limited.post(
            "/v1/position-ids", content=content, headers={"Content-Type": "application/x-npy"}
        )
        assert r.status_code == 413, r.text
        assert "POSENC_MAX_BODY_BYTES" in r.json()["detail"] and r.json()["limit"] == LIMIT
    r = limited.post(
        "/v1/position-ids", content=npy(4), headers={"Content-Type": "application/x-npy"}
    )
    assert r.status_code == 200, r.text
    ids = np.asarray(r.json()["tensors"]["position_ids"]["data"]).reshape(4, 64)
    np.testing.assert_array_equal(ids, np.tile(np.arange(64), (4, 1)))


def test_a_body_over_the_limit_through_uvicorn(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "service.log"
    proc = start_service(port, log, clean_env(POSENC_DEVICE="cpu", POSENC_MAX_BODY_BYTES="100000"))
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log)
        body = _big_json(2_000_000)
        for content in (body, _chunks(body)):
            with httpx.Client(base_url=url, timeout=60) as client:
                r = client.post(
                    "/v1/embed", content=content, headers={"Content-Type": "application/json"}
                )
            assert r.status_code == 413, r.text
            assert "100000" in r.json()["detail"]
        ok = httpx.post(url + "/v1/tokenize", json={"text": "still serving"}, timeout=60)
        assert ok.status_code == 200
    finally:
        stop_service(proc)


# ---------------------------------------------------------------------------------------------
# The client and the CLI
# ---------------------------------------------------------------------------------------------


def test_client_tokenize_detokenize_and_text_fields(live: httpx.Client, reference) -> None:  # type: ignore[no-untyped-def]
    from posenc.client import PosencClient, ValidationError

    tok, hf = reference
    url = str(live.base_url).rstrip("/")
    with PosencClient(url) as client:
        body = client.tokenize(TEXTS, model=WORDY, add_special_tokens=False)
        want = tok.encode_batch(TEXTS, add_special_tokens=False)
        assert body["input_ids"] == [e.ids for e in want]
        assert body["tokens"] == [e.tokens for e in want]
        assert client.tokenize("héllo", model=WORDY)["input_ids"] == [tok.encode("héllo").ids]
        rows = [e.ids for e in tok.encode_batch(TEXTS)]
        assert client.detokenize(rows, model=WORDY)["text"] == tok.decode_batch(rows)
        with pytest.raises(ValidationError, match=r"input_ids\[0\]\[1\]"):
            client.detokenize([[1, 10**6]], model=WORDY)

        result = client.embed(text=TEXTS, model=WORDY, padding_side="left")
        same = client.embed(input_ids=rows, model=WORDY, padding_side="left")
        np.testing.assert_array_equal(result["embeddings"], same["embeddings"])
        theirs = hf(TEXTS, padding=True, padding_side="left")
        assert result["input_ids"].tolist() == theirs["input_ids"]
        ids = client.position_ids(text=TEXTS, model=WORDY)
        assert ids["attention_mask"].tolist() == hf(TEXTS, padding=True)["attention_mask"]


def test_cli_tokenize_with_url_and_locally(live: httpx.Client, reference, capsys) -> None:  # type: ignore[no-untyped-def]
    from posenc.cli import main

    tok, _ = reference
    url = str(live.base_url).rstrip("/")
    assert main(["tokenize", "--url", url, "--model", WORDY, "Hello world", "héllo 🎉"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["input_ids"] == [e.ids for e in tok.encode_batch(["Hello world", "héllo 🎉"])]
    assert main(["tokenize", "--url", url, "--model", GPT2_NAME, "hi"]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    # without --url: the built-in model's tokenizer, the same as the service's default
    assert main(["tokenize", "héllo"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert local == live.post("/v1/tokenize", json={"text": ["héllo"]}).json()


def test_text_too_large_for_the_limit_stops_before_it_is_all_tokenized(
    models_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of texts are tokenized one after the other, and the group whose tokens cross
    POSENC_MAX_ELEMENTS ends the request with the 413 the whole batch would get."""
    from fastapi.testclient import TestClient

    import posenc.tokens.tokenizer as tokenizer
    from service.app import create_app
    from service.config import Settings

    monkeypatch.setattr(tokenizer, "GROUP_CHARS", 100)
    calls: list[int] = []
    real = tokenizer.TextTokenizer.encode

    def spy(self, texts, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return real(self, texts, **kw)

    monkeypatch.setattr(tokenizer.TextTokenizer, "encode", spy)
    texts = ["Hello world " * 8] * 50  # 96 characters each: one text per group
    app = create_app(Settings(device="cpu", models=models_env, max_elements=2000))
    with TestClient(app) as client:
        r = client.post("/v1/embed", json={"text": texts, "model": WORDY})
        assert r.status_code == 413, r.text
        assert r.json()["limit"] == 2000
        assert len(calls) < 10  # stopped at the group that crossed the limit, not after 50
        calls.clear()
        ok = client.post("/v1/position-ids", json={"text": texts[:3], "model": WORDY})
        assert ok.status_code == 200 and calls == [1, 1, 1]
        # the built-in byte-level tokenizer: one token per byte, refused before tokenizing
        calls.clear()
        r = client.post("/v1/embed", json={"text": ["x" * 10]})
        assert r.status_code == 413 and calls == []


def test_tokenize_in_many_groups_is_one_encode_batch(
    inprocess: httpx.Client, reference, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The answer, made group by group, is the whole batch's encode_batch."""
    import posenc.tokens.tokenizer as tokenizer

    monkeypatch.setattr(tokenizer, "GROUP_CHARS", 30)
    tok, _ = reference
    texts = TEXTS * 3
    assert len(list(tokenizer.text_groups([len(t) for t in texts]))) > 5
    body = inprocess.post("/v1/tokenize", json={"text": texts, "model": WORDY}).json()
    want = tok.encode_batch(texts)
    assert body["input_ids"] == [e.ids for e in want]
    assert body["tokens"] == [e.tokens for e in want]
    assert body["offsets"] == [[list(o) for o in e.offsets] for e in want]
    raw = b'{"model": "wordy", "text": [' + b'"ok", ' * 20 + b'"bad \\ud800"]}'
    r = inprocess.post("/v1/tokenize", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["field"] == "text[20]"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=40), min_size=1, max_size=12))
def test_detokenize_s_answer_written_in_slices_is_orjson_s(texts: list[str]) -> None:
    """Issue 39: the answer is written at most a few characters a call here (a long text in
    slices): the bytes are one ``orjson.dumps`` of it (escapes, astral characters included)."""
    whole = orjson.dumps({"text": texts})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(text_routes, "_DUMP_CHARS", 7)
        assert text_routes.texts_json(texts) == whole
    assert text_routes.texts_json(texts) == whole
