"""posenc on Ray Serve: the service's ASGI app in every replica of one deployment, behind a thin
ingress that sends a request lost with its replica to another one.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address 127.0.0.1 ...
    serve run --address 127.0.0.1:6379 deploy/ray/serve.yaml   # from the repository root

(docs/deployment.md has the whole recipe: a cluster bound to 127.0.0.1 alone). Two deployments:

- ``PosencService``, the deployment that serves requests (``num_replicas`` or
  ``autoscaling_config``, and each replica's ``num_cpus``/``num_gpus``, in serve.yaml). Each
  replica is one service process: it builds ``service.app.create_app()`` from its ``POSENC_*``
  environment and runs the app's lifespan as uvicorn would (``POSENC_DEVICE`` picks the device:
  ``auto`` takes the GPU that Ray gave the replica, ``POSENC_MODELS`` is loaded from the same
  paths on every node), then answers whole requests handed to it as plain values
  (:meth:`PosencService.handle`: deploy/ray/asgi.py).
- ``PosencIngress``, the application's ingress: Serve's HTTP proxy gives it every request; it
  reads the request whole, passes it to a ``PosencService`` replica through a DeploymentHandle,
  and returns that replica's status, headers and body unchanged, so the bytes are the plain
  service's. A replica that dies with the request (its actor lost or unavailable) costs the
  request nothing: the ingress sends it again, to a live replica, up to ``retries`` times (every
  posenc endpoint is a computation or a read, so repeating one is safe); when no replica answers,
  the client gets a 503 with ``Retry-After``, which posenc.client retries.
  ``GET /metrics`` asks every replica for its own ``/metrics`` (a broadcast) and joins them,
  each sample labelled ``replica`` (deploy/ray/metrics.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, generate_latest
from ray import serve
from ray.exceptions import ObjectLostError, RayActorError, RayTaskError, WorkerCrashedError
from ray.serve.exceptions import (
    BackPressureError,
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import Response

from deploy.ray.asgi import HttpAnswer, HttpCall, Lifespan, call_app
from deploy.ray.metrics import merge_expositions

logger = logging.getLogger("ray.serve")

#: The errors of a replica that went away with the request (killed, its node lost, being
#: replaced): the request never finished there, so it is sent to another replica. Serve's
#: handle also raises RuntimeError for a gRPC call cut off after the replica accepted it.
LOST = (RayActorError, WorkerCrashedError, ReplicaUnavailableError, ObjectLostError, RuntimeError)
#: No replica can take the request now (all starting, or their queues full): a 503 at once.
UNAVAILABLE = (BackPressureError, DeploymentUnavailableError)


def bind_replica_grpc_to_node_ip() -> None:
    """Make this replica's inter-deployment gRPC server listen on the node's address only.

    Ray Serve 2.60 starts one in every replica, on ``[::]:0`` (all interfaces, hard-coded in
    ``ray.serve._private.replica``), even where nothing uses it (``RAY_SERVE_USE_GRPC_BY_DEFAULT``
    is off by default). The node's address is where the other nodes reach the replica anyway; on
    a cluster bound to 127.0.0.1 it is loopback, so the cluster listens on loopback alone. Called
    in each deployment's ``__init__``, which Serve runs before it starts that server. A Ray
    without that function is left as it is (logged)."""
    import ray
    from ray.serve._private import replica

    original = getattr(replica, "add_port_to_grpc_server", None)
    if original is None or getattr(original, "_posenc_bound", False):
        if original is None:
            logger.warning("this Ray has no replica gRPC bind to narrow; left as it is")
        return
    node_ip = ray.util.get_node_ip_address()
    host = f"[{node_ip}]" if ":" in node_ip else node_ip

    def bound(server: Any, address: str) -> int:
        if address == "[::]:0":
            address = f"{host}:0"
        return int(original(server, address))

    bound._posenc_bound = True  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = bound


@serve.deployment(name="PosencService")
class PosencService:
    """One posenc service process: the app of ``service.app.create_app()`` and its lifespan."""

    async def __init__(self) -> None:
        from service.app import create_app  # the replica's own POSENC_* environment

        bind_replica_grpc_to_node_ip()
        self.app = create_app()
        self.lifespan = Lifespan(self.app)
        await self.lifespan.start()  # device and models, as python -m service; raises if not
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        logger.info("posenc replica %s ready in pid %d", self.replica_id, os.getpid())

    async def handle(self, call: HttpCall) -> HttpAnswer:
        """``call`` through the app; the answer whole."""
        return await call_app(self.app, call, self.lifespan.state)

    async def metrics(self) -> tuple[str, str]:
        """This replica's id and its own ``GET /metrics`` text."""
        answer = await call_app(self.app, HttpCall("GET", "/metrics"), self.lifespan.state)
        return self.replica_id, answer.body.decode()

    async def __del__(self) -> None:
        await self.lifespan.stop()


def _unavailable(detail: str, retry_after: int) -> Response:
    body = orjson.dumps({"detail": detail})
    headers = {"Retry-After": str(retry_after), "Content-Type": "application/json"}
    return Response(body, status_code=503, headers=headers)


def _response(answer: HttpAnswer, request_id: bytes | None) -> Response:
    """The replica's answer as the proxy will send it: status, header pairs and body as they
    were (Starlette's ``Response`` would add its own Content-Length and Content-Type). Serve's
    proxy adds ``X-Request-ID`` itself, with the request's id; the app's copy of the same id
    is left out so that the header comes once."""
    response = Response(status_code=answer.status)
    response.body = answer.body
    response.raw_headers = [
        (k, v) for k, v in answer.headers if not (k.lower() == b"x-request-id" and v == request_id)
    ]
    return response


@serve.deployment(name="PosencIngress")
class PosencIngress:
    """Serve's HTTP ingress: every request to a ``PosencService`` replica, again to another one
    when its replica is lost; ``GET /metrics`` from every replica."""

    def __init__(
        self, service: DeploymentHandle, retries: int = 3, retry_after_seconds: int = 1
    ) -> None:
        bind_replica_grpc_to_node_ip()
        self.service = service
        self.retries = retries
        self.retry_after = retry_after_seconds
        self.ingress_id = serve.get_replica_context().replica_id.unique_id
        self.registry = CollectorRegistry()
        self.resent = Counter(
            "posenc_ray_requests_resent",
            "Requests sent again to another replica after theirs was lost, by the error.",
            ["error"],
            registry=self.registry,
        )
        self.unavailable = Counter(
            "posenc_ray_unavailable",
            "503 answers of the ingress (no replica could answer), by the reason.",
            ["reason"],
            registry=self.registry,
        )

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET" and request.url.path == "/metrics":
            return await self.all_metrics()
        call = HttpCall(
            method=request.method,
            path=request.url.path,
            query=request.scope.get("query_string", b""),
            headers=list(request.scope.get("headers", [])),
            body=await request.body(),
            client=request.scope.get("client"),
        )
        return await self.forward(call)

    async def forward(self, call: HttpCall) -> Response:
        """``call`` to a replica; again to a live one when its replica is lost on the way."""
        for attempt in range(self.retries + 1):
            try:
                answer: HttpAnswer = await self.service.handle.remote(call)
            except RayTaskError:
                raise  # the replica's own code failed (call_app answers the app's errors)
            except LOST as exc:
                self.resent.labels(type(exc).__name__).inc()
                logger.warning(
                    "%s %s: replica lost (%s), attempt %d of %d",
                    call.method, call.path, type(exc).__name__, attempt + 1, self.retries + 1,
                )  # fmt: skip
                await asyncio.sleep(0.05 * (attempt + 1))  # the router drops the dead replica
                continue
            except UNAVAILABLE as exc:
                self.unavailable.labels(type(exc).__name__).inc()
                return _unavailable(
                    f"no posenc replica can take the request now: {exc}", self.retry_after
                )
            return _response(answer, dict(call.headers).get(b"x-request-id"))
        self.unavailable.labels("lost").inc()
        return _unavailable(
            f"the posenc replicas were lost {self.retries + 1} times with this request",
            self.retry_after,
        )

    async def all_metrics(self) -> Response:
        """Every live replica's ``/metrics``, joined, each sample labelled with its replica."""
        results: list[Any] = await self.service.broadcast("metrics").results_async(
            timeout_s=30, return_exceptions=True
        )
        texts: dict[str, str] = dict(r for r in results if isinstance(r, tuple))
        if not texts:
            return _unavailable("no posenc replica answered for its metrics", self.retry_after)
        texts[f"ingress-{self.ingress_id}"] = generate_latest(self.registry).decode()
        body = merge_expositions(texts)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def build(args: dict[str, Any] | None = None) -> serve.Application:
    """The application (serve.yaml's ``import_path: deploy.ray.app:build``); ``args`` may set
    the ingress' ``retries`` and ``retry_after_seconds``."""
    options = dict(args or {})
    return PosencIngress.bind(
        PosencService.bind(),
        retries=int(options.get("retries", 3)),
        retry_after_seconds=int(options.get("retry_after_seconds", 1)),
    )


app = build()
