"""The Debian packages the built-in corpora are read from.

`trans-de-en`, `fortunes`, `dataset-fashion-mnist`, `bible-kjv` and the
packages of `messages.MESSAGE_PACKAGES` install the data that the built-in
sets read. A loader reading one of them calls `require_package(package, what)`
first, so that one variable can take them away: `KERAS_ATTENTION_HIDE_PACKAGES`
(a comma-separated list of package names, or `all`) makes every loader behave
as on a machine without those packages. CI runs the fast tier with `all`, so
that a test which needs a package without saying so fails there instead of
on a user's fresh machine; the tests say so with the `needs_package` marker,
which skips unless `installed(package)`.
"""

import functools
import os
import subprocess

HIDE_VARIABLE = "KERAS_ATTENTION_HIDE_PACKAGES"


class PackageMissingError(FileNotFoundError):
    """A built-in data set's Debian package is not installed, or is hidden by
    `KERAS_ATTENTION_HIDE_PACKAGES`."""


def hidden(package):
    """Whether `KERAS_ATTENTION_HIDE_PACKAGES` hides `package`.

    Args:
        package: a Debian package name, such as `"fortunes"`.

    Example:

    >>> import os
    >>> os.environ[HIDE_VARIABLE] = "fortunes,trans-de-en"
    >>> hidden("fortunes"), hidden("bible-kjv")
    (True, False)
    >>> del os.environ[HIDE_VARIABLE]
    """
    names = {name.strip() for name in os.environ.get(HIDE_VARIABLE, "").split(",")}
    return "all" in names or package in names


def require_package(package, what):
    """Raises `PackageMissingError` if `package` is hidden by
    `KERAS_ATTENTION_HIDE_PACKAGES`.

    The loaders call it before they read a package's files; where the files
    themselves are missing they say so with the path they looked at.

    Args:
        package: the Debian package name.
        what: what the package holds, for the message (`"Fashion-MNIST"`).

    Raises:
        PackageMissingError: naming the package, the variable and the
            `apt-get install` line.
    """
    if hidden(package):
        raise PackageMissingError(
            f"{what} is read from the Debian package {package!r}, which "
            f"{HIDE_VARIABLE}={os.environ[HIDE_VARIABLE]!r} hides: unset it "
            f"(or `apt-get install {package}` if it is not installed)."
        )


def require_data(path, default, package, what, missing, exists=os.path.isdir):
    """Checks a built-in data set's files before a loader reads them:
    `require_package(package, what)` where `path` is the package's own
    (`default`), then that `path` exists.

    Args:
        path: where the loader reads the data.
        default: where `package` installs it.
        package: the Debian package name.
        what: what the package holds, for `require_package`'s message.
        missing: the message where `path` does not exist.
        exists: the test of `path` (`os.path.isdir` for a folder).

    Raises:
        PackageMissingError: as `require_package`.
        FileNotFoundError: `missing`, where `path` does not exist.
    """
    if path == default:
        require_package(package, what)
    if not exists(path):
        raise FileNotFoundError(missing)


def installed(package):
    """Whether the Debian package `package` is installed and not hidden.

    Args:
        package: the Debian package name.

    Returns:
        `False` on a machine without `dpkg-query` (not Debian-based).
    """
    return not hidden(package) and _dpkg_installed(package)


@functools.cache
def _dpkg_installed(package):
    try:
        result = subprocess.run(
            ["dpkg-query", "--show", "--showformat=${db:Status-Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return False
    return result.returncode == 0 and result.stdout.strip() == "installed"
