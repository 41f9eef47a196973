"""The twin's Loki: LogQL (parsed with Lark) over the app model's synthesised logs, served over HTTP."""

from .api import LokiAPI, make_loki_app
from .engine import Engine, LogSource
from .errors import LogQLError, ParseError
from .syntax import parse

__all__ = ["Engine", "LogQLError", "LogSource", "LokiAPI", "ParseError", "make_loki_app", "parse"]
