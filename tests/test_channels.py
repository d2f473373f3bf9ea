"""CHN rules as pure functions over "packages" facts in the exact format the probe emits."""
from __future__ import annotations

from typing import Any

import pytest

from envdoctor.facts import Facts
from envdoctor.rules.channels import channel_name, find_mixed_blas, find_mixed_channels, find_retired_pytorch_channel

PREFIX = "/opt/envs/train"


def record(name: str, version: str, channel: str | None, build: str = "0", url: str | None = None) -> dict[str, Any]:
    return {"name": name, "version": version, "build": build, "channel": channel, "url": url,
            "subdir": "linux-64", "file": f"{PREFIX}/conda-meta/{name}-{version}-{build}.json",
            "files_count": 1, "dist_names": [], "checked_files": 1, "missing_count": 0, "changed_count": 0,
            "distribution": None, "distribution_from": None, "depends": []}


def facts_with(*records: dict[str, Any], kind: str = "conda") -> Facts:
    return Facts.from_dict({"packages": {
        "prefix": PREFIX, "kind": kind, "interpreter": f"{PREFIX}/bin/python3", "python": "3.11.7",
        "markers": None, "conda": {"present": True, "checked_by": "size", "records": list(records)},
        "site_dirs": [], "distributions": [], "unreadable": [], "pth_files": [],
        "installer": {"externally_managed": None, "uv_venv": None, "has_pip": True}, "os_database": None}})


@pytest.mark.parametrize("channel, url, expected", [
    ("https://conda.anaconda.org/conda-forge", None, "conda-forge"),
    ("https://conda.anaconda.org/conda-forge/linux-64", None, "conda-forge"),
    ("https://repo.anaconda.com/pkgs/main/", None, "pkgs/main"),
    ("pkgs/main", None, "pkgs/main"),
    ("conda-forge", None, "conda-forge"),
    ("https://prefix.dev/conda-forge/", None, "conda-forge"),
    (None, "https://conda.anaconda.org/pytorch/linux-64/pytorch-2.5.1-py3.11_cuda12.4_0.tar.bz2", "pytorch"),
    ("file:///tmp/channel", None, "file:///tmp/channel"),
    (None, None, None),
    ("https://conda.anaconda.org/conda-forge/label/rc/linux-64", None, "conda-forge/label/rc"),
    ("conda-forge/label/rc", None, "conda-forge/label/rc"),
    (None, "https://conda.anaconda.org/t/tk-123/conda-forge/noarch/x-1-0.conda", "conda-forge"),
])
def test_channel_name_from_records(channel: str | None, url: str | None, expected: str | None) -> None:
    assert channel_name({"channel": channel, "url": url}) == expected


def test_mixed_channels_fires_only_across_incompatible_families() -> None:
    quiet = facts_with(record("python", "3.11.7", "https://conda.anaconda.org/conda-forge"),
                       record("numpy", "1.26.4", "conda-forge"),
                       record("tqdm", "4.66.0", "https://repo.anaconda.com/pkgs/main"),  # not ABI-sensitive
                       record("libfoo", "1.0", "file:///tmp/local"))
    assert list(find_mixed_channels(quiet)) == []
    loud = facts_with(record("python", "3.11.7", "https://repo.anaconda.com/pkgs/main"),
                      record("numpy", "1.26.4", "https://repo.anaconda.com/pkgs/main"),
                      record("libstdcxx-ng", "13.2.0", "https://conda.anaconda.org/conda-forge"))
    [hit] = find_mixed_channels(loud)
    assert hit.evidence["families"] == {"conda-forge": ["libstdcxx-ng 13.2.0"],
                                        "defaults": ["python 3.11.7", "numpy 1.26.4"]}
    assert hit.evidence["keep_family"] == "defaults"
    assert hit.fix.startswith(f"conda install -p {PREFIX} --override-channels -c defaults --force-reinstall libstdcxx-ng")


def test_pytorch_from_defaults_is_stale_and_conda_forge_is_fine() -> None:
    [hit] = find_retired_pytorch_channel(facts_with(
        record("pytorch", "2.3.0", "https://repo.anaconda.com/pkgs/main/linux-64"),
        record("torchvision", "0.18.0", "pkgs/main")))
    assert (hit.evidence["channel"], hit.evidence["version"], hit.evidence["last_release"]) == ("pkgs/main", "2.3.0", None)
    assert hit.evidence["companions"] == [{"package": "torchvision", "version": "0.18.0"}]
    assert hit.fix.startswith(f"conda remove -p {PREFIX} pytorch torchvision && conda install -p {PREFIX} "
                              "--override-channels -c conda-forge pytorch torchvision")
    assert list(find_retired_pytorch_channel(facts_with(record("pytorch", "2.7.0", "conda-forge")))) == []


def test_pytorch_channel_companions_and_pixi_fix() -> None:
    facts = facts_with(record("pytorch", "2.5.1", "https://conda.anaconda.org/pytorch"),
                       record("pytorch-cuda", "12.4", "pytorch"), record("pytorch-mutex", "1.0", "pytorch"),
                       kind="pixi")
    facts["packages"]["prefix"] = "/work/proj/.pixi/envs/default"
    [hit] = find_retired_pytorch_channel(facts)
    assert [c["package"] for c in hit.evidence["companions"]] == ["pytorch-cuda", "pytorch-mutex"]
    assert hit.fix.startswith("pixi remove --manifest-path /work/proj -e default pytorch pytorch-cuda pytorch-mutex && "
                              "pixi add --manifest-path /work/proj -e default pytorch")
    # The same steps as data, with pixi as the tool: what `envdoctor fix` runs.
    assert [step.to_dict() for step in hit.fix_steps] == [
        {"tool": "pixi", "argv": ["pixi", "remove", "--manifest-path", "/work/proj", "-e", "default", "pytorch",
                                  "pytorch-cuda", "pytorch-mutex"]},
        {"tool": "pixi", "argv": ["pixi", "add", "--manifest-path", "/work/proj", "-e", "default", "pytorch"]}]


def test_mixed_blas_follows_the_libblas_build() -> None:
    [hit] = find_mixed_blas(facts_with(record("libblas", "3.9.0", "conda-forge", build="20_linux64_openblas"),
                                       record("libopenblas", "0.3.25", "conda-forge"),
                                       record("mkl", "2023.2.0", "conda-forge")))
    assert hit.evidence["implementations"] == {"mkl": ["mkl 2023.2.0"],
                                               "openblas": ["libblas 3.9.0", "libopenblas 0.3.25"]}
    assert hit.evidence["libblas_selects"] == "openblas" and hit.evidence["keep"] == "openblas"
    assert hit.fix.startswith(f"conda install -p {PREFIX} 'libblas=*=*openblas' && conda remove -p {PREFIX} mkl")


def test_one_blas_with_its_openmp_is_quiet() -> None:
    facts = facts_with(record("mkl", "2023.2.0", "conda-forge"), record("intel-openmp", "2023.2.0", "conda-forge"),
                       record("libblas", "3.9.0", "conda-forge", build="20_linux64_mkl"))
    assert list(find_mixed_blas(facts)) == []


def test_mixed_blas_on_defaults_switches_the_blas_selector_it_has() -> None:
    # defaults selects its BLAS with `blas` (build "mkl"/"openblas"), not conda-forge's libblas.
    [hit] = find_mixed_blas(facts_with(record("blas", "1.0", "pkgs/main", build="openblas"),
                                       record("openblas", "0.3.21", "pkgs/main"),
                                       record("mkl", "2023.1.0", "pkgs/main")))
    assert hit.evidence["libblas_selects"] == "openblas"
    assert hit.fix == (f"conda install -p {PREFIX} 'blas=*=*openblas' && conda remove -p {PREFIX} mkl"
                       "   # one BLAS (openblas) for every package")
    assert [step.to_dict() for step in hit.fix_steps] == [
        {"tool": "conda", "argv": ["conda", "install", "-p", PREFIX, "blas=*=*openblas"]},
        {"tool": "conda", "argv": ["conda", "remove", "-p", PREFIX, "mkl"]}]


def test_a_label_channel_belongs_to_its_family() -> None:
    [hit] = find_mixed_channels(facts_with(record("python", "3.11.7", "pkgs/main"),
                                           record("numpy", "2.1.0", "https://conda.anaconda.org/conda-forge/label/rc")))
    assert hit.evidence["families"] == {"conda-forge": ["numpy 2.1.0"], "defaults": ["python 3.11.7"]}


def test_retired_channel_fix_reinstalls_what_conda_remove_takes_along() -> None:
    lightning = {**record("lightning", "2.4.0", "conda-forge"), "depends": ["python", "pytorch"]}
    [hit] = find_retired_pytorch_channel(facts_with(record("pytorch", "2.5.1", "pytorch"), lightning))
    assert hit.fix.startswith(f"conda remove -p {PREFIX} pytorch && conda install -p {PREFIX} --override-channels "
                              "-c conda-forge pytorch lightning   # or pip:")


def test_credentials_in_a_channel_url_do_not_change_its_name() -> None:
    from envdoctor.redact import redact_url

    for raw in ("https://alice:pw@conda.example.com/t/tok-1/conda-forge/linux-64",
                "https://conda.anaconda.org/t/tok-2/pytorch"):
        shown = redact_url(raw)
        assert "pw" not in shown and "tok-" not in shown
        assert channel_name({"channel": shown}) == channel_name({"channel": raw})
