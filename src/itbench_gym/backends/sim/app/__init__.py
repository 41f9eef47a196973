"""The application behaviour model of the twin (from ``envs/<app>/``)."""

from .model import AppModel
from .spec import AppSpec, AppSpecError, load_spec

__all__ = ["AppModel", "AppSpec", "AppSpecError", "load_spec"]
