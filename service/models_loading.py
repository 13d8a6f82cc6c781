"""Loading the models at start-up, and again while the service runs (``POST /v1/models/reload``,
SIGHUP, or a change of their files when ``POSENC_WATCH_SECONDS`` is set).

Design (docs/deployment.md, "Models that change on disk"):

- Every table is copied into memory the process owns when it is loaded
  (:mod:`posenc.readers.weights_file`, plain reads, never a memory map), so no change to a model's files
  on disk (truncated, rewritten in place as ``cp`` does, replaced, deleted, unreadable) can reach
  a request: requests never touch the files. They keep the weights they were loaded with until
  a reload.
- A reload reads every ``POSENC_MODELS`` entry again, each into a new
  :class:`~posenc.readers.models.EmbeddingModel`, validated as at start-up. A model that loads replaces
  the old one by one assignment of a new dict (``state.models``); requests in flight hold the old
  model object and finish on it. A model that fails to load keeps its old weights, and the
  reload answers 503 with ``Retry-After`` and each failure's reason (the files are probably
  being written: try again).
- With ``POSENC_WATCH_SECONDS`` the files are polled (:func:`file_fingerprint`: size, mtime and
  inode) and the models reloaded once a change has held still for one poll, so a file still
  being written (``cp`` truncates, then writes) is not read half-way; a change whose reload
  failed is not tried again until the files change once more.
- Reloads run one at a time (a lock); the response cache is emptied after each, and each model's
  fingerprint (the key of cached responses and ETags) is that of the files it was read from.
- What a failed reload answers says what failed without the server's paths
  (:func:`public_errors`: each path as the model's folder relative name); the log keeps them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import signal
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

import posenc
from posenc.core.errors import PosencError
from posenc.readers.models import EmbeddingModel, default_model, load_safetensors_model
from service.state import ServiceState

logger = logging.getLogger("service")

_RELOAD_LOCK = threading.Lock()  # one reload at a time, whichever app asks


def file_fingerprint(name: str, path: str) -> str:
    """A digest of ``path``'s (and the files beside it that decide the model) size, mtime and
    inode: it changes when any of them is rewritten or replaced."""
    stat = os.stat(path)
    key = f"{name}|{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    # The config.json beside the weights decides positions, rope and normaliser, the
    # tokenizer.json the ids of text: they count too.
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    extras = ["config.json", "tokenizer.json", "model.safetensors", "model.safetensors.index.json"]
    if os.path.isdir(path) or path.endswith(".index.json"):  # every shard, rewritten in place too
        extras += sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    for extra in dict.fromkeys(extras):
        extra_path = os.path.join(folder, extra)
        if extra_path != os.path.abspath(path) and os.path.isfile(extra_path):
            extra_stat = os.stat(extra_path)
            key += f"|{extra}|{extra_stat.st_size}|{extra_stat.st_mtime_ns}|{extra_stat.st_ino}"
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def load_one(state: ServiceState, name: str, path: str) -> tuple[EmbeddingModel, str]:
    """Model ``name`` read from ``path``, and the fingerprint of the files it was read from
    (taken before and after the read: files that changed meanwhile are read again, once)."""
    for _ in range(2):
        before = file_fingerprint(name, path)
        model = load_safetensors_model(name, path, device=state.device)
        if file_fingerprint(name, path) == before:
            break
    return model, before


def load_models(state: ServiceState) -> None:
    """Load the built-in model and every ``POSENC_MODELS`` entry into ``state`` (blocking; run
    in a thread at start-up). ``POSENC_DEFAULT_MODEL`` names the default, else the built-in."""
    settings = state.settings
    base = default_model(state.device)
    models: dict[str, EmbeddingModel] = {base.name: base}
    fingerprints = {base.name: f"builtin:{base.name}:{posenc.__version__}"}
    for name, path in settings.model_paths.items():
        if name in models:
            raise ValueError(f"POSENC_MODELS: the name {name!r} is taken by the built-in model")
        logger.info("loading model %r from %s", name, path)
        models[name], fingerprints[name] = load_one(state, name, path)
    default = settings.default_model or base.name
    if default not in models:
        raise ValueError(
            f"POSENC_DEFAULT_MODEL names {default!r}, which is not loaded; the models are "
            f"{', '.join(models)}"
        )
    state.models, state.fingerprints, state.default_model = models, fingerprints, default


def _reason(exc: Exception) -> str:
    return exc.message if isinstance(exc, PosencError) else f"{type(exc).__name__}: {exc}"


def reload_models(state: ServiceState) -> list[dict[str, str]]:
    """Read every ``POSENC_MODELS`` entry again and swap in those that load (blocking; run in a
    thread). Returns the failures, ``[{"name", "path", "detail"}]``: those models keep their
    old weights."""
    with _RELOAD_LOCK:
        models, fingerprints = dict(state.models), dict(state.fingerprints)
        errors: list[dict[str, str]] = []
        for name, path in state.settings.model_paths.items():
            try:
                models[name], fingerprints[name] = load_one(state, name, path)
            except Exception as exc:  # any reason a file cannot be read: the old weights stay
                errors.append({"name": name, "path": path, "detail": _reason(exc)})
                logger.error("reload of model %r from %s failed: %s", name, path, _reason(exc))
        # models first: a request that sees a new fingerprint computes with the new models
        state.models = models
        state.fingerprints = fingerprints
        state.cache.clear()
        done = [n for n in state.settings.model_paths if n not in {e["name"] for e in errors}]
        logger.info(
            "models reloaded: %s%s",
            ", ".join(done) or "(none)",
            f"; kept the old weights of {', '.join(e['name'] for e in errors)}" if errors else "",
        )
        return errors


# An absolute path in an error's words: from a '/' that does not follow a name character, to
# the next space, quote or punctuation that ends it.
_ABSOLUTE = re.compile(r"(?<![\w.~-])/[^\s'\"`,;:()\[\]{}<>]+")


def _roots(path: str) -> list[str]:
    """The folders a model's files are named relative to: its folder, as given and resolved."""
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    return list(dict.fromkeys([os.path.abspath(folder), os.path.realpath(folder)]))


def without_paths(text: str, path: str) -> str:
    """``text`` with every absolute path written relative to model ``path``'s folder, or as its
    last part where it lies elsewhere: what failed, not where the server keeps it."""
    roots = _roots(path)
    text = text.replace(path, os.path.basename(os.path.normpath(path)))

    def short(match: re.Match[str]) -> str:
        found = match.group(0)
        for root in roots:
            relative = os.path.relpath(found, root)
            if not relative.startswith(".."):
                return relative
        return os.path.basename(found.rstrip("/")) or "<path>"

    return _ABSOLUTE.sub(short, text)


def public_errors(
    errors: Sequence[Mapping[str, str]], paths: Mapping[str, str]
) -> list[dict[str, str]]:
    """A reload's failures as an HTTP answer gives them: each ``path`` as its last part, each
    ``detail`` :func:`without_paths`."""
    out = []
    for error in errors:
        path = paths.get(error["name"], error["path"])
        out.append(
            {
                "name": error["name"],
                "path": os.path.basename(os.path.normpath(path)),
                "detail": without_paths(error["detail"], path),
            }
        )
    return out


def install_sighup(state: ServiceState) -> Any:
    """Reload on SIGHUP (the event loop's handler, where the platform has one). Returns a
    function that removes it, or None where it could not be installed."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[Any]] = set()

    def on_sighup() -> None:
        logger.info("SIGHUP: reloading the models")
        task = loop.create_task(anyio.to_thread.run_sync(reload_models, state))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, on_sighup)
    except (NotImplementedError, RuntimeError, ValueError, AttributeError):
        return None  # not the main thread (an app driven by a test client), or no SIGHUP
    return lambda: loop.remove_signal_handler(signal.SIGHUP)


def changed_files(state: ServiceState) -> dict[str, str]:
    """The ``POSENC_MODELS`` entries whose files are not those their model was read from:
    ``{name: fingerprint now}`` (``"unreadable: REASON"`` for a file that cannot be stat'ed)."""
    changed = {}
    for name, path in state.settings.model_paths.items():
        try:
            now = file_fingerprint(name, path)
        except OSError as exc:
            now = f"unreadable: {exc}"
        if now != state.fingerprints.get(name):
            changed[name] = now
    return changed


async def watch_models(state: ServiceState, seconds: float) -> None:
    """Poll the model files every ``seconds``; reload (:func:`reload_models`, in a thread) when
    the same change is seen on two polls in a row, and not again for a change whose reload
    was already tried."""
    seen: dict[str, str] = {}
    tried: dict[str, str] = {}
    while True:
        await asyncio.sleep(seconds)
        now = await anyio.to_thread.run_sync(changed_files, state)
        if now and now == seen and now != tried:
            logger.info("model files changed (%s): reloading the models", ", ".join(now))
            tried = now
            await anyio.to_thread.run_sync(reload_models, state)
        seen = now


def install_watch(state: ServiceState) -> Any:
    """Start :func:`watch_models` when ``POSENC_WATCH_SECONDS`` is over 0. Returns a function
    that stops it, or None."""
    seconds = state.settings.watch_seconds
    if seconds <= 0:
        return None
    task = asyncio.get_running_loop().create_task(watch_models(state, seconds))
    return task.cancel
