"""Human review of generated candidates: shortlist, decisions, agreement, export.

Pure logic lives in the modules here; `store` keeps a round's state in the blob store and the
metrics service exposes it over HTTP (services/metrics/review_api.py).
"""
