"""Math error pipeline: GSM8K problems, formalization templates, computational and conceptual errors."""
