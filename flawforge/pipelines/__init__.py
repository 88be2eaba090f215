"""Pipelines a job can run. Each module registers itself with flawforge.jobs.pipeline."""
