"""The llm-gateway's core: every model call in Flawforge goes through a `Gateway`."""
from flawforge.llm.gateway import Gateway, StructuredOutcome
from flawforge.llm.limits import Budget, CallScope

__all__ = ["Budget", "CallScope", "Gateway", "StructuredOutcome"]
