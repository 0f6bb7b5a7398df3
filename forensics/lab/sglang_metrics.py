"""An SGLang-shaped `/metrics` endpoint whose values a test or benchmark moves, served by the
real `prometheus_client` library.

Metric names and labels follow SGLang's (`sglang:num_running_reqs`, `sglang:gen_throughput`,
`sglang:prompt_tokens_total`, `sglang:generation_tokens_total`,
`sglang:time_to_first_token_seconds`, …, labelled `model_name`, `engine_type`, `tp_rank`),
plus the process collector's `process_start_time_seconds`. `step(...)` moves the counters,
gauges and histograms as a serving engine would; `stall()` keeps requests pending while the
token counters stop, the way a wedged decode engine looks from outside; `restart()` starts the
counters from zero with a new process start time.
"""

from __future__ import annotations

import random
import threading
import time
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)


class SGLangMetrics:
    """One engine's metrics in a registry of its own."""

    def __init__(self, engine_type: str = "decode", tp_ranks: int = 4, extra_series: int = 0, seed: int = 0,
                 started_at: float | None = None) -> None:
        self.registry = CollectorRegistry()
        self.rng = random.Random(seed)
        self.ranks = [str(r) for r in range(tp_ranks)]
        labels = ["model_name", "engine_type", "tp_rank"]
        r = self.registry
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", labels, registry=r)
        self.queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels,
                            registry=r)
        self.token_usage = Gauge("sglang:token_usage", "The token usage.", labels, registry=r)
        self.throughput = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", labels, registry=r)
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", labels,
                                     registry=r)
        self.generation_tokens = Counter("sglang:generation_tokens", "Number of generation tokens processed.",
                                         labels, registry=r)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of end-to-end request latency.",
                             labels, buckets=LATENCY_BUCKETS, registry=r)
        self.start_time = Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                                registry=r)
        self.start_time.set(time.time() if started_at is None else started_at)
        self.extra = Gauge("sglang:cache_hit_rate_by_slot", "Per-slot cache hit rate (volume for benchmarks).",
                           ["model_name", "slot"], registry=r) if extra_series else None
        self.extra_series = extra_series
        self.engine_type = engine_type
        self.stalled = False
        self.step()

    def _labels(self, rank: str) -> dict[str, str]:
        return {"model_name": MODEL, "engine_type": self.engine_type, "tp_rank": rank}

    def step(self, tokens: int = 1000, running: int = 8, queued: int = 2) -> None:
        """One interval of work: counters go up unless stalled; gauges and histograms move."""
        for rank in self.ranks:
            lab = self._labels(rank)
            self.running.labels(**lab).set(running)
            self.queued.labels(**lab).set(queued)
            self.token_usage.labels(**lab).set(round(self.rng.uniform(0.2, 0.9), 3))
            if self.stalled:
                self.throughput.labels(**lab).set(0)
                continue
            self.throughput.labels(**lab).set(round(self.rng.uniform(200, 900), 2))
            self.prompt_tokens.labels(**lab).inc(tokens * 4)
            self.generation_tokens.labels(**lab).inc(tokens)
            for _ in range(5):
                self.ttft.labels(**lab).observe(self.rng.expovariate(4))
                self.e2e.labels(**lab).observe(self.rng.expovariate(0.2))
        if self.extra is not None:
            for slot in range(self.extra_series):
                self.extra.labels(model_name=MODEL, slot=str(slot)).set(round(self.rng.random(), 4))

    def stall(self) -> None:
        """From now on requests stay pending while no tokens are produced."""
        self.stalled = True

    def restart(self, at: float | None = None) -> None:
        """A new process: counters and histograms from zero, a new start time (now unless `at`),
        work flowing again."""
        for metric in (self.prompt_tokens, self.generation_tokens, self.ttft, self.e2e):
            metric.clear()
        self.start_time.set(time.time() if at is None else at)
        self.stalled = False

    def exposition(self) -> str:
        """The text `/metrics` would return now (Prometheus text format 0.0.4)."""
        return generate_latest(self.registry).decode()

    def serve(self, port: int = 0) -> tuple[WSGIServer, threading.Thread, int]:
        """Serve `/metrics` on 127.0.0.1; returns the server, its thread and the port."""
        server, thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        return server, thread, server.server_port
