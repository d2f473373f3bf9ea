"""The walk's memo: a followed call's walk stands for the next call with the same arguments while nothing it
read or wrote has changed since, and only then (what it must find is in the `memo_*` fixtures, run under
real spawn by test_spawn_ground_truth; here, how often the walk goes into a function, and what it finds)."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check

HEAD = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"


class Case(NamedTuple):
    """A script (after HEAD), the calls its walk follows, the findings (rule, line), and why."""

    name: str
    script: str
    calls_followed: int
    findings: list[tuple[str, int]]
    why: str


CASES = [
    Case("a_memo_stands_across_statements_that_change_nothing_its_walk_read",
        "SETTINGS = {'num_workers': 2}\n\n\ndef make():\n"
        "    return DataLoader(TensorDataset(torch.arange(8.0)), **SETTINGS)\n\n\nfirst = make()\n"
        "count = 1\nsecond = make()\ncount = 2\nthird = make()\nfor batch in third:\n    pass\n",
        1, [('SPW001', 16)],
        "module-level assignments of other names between the calls (each one forgot every memo before)"),
    Case("a_write_to_what_the_walk_read_makes_the_next_call_walk_again",
        "SETTINGS = {'num_workers': 0}\n\n\ndef make():\n"
        "    return DataLoader(TensorDataset(torch.arange(8.0)), **SETTINGS)\n\n\nfirst = make()\n"
        "second = make()\nSETTINGS['num_workers'] = 2\nthird = make()\nfor batch in third:\n    pass\n",
        2, [('SPW001', 15)],
        "the settings it reads are written between the second and third call"),
    Case("a_walk_that_read_what_it_changed_itself_is_walked_every_time",
        "CACHE = {}\n\n\ndef make():\n    if 'train' not in CACHE:\n"
        "        CACHE['train'] = DataLoader(TensorDataset(torch.arange(8.0)), num_workers=2)\n"
        "    return CACHE['train']\n\n\nfirst = make()\nsecond = make()\nthird = make()\n",
        3, [],
        "`CACHE` looked up and then set: the next call takes the other way, so no memo may stand for it"),
    Case("packed_arguments_count_by_what_they_hold",
        "def make(**options):\n    return DataLoader(TensorDataset(torch.arange(8.0)), **options)\n\n\n"
        "a = make(batch_size=2)\nb = make(batch_size=2)\nc = make(num_workers=2)\nfor batch in c:\n"
        "    pass\n",
        2, [('SPW001', 11)],
        "`**options` is made for each call: the same options are the same walk, other options another"),
    Case("an_attribute_set_on_the_object_after_a_call_makes_its_method_walk_again",
        "class Data:\n    def __init__(self):\n        self.workers = 0\n\n    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "data = Data()\nfirst = data.loader()\nsecond = data.loader()\ndata.workers = 2\n"
        "for batch in data.loader():\n    pass\n",
        3, [('SPW001', 16)],
        "__init__, and loader() before and after the attribute changed"),
    Case("a_new_object_made_with_the_same_arguments_takes_the_attributes_the_first_one_was_left_with",
        "class Data:\n    def __init__(self, workers):\n        self.workers = workers\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "serial = Data(0)\nfirst = Data(2)\nsecond = Data(2)\nfor batch in second.loader():\n    pass\n",
        3, [('SPW001', 15)],
        "two constructions walked, the third taken from the memo, then loader()"),
    Case("an_attribute_naming_the_first_object_names_the_new_one",
        "class Maker:\n    def __init__(self, workers):\n        self.workers = workers\n"
        "        self.build = self.loader\n\n    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "a = Maker(0)\nb = Maker(0)\nb.workers = 2\nfor batch in b.build():\n    pass\n",
        2, [('SPW001', 16)],
        "`self.build = self.loader`: the new object's bound method is its own, and reads its own count"),
    Case("a_constructor_that_changes_what_was_there_before_is_walked_for_each_object",
        "LAST = None\n\n\nclass Data:\n    def __init__(self, workers):\n        global LAST\n"
        "        self.workers = workers\n        LAST = self\n\n    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "a = Data(0)\nb = Data(0)\nb.workers = 2\nfor batch in LAST.loader():\n    pass\n",
        3, [('SPW001', 20)],
        "`LAST = self`: each new object is the last one made, which no memo of the first construction says"),
    Case("a_change_to_an_object_the_first_construction_made_walks_the_next_one_again",
        "class Settings:\n    def __init__(self):\n        self.workers = 0\n\n\nclass Box:\n"
        "    def __init__(self):\n        self.settings = Settings()\n\n    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.settings.workers)\n\n"
        "\na = Box()\na.settings.workers = 2\nb = Box()\nfor batch in b.loader():\n    pass\n",
        4, [],
        "the new object would share the first one's settings object, changed since: Box() is walked again "
        "(Settings() from the memo), so its settings stay serial"),
    Case("a_change_to_a_dict_the_first_construction_made_walks_the_next_one_again",
        "class Box:\n    def __init__(self):\n        self.settings = {'num_workers': 0}\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), **self.settings)\n\n\na = Box()\n"
        "a.settings['num_workers'] = 2\nb = Box()\nfor batch in b.loader():\n    pass\n",
        3, [],
        "the same with the settings in a dict"),
    Case("attributes_read_off_an_unknown_config_are_as_unknown_as_it_is",
        "import json\n\ncfg = json.loads('{}')\n\n\ndef make(section):\n"
        "    return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=2)\n\n\n"
        "train = make(cfg.train)\nvalid = make(cfg.data.valid)\nfor batch in valid:\n    pass\n",
        1, [('SPW001', 15)],
        "`cfg.train` and `cfg.data.valid` of a config the walk cannot read are two unknown values: one walk"),
    Case("a_method_handed_on_counts_by_its_object_and_is_walked_again_when_the_object_changes",
        "class Data:\n    def __init__(self, workers):\n        self.workers = workers\n\n    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "def run(factory):\n    return factory()\n\n\n"
        "data = Data(0)\nfirst = run(data.loader)\nsecond = run(data.loader)\ndata.workers = 2\n"
        "for batch in run(data.loader):\n    pass\n",
        5, [('SPW001', 20)],
        "__init__; run() and loader() for the first call, the memo for the second, both again after the count "
        "changed"),
    Case("one_of_two_objects_a_call_made_and_changed_since_makes_the_next_call_walk_again",
        "import sys\n\n\nclass A:\n    workers = 0\n\n    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "class B(A):\n    pass\n\n\ndef make():\n    return A() if len(sys.argv) > 1 else B()\n\n\n"
        "x = make()\nx.workers = 2\ny = make()\nfor batch in y.loader():\n    pass\n",
        4, [],
        "make() returns one of two new objects; the first call's objects changed, so the second call is walked "
        "and makes new ones (whose count is 0) instead of taking the first call's from the memo; then loader() "
        "of each"),
    Case("an_attribute_naming_the_first_object_as_one_of_two_names_the_new_one",
        "import sys\n\n\nclass Box:\n    def __init__(self, workers, fallback):\n        self.workers = workers\n"
        "        self.pick = self if len(sys.argv) < 2 else fallback\n\n    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.pick.workers)\n\n\n"
        "serial = Box(0, None)\na = Box(0, serial)\nb = Box(0, serial)\nb.workers = 2\n"
        "for batch in b.loader():\n    pass\n",
        3, [('SPW001', 20)],
        "b takes a's attributes from the memo: `self.pick` is b itself or the fallback, not a"),
]


def check(tmp_path: Path, body: str) -> tuple[int, list[tuple[str, int]]]:
    script = tmp_path / "train.py"
    script.write_text(HEAD + body, encoding="utf-8")
    report = run_check(Config(scripts=(str(script),), select=("SPW001",), no_loader=True))
    (facts,) = report.facts["scripts"]["files"]
    return facts["calls_followed"], sorted((f.rule, f.location.line) for f in report.findings)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_memo_stands_only_while_nothing_its_walk_read_or_wrote_changed(case: Case, tmp_path: Path):
    assert check(tmp_path, case.script) == (case.calls_followed, case.findings), case.why
