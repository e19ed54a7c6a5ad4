"""tests/schedule.py: the order the end-to-end job hands its tests to xdist's workers."""

from __future__ import annotations

import re

import pytest

from . import paths, schedule


class Item:
    """What order() reads of a collected test: its node id, fixtures and xdist group."""

    def __init__(self, nodeid: str, fixtures=(), group: str | None = None):
        self.nodeid, self.fixturenames, self.group = nodeid, list(fixtures), group

    def get_closest_marker(self, name):
        return pytest.mark.xdist_group(self.group).mark if name == "xdist_group" and self.group else None


def test_every_long_test_named_is_a_test_of_its_file():
    for test in schedule.LONG_S:
        path, function = test.split("::")
        source = (paths.REPO / path).read_text()
        assert re.search(rf"^def {re.escape(function)}\(", source, re.M), test


def test_long_tests_first_then_the_dags_readers_then_the_rest_with_groups_kept_in_order(monkeypatch):
    monkeypatch.setattr(schedule, "LONG_S", {"t.py::long": 50.0, "t.py::longer": 90.0, "t.py::reader": 10.0,
                                             "t.py::g2": 200.0})
    items = [Item("t.py::short1"), Item("t.py::g1", ["micro_dag"], "g"), Item("t.py::long[a]"),
             Item("t.py::reader", ["micro_dag"]), Item("t.py::g2", group="g"), Item("t.py::longer"),
             Item("t.py::short2"), Item("t.py::long[b]"), Item("t.py::other_reader", ["micro_dag"])]
    schedule.order(items)
    assert [i.nodeid for i in items] == [
        "t.py::longer", "t.py::long[a]", "t.py::long[b]",            # long, not reading the DAG: longest first
        "t.py::g1", "t.py::g2", "t.py::reader", "t.py::other_reader",  # the DAG's readers (a group: in its order)
        "t.py::short1", "t.py::short2"]                                # the rest as collected
