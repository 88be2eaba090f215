"""What every service shares: its platform handles, its HTTP app and its queue workers."""
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer, ServiceSpec

__all__ = ["Consumer", "Platform", "ServiceSpec"]
