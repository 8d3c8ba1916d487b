"""Running a test in ranks: the controller session, worlds, the rank loop, the wire, the
in-rank distbench object."""
