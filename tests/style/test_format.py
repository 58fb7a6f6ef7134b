"""The tree keeps the style of .clang-format (Google's, 100 columns).

    python3 -m unittest -v test_format        (from tests/style)

Fix a failure with:  git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i
"""
import os
import shutil
import subprocess
import unittest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CXX_SUFFIXES = (".h", ".cc", ".cu")


def cxx_sources():
    """Every C++ and CUDA file of the project: what git tracks, or, outside a
    git checkout, what the source tree holds apart from build folders."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=SOURCE_DIR, check=True,
                                capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = []
        for root, dirs, files in os.walk(SOURCE_DIR):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            listed += [os.path.relpath(os.path.join(root, f), SOURCE_DIR) for f in files]
    return sorted(path for path in listed if path.endswith(CXX_SUFFIXES))


class FormatTest(unittest.TestCase):
    def test_every_source_file_is_formatted(self):
        clang_format = shutil.which("clang-format")
        self.assertIsNotNone(clang_format,
                             "clang-format is not installed (scripts/install-deps.sh installs it)")
        files = cxx_sources()
        self.assertGreater(len(files), 100, "found too few C++ files: is this the source tree?")
        # One clang-format for every file: a process per file spent half a
        # minute starting up, and clang-format goes on past a file that differs.
        result = subprocess.run([clang_format, "--dry-run", "--Werror", *files], cwd=SOURCE_DIR,
                                capture_output=True, text=True)
        complaints = [line for line in result.stderr.splitlines()
                      if "-Wclang-format-violations" in line]
        self.assertEqual(result.returncode != 0, bool(complaints),
                         "clang-format failed without naming a file:\n" + result.stderr[-2000:])
        unformatted = sorted({line.split(":", 1)[0] for line in complaints})
        if unformatted:
            self.fail("files that differ from .clang-format's style (run clang-format -i on "
                      "them):\n" + "\n".join(unformatted))


if __name__ == "__main__":
    unittest.main()
