import datetime
import re

import pytest

from keras_attention.data import dates
from keras_attention.data.dates import (
    DATE_FORMATS,
    date_splits,
    format_date,
    generate_date_pairs,
)


def _parse_iso(target):
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", target), target
    return datetime.date.fromisoformat(target)


def test_formats_are_many_and_distinct():
    assert len(DATE_FORMATS) >= 12
    assert len(set(DATE_FORMATS)) == len(DATE_FORMATS)


@pytest.mark.parametrize(
    "date_format, expected",
    [
        ("{d} {Month} {yyyy}", "3 March 2021"),
        ("{dd} {Mon} {yyyy}", "03 Mar 2021"),
        ("{Wkd} {mm}/{dd}/{yy}", "Wed 03/03/21"),
        ("{month} {dth}, {yyyy}", "march 3rd, 2021"),
        ("{d}.{m}.{yyyy}", "3.3.2021"),
        ("{Weekday}, {Month} {d}, {yyyy}", "Wednesday, March 3, 2021"),
        ("{yyyy}/{mm}/{dd}", "2021/03/03"),
        ("{MONTH} {d} {yyyy}", "MARCH 3 2021"),
        ("{dth} of {Month} {yyyy}", "3rd of March 2021"),
        ("{dd}-{mm}-{yyyy}", "03-03-2021"),
    ],
)
def test_format_date(date_format, expected):
    assert date_format in DATE_FORMATS
    assert format_date(datetime.date(2021, 3, 3), date_format) == expected


@pytest.mark.parametrize(
    "day, expected",
    [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th")]
    + [(13, "13th"), (21, "21st"), (22, "22nd"), (23, "23rd"), (30, "30th")],
)
def test_ordinals(day, expected):
    date = datetime.date(1999, 1, day)
    assert format_date(date, "{dth}") == expected


def test_every_format_reads_back_to_one_date():
    # Over a sample of dates in every format, no source maps to two targets,
    # and each source holds the day, the month and the year of its target.
    sources = {}
    for offset in range(0, 36525, 97):
        date = dates.FIRST_DATE + datetime.timedelta(days=offset)
        for date_format in DATE_FORMATS:
            source = format_date(date, date_format)
            assert sources.setdefault(source, date) == date, source
            assert str(date.day) in source
            year = str(date.year)
            assert year in source or year[2:] in source


def test_generate_date_pairs():
    pairs = generate_date_pairs(300, seed=3)
    assert len(pairs) == 300
    assert len(set(pairs)) == 300
    assert pairs == generate_date_pairs(300, seed=3)
    assert pairs != generate_date_pairs(300, seed=4)
    for source, target in pairs:
        date = _parse_iso(target)
        assert dates.FIRST_DATE <= date <= dates.LAST_DATE
        assert re.search(rf"(?<!\d)0?{date.day}(?!\d)", source), (source, target)
        assert source in {format_date(date, f) for f in DATE_FORMATS}


@pytest.mark.parametrize("year", [1950, 1999, 2000, 2007, 2049])
def test_two_digit_years(year):
    # yy means 19yy for yy >= 50 and 20yy otherwise: one year per yy.
    date = datetime.date(year, 5, 17)
    yy = format_date(date, "{Wkd} {mm}/{dd}/{yy}")[-2:]
    assert int(yy) == year % 100
    assert (1900 if int(yy) >= 50 else 2000) + int(yy) == year


def test_date_splits_sizes_and_held_out_dates():
    splits = date_splits(num_train=400, num_valid=50, num_test=80, seed=1)
    assert {name: len(pairs) for name, pairs in splits.items()} == {
        "train": 400,
        "valid": 50,
        "test": 80,
    }
    train_dates = {target for _, target in splits["train"]}
    valid_dates = {target for _, target in splits["valid"]}
    test_dates = {target for _, target in splits["test"]}
    assert not train_dates & valid_dates
    assert not train_dates & test_dates
    assert not valid_dates & test_dates
    assert splits == date_splits(num_train=400, num_valid=50, num_test=80, seed=1)
    assert splits != date_splits(num_train=400, num_valid=50, num_test=80, seed=2)


def test_date_splits_default_sizes():
    splits = date_splits()
    assert [len(splits[name]) for name in ("train", "valid", "test")] == [
        20000,
        1000,
        2000,
    ]
    train_dates = {target for _, target in splits["train"]}
    assert not train_dates & {target for _, target in splits["test"]}


@pytest.mark.parametrize("num_pairs", [0, -1, 2.5, True])
def test_bad_num_pairs(num_pairs):
    with pytest.raises(ValueError, match="num_pairs"):
        generate_date_pairs(num_pairs)


def test_too_many_pairs():
    with pytest.raises(ValueError, match="distinct"):
        generate_date_pairs(10**7)
