import pytest

from rig.description import units


@pytest.mark.parametrize("text,want", [("50ms", 0.05), ("0ms", 0.0), ("1.5s", 1.5),
                                       ("250us", 250e-6), ("2min", 120.0)])
def test_duration(text, want):
    assert units.parse_duration(text) == pytest.approx(want)


@pytest.mark.parametrize("text,want", [("10gbit", 10e9), ("1Gbit", 1e9), ("100mbit", 1e8),
                                       ("400GBIT", 400e9)])
def test_rate(text, want):
    assert units.parse_rate(text) == pytest.approx(want)


@pytest.mark.parametrize("text,want", [("256MiB", 256 << 20), ("1GiB", 1 << 30), ("10GB", 10**10),
                                       ("4096B", 4096), ("64KiB", 65536)])
def test_size(text, want):
    assert units.parse_size(text) == want


@pytest.mark.parametrize("text,want", [("1.5%", 0.015), ("0%", 0.0), (0, 0.0), ("0", 0.0)])
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


@pytest.mark.parametrize("fn,bad,words", [
    (units.parse_size, "256Mib", "write 'MiB'"),           # mebibits, not bytes
    (units.parse_size, "256mib", "write 'MiB'"),
    (units.parse_size, "4mb", "write 'MB' (10^6 bytes) or 'MiB'"),
    (units.parse_size, "4KB", "write 'kB' (10^3 bytes) or 'KiB'"),
    (units.parse_size, "4M", "write 'MB'"),
    (units.parse_size, "8b", "write 'B' for bytes"),
    (units.parse_rate, "100mbps", "write '100mbit' for bits per second"),  # tc: megaBYTES/s
    (units.parse_rate, "10Gbps", "write '10gbit'"),
    (units.parse_rate, "1000", "add a unit"),
    (units.parse_rate, 1000, "add a unit"),
    (units.parse_rate, "10G", "write '10gbit'"),
    (units.parse_duration, "50MS", "write 'ms'"),
    (units.parse_duration, "1e400s", "not finite"),
    (units.parse_rate, "1e400gbit", "not finite"),
    (units.parse_size, "1e400MiB", "not finite"),
    (units.parse_size, 10**400, "not finite"),
    (units.parse_size, float("inf"), "not finite"),
    (units.parse_fraction, float("nan"), "not finite"),
    (units.parse_fraction, 0.5, "write a percentage, '50%' for 0.5 as a fraction or '0.5%'"),
    (units.parse_fraction, "0.01", "'1%' for 0.01 as a fraction or '0.01%'"),
    (units.parse_fraction, -0.5, "not negative"),
    (units.parse_fraction, "-0.5%", "must be between 0% and 100%: not negative"),
    (units.parse_duration, "1" * 10**6 + "s", "too long"),
])
def test_traps_are_refused_with_what_to_write(fn, bad, words):
    with pytest.raises(ValueError) as e:
        fn(bad)
    assert words in str(e.value) and len(str(e.value)) < 200, str(e.value)


def test_huge_unit_is_not_echoed():
    with pytest.raises(ValueError) as e:
        units.parse_size("1" + "x" * 60)
    assert len(str(e.value)) < 120
