"""specdraft's counters through Ray's metrics, where Ray Serve users read a replica's metrics.

With ``LLMConfig.log_engine_metrics`` on (Ray's default), Ray Serve LLM records vLLM's metrics with
``ray.util.metrics`` and Ray's Prometheus endpoint (every node's ``metrics_export_port``) serves
them as ``ray_vllm_*``. A replica's ``specdraft:*`` families (the ones vLLM's own /metrics shows,
``plugins/vllm_metrics.py``) are mirrored the same way: ``specdraft:accepted_tokens_total``
becomes ``ray_specdraft_accepted_tokens_total``, with the family's labels plus ``ReplicaId``, as
vLLM's Ray metrics carry. Counters are recorded as increments since the last export (Ray counters
only go up), gauges as their value. The export runs on the replica's event loop every
``interval`` seconds, off the engine's step: the counters come from the snapshot file the drafting
worker writes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Callable, Iterable

logger = logging.getLogger(__name__)

REPLICA_TAG = "ReplicaId"  # the tag vLLM's Ray metrics put on every series


def ray_name(name: str) -> str:
    """A Prometheus family name as Ray's metrics accept it (``specdraft:x`` -> ``specdraft_x``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


class RayMetricsExport:
    """Mirrors Prometheus metric families (``families()``) into ``ray.util.metrics``."""

    def __init__(self, families: Callable[[], Iterable[Any]], replica_id: str = ""):
        self.families = families
        self.replica_id = replica_id
        self._metrics: dict[str, Any] = {}
        self._recorded: dict[tuple, float] = {}  # counter series -> value recorded so far
        self._failed = False

    def _metric(self, family: Any, tag_keys: tuple[str, ...]) -> Any:
        metric = self._metrics.get(family.name)
        if metric is None:
            from ray.util import metrics

            cls = metrics.Counter if family.type == "counter" else metrics.Gauge
            metric = cls(ray_name(family.name), description=family.documentation,
                         tag_keys=tag_keys)
            self._metrics[family.name] = metric
        return metric

    def export(self) -> None:
        """Records every family's current values once."""
        for family in self.families():
            if family.type not in ("counter", "gauge"):
                continue
            for sample in family.samples:
                if family.type == "counter" and not sample.name.endswith("_total"):
                    continue  # a counter's _created sample
                tags = dict(sample.labels, **{REPLICA_TAG: self.replica_id})
                metric = self._metric(family, tuple(tags))
                if family.type == "gauge":
                    metric.set(sample.value, tags=tags)
                    continue
                key = (family.name, tuple(sorted(tags.items())))
                recorded = self._recorded.get(key, 0.0)
                # below what was recorded: the engine restarted and counts from zero again
                delta = sample.value - recorded if sample.value >= recorded else sample.value
                if delta > 0:
                    metric.inc(delta, tags=tags)
                self._recorded[key] = sample.value

    async def run(self, interval: float = 2.0) -> None:
        """Exports every ``interval`` seconds until cancelled; a failure is logged once and
        never reaches serving."""
        while True:
            try:
                self.export()
            except Exception:  # noqa: BLE001 - metrics are best effort
                if not self._failed:
                    self._failed = True
                    logger.exception("specdraft: exporting counters to Ray's metrics failed "
                                     "(serving goes on; logged once)")
            await asyncio.sleep(interval)
