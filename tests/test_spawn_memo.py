"""The walk's memo: a followed call's walk stands for the next call with the same arguments while nothing it
read or wrote has changed since, and only then (what it must find is in the `memo_*` fixtures, run under
real spawn by test_spawn_ground_truth; here, how often the walk goes into the function)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from envdoctor.config import Config
from envdoctor.engine import run_check

HEAD = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"


def check(tmp_path: Path, body: str) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    script = tmp_path / "train.py"
    script.write_text(HEAD + body, encoding="utf-8")
    report = run_check(Config(scripts=(str(script),), select=("SPW001",), no_loader=True))
    (facts,) = report.facts["scripts"]["files"]
    return facts, sorted((f.rule, f.location.line) for f in report.findings)


def test_a_memo_stands_across_statements_that_change_nothing_its_walk_read(tmp_path: Path):
    """Module-level assignments of other names between the calls (each one forgot every memo before)."""
    facts, findings = check(tmp_path, (
        "SETTINGS = {'num_workers': 2}\n\n\n"
        "def make():\n    return DataLoader(TensorDataset(torch.arange(8.0)), **SETTINGS)\n\n\n"
        "first = make()\ncount = 1\nsecond = make()\ncount = 2\nthird = make()\n"
        "for batch in third:\n    pass\n"))
    assert facts["calls_followed"] == 1
    assert findings == [("SPW001", 16)]


def test_a_write_to_what_the_walk_read_makes_the_next_call_walk_again(tmp_path: Path):
    facts, findings = check(tmp_path, (
        "SETTINGS = {'num_workers': 0}\n\n\n"
        "def make():\n    return DataLoader(TensorDataset(torch.arange(8.0)), **SETTINGS)\n\n\n"
        "first = make()\nsecond = make()\nSETTINGS['num_workers'] = 2\nthird = make()\n"
        "for batch in third:\n    pass\n"))
    assert facts["calls_followed"] == 2
    assert findings == [("SPW001", 15)]


def test_a_walk_that_read_what_it_changed_itself_is_walked_every_time(tmp_path: Path):
    """`CACHE` looked up and then set: the next call takes the other way, so no memo may stand for it."""
    facts, _ = check(tmp_path, (
        "CACHE = {}\n\n\n"
        "def make():\n    if 'train' not in CACHE:\n"
        "        CACHE['train'] = DataLoader(TensorDataset(torch.arange(8.0)), num_workers=2)\n"
        "    return CACHE['train']\n\n\n"
        "first = make()\nsecond = make()\nthird = make()\n"))
    assert facts["calls_followed"] == 3


def test_packed_arguments_count_by_what_they_hold(tmp_path: Path):
    """`**options` is made for each call: the same options are the same walk, other options another."""
    facts, findings = check(tmp_path, (
        "def make(**options):\n    return DataLoader(TensorDataset(torch.arange(8.0)), **options)\n\n\n"
        "a = make(batch_size=2)\nb = make(batch_size=2)\nc = make(num_workers=2)\n"
        "for batch in c:\n    pass\n"))
    assert facts["calls_followed"] == 2
    assert findings == [("SPW001", 11)]


def test_an_attribute_set_on_the_object_after_a_call_makes_its_method_walk_again(tmp_path: Path):
    facts, findings = check(tmp_path, (
        "class Data:\n    def __init__(self):\n        self.workers = 0\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "data = Data()\nfirst = data.loader()\nsecond = data.loader()\ndata.workers = 2\n"
        "for batch in data.loader():\n    pass\n"))
    assert facts["calls_followed"] == 3  # __init__, and loader() before and after the change
    assert findings == [("SPW001", 16)]


def test_a_new_object_made_with_the_same_arguments_takes_the_attributes_the_first_one_was_left_with(tmp_path: Path):
    facts, findings = check(tmp_path, (
        "class Data:\n    def __init__(self, workers):\n        self.workers = workers\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "serial = Data(0)\nfirst = Data(2)\nsecond = Data(2)\n"
        "for batch in second.loader():\n    pass\n"))
    assert facts["calls_followed"] == 3  # two constructions walked, the third taken from the memo; loader()
    assert findings == [("SPW001", 15)]


def test_an_attribute_naming_the_first_object_names_the_new_one(tmp_path: Path):
    """`self.build = self.loader`: the new object's bound method is its own, and reads its own count."""
    _, findings = check(tmp_path, (
        "class Maker:\n    def __init__(self, workers):\n        self.workers = workers\n"
        "        self.build = self.loader\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "a = Maker(0)\nb = Maker(0)\nb.workers = 2\n"
        "for batch in b.build():\n    pass\n"))
    assert findings == [("SPW001", 16)]


def test_a_constructor_that_changes_what_was_there_before_is_walked_for_each_object(tmp_path: Path):
    """`LAST = self`: each new object is the last one made, which no memo of the first construction says."""
    facts, findings = check(tmp_path, (
        "LAST = None\n\n\n"
        "class Data:\n    def __init__(self, workers):\n        global LAST\n"
        "        self.workers = workers\n        LAST = self\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.workers)\n\n\n"
        "a = Data(0)\nb = Data(0)\nb.workers = 2\n"
        "for batch in LAST.loader():\n    pass\n"))
    assert facts["calls_followed"] == 3
    assert findings == [("SPW001", 20)]


def test_a_change_to_an_object_the_first_construction_made_walks_the_next_one_again(tmp_path: Path):
    """The new object would share the first one's settings object: changed since, it is not what `__init__`
    makes, so the second construction is walked and its own settings stay serial."""
    facts, findings = check(tmp_path, (
        "class Settings:\n    def __init__(self):\n        self.workers = 0\n\n\n"
        "class Box:\n    def __init__(self):\n        self.settings = Settings()\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), num_workers=self.settings.workers)\n\n\n"
        "a = Box()\na.settings.workers = 2\nb = Box()\n"
        "for batch in b.loader():\n    pass\n"))
    assert facts["calls_followed"] == 4  # Box and Settings for a; Box again for b (Settings from the memo); loader
    assert findings == []


def test_a_change_to_a_dict_the_first_construction_made_walks_the_next_one_again(tmp_path: Path):
    facts, findings = check(tmp_path, (
        "class Box:\n    def __init__(self):\n        self.settings = {'num_workers': 0}\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.arange(8.0)), **self.settings)\n\n\n"
        "a = Box()\na.settings['num_workers'] = 2\nb = Box()\n"
        "for batch in b.loader():\n    pass\n"))
    assert facts["calls_followed"] == 3
    assert findings == []
