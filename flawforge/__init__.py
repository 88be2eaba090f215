"""Flawforge: realistic failures for training and studying language models."""
__version__ = "0.1.0"
