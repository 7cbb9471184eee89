"""Responses kept in memory for `previous_response_id` and GET/DELETE /v1/responses/{id}:
each with the conversation it continues (its input and its output turn, as Ember's messages),
bounded in count and age. Nothing is written to disk: a restarted server has forgotten them,
as a client that sends `store: false` (Codex does) never relies on them."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from backends.base import Message

# An agent chains one response per turn, and only the newest one is continued; 1,000 holds
# many sessions' recent turns. Each keeps a tuple of its whole conversation, but the messages
# in it are shared with the response it continued, so a chain costs a pointer per message
# per turn, not a copy of the text.
MAX_RESPONSES = 1000
# An hour: a person's pause between turns, not a day's work (OpenAI keeps stored responses
# 30 days; a local server restarts more often than that anyway).
MAX_AGE_S = 3600.0


@dataclass(frozen=True)
class StoredResponse:
    body: dict  # the response object as it was sent
    # its input conversation, then its output as an assistant turn; without `instructions`,
    # which OpenAI does not carry over to the next response
    conversation: tuple[Message, ...]
    stored_at: float


class ResponseStore:
    def __init__(self, max_responses: int = MAX_RESPONSES, max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_responses, self.max_age_s, self._clock = max_responses, max_age_s, clock
        self._responses: OrderedDict[str, StoredResponse] = OrderedDict()  # oldest first
        self._lock = threading.Lock()

    def put(self, response_id: str, body: dict, conversation: tuple[Message, ...]) -> None:
        with self._lock:
            self._responses[response_id] = StoredResponse(body, conversation, self._clock())
            self._prune()

    def get(self, response_id: str) -> StoredResponse | None:
        """The response, or None: unknown, expired, evicted or deleted."""
        with self._lock:
            self._prune()
            return self._responses.get(response_id)

    def delete(self, response_id: str) -> bool:
        with self._lock:
            self._prune()
            return self._responses.pop(response_id, None) is not None

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._responses)

    def _prune(self) -> None:
        oldest_kept = self._clock() - self.max_age_s
        while self._responses and (
                len(self._responses) > self.max_responses
                or next(iter(self._responses.values())).stored_at < oldest_kept):
            self._responses.popitem(last=False)
