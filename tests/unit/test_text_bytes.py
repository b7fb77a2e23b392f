"""kldtui.text.human_bytes: the one rule every byte amount a user reads is written by (disk plans,
free space, memory needs, model and head sizes, publish sizes, errors, progress lines). It wrote
GiB to one decimal in some places ("0.0 GiB" for a small run), three significant digits in others,
"bytes" or "B" below 1 KiB; now three significant digits in the binary unit that shows the amount."""

from __future__ import annotations

import pytest

from kldtui.text import done_of_total, human_bytes, human_count

KIMI_SUITE = 163840 * 2047 * 32 * 4  # 32 windows of 2,047 F32 rows at a 163,840 vocabulary


@pytest.mark.parametrize(("nbytes", "shown"), [
    (0, "0 B"),
    (1, "1 B"),
    (1023, "1023 B"),  # whole bytes below 1 KiB
    (1024, "1.00 KiB"),
    (4186112, "3.99 MiB"),  # a demo window (it read 4.0 MiB, one decimal)
    (int(18.8 * 2**20), "18.8 MiB"),  # the hidden demo's campaign
    (int(1.234 * 2**30), "1.23 GiB"),
    (40 * 2**30, "40.0 GiB"),
    (KIMI_SUITE, "40.0 GiB"),  # 39.98 GiB
    (163 * 2**30, "163 GiB"),
    (1000 * 2**30, "1000 GiB"),  # under 1024: still GiB, whole
    (2**40, "1.00 TiB"),
    (2**50, "1.00 PiB"),
    (2**60, "1024 PiB"),  # PiB the largest unit
])
def test_a_byte_amount_reads_in_three_significant_digits_from_bytes_to_pib(nbytes: int, shown: str) -> None:
    assert human_bytes(nbytes) == shown


@pytest.mark.parametrize(("nbytes", "shown"), [
    (1023.6, "1.00 KiB"),  # rounds to 1024 B: the next unit's 1.00, not "1024 B"
    (1023.7 * 2**10, "1.00 MiB"),  # likewise "1024 KiB"
    (9.996 * 2**20, "10.0 MiB"),  # not "10.00 MiB" (four digits)
    (99.96 * 2**30, "100 GiB"),  # not "100.0 GiB"
    (-2048, "-2.00 KiB"),
])
def test_rounding_never_shows_four_significant_digits_or_1024_of_a_unit(nbytes: float, shown: str) -> None:
    assert human_bytes(nbytes) == shown


def test_a_small_amount_never_reads_as_zero() -> None:
    """What the capture's disk note said of the hidden demo ("0.0 GiB"): any amount above 0 shows."""
    for nbytes in (1, 100, 5000, 2**20, 24 * 8 * 2047 * 64):
        number = human_bytes(nbytes).split()[0]
        assert float(number) > 0, human_bytes(nbytes)


def test_a_progress_line_keeps_the_unit_once() -> None:
    assert done_of_total(2 * 2**20, 4186112, "bytes") == "2.00/3.99 MiB"
    assert done_of_total(512, 4186112, "bytes") == "512 B/3.99 MiB"


@pytest.mark.parametrize(("count", "shown"), [
    (0, "0"),
    (999, "999"),  # whole below 1,000
    (1000, "1 K"),
    (1499, "1.5 K"),
    (999_499, "999 K"),
    (999_500, "1 M"),  # rounds to 1000 K: the next unit's 1
    (999_999_999, "1 B"),  # it read "1000 M": the unit was picked before rounding
    (8_030_261_248, "8.03 B"),
    (671_026_419_712, "671 B"),
    (1_200_000_000_000, "1.2 T"),
    (999_999_999_999_999, "1000 T"),  # T the largest unit
])
def test_a_count_reads_in_the_unit_its_rounded_figure_fits_as_bytes_do(count: int, shown: str) -> None:
    assert human_count(count) == shown
    from kldtui.formats.model_size import given

    if count:  # a model's description says its parameters so
        assert f", {shown} parameters, " in given(parameters=count, bits_per_weight=4.5).describe()
