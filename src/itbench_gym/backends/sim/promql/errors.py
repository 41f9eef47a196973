"""PromQL errors and annotations, shaped like Prometheus' so API envelopes and tests can match them."""

from __future__ import annotations


class PromQLError(Exception):
    """A query that cannot be parsed or evaluated.

    ``error_type`` is the Prometheus API ``errorType``: ``bad_data`` for invalid queries or
    parameters, ``execution`` for evaluation failures, ``timeout`` when a limit was hit.
    """

    def __init__(self, message: str, error_type: str = "execution") -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


class Annotations:
    """Ordered, de-duplicated warning and info messages collected during evaluation."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.infos: list[str] = []

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def info(self, message: str) -> None:
        if message not in self.infos:
            self.infos.append(message)
