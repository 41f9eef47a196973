"""PromQL for the twin: parsing via ``promql-parser``, vectorised evaluation over the TSDB."""

from .engine import Engine, Result
from .errors import PromQLError

__all__ = ["Engine", "PromQLError", "Result"]
