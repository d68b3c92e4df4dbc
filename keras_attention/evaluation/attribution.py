"""Which words a text classifier's attention points at, and whether its
prediction rests on them.

`deletion_check` is the test of Jain and Wallace (2019) and Serrano and Smith
(2019) in its simplest form: delete the words with the most attention and,
separately, as many words drawn at random, and compare how far the predicted
class's probability moves. Attention that explains the prediction moves it
more.

References:
    Jain and Wallace, "Attention is not Explanation", NAACL 2019.
    Serrano and Smith, "Is Attention Interpretable?", ACL 2019.
"""

import numpy as np

# Words deleted per document by `deletion_check`.
NUM_DELETED_WORDS = 3


def word_index(tokenizer, token_ids):
    """The word each token belongs to: WordPiece continuations (`##...`)
    join the word before them, within a sentence. Returns an int array shaped
    like `token_ids` numbering the words of the document in reading order,
    -1 at padding."""
    token_ids = np.asarray(token_ids)
    rows = token_ids.reshape(-1, token_ids.shape[-1])
    index = np.full(rows.shape, -1, "int64")
    word = -1
    for r, row in enumerate(rows):
        for t, token in enumerate(row):
            if token == 0:
                continue
            continues = t > 0 and tokenizer.id_to_token(int(token)).startswith("##")
            if not continues or word < 0:
                word += 1
            index[r, t] = word
    return index.reshape(token_ids.shape)


def word_weights(tokenizer, token_ids, importance):
    """Whole words and their weights (summed over their word pieces) of one
    document, in reading order, grouped by sentence for a `(S, W)` grid:
    returns `(words, weights)` lists (of lists for a grid)."""
    token_ids = np.asarray(token_ids)
    importance = np.asarray(importance, "float32")
    index = word_index(tokenizer, token_ids)
    if token_ids.ndim == 2:
        sentences = [
            _merge(tokenizer, ids, weights, idx)
            for ids, weights, idx in zip(token_ids, importance, index, strict=True)
            if (ids != 0).any()
        ]
        return [s[0] for s in sentences], [s[1] for s in sentences]
    return _merge(tokenizer, token_ids, importance, index)


def _merge(tokenizer, token_ids, importance, index):
    words, weights, seen = [], [], {}
    for token, weight, word in zip(token_ids, importance, index, strict=True):
        if word < 0:
            continue
        piece = tokenizer.id_to_token(int(token))
        if word in seen:
            position = seen[word]
            words[position] += piece[2:] if piece.startswith("##") else piece
            weights[position] += float(weight)
        else:
            seen[word] = len(words)
            words.append(piece)
            weights.append(float(weight))
    return words, weights


def delete_words(token_ids, index, words):
    """`token_ids` without the tokens of `words` (indices from `word_index`),
    the remaining tokens of each row moved left over the gaps."""
    kept = np.where(np.isin(index, list(words)), 0, token_ids)
    rows = kept.reshape(-1, kept.shape[-1])
    compact = np.zeros_like(rows)
    for r, row in enumerate(rows):
        remaining = row[row != 0]
        compact[r, : len(remaining)] = remaining
    return compact.reshape(kept.shape)


def deletion_check(model, token_ids, probabilities, seed=0, k=NUM_DELETED_WORDS):
    """Do the attention weights point at the words the prediction rests on?

    For every document with more than `k` words, deletes the `k` words with
    the most attention (summed over their pieces; for the HAN, sentence weight
    times word weight), and separately `k` words drawn at random, and measures
    how much the probability of the originally predicted class moves.

    Returns:
        Dict with the mean absolute probability change for the
        `top_attended` and the `random` deletions, the share of documents
        where the top-attended deletion moved it more, and the count.
    """
    rng = np.random.default_rng(seed)
    importance = model.token_importance(token_ids)
    predicted = np.argmax(probabilities, axis=-1)
    top_inputs, random_inputs, chosen = [], [], []
    for i, ids in enumerate(token_ids):
        index = word_index(model.tokenizer, ids)
        num_words = int(index.max()) + 1
        if num_words <= k:
            continue
        scores = np.bincount(
            index[index >= 0], weights=importance[i][index >= 0], minlength=num_words
        )
        top = np.argsort(-scores, kind="stable")[:k]
        drawn = rng.choice(num_words, size=k, replace=False)
        top_inputs.append(delete_words(ids, index, top))
        random_inputs.append(delete_words(ids, index, drawn))
        chosen.append(i)
    chosen = np.array(chosen, "int64")
    before = probabilities[chosen, predicted[chosen]]

    def change(inputs):
        after = np.asarray(model.predict(np.stack(inputs), batch_size=128, verbose=0))
        return np.abs(after[np.arange(len(chosen)), predicted[chosen]] - before)

    top_change, random_change = change(top_inputs), change(random_inputs)
    return {
        "top_attended": float(np.mean(top_change)),
        "random": float(np.mean(random_change)),
        "top_moves_more_share": float(np.mean(top_change > random_change)),
        "documents": len(chosen),
        "words_deleted": k,
    }
