"""Local HTTP receivers that stand in for the bridges' vendors in tests.

Each one validates the vendor's published format (a violation is answered 400 with its
reason *and* recorded, so a test that only looks at outcomes still fails on it) and can be
scripted to answer what the vendor answers when things go wrong (429, 5xx, 400).
"""
