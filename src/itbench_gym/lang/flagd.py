"""flagd flag definition files, read the way flagd reads them.

One reader for the twin's flagd (which flags it serves) and for the mitigation check (whether an
edit left a file flagd still accepts). Facts from open-feature/flagd ``core/pkg/evaluator/json.go``
(core v0.11, which flagd v0.12 — the Astronomy Shop's — builds on): a sync is accepted or
rejected as a whole. ``configToFlagDefinition`` unmarshals the document into
``{"flags": map[string]Flag, "metadata": ...}`` (after ``transposeEvaluators`` unmarshalled it once
for ``$evaluators``) and then ``validateDefaultVariants`` requires every non-empty
``defaultVariant`` to be one of the flag's ``variants``; any error rejects the whole file, which
flagd logs, keeping the flags it had (none, at start). An empty file is not an error: flagd warns
``file ... is empty`` and loads the empty default state. A flag whose ``state`` is ``DISABLED``, or
that has no default variant, evaluates to the caller's code default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class FlagFileError(ValueError):
    """flagd rejects the file; the message says why, with flagd's wording where it has one."""


@dataclass(frozen=True)
class FlagDefinition:
    state: str = ""
    variants: Mapping[str, Any] = field(default_factory=dict)
    default_variant: str = ""
    #: the flag's ``targeting`` rules (None, or ``{}``, when it has none: its evaluation is static)
    targeting: Any = None
    #: the flag's own ``metadata`` (evaluations report it with the flag set's)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def targeted(self) -> bool:
        return self.targeting is not None and self.targeting != {}

    def served(self) -> tuple[bool, Any]:
        """(True, value) when flagd resolves the flag to its default variant; (False, None) when the
        caller falls back to its code default (disabled, or no default variant)."""
        if self.state == "DISABLED" or not self.default_variant:
            return False, None
        return True, self.variants[self.default_variant]


def _unmarshal_error(what: str, value: Any, target: str) -> FlagFileError:
    kind = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}.get(type(value), "value")
    return FlagFileError(f"unmarshalling provided configurations: json: cannot unmarshal {kind} into {what} of type {target}")


@dataclass(frozen=True)
class FlagSet:
    """What flagd holds from one flag file: its flags and the file's own ``metadata``."""

    flags: dict[str, FlagDefinition] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)


def load_flag_file(text: str) -> dict[str, FlagDefinition]:
    """The flags of a flagd flag file, or ``FlagFileError`` when flagd would reject the file."""
    return load_flag_set(text).flags


def load_flag_set(text: str) -> FlagSet:
    """A flagd flag file as flagd holds it, or ``FlagFileError`` when flagd would reject the file."""
    if not text.strip():
        return FlagSet()
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise FlagFileError(f"transposing evaluators: unmarshal: {exc}") from None
    if not isinstance(doc, dict):
        raise FlagFileError(f"transposing evaluators: unmarshal: json: cannot unmarshal "
                            f"{'array' if isinstance(doc, list) else 'value'} into Go value of type evaluator.Evaluators")
    evaluators = doc.get("$evaluators")
    if evaluators is not None and not isinstance(evaluators, dict):
        raise _unmarshal_error("Go struct field Evaluators.$evaluators", evaluators, "map[string]json.RawMessage")
    metadata = doc.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _unmarshal_error("Go struct field Definition.metadata", metadata, "map[string]interface {}")
    flags = doc.get("flags")
    if flags is None:
        return FlagSet(metadata=metadata or {})
    if not isinstance(flags, dict):
        raise _unmarshal_error("Go struct field Definition.flags", flags, "map[string]model.Flag")
    out: dict[str, FlagDefinition] = {}
    for name, raw in flags.items():
        if raw is None:
            out[str(name)] = FlagDefinition()
            continue
        if not isinstance(raw, dict):
            raise _unmarshal_error("Go struct field Definition.flags", raw, "model.Flag")
        state, variants, default = raw.get("state", ""), raw.get("variants", {}), raw.get("defaultVariant", "")
        if not isinstance(state, str):
            raise _unmarshal_error("Go struct field Flag.flags.state", state, "string")
        if variants is not None and not isinstance(variants, dict):
            raise _unmarshal_error("Go struct field Flag.flags.variants", variants, "map[string]interface {}")
        if default is not None and not isinstance(default, str):
            raise _unmarshal_error("Go struct field Flag.flags.defaultVariant", default, "string")
        flag_metadata = raw.get("metadata")
        if flag_metadata is not None and not isinstance(flag_metadata, dict):
            raise _unmarshal_error("Go struct field Flag.flags.metadata", flag_metadata, "map[string]interface {}")
        out[str(name)] = FlagDefinition(state=state, variants=dict(variants or {}), default_variant=default or "",
                                        targeting=raw.get("targeting"), metadata=flag_metadata or {})
    for name, flag in out.items():  # validateDefaultVariants runs once the whole document unmarshalled
        if flag.default_variant and flag.default_variant not in flag.variants:
            raise FlagFileError(f"default variant: '{flag.default_variant}' isn't a valid variant of flag: '{name}'")
    return FlagSet(out, metadata or {})
