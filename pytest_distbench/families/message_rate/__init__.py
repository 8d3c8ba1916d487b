"""Message rate with credits over three traffic paths (the arras benchmark's shape).

Rank 0 plays the client, ranks 1.. the computations.  Kept free of imports; benchmark with
``run_message_rate(distbench, path, credits, nbytes)`` from ``.harness``.
"""
