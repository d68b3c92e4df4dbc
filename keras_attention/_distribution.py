"""What the models and the tasks both need to know about a `tf.distribute`
strategy (no TensorFlow import: a strategy object is inspected as given)."""


def num_workers(strategy):
    """The number of machines (worker and chief tasks) that a multi-worker
    strategy spans; 1 for any other strategy or None."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict() or {}
    return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))
