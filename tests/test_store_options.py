"""The store family's options: parsing, errors naming the option, parametrized ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.families.store import options


@given(st.lists(st.sampled_from(["libuv", "legacy", "LIBUV", " legacy "]), min_size=1))
def test_backend_lists_parse_in_order_without_duplicates(names):
    parsed = options._store_backends(",".join(names))
    assert parsed == list(dict.fromkeys(n.strip().lower() for n in names))


@pytest.mark.parametrize("text", ["", "uv", "libuv,,legacy", "legacy,tcp"])
def test_bad_backend_is_an_error(text):
    with pytest.raises(ValueError):
        options._store_backends(text)


def test_bad_option_stops_the_run_naming_it(pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--distbench", "--distbench-store-backend=uv")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--distbench-store-backend*unknown store backend 'uv'*"])
    result = pytester.runpytest_subprocess("--distbench", "--distbench-store-clients=0")
    result.stderr.fnmatch_lines(["*--distbench-store-clients*positive integer*"])
