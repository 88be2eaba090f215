"""Jobs: a pipeline run with validated parameters, its state kept in the blob store."""
