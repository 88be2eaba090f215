"""`flawforge run smoke`."""
from __future__ import annotations

from flawforge.cli.run import JobOptions, field_option, job_command, run_pipeline
from flawforge.pipelines.smoke import SmokeParams


@job_command("smoke")
def run_smoke(count: int = field_option(SmokeParams, "count"),
              payload_bytes: int = field_option(SmokeParams, "payload_bytes"), *, job: JobOptions) -> None:
    """Round trip of payload blobs through the bus (platform check)."""
    run_pipeline("smoke", {"count": count, "payload_bytes": payload_bytes}, job)
