"""Prometheus text metrics: requests, tokens, time to first token, queue, loaded models."""

from __future__ import annotations

import threading
from collections import Counter

from app.runtime.worker_memory import resident_bytes
from backends.base import Stats

TTFT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()  # (endpoint, outcome)
        self.prompt_tokens = 0
        self.cached_tokens = 0  # prompt tokens the prefix cache supplied
        self.disk_tokens = 0  # of those, the ones restored from a cache saved on disk
        self.completion_tokens = 0
        self.ttft_buckets = [0] * len(TTFT_BUCKETS)
        self.ttft_sum = 0.0
        self.ttft_count = 0

    def record(self, endpoint: str, model: str, stats: Stats, seconds: float) -> None:
        with self._lock:
            self.requests[(endpoint, stats.finish_reason)] += 1
            self.prompt_tokens += stats.prompt_tokens
            self.cached_tokens += stats.cached_tokens
            self.disk_tokens += stats.disk_tokens
            self.completion_tokens += stats.completion_tokens
            if stats.completion_tokens:
                self.ttft_sum += stats.ttft_s
                self.ttft_count += 1
                for i, bound in enumerate(TTFT_BUCKETS):
                    if stats.ttft_s <= bound:
                        self.ttft_buckets[i] += 1

    def record_error(self, endpoint: str, kind: str) -> None:
        with self._lock:
            self.requests[(endpoint, f"error_{kind}")] += 1

    def render(self, queued: int, active: int, loaded: list) -> str:
        lines = ["# HELP ember_requests_total Finished generation requests.",
                 "# TYPE ember_requests_total counter"]
        with self._lock:
            for (endpoint, outcome), n in sorted(self.requests.items()):
                lines.append(f'ember_requests_total{{endpoint="{endpoint}",outcome="{outcome}"}} '
                             f"{n}")
            lines += ["# TYPE ember_prompt_tokens_total counter",
                      f"ember_prompt_tokens_total {self.prompt_tokens}",
                      "# HELP ember_cached_prompt_tokens_total Prompt tokens the prefix cache "
                      "supplied (not evaluated again).",
                      "# TYPE ember_cached_prompt_tokens_total counter",
                      f"ember_cached_prompt_tokens_total {self.cached_tokens}",
                      "# HELP ember_disk_prompt_tokens_total Of the cached prompt tokens, "
                      "those restored from a KV cache saved on disk (before a restart).",
                      "# TYPE ember_disk_prompt_tokens_total counter",
                      f"ember_disk_prompt_tokens_total {self.disk_tokens}",
                      "# TYPE ember_completion_tokens_total counter",
                      f"ember_completion_tokens_total {self.completion_tokens}",
                      "# HELP ember_ttft_seconds Time to first token.",
                      "# TYPE ember_ttft_seconds histogram"]
            for bound, n in zip(TTFT_BUCKETS, self.ttft_buckets, strict=True):
                lines.append(f'ember_ttft_seconds_bucket{{le="{bound}"}} {n}')
            lines += [f'ember_ttft_seconds_bucket{{le="+Inf"}} {self.ttft_count}',
                      f"ember_ttft_seconds_sum {self.ttft_sum:.6f}",
                      f"ember_ttft_seconds_count {self.ttft_count}"]
        lines += ["# TYPE ember_queue_depth gauge", f"ember_queue_depth {queued}",
                  "# TYPE ember_active_requests gauge", f"ember_active_requests {active}",
                  "# HELP ember_model_memory_bytes Resident memory of each loaded model's worker.",
                  "# TYPE ember_model_memory_bytes gauge"]
        for m in loaded:
            lines.append(f'ember_model_memory_bytes{{model="{m.model.ref}"}} '
                         f"{resident_bytes(m.pid)}")
        lines += ["# TYPE ember_loaded_models gauge", f"ember_loaded_models {len(loaded)}"]
        return "\n".join(lines) + "\n"
