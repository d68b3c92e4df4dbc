import struct

import pytest

from keras_attention.data import messages
from keras_attention.data.files import DataFormatError
from keras_attention.data.messages import (
    CatalogEntry,
    catalog_pairs,
    load_messages,
    message_splits,
    messages_by_package,
    package_catalogs,
    read_mo,
)
from keras_attention.data.tokenization import (
    PLACEHOLDER_TOKENS,
    SPECIAL_TOKENS,
    find_placeholders,
    mask_placeholders,
    placeholder_accuracy,
    placeholders_kept,
    unmask_placeholders,
    word_piece_tokenizer,
)

HEADER = (
    "Content-Type: text/plain; charset=UTF-8\n"
    "Plural-Forms: nplurals=2; plural=(n != 1);\n"
)


def write_mo(path, entries, header=HEADER, byte_order="<", encoding="utf-8"):
    """Writes a `.mo` file as `msgfmt` does (GNU gettext manual, "The Format
    of GNU MO Files"): `entries` are `(original, translation)` strings, with
    `msgctxt\\x04msgid` and `msgid\\x00msgid_plural` originals."""
    entries = sorted([("", header), *entries])
    originals = [o.encode(encoding) for o, _ in entries]
    translations = [t.encode(encoding) for _, t in entries]
    count = len(entries)
    originals_at = 28
    translations_at = originals_at + 8 * count
    text_at = translations_at + 8 * count
    tables, texts = [], b""
    for strings in (originals, translations):
        table = []
        for string in strings:
            table.append((len(string), text_at + len(texts)))
            texts += string + b"\x00"
        tables.append(table)
    data = struct.pack(
        byte_order + "7I", 0x950412DE, 0, count, originals_at, translations_at, 0, 0
    )
    for table in tables:
        for length, offset in table:
            data += struct.pack(byte_order + "2I", length, offset)
    path.write_bytes(data + texts)
    return str(path)


TINY_CATALOG = [
    ("Cannot open file %s for reading", "Datei %s kann nicht gelesen werden"),
    ("menu\x04Open the file now", "Die Datei jetzt öffnen"),
    ("button\x04Open the file now", "Die Datei sofort öffnen"),
    ("%d file was copied\x00%d files were copied", "%d Datei kopiert\x00%d Dateien"),
    ("This one is not translated", ""),
    ("GNU General Public License", "GNU General Public License"),
    ("Usage:  %s [OPTION]...\n  or:  %s\n", "Aufruf:  %s [OPTION]...\n  oder:  %s\n"),
]


# read_mo and catalog_pairs


@pytest.mark.parametrize("byte_order", ["<", ">"])
def test_read_mo_reads_contexts_plurals_and_the_header(tmp_path, byte_order):
    path = write_mo(tmp_path / "tiny.mo", TINY_CATALOG, byte_order=byte_order)
    entries, plural_forms = read_mo(path)
    assert len(entries) == len(TINY_CATALOG)
    assert plural_forms == "nplurals=2; plural=(n != 1);"
    by_msgid = {(e.context, e.msgid): e for e in entries}
    assert by_msgid[("menu", "Open the file now")].msgstr == ("Die Datei jetzt öffnen",)
    assert by_msgid[(None, "%d file was copied")] == CatalogEntry(
        None,
        "%d file was copied",
        "%d files were copied",
        ("%d Datei kopiert", "%d Dateien"),
    )


def test_catalog_pairs_cleans_and_drops(tmp_path):
    pairs = catalog_pairs(write_mo(tmp_path / "tiny.mo", TINY_CATALOG))
    assert [(s, t) for s, t, _ in pairs] == [
        ("%d file was copied", "%d Datei kopiert"),
        ("%d files were copied", "%d Dateien"),
        ("Cannot open file %s for reading", "Datei %s kann nicht gelesen werden"),
        # Whitespace runs become one space.
        ("Usage: %s [OPTION]... or: %s", "Aufruf: %s [OPTION]... oder: %s"),
        # One pair per context.
        ("Open the file now", "Die Datei sofort öffnen"),
        ("Open the file now", "Die Datei jetzt öffnen"),
    ]
    # Both forms of a plural share the key of the singular.
    assert pairs[0][2] == pairs[1][2] == "%d file was copied"


def test_catalog_pairs_pick_forms_by_the_plural_expression(tmp_path):
    # Three forms, of which n=1 selects the first and n=2 the third.
    header = "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=3; "
    header += "plural=(n==1 ? 0 : n==0 ? 1 : 2);\n"
    entry = ("one fine test\x00many fine tests", "eins\x00keins\x00viele")
    pairs = catalog_pairs(write_mo(tmp_path / "p.mo", [entry], header=header))
    assert [(s, t) for s, t, _ in pairs] == [
        ("one fine test", "eins"),
        ("many fine tests", "viele"),
    ]


def test_read_mo_decodes_the_declared_charset(tmp_path):
    header = "Content-Type: text/plain; charset=ISO-8859-1\n"
    entries = [("Open a file", "Öffnen")]
    path = write_mo(tmp_path / "l.mo", entries, header=header, encoding="latin-1")
    entries, _ = read_mo(path)
    assert entries[-1].msgstr == ("Öffnen",)


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda data: b"\x00\x01\x02\x03" + data[4:], "magic number is incorrect"),
        (lambda data: data[:20], "ends before its tables and texts do"),
        (lambda data: data[:60], "ends before its tables and texts do"),
        (
            lambda data: data.replace(
                "öffnen".encode(), b"\xff\xfe\xfd\xfc\xfb\xfa\xf9"
            ),
            "not valid utf-8",
        ),
    ],
)
def test_malformed_catalog_names_the_file_and_the_format(tmp_path, damage, expected):
    path = tmp_path / "broken.mo"
    write_mo(path, TINY_CATALOG)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DataFormatError) as info:
        read_mo(path)
    assert str(path) in str(info.value) and expected in str(info.value)
    assert "magic number 0x950412de" in str(info.value)


# Packages


@pytest.mark.needs_package("coreutils")
def test_an_installed_package_gives_its_catalog():
    # coreutils is Essential on Debian: always installed.
    paths = package_catalogs("coreutils")
    assert paths == ["/usr/share/locale/de/LC_MESSAGES/coreutils.mo"]
    pairs = load_messages(packages=["coreutils"])
    assert len(pairs) > 500
    assert all(4 <= len(s.split()) <= 30 and s != t for s, t in pairs)
    assert ("write error", "Schreibfehler") not in pairs  # shorter than 4 words


@pytest.mark.needs_package("coreutils")
def test_a_missing_package_names_the_apt_package():
    with pytest.raises(FileNotFoundError, match="apt-get install no-such-package-x"):
        package_catalogs("no-such-package-x")
    with pytest.raises(FileNotFoundError) as info:
        load_messages(packages=["coreutils", "no-such-package-x", "no-such-y"])
    assert "`apt-get install no-such-package-x no-such-y`" in str(info.value)


@pytest.mark.needs_package("coreutils")
def test_a_package_without_the_language_is_reported():
    with pytest.raises(FileNotFoundError, match="no message catalog.*'xx'"):
        package_catalogs("coreutils", language="xx")


def test_packages_must_be_a_list():
    with pytest.raises(TypeError, match="Wrap one name in a list"):
        load_messages(packages="coreutils")


def _fake_packages(monkeypatch, tmp_path, catalogs):
    """Makes `package_catalogs` read the given {package: entries} catalogs."""
    paths = {
        package: [write_mo(tmp_path / f"{package}.mo", entries)]
        for package, entries in catalogs.items()
    }
    monkeypatch.setattr(
        messages, "package_catalogs", lambda package, lang: paths[package]
    )


def test_repeats_across_packages_are_kept_once(monkeypatch, tmp_path):
    _fake_packages(
        monkeypatch,
        tmp_path,
        {
            "first": [
                ("A message of five words", "Eine Meldung"),
                ("Only in first one", "Nur"),
            ],
            "second": [
                ("A message of five words", "Andere"),
                ("Only in the second", "Nur 2"),
            ],
        },
    )
    by_package = messages_by_package(packages=["first", "second"])
    assert [s for s, _, _ in by_package["first"]] == [
        "A message of five words",
        "Only in first one",
    ]
    assert [s for s, _, _ in by_package["second"]] == ["Only in the second"]
    assert load_messages(packages=["second", "first"])[0] == (
        "A message of five words",
        "Andere",
    )


@pytest.fixture
def many_messages(monkeypatch, tmp_path):
    entries = [
        (f"Message number {i} of the test", f"Meldung Nummer {i}") for i in range(300)
    ]
    entries += [
        (f"{i} plural thing here\x00{i} plural things here", f"{i} Ding\x00{i} Dinge")
        for i in range(100)
    ]
    _fake_packages(monkeypatch, tmp_path, {"many": entries})
    return ["many"]


def test_split_is_deterministic_disjoint_and_keeps_plurals_together(many_messages):
    splits = message_splits(packages=many_messages, num_test=50, num_valid=40)
    assert splits == message_splits(packages=many_messages, num_test=50, num_valid=40)
    assert len(splits["test"]) == 50 and 39 <= len(splits["valid"]) <= 40
    assert len(splits["train"]) + len(splits["valid"]) >= 500 - 50 - 2
    sources = {name: {s for s, _ in pairs} for name, pairs in splits.items()}
    assert not sources["test"] & sources["train"]
    assert not sources["test"] & sources["valid"]
    assert not sources["valid"] & sources["train"]

    def numbers(name):
        return {s.split()[0] for s, _ in splits[name] if "plural" in s}

    # No plural message has its singular in one split and its plural in another.
    assert not numbers("test") & numbers("train")
    assert not numbers("valid") & numbers("train")
    other_seed = message_splits(
        packages=many_messages, num_test=50, num_valid=40, seed=1
    )
    assert other_seed["test"] != splits["test"]


def test_too_few_messages_to_split(many_messages):
    with pytest.raises(ValueError, match="received 500 messages.*more than"):
        message_splits(packages=many_messages, num_test=300, num_valid=200)


# Placeholders


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "%s: %d of %lu, %-10s %1$s %5.2f %%",
            ["%s", "%d", "%lu", "%-10s", "%1$s", "%5.2f", "%%"],
        ),
        (
            "%(name)s has %(count)d {0} {name} {}",
            ["%(name)s", "%(count)d", "{0}", "{name}", "{}"],
        ),
        (
            '<b>bold</b> <a href="x">link</a> &amp; &#169;',
            ["<b>", "</b>", '<a href="x">', "</a>", "&amp;", "&#169;"],
        ),
        ("50 % der Dateien", []),  # the space flag is not matched
        ("%<PRIu64> bytes", ["%<PRIu64>"]),
    ],
)
def test_find_placeholders(text, expected):
    assert find_placeholders(text) == expected


def test_mask_and_unmask_round_trip():
    source = "Could not copy <b>%s</b> to %(dest)s: %m (%d%%)"
    masked, placeholders = mask_placeholders(source)
    assert masked == "Could not copy [PH1] [PH2] [PH3] to [PH4] : [PH5] ( [PH6] [PH7] )"
    assert unmask_placeholders(masked, placeholders) == (
        "Could not copy <b> %s </b> to %(dest)s: %m (%d %%)"
    )
    assert placeholders_kept(source, unmask_placeholders(masked, placeholders))


def test_target_placeholders_take_the_source_slots():
    _, placeholders = mask_placeholders("Copy %s to %s: %d")
    # Equal placeholders in order; positional ones by their number.
    assert (
        mask_placeholders("%d: %s nach %s", placeholders)[0]
        == "[PH3] : [PH1] nach [PH2]"
    )
    assert mask_placeholders("%2$s <- %1$s", ["%s", "%s"])[0] == "[PH2] <- [PH1]"
    # One the source lacks stays as it is.
    assert mask_placeholders("%s und {x}", ["%s"])[0] == "[PH1] und {x}"
    # A slot the source has no placeholder for is dropped.
    assert unmask_placeholders("[PH1] und [PH5]", ["%s"]) == "%s und"


def test_tokenizer_keeps_placeholder_slots_whole():
    vocabulary = [
        *SPECIAL_TOKENS,
        "copy",
        "to",
        ":",
        "(",
        ")",
        "[",
        "]",
        "PH",
        "##1",
        *PLACEHOLDER_TOKENS,
    ]
    tokenizer = word_piece_tokenizer(vocabulary)
    masked, placeholders = mask_placeholders("copy %(name)s to %s:")
    ids = tokenizer(masked)
    tokens = [tokenizer.id_to_token(int(i)) for i in ids]
    assert tokens == ["copy", "[PH1]", "to", "[PH2]", ":"]
    text = tokenizer.detokenize(ids)
    text = text.numpy().decode() if hasattr(text, "numpy") else str(text)
    assert unmask_placeholders(text, placeholders) == "copy %(name)s to %s:"
    # Without the slots in its vocabulary a tokenizer splits them as before.
    plain = word_piece_tokenizer(vocabulary[: -len(PLACEHOLDER_TOKENS)])
    assert len(plain("[PH1]")) == 4


def test_placeholder_accuracy():
    sources = ["Copy %s to %s", "<b>%d</b> files", "No placeholders here", "%s"]
    translations = ["%s nach %s kopieren", "<b>%s</b> Dateien", "Keine hier", "%s %s"]
    assert placeholder_accuracy(sources, translations) == 0.5
    with pytest.raises(ValueError, match="2 sources and 1 translations"):
        placeholder_accuracy(sources[:2], translations[:1])
