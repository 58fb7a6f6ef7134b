"""`pip install --no-build-isolation ./python` into a fresh virtual environment works with no
network, and the installed package imports from outside the source tree.

The venv sees the system's packages (--system-site-packages), so setuptools and torch come
from Debian; pip is told to use no index at all, so a build that needed a download fails.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from agent_fixture import PYTHON_SOURCE

try:
    import torch
except ImportError:
    torch = None


class Install(unittest.TestCase):
    def test_pip_installs_the_package_offline_and_it_imports_from_outside_the_tree(self):
        missing = _missing_build_requirements()
        if missing:
            self.skipTest("%s cannot build a wheel without isolation: %s (Debian: apt-get "
                          "install python3-setuptools python3-wheel)" % (sys.executable, missing))
        work = tempfile.mkdtemp(prefix="kubeps-install-")
        self.addCleanup(shutil.rmtree, work, True)
        venv = os.path.join(work, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                       check=True, timeout=300)
        # The source is copied so the build leaves nothing (build/, *.egg-info) in the tree.
        source = os.path.join(work, "source")
        shutil.copytree(PYTHON_SOURCE, source,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        python = os.path.join(venv, "bin", "python")
        install = subprocess.run([python, "-m", "pip", "install", "--no-index",
                                  "--no-build-isolation", source],
                                 capture_output=True, text=True, env=env, cwd=work, timeout=300)
        self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
        self.assertIn("Successfully installed kubeps-0.1.0", install.stdout)
        modules = ["kubeps", "kubeps.torch"] if torch is not None else ["kubeps"]
        probe = ("import sys, %s, kubeps; print(kubeps.__file__); "
                 "print(kubeps.DEFAULT_AGENT_WAIT_S)" % ", ".join(modules))
        imported = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                                  env=env, cwd=work, timeout=120)
        self.assertEqual(imported.returncode, 0, imported.stderr)
        location = imported.stdout.splitlines()[0]
        self.assertTrue(location.startswith(os.path.join(venv, "lib")),
                        "imported from %s, not from the venv" % location)
        if torch is None:
            self.skipTest("installed and imported kubeps; kubeps.torch not tried: torch is not "
                          "installed for %s" % sys.executable)


def _missing_build_requirements():
    """What --no-build-isolation needs from the interpreter and does not find, or ''."""
    try:
        import setuptools
    except ImportError:
        return "setuptools is not installed"
    version = tuple(int(part) for part in setuptools.__version__.split(".")[:2])
    if version < (61, 0):
        return "setuptools %s is older than 61" % setuptools.__version__
    if version < (70, 1):  # before 70.1 setuptools' bdist_wheel is the wheel package's
        try:
            import wheel  # noqa: F401
        except ImportError:
            return "setuptools %s needs the wheel package, which is not installed" % (
                setuptools.__version__)
    return ""


if __name__ == "__main__":
    unittest.main()
