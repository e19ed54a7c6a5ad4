"""The end-to-end job's schedule (tests/schedule.py) on constructed items with a known order."""

from __future__ import annotations

from types import SimpleNamespace

from . import schedule


class Item(SimpleNamespace):
    def get_closest_marker(self, name):
        if name == "xdist_group" and self.group:
            return SimpleNamespace(args=(self.group,), kwargs={})
        return None


def item(nodeid, *, dag=False, group=None):
    return Item(nodeid=nodeid, fixturenames=("tmp_path", "micro_dag") if dag else ("tmp_path",), group=group)


def test_groups_that_build_the_dag_first_then_long_tests_then_dag_readers_each_with_a_short_one():
    items = [item("t.py::short_a"), item("t.py::dag_short", dag=True), item("t.py::long_free"),
             item("t.py::short_b"), item("d.py::adopt@dvc", dag=True, group="dvc"), item("t.py::dag_long", dag=True),
             item("d.py::repro@dvc", dag=True, group="dvc"), item("t.py::short_c")]
    seconds = {"t.py::long_free": 90, "t.py::dag_long": 120, "t.py::dag_short": 15, "d.py::adopt": 100,
               "d.py::repro": 80, "t.py::short_a": 5, "t.py::short_b": 8, "t.py::short_c": 1}
    got = [i.nodeid for i in schedule.order(items, seconds)]
    assert got == ["d.py::adopt@dvc", "d.py::repro@dvc",  # the group, whole, in its file order
                   "t.py::long_free",                    # long, needs no DAG: runs while it trains
                   "t.py::dag_long", "t.py::short_b",    # each DAG reader followed by a short test
                   "t.py::dag_short", "t.py::short_a",
                   "t.py::short_c"]                      # the rest, longest first


def test_an_unlisted_test_counts_as_unknown_and_a_group_suffix_is_not_part_of_its_name():
    assert schedule.plain("tests/test_dvc.py::test_x@dvc") == "tests/test_dvc.py::test_x"
    assert schedule.plain("tests/t.py::test_y[a-b]") == "tests/t.py::test_y[a-b]"
    items = [item("t.py::listed"), item("t.py::unlisted")]
    got = schedule.order(items, {"t.py::listed": schedule.UNKNOWN_S - 1})
    assert [i.nodeid for i in got] == ["t.py::unlisted", "t.py::listed"]


def test_durations_come_from_a_junit_record(tmp_path):
    xml = tmp_path / "e2e.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="tests.infra.test_slurm" name="test_a" time="12.34"/>'
                   '<testcase classname="tests.test_dvc" name="test_b@dvc" time="3"/></testsuite></testsuites>')
    assert schedule.from_junit(xml) == {"tests/infra/test_slurm.py::test_a": 12.3, "tests/test_dvc.py::test_b": 3.0}


def test_the_committed_durations_name_tests_that_exist(request):
    """A stale file only reorders; but a name in it that no test has is a rename it missed."""
    listed = schedule.durations()
    assert listed, schedule.DURATIONS
    root = request.config.rootpath
    for nodeid in listed:
        path = nodeid.split("::", 1)[0]
        assert (root / path).is_file(), f"{schedule.DURATIONS}: {nodeid}: no such file; rewrite it (tests/schedule.py)"


def test_order_keeps_collection_order_among_equals():
    items = [item("t.py::b"), item("t.py::a"), item("t.py::c")]
    assert [i.nodeid for i in schedule.order(items, {})] == ["t.py::b", "t.py::a", "t.py::c"]
