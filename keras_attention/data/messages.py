"""English->German software messages from the gettext catalogs (`.mo` files)
that Debian packages install under `/usr/share/locale/<language>/LC_MESSAGES`.

Each project's translators wrote them, so the corpus is real, single-domain
and has long sentences (PostgreSQL's and git's errors and hints, coreutils'
option help), with format placeholders and markup that a translation must
keep intact."""

import gettext
import hashlib
import os
import re
import struct
import subprocess
from collections import namedtuple

from keras_attention.data.files import DataFormatError
from keras_attention.data.packages import PackageMissingError, require_package

LOCALE_DIR = "/usr/share/locale"
# The Debian packages whose catalogs make the corpus, in the order that
# decides which package keeps a message that several translate: the largest
# first. Each is either mostly catalogs (`*-l10n`, `*-locales`, `*-common`,
# `*-data`) or installed on a Debian machine anyway. Left out: `iso-codes` and
# `xkb-data` (names of countries, languages and keyboard layouts rather than
# messages), `net-tools` (its German catalog declares UTF-8 and is Latin-1),
# and packages with fewer than 100 messages of 4 words or more.
MESSAGE_PACKAGES = (
    "postgresql-15",
    "git",
    "postgresql-client-15",
    "gnupg-l10n",
    "krb5-locales",
    "coreutils",
    "libgtk2.0-common",
    "dpkg",
    "libc-l10n",
    "libglib2.0-data",
    "binutils-common",
    "gettext",
    "libdpkg-perl",
    "wget",
    "login",
    "gsettings-desktop-schemas",
    "tar",
    "procps",
    "appstream",
    "bash",
    "make",
    "apt",
    "libgstreamer1.0-0",
    "libgnutls30",
    "libpq5",
    "libapt-pkg6.0",
    "diffutils",
    "man-db",
    "libgdk-pixbuf2.0-common",
    "findutils",
    "packagekit",
    "systemd",
    "xz-utils",
    "adduser",
    "libelf1",
)

CatalogEntry = namedtuple(
    "CatalogEntry", ["context", "msgid", "msgid_plural", "msgstr"]
)
CatalogEntry.__doc__ = """One message of a `.mo` catalog.

`context` is the `msgctxt` or None, `msgid_plural` the English plural or None,
and `msgstr` a tuple of the translations: one, or one per plural form."""

_EXPECTED_MO = (
    "a GNU gettext message catalog (.mo): magic number 0x950412de, a count and "
    "two tables of (length, offset) pairs pointing inside the file, texts in "
    "the charset its header declares"
)
_PLURAL = re.compile(r"plural=([^;\n]+)", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def read_mo(path):
    """Reads every message of a compiled gettext catalog (`.mo` file), with
    `polib`: in either byte order, decoded with the charset of the catalog's
    header, contexts (`msgctxt`) and plural forms kept apart.

    Fuzzy entries carry no flag in a `.mo` file: `msgfmt` leaves them out
    unless given `--use-fuzzy`.

    Args:
        path: path of the `.mo` file.

    Returns:
        `(entries, plural_forms)`: a list of `CatalogEntry` in the file's
        order (the header not included), and the header's `Plural-Forms`
        value, or None.

    Raises:
        FileNotFoundError: if `path` does not exist.
        DataFormatError: if the file is not a `.mo` catalog, is cut short, or
            has a text that is not in the declared charset. The message names
            the file and what was expected.
    """
    import polib

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No message catalog at '{path}'.")
    try:
        catalog = polib.mofile(path)
    except OSError as error:  # polib's "magic number is incorrect"
        problem = f"is not a .mo catalog ({error})"
    except struct.error:
        problem = "ends before its tables and texts do (a cut-short file?)"
    except UnicodeDecodeError as error:
        problem = (
            f"has a text that is not valid {error.encoding} (the charset its "
            f"header declares) at byte {error.start}"
        )
    except LookupError as error:
        problem = f"declares a charset Python does not know ({error})"
    else:
        entries = [
            CatalogEntry(
                entry.msgctxt or None,
                entry.msgid,
                entry.msgid_plural or None,
                tuple(entry.msgstr_plural[i] for i in sorted(entry.msgstr_plural))
                if entry.msgid_plural
                else (entry.msgstr,),
            )
            for entry in catalog
        ]
        return entries, catalog.metadata.get("Plural-Forms")
    raise DataFormatError(f"'{path}' {problem}. Expected {_EXPECTED_MO}.")


def catalog_pairs(path):
    """The `(english, translation)` pairs of a `.mo` catalog.

    Whitespace runs (line breaks of multi-line help texts included) become
    one space and the ends are stripped. Dropped: the header entry, entries
    with an empty translation (or plural form), and pairs whose two sides are
    equal (untranslatable names, commands and formats). A plural message
    gives two pairs: the singular with the form that the catalog's
    `Plural-Forms` selects for n=1, and the plural with the form for n=2.
    A message in several contexts gives a pair per context.

    Args:
        path: path of the `.mo` file.

    Returns:
        A list of `(source, target, key)` tuples, where `key` is the English
        singular: both forms of a plural share it, so that a split on the key
        keeps them together.
    """
    entries, plural_forms = read_mo(path)
    plural = _plural_function(path, plural_forms)
    pairs = []
    for entry in entries:
        if not entry.msgid or not all(entry.msgstr):
            continue
        if entry.msgid_plural is None:
            sides = [(entry.msgid, entry.msgstr[0])]
        else:
            forms = entry.msgstr
            sides = [
                (entry.msgid, forms[min(plural(1), len(forms) - 1)]),
                (entry.msgid_plural, forms[min(plural(2), len(forms) - 1)]),
            ]
        for source, target in sides:
            source = _SPACES.sub(" ", source).strip()
            target = _SPACES.sub(" ", target).strip()
            if source and target and source != target:
                pairs.append((source, target, entry.msgid))
    return pairs


def _plural_function(path, plural_forms):
    match = _PLURAL.search(plural_forms or "")
    if not match:
        return lambda n: int(n != 1)  # gettext's default: English-like
    try:
        return gettext.c2py(match.group(1).strip())
    except (ValueError, SyntaxError) as error:
        raise DataFormatError(
            f"'{path}' has a Plural-Forms header whose expression "
            f"{match.group(1).strip()!r} is not a valid C plural expression "
            f"({error}). Expected e.g. 'plural=(n != 1);'."
        ) from None


def package_catalogs(package, language="de", locale_dir=LOCALE_DIR):
    """The `.mo` files that Debian package `package` installs for `language`.

    Args:
        package: a Debian package name, such as `"coreutils"`.
        language: the locale folder, such as `"de"`.
        locale_dir: where the packages install their catalogs.

    Returns:
        The sorted paths of the package's files
        `<locale_dir>/<language>/LC_MESSAGES/*.mo`.

    Raises:
        FileNotFoundError: if the package is not installed (naming the
            `apt-get install` command), or installs no catalog for
            `language`.
    """
    require_package(package, "The messages corpus")
    try:
        listing = subprocess.run(
            ["dpkg-query", "--listfiles", package],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        raise FileNotFoundError(
            f"`dpkg-query` was not found: the message catalogs are read from "
            f"installed Debian packages, here {package!r} (`apt-get install "
            f"{package}`)."
        ) from None
    if listing.returncode != 0:
        raise FileNotFoundError(
            f"The Debian package {package!r}, whose message catalogs the "
            f"messages corpus reads, is not installed. Install it with "
            f"`apt-get install {package}`."
        )
    folder = os.path.join(locale_dir, language, "LC_MESSAGES") + os.sep
    paths = sorted(
        line
        for line in listing.stdout.splitlines()
        if line.startswith(folder) and line.endswith(".mo") and os.path.isfile(line)
    )
    if not paths:
        raise FileNotFoundError(
            f"The Debian package {package!r} installs no message catalog in "
            f"'{folder}': expected at least one '.mo' file for language "
            f"{language!r}."
        )
    return paths


def messages_by_package(
    language="de", packages=MESSAGE_PACKAGES, min_words=4, max_words=30
):
    """The message pairs of each package, without repeats across packages.

    Args:
        language: the locale whose catalogs are read (`"de"` for German).
        packages: Debian package names; a message that several translate is
            kept in the first package that has it (with its translation).
        min_words: shortest English message kept, in words.
        max_words: longest English message kept, in words.

    Returns:
        A dict `{package: [(source, target, key), ...]}` in `packages` order,
        each list in catalog order (see `catalog_pairs` for `key`).

    Raises:
        FileNotFoundError: if a package is not installed, naming it.
        DataFormatError: if a catalog is malformed, naming the file.
    """
    if isinstance(packages, str):
        raise TypeError(
            "`packages` must be a list of Debian package names; received the "
            f"string {packages!r}. Wrap one name in a list: [{packages!r}]."
        )
    if not 1 <= min_words <= max_words:
        raise ValueError(
            "Expected 1 <= min_words <= max_words; received "
            f"min_words={min_words!r}, max_words={max_words!r}."
        )
    # Missing packages are reported together, before the slow reading.
    catalogs = {}
    missing = []
    for package in packages:
        try:
            catalogs[package] = package_catalogs(package, language)
        except PackageMissingError:
            raise  # hidden on purpose: no install command to gather
        except FileNotFoundError:
            missing.append(package)
    if missing:
        raise FileNotFoundError(
            f"The messages corpus reads the {language!r} catalogs of Debian "
            f"packages, and {len(missing)} of them are not installed or have "
            f"none: {', '.join(missing)}. Install them with `apt-get install "
            f"{' '.join(missing)}`."
        )
    seen = set()
    result = {}
    for package, paths in catalogs.items():
        result[package] = []
        for path in paths:
            for source, target, key in catalog_pairs(path):
                if source in seen or not min_words <= len(source.split()) <= max_words:
                    continue
                seen.add(source)
                result[package].append((source, target, key))
    return result


def load_messages(language="de", packages=MESSAGE_PACKAGES, min_words=4, max_words=30):
    """Loads English->`language` message pairs from installed catalogs.

    Reads the `.mo` catalogs that the Debian `packages` install under
    `/usr/share/locale/<language>/LC_MESSAGES` (see `catalog_pairs` for the
    cleaning and `messages_by_package` for the repeats).

    Args:
        language: the locale whose catalogs are read (`"de"` for German).
        packages: Debian package names (default `MESSAGE_PACKAGES`).
        min_words: shortest English message kept, in words.
        max_words: longest English message kept, in words.

    Returns:
        A list of `(english, translation)` string tuples, package by package.

    Example:

    >>> pairs = load_messages(packages=["coreutils"])  # doctest: +SKIP
    >>> len(pairs)  # doctest: +SKIP
    1208
    """
    by_package = messages_by_package(language, packages, min_words, max_words)
    return [(s, t) for pairs in by_package.values() for s, t, _ in pairs]


def message_splits(
    language="de",
    packages=MESSAGE_PACKAGES,
    num_test=1000,
    num_valid=1000,
    seed=0,
    **kwargs,
):
    """Splits the messages into train, validation and test sets by hash.

    Each message goes by the SHA-256 of `seed` and its English singular: the
    `num_test` smallest hashes make the test set and the next `num_valid` the
    validation set. The split is deterministic, both forms of a plural fall in
    the same set, and since repeats are removed first, no test message
    appears in training.

    Args:
        language: the locale whose catalogs are read.
        packages: Debian package names (default `MESSAGE_PACKAGES`).
        num_test: number of test pairs.
        num_valid: number of validation pairs.
        seed: changes the split.
        **kwargs: `min_words`, `max_words` of `messages_by_package`.

    Returns:
        A dict `{"train": [...], "valid": [...], "test": [...]}` of lists of
        `(english, translation)` tuples; train is in hash order. The test
        set has exactly `num_test` pairs; the validation set can have one
        fewer than `num_valid`, and training one fewer than the rest, where
        a plural's other form fell in an earlier split.
    """
    pairs = [
        triple
        for package_pairs in messages_by_package(language, packages, **kwargs).values()
        for triple in package_pairs
    ]
    if len(pairs) <= num_test + num_valid:
        raise ValueError(
            f"Too few messages to split: received {len(pairs)} messages from "
            f"{list(packages)}, expected more than num_test + num_valid = "
            f"{num_test + num_valid} so that the training split is not empty."
        )

    def rank(triple):
        source, _, key = triple
        digest = hashlib.sha256(f"{seed}\x00{key}".encode()).hexdigest()
        return digest, source

    pairs.sort(key=rank)
    test = pairs[:num_test]
    valid = pairs[num_test : num_test + num_valid]
    train = pairs[num_test + num_valid :]
    # Both forms of a plural share a key, and a boundary can fall between
    # them: the form past the boundary is dropped rather than let the other
    # form's split see the message.
    held_out_keys = {key for _, _, key in test}
    valid = [p for p in valid if p[2] not in held_out_keys]
    held_out_keys.update(key for _, _, key in valid)
    train = [p for p in train if p[2] not in held_out_keys]
    return {
        name: [(source, target) for source, target, _ in split]
        for name, split in (("train", train), ("valid", valid), ("test", test))
    }
