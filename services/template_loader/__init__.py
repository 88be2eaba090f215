"""The template-loader service; it also runs the math-errors jobs (see flawforge.pipelines.math_errors)."""
from flawforge.runtime.service import ServiceSpec

SERVICE = ServiceSpec(
    name="template-loader",
    port=8001,
    description="Reads GSM8K and formalization templates, validates them, emits work items of up to 8 problems.",
    routers=("flawforge.services.template_loader.api:templates_router",),
    extras=("gateway",),  # its debugging-conversation jobs call models through an in-process gateway
)
