"""What is kept and shown, by role: statistics (numbers in, verdicts out), document (the results
file: build, schema, io, history, environment), comparison (two documents judged, the gate) and
rendering (tables, reports, plots). Lower to higher in that order; none of it names a family."""
