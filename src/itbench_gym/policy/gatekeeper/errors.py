"""The two ways a Gatekeeper input cannot be evaluated: it is wrong, or it needs what this runner lacks."""

from __future__ import annotations


class GatekeeperError(Exception):
    """A template, constraint or object that Gatekeeper itself would reject."""


class Unsupported(Exception):
    """A feature outside this runner (CEL-only templates, ``external_data``): the case is skipped with this reason."""
