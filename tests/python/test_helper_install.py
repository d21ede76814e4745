"""The Python helper installs with pip from its directory (web/python) into
a fresh virtualenv, offline: no index, the build backend and the
dependencies taken from this interpreter's environment."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def offline_backend() -> bool:
    """Whether this environment can build the package without an index:
    setuptools with bdist_wheel (its own from 70.1, else the wheel package)."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.mark.skipif(
    not offline_backend(),
    reason="no offline build backend here (wheel, or setuptools>=70.1); .ci/run installs ./web/python into its venv anyway",
)
def test_pip_install_into_a_fresh_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # This environment's packages (pip, setuptools, httpx, httpx2) come
    # after the venv's own: what pip installs into the venv is imported.
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "parent.pth").write_text("\n".join(sorted(here)) + "\n")
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation", "--ignore-installed",
         "--disable-pip-version-check", str(REPO / "web" / "python")],
        check=True, cwd=tmp_path,
    )
    check = (
        "import reprise, httpx;"
        "assert issubclass(reprise.ResumeError, httpx.RemoteProtocolError);"
        "t = reprise.Transport(); t.close();"
        "import pathlib; print(pathlib.Path(reprise.__file__).parent)"
    )
    out = subprocess.run([py, "-c", check], check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    pkg = Path(out)
    assert pkg.is_relative_to(venv), out
    assert (pkg / "py.typed").is_file()
