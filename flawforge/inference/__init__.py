"""Local model serving: loading, sampling and scoring backends, research computations, OpenAI
compatibility and the Batch API. Needs the `inference` extra (torch, transformers)."""
