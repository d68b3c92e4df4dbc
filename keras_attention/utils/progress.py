"""Progress lines shared by the long jobs (tasks and benchmarks)."""


def phase(message):
    """One line per phase of a long job."""
    print(f"[keras-attention] {message}", flush=True)
