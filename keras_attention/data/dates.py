"""A generated date-normalisation task: human-written dates to ISO 8601.

Every source is one date written in one of `DATE_FORMATS` ("3 March 2021",
"Tue 03/02/21", "march 3rd, 2021", ...) and its target is the same date as
`YYYY-MM-DD`. Dates range over 1950-01-01 .. 2049-12-31, so a two-digit year
`yy` always means `19yy` if `yy >= 50` and `20yy` otherwise, and every format
reads back to exactly one date: a model can learn the mapping from examples.

Names of months and weekdays are spelled out here in English rather than taken
from `calendar.month_name`, which follows the process locale.
"""

import datetime

import numpy as np

from keras_attention._checks import check_positive_int

FIRST_DATE = datetime.date(1950, 1, 1)
LAST_DATE = datetime.date(2049, 12, 31)

MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAY_NAMES = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)

# Each format is a `str.format` template over the fields of `_date_fields`:
#   {d} {dd}  day (3, 03)         {dth}  ordinal day (3rd)
#   {m} {mm}  month (3, 03)       {yy} {yyyy}  year (21, 2021)
#   {Month} {month} {MONTH} {Mon} {mon} {MON}  month names (March ... MAR)
#   {Weekday} {weekday} {WEEKDAY} {Wkd} {wkd}  weekday names (Tuesday ... tue)
# Numeric formats follow one rule per separator, so none is ambiguous: a year
# written first is followed by month then day; a `/` with the year last is the
# US order month/day; `.` and `-` with the year last are day.month.
DATE_FORMATS = (
    "{d} {Month} {yyyy}",  # 3 March 2021
    "{dd} {Mon} {yyyy}",  # 03 Mar 2021
    "{Wkd} {mm}/{dd}/{yy}",  # Wed 03/03/21
    "{month} {dth}, {yyyy}",  # march 3rd, 2021
    "{d}.{m}.{yyyy}",  # 3.3.2021
    "{Weekday}, {Month} {d}, {yyyy}",  # Wednesday, March 3, 2021
    "{yyyy}/{mm}/{dd}",  # 2021/03/03
    "{MONTH} {d} {yyyy}",  # MARCH 3 2021
    "{dth} of {Month} {yyyy}",  # 3rd of March 2021
    "{dd}-{mm}-{yyyy}",  # 03-03-2021
    "{Mon} {d}, {yyyy}",  # Mar 3, 2021
    "{d} {MON} {yy}",  # 3 MAR 21
    "{wkd} {dth} {month} {yy}",  # wed 3rd march 21
    "{Wkd}, {d} {Mon} {yyyy}",  # Wed, 3 Mar 2021
    "{m}/{d}/{yyyy}",  # 3/3/2021
    "{dd}.{mm}.{yy}",  # 03.03.21
    "{WEEKDAY} {d} {MONTH} {yyyy}",  # WEDNESDAY 3 MARCH 2021
    "{yyyy}-{m}-{d}",  # 2021-3-3
    "{Month} {yyyy}, {dth}",  # March 2021, 3rd
    "{weekday}, {d} {month} {yyyy}",  # wednesday, 3 march 2021
    "{mon} {dd} {yy}",  # mar 03 21
)


def _ordinal(day):
    if 10 <= day % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _date_fields(date):
    month = MONTH_NAMES[date.month - 1]
    weekday = WEEKDAY_NAMES[date.weekday()]
    return {
        "d": str(date.day),
        "dd": f"{date.day:02d}",
        "dth": _ordinal(date.day),
        "m": str(date.month),
        "mm": f"{date.month:02d}",
        "yy": f"{date.year % 100:02d}",
        "yyyy": str(date.year),
        "Month": month,
        "month": month.lower(),
        "MONTH": month.upper(),
        "Mon": month[:3],
        "mon": month[:3].lower(),
        "MON": month[:3].upper(),
        "Weekday": weekday,
        "weekday": weekday.lower(),
        "WEEKDAY": weekday.upper(),
        "Wkd": weekday[:3],
        "wkd": weekday[:3].lower(),
    }


def format_date(date, date_format):
    """Writes a date in one of `DATE_FORMATS`.

    Args:
        date: a `datetime.date` between 1950-01-01 and 2049-12-31.
        date_format: a template from `DATE_FORMATS`.

    Returns:
        The date as a string, e.g. `"Wed 03/03/21"`.
    """
    return date_format.format(**_date_fields(date))


def _num_days():
    return (LAST_DATE - FIRST_DATE).days + 1


def _pairs_from_pool(rng, day_pool, num_pairs, split):
    """Draws `num_pairs` distinct (date, format) pairs whose dates are in
    `day_pool` (day offsets from `FIRST_DATE`)."""
    num_formats = len(DATE_FORMATS)
    num_combinations = len(day_pool) * num_formats
    if num_pairs > num_combinations:
        raise ValueError(
            f"Cannot draw {num_pairs} distinct {split} pairs from "
            f"{len(day_pool)} dates in {num_formats} formats "
            f"({num_combinations} combinations); request fewer pairs."
        )
    picks = rng.choice(num_combinations, size=num_pairs, replace=False)
    pairs = []
    for pick in picks.tolist():
        offset = int(day_pool[pick // num_formats])
        date = FIRST_DATE + datetime.timedelta(days=offset)
        source = format_date(date, DATE_FORMATS[pick % num_formats])
        pairs.append((source, date.isoformat()))
    return pairs


def generate_date_pairs(num_pairs, seed=0):
    """Generates human-written dates and their ISO 8601 forms.

    Dates are drawn uniformly from 1950-01-01 .. 2049-12-31 and formats
    uniformly from `DATE_FORMATS`; no (date, format) pair repeats.

    Args:
        num_pairs: number of pairs.
        seed: random seed (the pairs are deterministic given it).

    Returns:
        A list of `(source, target)` string tuples, e.g.
        `("march 3rd, 2021", "2021-03-03")`.

    Example:

    >>> generate_date_pairs(2, seed=1)
    [('08-07-2025', '2025-07-08'), ('8.3.2001', '2001-03-08')]
    """
    check_positive_int("num_pairs", num_pairs)
    rng = np.random.default_rng(seed)
    return _pairs_from_pool(rng, np.arange(_num_days()), num_pairs, "date")


def date_splits(num_train=20000, num_valid=1000, num_test=2000, seed=0):
    """Train, validation and test splits of the date task, held out by date.

    The calendar dates are shuffled and partitioned in proportion to the
    requested sizes, so no target date of the validation or test split occurs
    in the training split: the test measures generalisation to unseen dates,
    not recall of seen ones.

    Args:
        num_train: number of training pairs.
        num_valid: number of validation pairs.
        num_test: number of test pairs.
        seed: random seed (the splits are deterministic given it).

    Returns:
        A dict `{"train": [...], "valid": [...], "test": [...]}` of lists of
        `(source, target)` tuples with exactly the requested sizes.
    """
    check_positive_int("num_train", num_train)
    check_positive_int("num_valid", num_valid)
    check_positive_int("num_test", num_test)
    rng = np.random.default_rng(seed)
    num_days = _num_days()
    total = num_train + num_valid + num_test
    num_test_days = max(1, round(num_days * num_test / total))
    num_valid_days = max(1, round(num_days * num_valid / total))
    if num_test_days + num_valid_days >= num_days:
        raise ValueError(
            f"Too many held-out pairs: num_valid={num_valid} and "
            f"num_test={num_test} leave no dates for num_train={num_train}."
        )
    days = rng.permutation(num_days)
    pools = {
        "test": days[:num_test_days],
        "valid": days[num_test_days : num_test_days + num_valid_days],
        "train": days[num_test_days + num_valid_days :],
    }
    sizes = {"train": num_train, "valid": num_valid, "test": num_test}
    return {
        split: _pairs_from_pool(rng, pools[split], sizes[split], split)
        for split in ("train", "valid", "test")
    }
