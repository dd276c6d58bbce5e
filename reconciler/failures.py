"""``EngineError``: a failure the CLI reports as one sentence and an exit code.

Its own light module so that commands can catch it without importing the engine (and
with it the HTTP stack) at start-up; ``reconcile validate`` never needs either.
"""

from __future__ import annotations

from reconciler.core.diagnostics import Diagnostic
from reconciler.exitcodes import Exit


class EngineError(Exception):
    """A failure the CLI reports as one message and an exit code."""

    def __init__(self, message: str, code: Exit = Exit.ERROR,
                 diagnostics: tuple[Diagnostic, ...] = (), *, hint: str = "") -> None:
        super().__init__(message + hint)
        self.code = code
        self.diagnostics = diagnostics
        #: what happened, without the advice (``hint``) the full message ends with: for
        #: a place that reports only the fact, like the daemon's ``/readyz``
        self.bare = message
        self.hint = hint
