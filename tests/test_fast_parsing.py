"""The two shortcuts every params load takes (kernattn.yaml_text, kernattn.type_hints): they
must give what the slow paths they replace give."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import yaml

from kernattn.config.lm import LMParams
from kernattn.config.schema import build
from kernattn.type_hints import type_hints
from kernattn.yaml_text import SAFE_DUMPER, SAFE_LOADER, safe_dump, safe_load
from tests import paths

DOCUMENTS = [paths.REPO / "params.yaml", paths.REPO / "src/kernattn/report/paper_numbers.yaml",
             paths.REPO / "profiles/slurm/config.yaml", paths.REPO / "src/kernattn/datasets/catalogue.yaml"]


def test_libyaml_is_what_reads_and_writes_here():
    assert yaml.__with_libyaml__ and SAFE_LOADER is yaml.CSafeLoader and SAFE_DUMPER is yaml.CSafeDumper


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_libyaml_reads_the_shipped_documents_as_pyyaml_does(path):
    text = path.read_text()
    assert safe_load(text) == yaml.safe_load(text)


def test_what_libyaml_writes_reads_back_as_the_same_document():
    doc = yaml.safe_load((paths.REPO / "params.yaml").read_text())
    assert yaml.safe_load(safe_dump(doc, sort_keys=False)) == doc
    assert list(safe_load(safe_dump(doc, sort_keys=False))) == list(doc)  # the order kept


def test_a_syntax_error_is_still_a_yaml_error_with_its_line():
    with pytest.raises(yaml.YAMLError) as err:
        safe_load("a: 1\nb: [2\n")
    assert err.value.problem_mark.line >= 1


@dataclasses.dataclass(frozen=True)
class _Inner:
    x: int = 1


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    names: tuple[str, ...] = ()
    scale: float | None = None


def test_type_hints_are_typing_s_resolved_once_per_class():
    assert type_hints(_Outer) == typing.get_type_hints(_Outer) == {
        "inner": _Inner, "names": tuple[str, ...], "scale": float | None}
    assert type_hints(_Outer) is type_hints(_Outer)
    assert type_hints(LMParams) == typing.get_type_hints(LMParams)


def test_the_schema_builds_with_the_resolved_hints():
    built = build(_Outer, {"inner": {"x": 3}, "names": ["a"], "scale": 2}, "outer", "test.yaml")
    assert built == _Outer(_Inner(3), ("a",), 2.0)
