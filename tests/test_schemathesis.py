"""Schemathesis over the app's /openapi.json: generated requests (valid and invalid) for every
operation never get a 5xx, and every response conforms to the documented schema (status codes,
content types, headers, JSON bodies). Bounded: a few derandomised examples per operation, so the
run stays well under two minutes on two cores.

The schema is loaded from the ASGI app (schemathesis runs its lifespan) at import time:
``schemathesis.pytest.from_fixture`` would allow the live server, but schemathesis 4.32's lazy
loader reads ``request.node._nodeid``, which pytest 9 no longer has."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.config import Settings

# A small output limit keeps every generated request cheap (larger ones are 413s, also checked).
app = create_app(
    Settings(
        device="cpu",
        models="",
        api_key=None,
        cors_origins="",
        max_elements=1_000_000,
        max_stream_elements=4_000_000,
    )
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
def test_no_5xx_and_responses_conform(case) -> None:  # type: ignore[no-untyped-def]
    case.call_and_validate(
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
        ],
        timeout=60,
    )
