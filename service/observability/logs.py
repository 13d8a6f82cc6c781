"""Log configuration of the service: text or one JSON object per line (``POSENC_LOG_FORMAT``).

:func:`logging_config` returns a :func:`logging.config.dictConfig` dictionary that
``python -m service`` applies to itself and hands to uvicorn as ``log_config``, so that every
worker process (uvicorn starts them fresh, with ``spawn``) configures its logging the same way.

Every record gets the id of the request being served (``request_id``, from
:data:`service.observability.request_id.request_id_var`; ``None`` outside a request). The access log
(logger ``service.access``, written by :class:`service.observability.request_id.RequestIdMiddleware`) adds
``method``, ``route``, ``path``, ``status``, ``duration_ms``, the split of a miss's time
(``queue_ms``, ``compute_ms``, ``encode_ms``, ``send_ms``; only the phases it went through),
``bytes`` and ``cache``.

A JSON line looks like::

    {"time": "2026-11-23T14:02:11.532Z", "level": "INFO", "logger": "service.access",
     "message": "GET /v1/encodings/sinusoidal 200", "request_id": "3f0c...", "method": "GET",
     "route": "/v1/encodings/sinusoidal", "path": "/v1/encodings/sinusoidal", "status": 200,
     "duration_ms": 1.284, "bytes": 4410, "cache": "hit"}

(one line; wrapped here).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

import orjson

from service.observability.request_id import request_id_var

LogFormat = Literal["text", "json"]

# Fields that the access log adds to its records, in the order a JSON line gives them.
ACCESS_FIELDS = (
    "method",
    "route",
    "path",
    "status",
    "duration_ms",
    "queue_ms",
    "compute_ms",
    "encode_ms",
    "send_ms",
    "bytes",
    "cache",
    "client",
)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id``: the id of the request this code runs for, else None."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


class TracebackAtDebug(logging.Filter):
    """Keeps uvicorn's error records that are a whole traceback (a failed lifespan start-up
    logs one) out of the log unless the service logs at debug level: the service has already
    said in one line why it cannot start."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("uvicorn") or record.levelno < logging.ERROR:
            return True
        if "Traceback (most recent call last)" not in str(record.msg):
            return True
        return logging.getLogger("service").isEnabledFor(logging.DEBUG)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: time (UTC, ms), level, logger, message,
    ``request_id``, the access fields where the record has them, and ``exception`` (the
    traceback as one string) where it carries one."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        out: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for name in ACCESS_FIELDS:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return orjson.dumps(out, default=str).decode()


def _level(level: str) -> str:
    return "DEBUG" if level.lower() == "trace" else level.upper()


def logging_config(level: str = "info", fmt: LogFormat = "text") -> dict[str, Any]:
    """A ``dictConfig`` for the service and uvicorn: one stderr handler, text or JSON.

    Args:
        level: ``POSENC_LOG_LEVEL`` (``trace`` counts as ``debug`` for the standard loggers).
        fmt: ``text`` (``time LEVEL logger: message``) or ``json`` (:class:`JsonFormatter`).
    """
    formatter: dict[str, Any] = (
        {"()": "service.observability.logs.JsonFormatter"}
        if fmt == "json"
        else {"format": TEXT_FORMAT}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": "service.observability.logs.RequestIdFilter"},
            "traceback_at_debug": {"()": "service.observability.logs.TracebackAtDebug"},
        },
        "formatters": {"default": formatter},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "default",
                "filters": ["request_id", "traceback_at_debug"],
            }
        },
        "root": {"handlers": ["default"], "level": _level(level)},
        "loggers": {
            # uvicorn's own loggers log through the root handler (no second copy of each line)
            "uvicorn": {"handlers": [], "level": _level(level), "propagate": True},
            "uvicorn.error": {"handlers": [], "level": _level(level), "propagate": True},
            "uvicorn.access": {"handlers": [], "level": _level(level), "propagate": True},
        },
    }
