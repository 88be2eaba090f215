"""A job run through the template-loader's and mutator's consumers on RabbitMQ, as on a stack."""
from __future__ import annotations

import time
from contextlib import contextmanager


@contextmanager
def job_through_the_services(amqp_url: str, blob_dir, pipeline: str, params: dict, timeout_s: float):
    """Runs `pipeline` to its end; yields the job store and the final status (artifacts readable until exit)."""
    from flawforge.assembly import platform_for
    from flawforge.jobs.pipeline import pipelines
    from flawforge.jobs.runner import submit
    from flawforge.jobs.store import JobStore
    from flawforge.runtime.service import Workers
    from flawforge.services import consumers_of, load_service
    from flawforge.settings import Settings

    settings = Settings(bus="rabbitmq", amqp_url=amqp_url, blob_backend="local", blob_dir=str(blob_dir))
    platform = platform_for(settings)
    consumers = [c for name in ("template-loader", "mutator") for c in consumers_of(load_service(name))]
    workers = Workers(platform, consumers).start()
    try:
        jobs = JobStore(platform.store)
        status = submit(platform, pipelines()[pipeline], params)
        deadline = time.monotonic() + timeout_s
        while not (status := jobs.get(status.job_id)).state.finished and time.monotonic() < deadline:
            time.sleep(0.2)
        yield jobs, status
    finally:
        workers.stop()
        platform.close()
