"""Debugging conversations (seed 002): pure logic, no I/O.

Bug modifiers (`modifiers/`), library layout discovery (`layout`), diffs and instance ids
(`patches`), verdicts on a candidate's test run (`verdict`), the deterministic conversation
writer (`conversation`) and the scenario catalog (`catalog`).
"""
