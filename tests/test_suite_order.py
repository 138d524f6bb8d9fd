"""The order the suite runs its files in (tests/conftest.py, ``run_order``): the files listed in
SLOW_FILES_FIRST exist (a renamed one would silently fall back behind the others), and the run goes
from those through the rest of the e2e tier and the integration tier to the unit tier, so that it
ends on files of seconds and neither pytest-xdist worker runs minutes alone after the other is done."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT, SLOW_FILES_FIRST, run_order


def test_the_slow_files_listed_first_exist() -> None:
    missing = [path for path in SLOW_FILES_FIRST if not (REPO_ROOT / path).is_file()]
    assert not missing, missing
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)


def test_the_run_goes_from_the_slow_files_through_the_tiers() -> None:
    listed = [run_order(path) for path in SLOW_FILES_FIRST]
    assert listed == sorted(listed) and len(set(listed)) == len(listed)  # in the listed order
    other_e2e = run_order("tests/test_demo.py")
    integration = run_order("tests/gc/test_sweep.py")
    unit = run_order("tests/format/test_ids.py")
    assert max(listed) < other_e2e < integration < unit
    assert run_order("tests/no_such_dir/test_new.py") == unit  # unlisted: unit, as its tier


def test_the_collected_items_follow_the_run_order(request: pytest.FixtureRequest) -> None:
    """This run's own collection (whatever it selected) is in that order."""
    keys = [run_order(item.nodeid.split("::", 1)[0]) for item in request.session.items]
    assert keys == sorted(keys)
