"""Progress lines shared by the long jobs (tasks and benchmarks)."""

import sys


def phase(message):
    """One line per phase of a long job."""
    # One write: a signal handled mid-line would otherwise glue its own line
    # to this one.
    sys.stdout.write(f"[keras-attention] {message}\n")
    sys.stdout.flush()
