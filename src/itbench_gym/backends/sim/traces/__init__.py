"""Traces of the twin: synthesised on demand from the app model's recorded ticks, served through
the Jaeger query API."""

from .jaeger_api import JaegerAPI, make_jaeger_app
from .record import PodRef, TraceTick
from .synth import Span, Trace, TraceSynth

__all__ = ["JaegerAPI", "PodRef", "Span", "Trace", "TraceSynth", "TraceTick", "make_jaeger_app"]
