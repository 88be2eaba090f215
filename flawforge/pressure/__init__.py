"""Semantic-pressure study (seed 001): prompt templates, the word detector and the study's metrics (pure)."""
