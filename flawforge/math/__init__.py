"""Math error pipeline: GSM8K problems, formalization templates, computational and conceptual errors."""

# Entries of the caches that generation reads a problem's templates, expressions and lines through: a problem
# needs a few dozen, and a problem's entries are never asked for again once the next one starts. A larger cache
# only keeps dead entries alive for the garbage collector to walk (at 4,096 to 16,384 entries each, a generation
# process held a million objects by the end of the corpus, and its collections took about 6% of its time).
PROBLEM_CACHE_SIZE = 256
