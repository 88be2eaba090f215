"""The template-loader service."""
from flawforge.runtime.service import ServiceSpec

SERVICE = ServiceSpec(
    name="template-loader",
    port=8001,
    description="Reads GSM8K and formalization templates, validates them, emits one work item per problem.",
)
