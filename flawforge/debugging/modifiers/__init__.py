"""The bug modifiers, one class each; importing this package registers them all."""
from flawforge.debugging.modifiers import operators, procedural  # noqa: F401  (registration)
from flawforge.debugging.modifiers.base import (REGISTRY, Bug, BugModifier, Site, apply_edits, definitions, offset_of,
                                                sites_of)

__all__ = ["REGISTRY", "Bug", "BugModifier", "Site", "apply_edits", "definitions", "offset_of", "sites_of"]
