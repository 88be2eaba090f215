"""The bug modifiers, one class each; importing this package registers them all."""
# The named mistakes first: a change they share with a broader modifier keeps their name (registry order).
from flawforge.debugging.modifiers import mistakes, operators, procedural  # noqa: F401  (registration)
from flawforge.debugging.modifiers.base import REGISTRY, Bug, BugModifier, Site, apply_edits, offset_of, sites_of

__all__ = ["REGISTRY", "Bug", "BugModifier", "Site", "apply_edits", "offset_of", "sites_of"]
