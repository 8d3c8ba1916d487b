"""The replay suite, in a folder of its own: `--distbench-replay` alone collects this folder,
so the test's node id keeps its file part wherever pytest runs (test_replay.py::...)."""
