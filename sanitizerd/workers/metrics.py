"""One /metrics for the listener and its workers: every series summed over the processes, under the names and
labels a single-process daemon has (a few say something true of the whole daemon once, and are not summed).

The metrics thread asks the workers through the event loop (``anyio.from_thread``); a worker that does not answer
in time is left out of that scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import anyio.from_thread
from anyio.lowlevel import EventLoopToken
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sanitizerd.workers.pool import Pool


def _listeners(seen: list[float]) -> float:
    return seen[0]  # the listener's registry is merged first


# Series that are one fact about the daemon, not a count per process: how to combine them instead of summing.
COMBINED: dict[str, Callable[[list[float]], float]] = {
    # A SIGHUP is one reload of the daemon (each worker reloads too, with the same file and the same result).
    "sanitizerd_config_reloads": _listeners,
    "sanitizerd_build_info": max,
    "sanitizerd_store_writable": min,
    "process_start_time_seconds": min,
    "process_max_fds": min,
    # The longest any check waits for a detector thread: each worker shares out its own threads.
    "sanitizerd_detector_oldest_wait_seconds": max,
}
SCRAPE_TIMEOUT = 5.0


class MergedMetrics:
    def __init__(self, own: CollectorRegistry, pool: Pool) -> None:
        self.own = own
        self.pool = pool
        self.token: EventLoopToken | None = None  # set once the event loop runs
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)  # type: ignore[arg-type]

    def describe(self) -> list[Metric]:
        return []  # no fixed names: nothing to check for duplicates at registration

    def collect(self) -> Iterator[Metric]:
        families = list(self.own.collect())
        for text in self._worker_texts():
            families.extend(text_string_to_metric_families(text.decode()))
        yield from merge(families)

    def _worker_texts(self) -> list[bytes]:
        if self.token is None:
            return []
        try:
            return anyio.from_thread.run(self._ask, token=self.token)
        except Exception:  # the loop is stopping, or a worker is gone: this scrape shows the listener's own
            return []

    async def _ask(self) -> list[bytes]:
        with anyio.move_on_after(SCRAPE_TIMEOUT):
            return await self.pool.metrics_texts()
        return []


def merge(families: Iterable[Metric]) -> Iterator[Metric]:
    """Families of one name as one, each sample (name and labels) summed, or combined as ``COMBINED`` says."""
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]] = {}
    for family in families:
        if family.name not in merged:
            merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            values[family.name] = {}
        samples = values[family.name]
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # when each process's series began: no sum of them means anything
            key = (sample.name, tuple(sorted(sample.labels.items())))
            samples.setdefault(key, []).append(sample.value)
    for name, family in merged.items():
        combine = COMBINED.get(name, sum)
        for (sample, labels), seen in values[name].items():
            family.add_sample(sample, dict(labels), float(combine(seen)))
        if family.samples:  # the text format's own families of ``_created`` series are left out with them
            yield family
