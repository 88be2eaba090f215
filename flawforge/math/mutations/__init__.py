"""The error types, one class each; importing this package registers them all."""
from flawforge.math.mutations import computational, conceptual, realism  # noqa: F401  (registration)
from flawforge.math.mutations.base import REGISTRY, Edit, Mutation, mutations_of

__all__ = ["REGISTRY", "Edit", "Mutation", "mutations_of"]
