"""Runs whose tests read their loss curves only (the strategy and
distribution runs) score a few held-out pairs, not the date task's 1000
validation and 2000 test pairs: each epoch's validation and the final
evaluation were most of such a run's time."""

HELD_OUT = 64


def score_few_held_out_pairs():
    """Makes `translate` load at most `HELD_OUT` validation and test pairs in
    this process (each run is a process of its own)."""
    from keras_attention.tasks import translate

    load = translate.load_translation_pairs

    def load_few(data, seed=0):
        splits = load(data, seed=seed)
        return {
            **splits,
            "valid": splits["valid"][:HELD_OUT],
            "test": splits["test"][:HELD_OUT],
        }

    translate.load_translation_pairs = load_few
