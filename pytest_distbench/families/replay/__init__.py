"""Capture of a real program's communication and its replay as distbench tests
(docs/replay.md).

Kept free of imports: trace.py is the format, capture.py records one, reading.py reads any.
"""
