"""LogQL errors, worded like Loki's so clients and agents see familiar messages."""

from __future__ import annotations


class LogQLError(Exception):
    """A query Loki would reject with HTTP 400; ``str()`` is the response body."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ParseError(LogQLError):
    """``parse error at line L, col C: ...`` (line and column are 1-based; 0 when unknown)."""

    def __init__(self, message: str, line: int = 0, col: int = 0) -> None:
        text = f"parse error at line {line}, col {col}: {message}" if line else f"parse error : {message}"
        super().__init__(text)
        self.detail = message
        self.line = line
        self.col = col


class PipelineError(LogQLError):
    """A metric query whose samples carry ``__error__``: Loki refuses to aggregate them silently."""
