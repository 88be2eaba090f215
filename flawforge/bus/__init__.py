"""The message bus: one small interface, an in-memory and a RabbitMQ backend, middleware for the rest."""
from flawforge.bus.base import Bus, Delivery, Middleware, SkipMessage
from flawforge.bus.memory import MemoryBus

__all__ = ["Bus", "Delivery", "MemoryBus", "Middleware", "SkipMessage", "open_bus"]


def open_bus(settings, blob_store=None, extra_middleware=()) -> Bus:
    """Builds the backend named by the settings with the standard middleware stack."""
    from flawforge.bus.middleware import Idempotency, Metrics, Retries

    middleware = [Metrics(), Retries(settings.max_attempts, settings.retry_delays_ms)]
    if settings.bus == "memory":
        middleware.append(Idempotency(None))  # its messages die with the process, and so may its markers
    elif blob_store is not None:
        middleware.append(Idempotency(blob_store))
    middleware.extend(extra_middleware)
    if settings.bus == "memory":
        return MemoryBus(middleware=middleware)
    from flawforge.bus.rabbitmq import RabbitMQBus

    return RabbitMQBus(settings.amqp_url, middleware=middleware, heartbeat=settings.amqp_heartbeat_s,
                       prefetch=settings.prefetch, delivery_limit=settings.delivery_limit,
                       retry_delays_ms=settings.retry_delays_ms, prefix=settings.queue_prefix)
