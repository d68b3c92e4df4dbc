"""WordPiece tokenizers learned from a corpus, and detokenization clean-up."""

import os
import re
from collections import Counter

import keras_hub
import tensorflow as tf

from keras_attention._checks import check_positive_int

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
PAD_ID, UNK_ID, START_ID, END_ID = range(len(SPECIAL_TOKENS))

_SPACE_BEFORE = re.compile(r"\s+([.,!?;:)])")
_SPACE_AFTER = re.compile(r"\(\s+")
_SPACE_AROUND = re.compile(r"\s*([-/'])\s*")


def train_word_piece(texts, vocabulary_size, lowercase=False, strip_accents=False):
    """Learns a WordPiece vocabulary from texts and returns its tokenizer.

    The vocabulary starts with `SPECIAL_TOKENS`, so that `[PAD]`, `[UNK]`,
    `[START]` and `[END]` have ids `PAD_ID` .. `END_ID` (0 .. 3), and words
    the vocabulary cannot spell map to `[UNK]`. The tokenizer stores its
    vocabulary as an asset, so a Keras model that holds it as an attribute
    saves it inside the `.keras` file.

    Args:
        texts: a list of strings (e.g. the source or target side of the
            training pairs).
        vocabulary_size: the largest vocabulary to learn, special tokens
            included. The learned vocabulary can be smaller when the texts
            have few distinct words.
        lowercase: whether the tokenizer lowercases its inputs.
        strip_accents: whether the tokenizer removes accents ("ü" -> "u").

    Returns:
        A `keras_hub.tokenizers.WordPieceTokenizer` with int32 outputs.

    Raises:
        ValueError: for a `vocabulary_size` not above the special tokens, or
            texts that hold no word (empty, whitespace, control characters).

    Example:

    >>> tokenizer = train_word_piece(["Hello, world."] * 10, 40)
    >>> tokenizer.id_to_token(START_ID)
    '[START]'
    """
    check_positive_int("vocabulary_size", vocabulary_size)
    if vocabulary_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"`vocabulary_size` must exceed the {len(SPECIAL_TOKENS)} special "
            f"tokens; received vocabulary_size={vocabulary_size}."
        )
    texts = [str(text) for text in texts]
    if not texts:
        raise ValueError("`texts` is empty: a vocabulary needs some text.")
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(1024)
    try:
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            dataset,
            vocabulary_size,
            lowercase=lowercase,
            strip_accents=strip_accents,
            reserved_tokens=list(SPECIAL_TOKENS),
        )
    except StopIteration:
        # What keras-hub raises when the texts split into no word at all.
        vocabulary = []
    if len(vocabulary) <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"The {len(texts):,} texts hold no word to learn a vocabulary from "
            f"(only whitespace or control characters, such as {texts[0][:30]!r}): "
            "the vocabulary would be its special tokens alone."
        )
    return word_piece_tokenizer(vocabulary, lowercase, strip_accents)


def word_piece_tokenizer(vocabulary, lowercase=False, strip_accents=False):
    """The tokenizer of a vocabulary made by `train_word_piece`: a list of
    tokens, or the path of a file with one token per line.

    Args:
        vocabulary: the tokens, `SPECIAL_TOKENS` first, or a file of them.
        lowercase: whether the tokenizer lowercases its inputs (as when the
            vocabulary was learned).
        strip_accents: whether the tokenizer removes accents (likewise).

    Returns:
        A `keras_hub.tokenizers.WordPieceTokenizer` mapping unknown words to
        `[UNK]`. When the vocabulary has the placeholder slots
        `PLACEHOLDER_TOKENS` (see `mask_placeholders`), the tokenizer keeps
        `[PH1]`, `[PH2]`, ... in its input strings whole, as one token each.
    """
    tokens = vocabulary
    if isinstance(vocabulary, (str, os.PathLike)):
        vocabulary = os.fspath(vocabulary)  # keras-hub takes a str path only
        with open(vocabulary, encoding="utf-8") as file:
            tokens = file.read().splitlines()
    slots = [t for t in PLACEHOLDER_TOKENS if t in set(tokens)]
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary,
        lowercase=lowercase,
        strip_accents=strip_accents,
        oov_token=SPECIAL_TOKENS[UNK_ID],
        special_tokens=slots or None,
        special_tokens_in_strings=bool(slots),
    )


def join_punctuation(text):
    """Undoes the spaces that WordPiece detokenization puts around punctuation.

    Removes the space before `. , ! ? ; : )`, after `(`, and on both sides
    of `-`, `/` and `'`.

    Args:
        text: a detokenized string.

    Returns:
        The string with natural spacing.

    Example:

    >>> join_punctuation("Don ' t , please : 2021 - 03 - 03 .")
    "Don't, please: 2021-03-03."
    """
    text = _SPACE_BEFORE.sub(r"\1", text)
    text = _SPACE_AFTER.sub("(", text)
    return _SPACE_AROUND.sub(r"\1", text).strip()


# Format placeholders and markup of software messages, longest forms first:
# printf conversions with an optional argument position, flags, width,
# precision and length (`%s`, `%-10s`, `%1$s`, `%'d`, `%lu`, `%.*s`; the space
# flag is left out, since "50 % der" is German, not `% d`), glib's `%<PRIu64>`,
# Python's `%(name)s`, `%%`, `str.format`'s `{0}`, `{name}`, `{}`, XML/HTML
# tags (`<b>`, `</b>`, `<a href="...">`) and entities (`&amp;`, `&#169;`).
_PLACEHOLDER = re.compile(
    r"%\([A-Za-z_][A-Za-z0-9_]*\)[-+#0]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]"
    r"|%(?:\d+\$)?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?"
    r"(?:hh|h|ll|l|L|q|j|z|Z|t)?[diouxXeEfFgGaAcspnm]"
    r"|%<PRI[a-zA-Z0-9]+>|%%"
    r"|\{[A-Za-z0-9_]*\}"
    r"|</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>"
    r"|&(?:[A-Za-z]+|#\d+|#x[0-9A-Fa-f]+);"
)
NUM_PLACEHOLDER_SLOTS = 16
PLACEHOLDER_TOKENS = tuple(f"[PH{i}]" for i in range(1, NUM_PLACEHOLDER_SLOTS + 1))


def find_placeholders(text):
    """The format placeholders and markup of a message, in order.

    Finds printf conversions (`%s`, `%-10s`, `%1$s`, `%lu`, `%%`), Python's
    `%(name)s`, `str.format` fields (`{0}`, `{name}`), XML/HTML tags (`<b>`,
    `</b>`) and entities (`&amp;`).

    Args:
        text: a string.

    Returns:
        A list of the placeholder strings, repeats included.

    Example:

    >>> find_placeholders("<b>%s</b>: %d of {total} files (%(pct)s%%)")
    ['<b>', '%s', '</b>', '%d', '{total}', '%(pct)s', '%%']
    """
    return _PLACEHOLDER.findall(text)


def mask_placeholders(text, source_placeholders=None):
    """Replaces each placeholder of a message by a slot token `[PH<k>]`.

    The slot tokens `PLACEHOLDER_TOKENS` are appended to the vocabularies of
    message translation, and `word_piece_tokenizer` then keeps them whole, so
    that a model copies `%(name)s` as one token it can attend to instead of
    five pieces. In a source (`source_placeholders=None`) the
    k-th placeholder becomes `[PHk]`. In a target, pass the source's
    placeholders: each placeholder takes the slot of the first unused equal
    one of the source, and a positional `%k$s` whose source has no such
    placeholder takes slot k (translators reorder `%s ... %s` that way).
    Placeholders past `NUM_PLACEHOLDER_SLOTS`, or with no match in the
    source, are left as they are.

    Args:
        text: the message.
        source_placeholders: `find_placeholders(source)` when `text` is a
            translation of `source`; None when `text` is a source.

    Returns:
        `(masked_text, placeholders)`: the text with slot tokens, spaced
        apart from the neighbouring text, and the placeholders of `text`
        (for a source, what `unmask_placeholders` puts back).

    Example:

    >>> mask_placeholders("Copy %s to %s?")
    ('Copy [PH1] to [PH2] ?', ['%s', '%s'])
    >>> mask_placeholders("%2$s nach %1$s kopieren?", ["%s", "%s"])[0]
    '[PH2] nach [PH1] kopieren?'
    """
    placeholders = find_placeholders(text)
    used = set()

    def slot(match):
        found = match.group(0)
        if source_placeholders is None:
            k = len(used)
        else:
            k = next(
                (
                    i
                    for i, p in enumerate(source_placeholders)
                    if p == found and i not in used
                ),
                None,
            )
            position = re.match(r"%(\d+)\$", found)
            if k is None and position:
                k = int(position.group(1)) - 1
                k = None if k >= len(source_placeholders) or k in used else k
        if k is None or k >= NUM_PLACEHOLDER_SLOTS:
            return found
        used.add(k)
        return f" {PLACEHOLDER_TOKENS[k]} "

    masked = _PLACEHOLDER.sub(slot, text)
    return " ".join(masked.split()), placeholders


def unmask_placeholders(text, placeholders):
    """Puts a source's placeholders back in place of the slot tokens of its
    translation: the inverse of `mask_placeholders`.

    Slot tokens with no placeholder (the model wrote `[PH3]` for a source with
    two) are removed. The spaces that tokenization put around a slot are
    removed where the placeholder is glued to a word or punctuation in the
    source's way of writing it: before `.,:;!?)` and after `(`.

    Args:
        text: a translation with slot tokens.
        placeholders: the source's placeholders (`mask_placeholders(source)[1]`).

    Returns:
        The translation with the placeholders.

    Example:

    >>> unmask_placeholders("[PH2] nach [PH1] kopieren ?", ["%s", "{0}"])
    '{0} nach %s kopieren?'
    """

    def restore(match):
        k = int(match.group(1)) - 1
        return placeholders[k] if k < len(placeholders) else ""

    text = re.sub(r"\[PH(\d+)\]", restore, text)
    return join_punctuation(" ".join(text.split()))


def placeholders_kept(source, translation):
    """Whether `translation` has the placeholders and markup of `source`, as a
    multiset: each `%s`, `%(name)s`, `{0}`, `<b>`, `&amp;` ... as many times,
    in any order (see `find_placeholders`).

    Example:

    >>> placeholders_kept("Copy <b>%s</b> to %s?", "%s nach <b>%s</b> kopieren?")
    True
    >>> placeholders_kept("%d files", "%s Dateien")
    False
    """
    return Counter(find_placeholders(source)) == Counter(find_placeholders(translation))


def placeholder_accuracy(sources, translations):
    """The share of translations whose placeholders and markup are, as a
    multiset, those of their source (`placeholders_kept`).

    A translation that drops a `%s`, repeats one, or turns `%d` into `%s`
    would crash or garble the program that formats it; this counts the
    messages that would not.

    Args:
        sources: the source messages.
        translations: their translations, one per source.

    Returns:
        A float in [0, 1].
    """
    sources, translations = list(sources), list(translations)
    if len(sources) != len(translations) or not sources:
        raise ValueError(
            "Expected as many translations as sources, at least one; received "
            f"{len(sources)} sources and {len(translations)} translations."
        )
    kept = [placeholders_kept(s, t) for s, t in zip(sources, translations, strict=True)]
    return sum(kept) / len(kept)
