"""Numbers in, numbers out: summaries of samples and the tests behind every verdict.

No documents, files or families here: stats (summaries, percentiles, bandwidth), unpaired (two
runs' samples), runs (one p50 against a history of p50s), paired (A/B rounds), ratio (the
comparison plot's interval), changepoints (the runs at which a history's speed stepped)."""
