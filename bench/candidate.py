"""The service app with the benchmark's proposed fixes patched in, to measure them.

Not the service: a measuring aid that leaves ``service/`` untouched. It patches, at import time,
the three per-request costs that ``bench/RESULTS.md`` names, then builds the app as
``service.app`` does::

    PYTHONPATH=. python -m bench --app bench.candidate:app

``BENCH_FIXES`` picks the fixes (default ``overrides,deps,fastpath``):

- ``overrides``: no ``app.dependency_overrides`` entry. With any override registered, FastAPI
  rebuilds every sub-dependency (``get_dependant``: signatures, pydantic TypeAdapters) on every
  request; ``service/app.py`` registers one for ``get_settings``, which no route uses.
- ``deps``: ``get_state`` and ``output_options`` as ``async def``: as plain ``def`` each one is a
  round trip through the thread pool on every request.
- ``fastpath``: a compute route answers a body-cache hit on the event loop; only a miss (compute
  and encode) goes to the thread pool.

Once the service has these fixes, this module only measures the same thing twice.
"""

import dataclasses
import inspect
import os
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

import service.routes.common as common

FIXES = {f.strip() for f in os.environ.get("BENCH_FIXES", "overrides,deps,fastpath").split(",")}

if "deps" in FIXES:
    _get_state = common.get_state
    _output_options = common.output_options

    async def get_state(request: Request) -> common.ServiceState:
        return _get_state(request)

    async def output_options(**kwargs: Any) -> common.OutputOptions:
        return _output_options(**kwargs)

    # FastAPI reads the query parameters from the signature: keep the original one.
    output_options.__signature__ = inspect.signature(_output_options)  # type: ignore[attr-defined]
    common.State = Annotated[common.ServiceState, Depends(get_state)]  # type: ignore[misc]
    common.Output = Annotated[common.OutputOptions, Depends(output_options)]  # type: ignore[misc]

if "fastpath" in FIXES:
    import service.routes.tables as tables

    class _Miss(Exception):
        """The body cache has no answer: compute in the thread pool."""

    class _PeekCache:
        """A cache that answers hits and raises _Miss instead of computing."""

        def __init__(self, cache: Any) -> None:
            self._cache = cache

        def get(self, key: Any) -> Any:
            value = self._cache.get(key)
            if value is None:
                raise _Miss
            return value

        def put(self, key: Any, value: Any, nbytes: int) -> None:
            raise _Miss

    _add_compute_routes = tables.add_compute_routes

    def add_compute_routes(router, path, model_cls, plan, **kwargs):  # type: ignore[no-untyped-def]
        _add_compute_routes(router, path, model_cls, plan, **kwargs)
        route = next(r for r in router.routes if r.path.endswith(path) and "POST" in r.methods)
        State, Output = common.State, common.Output

        async def post_handler(
            body: model_cls,  # type: ignore[valid-type]
            request: Request,
            state: State,  # type: ignore[valid-type]
            out: Output,  # type: ignore[valid-type]
        ) -> Response:
            p = plan(body, state, "body")
            peek = dataclasses.replace(state, cache=_PeekCache(state.cache))
            try:
                return common.respond(request, peek, p, out)
            except _Miss:
                return await run_in_threadpool(common.respond, request, state, p, out)

        post_handler.__name__ = route.endpoint.__name__
        router.routes.remove(route)
        router.add_api_route(
            route.path.removeprefix(router.prefix),
            post_handler,
            methods=["POST"],
            summary=route.summary,
            description=route.description,
            responses=route.responses,
            response_class=Response,
            operation_id=route.operation_id,
        )

    tables.add_compute_routes = add_compute_routes

from service.app import create_app  # noqa: E402  (after the patches: routes import them)

app = create_app()
if "overrides" in FIXES:
    app.dependency_overrides.clear()
