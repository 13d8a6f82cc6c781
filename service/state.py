"""The service's state: what the lifespan builds (device, models, cache, metrics, the
in-flight byte budget) and every request reads, as ``app.state.posenc``; ``read_state`` gives it
to a route (503 while models are still loading), ``State`` is the FastAPI dependency form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import torch
from fastapi import Depends, Request

from posenc.core.errors import UnknownName
from posenc.readers.models import EmbeddingModel
from service.admission.budget import ByteBudget
from service.admission.cost import CpuBudget
from service.cache import ByteLRU
from service.config import Settings
from service.errors import NotReady
from service.observability.metrics import Metrics


@dataclass
class ServiceState:
    """What the lifespan builds and every request reads (``app.state.posenc``)."""

    settings: Settings
    device: torch.device
    metrics: Metrics
    cache: ByteLRU
    models: dict[str, EmbeddingModel] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    default_model: str = ""
    ready: bool = False
    # The in-flight byte budget (service.admission.budget), built from the settings, shared by
    # every request of this app: a plain attribute, read on every miss.
    budget: ByteBudget = field(init=False, repr=False)
    # and the CPU-milliseconds in flight (service.admission.cost), next to it
    cpu_budget: CpuBudget = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.budget = ByteBudget(
            self.settings.max_inflight_bytes, self.settings.queue_timeout, metrics=self.metrics
        )
        self.cpu_budget = CpuBudget(
            max(1, int(self.settings.max_inflight_cpu_seconds * 1000)),
            self.settings.queue_timeout,
        )

    def text_models(self) -> list[str]:
        """The names of the loaded models that have a tokenizer."""
        return [name for name, m in self.models.items() if m.tokenizer is not None]

    def model(self, name: str | None, *, field_name: str = "model") -> EmbeddingModel:
        """The named model (the default for ``None``); UnknownName (422) lists the loaded ones."""
        key = self.default_model if name is None else name
        try:
            return self.models[key]
        except KeyError:
            raise UnknownName(
                f"unknown model {name!r}; loaded models: {', '.join(self.models) or '(none)'}",
                field=field_name,
                name=name,
                known=self.models,
            ) from None


def read_state(request: Request) -> ServiceState:
    """The ready service state; NotReady (503) while the lifespan is still loading models."""
    state: ServiceState | None = getattr(request.app.state, "posenc", None)
    if state is None or not state.ready:
        raise NotReady("the service is starting: models are still loading")
    return state


async def get_state(request: Request) -> ServiceState:
    return read_state(request)


State = Annotated[ServiceState, Depends(get_state)]
