import pytest

from rig import units


@pytest.mark.parametrize("text,want", [("50ms", 0.05), ("0ms", 0.0), ("1.5s", 1.5),
                                       ("250us", 250e-6), ("2min", 120.0)])
def test_duration(text, want):
    assert units.parse_duration(text) == pytest.approx(want)


@pytest.mark.parametrize("text,want", [("10gbit", 10e9), ("1Gbit", 1e9), ("100mbit", 1e8),
                                       ("400Gbps", 400e9)])
def test_rate(text, want):
    assert units.parse_rate(text) == pytest.approx(want)


@pytest.mark.parametrize("text,want", [("256MiB", 256 << 20), ("1GiB", 1 << 30), ("10GB", 10**10),
                                       ("4096", 4096), ("64KiB", 65536)])
def test_size(text, want):
    assert units.parse_size(text) == want


@pytest.mark.parametrize("text,want", [("1.5%", 0.015), ("0%", 0.0), ("0.01", 0.01)])
def test_fraction(text, want):
    assert units.parse_fraction(text) == pytest.approx(want)


@pytest.mark.parametrize("fn,bad", [(units.parse_duration, "50 parsecs"),
                                    (units.parse_duration, "fast"),
                                    (units.parse_rate, "10gbyte/s"),
                                    (units.parse_size, "1.5B"),
                                    (units.parse_fraction, "150%"),
                                    (units.parse_size, True)])
def test_bad_units_raise(fn, bad):
    with pytest.raises(ValueError):
        fn(bad)
