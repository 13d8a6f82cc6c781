"""Every replica's Prometheus text in one exposition, each sample labelled with its replica.

Through Ray Serve, ``GET /metrics`` reaches every ``PosencService`` replica (a broadcast) and
:func:`merge_expositions` joins their answers: one ``# HELP``/``# TYPE`` per family (Prometheus
refuses a family declared twice), every sample with ``replica="<Serve's replica id>"`` added, so
one scrape sees each replica's own counters, as separate series that a replica's restart resets
alone. Nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

REPLICA_LABEL = "replica"


class _Families:
    """A collector (prometheus_client's ``collect()`` protocol) over parsed families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def merge_expositions(texts: dict[str, str]) -> bytes:
    """``{replica id: its /metrics text}`` as one text exposition (Prometheus' format 0.0.4),
    families in order of first appearance, each replica's samples labelled with its id."""
    merged: dict[str, Metric] = {}
    for replica, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            into = merged.get(family.name)
            if into is None:
                into = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = into
            for s in family.samples:
                labels = {**s.labels, REPLICA_LABEL: replica}
                into.samples.append(Sample(s.name, labels, s.value, s.timestamp, s.exemplar))
    return generate_latest(_Families(merged.values()))  # type: ignore[arg-type,unused-ignore]
