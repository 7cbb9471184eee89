"""The chat's context policy: a conversation longer than the model's context loses its oldest
turns after the system prompt (the backend drops them: backends.prompt.fit_prompt, asked by
GenerationRequest.truncate), and the front end says so after the answer."""

from __future__ import annotations

from dataclasses import dataclass

TRUNCATED_NOTE = ("The conversation no longer fits the model's context: the earliest turns "
                  "were dropped for this answer. Start a new chat or raise the context length "
                  "in Settings.")


@dataclass(frozen=True)
class ContextPolicy:
    truncate: bool = True  # False: a prompt that does not fit is an error, never cut

    def note(self, truncated: bool) -> str:
        """What the front end says after an answer ("" when nothing was dropped)."""
        return TRUNCATED_NOTE if truncated and self.truncate else ""


DROP_OLD_TURNS = ContextPolicy()  # the window's and `ember chat`'s
