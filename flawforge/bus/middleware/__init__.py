from flawforge.bus.middleware.idempotency import Idempotency
from flawforge.bus.middleware.metrics import Metrics
from flawforge.bus.middleware.retries import Retries

__all__ = ["Idempotency", "Metrics", "Retries"]
