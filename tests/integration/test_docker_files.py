"""The Dockerfiles in docker/, checked without a Docker engine: what they
COPY exists in the build context (or comes from an earlier stage that
builds it), base images are pinned, the entrypoints are binaries the CMake
build makes, the images run as a non-root user, builds are multi-stage and
install what scripts/install-deps.sh installs to build, the Debian runtime
stages install the packages of every library the binaries load, and
.dockerignore keeps build outputs and .git out of the context.
"""
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import unittest

from jobtools import BIN_DIR, SOURCE_DIR

DOCKER_DIR = os.path.join(SOURCE_DIR, "docker")
DOCKERIGNORE = os.path.join(SOURCE_DIR, ".dockerignore")
RUNTIME_PACKAGES = os.path.join(DOCKER_DIR, "runtime-packages.sh")
# image file -> the binary it runs
IMAGES = {"server.Dockerfile": "kubeps-server", "operator.Dockerfile": "kubeps-operator",
          "agent.Dockerfile": "kubeps-agent"}
# scripts/install-deps.sh packages that building a binary does not need:
# tools, test libraries, and what only the tests use (a real Prometheus,
# openssl and unshare for the Kubernetes stand-in, Go and sprig for Helm).
NOT_FOR_BUILDING = {"git", "curl", "python3", "ccache", "clang-format", "libgtest-dev", "libgmock-dev", "libbenchmark-dev",
                    "dataset-fashion-mnist", "prometheus", "openssl", "util-linux", "golang-go",
                    "golang-github-masterminds-sprig-dev", "golang-gopkg-yaml.v2-dev",
                    # the Python client's tests and the PyTorch examples
                    "python3-torch", "python3-venv", "python3-pip", "python3-setuptools",
                    "python3-wheel"}
# Root CMakeLists.txt subdirectories the images leave out: tests are off
# (-DKUBEPS_BUILD_TESTS=OFF) and benchmarks need libbenchmark-dev.
NOT_COPIED = {"tests", "bench"}
# Packages in every debian:*-slim image (required priority, apt's and dpkg's dependencies).
DEBIAN_SLIM_BASE = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def instructions(path):
    """[(INSTRUCTION, arguments)] of a Dockerfile, continuation lines joined
    and comments dropped."""
    result, current = [], ""
    with open(path) as f:
        for line in f:
            stripped = line.strip()
            if stripped.startswith("#") or (not stripped and not current):
                continue
            if stripped.endswith("\\"):
                current += stripped[:-1] + " "
                continue
            current += stripped
            if current.strip():
                keyword, _, rest = current.strip().partition(" ")
                result.append((keyword.upper(), rest.strip()))
            current = ""
    if current.strip():
        keyword, _, rest = current.strip().partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def stages(path):
    """[{image, name, instructions}] per FROM."""
    result = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            result.append({"image": words[0], "name": name, "instructions": []})
        elif result:
            result[-1]["instructions"].append((keyword, args))
        else:
            assert keyword == "ARG", "%s: %s before the first FROM" % (path, keyword)
    return result


def split_flags(args):
    """(flags {name: value}, words) of a COPY/ADD, exec (JSON) form included."""
    words = args.split()
    flags = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        flags[name] = value
    rest = " ".join(words)
    if rest.startswith("["):
        words = json.loads(rest)
    return flags, words


def executables():
    """Names of every add_executable in the CMake files (not variables)."""
    names = set()
    for path in glob.glob(os.path.join(SOURCE_DIR, "**", "CMakeLists.txt"), recursive=True):
        if os.path.relpath(path, SOURCE_DIR).split(os.sep)[0].startswith("build"):
            continue
        with open(path) as f:
            names.update(re.findall(r"add_executable\(\s*([A-Za-z0-9_.+-]+)", f.read()))
    return names


def root_subdirectories():
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        return set(re.findall(r"add_subdirectory\(\s*([A-Za-z0-9_./-]+)\s*\)", f.read()))


def install_deps_packages():
    with open(os.path.join(SOURCE_DIR, "scripts", "install-deps.sh")) as f:
        text = f.read()
    block = re.search(r"PACKAGES=\((.*?)\n\)", text, re.S).group(1)
    packages = []
    for line in block.splitlines():
        packages += line.split("#", 1)[0].split()
    return set(packages)


def apt_installed(stage):
    """Packages a stage installs with apt-get install."""
    packages = set()
    for keyword, args in stage["instructions"]:
        if keyword != "RUN":
            continue
        for command in re.split(r"&&|;|\|\|", args):
            words = command.split()
            if words[:2] == ["apt-get", "install"]:
                packages.update(w for w in words[2:] if not w.startswith("-") and not w.startswith("$"))
    return packages


def dockerignore_patterns():
    with open(DOCKERIGNORE) as f:
        return [line.strip().rstrip("/").lstrip("/") for line in f
                if line.strip() and not line.startswith("#")]


def ignored(path, patterns):
    parts = os.path.normpath(path).split(os.sep)
    return any(fnmatch.fnmatch("/".join(parts[:i]), p) for p in patterns for i in range(1, len(parts) + 1))


def dependency_closure(packages):
    """The packages and everything they depend on, from dpkg's database."""
    seen, todo = set(), list(packages)
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        seen.add(package)
        result = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", package],
                                capture_output=True, text=True)
        for alternatives in result.stdout.split(","):
            for dependency in alternatives.split("|"):
                name = dependency.strip().split(" ")[0].split(":")[0]
                if name:
                    todo.append(name)
    return seen


class DockerfilesTest(unittest.TestCase):
    def images(self):
        result = []
        for filename, binary in sorted(IMAGES.items()):
            path = os.path.join(DOCKER_DIR, filename)
            self.assertTrue(os.path.exists(path), path)
            result.append((filename, binary, stages(path)))
        return result

    def test_multi_stage_with_build_and_runtime_stages(self):
        for filename, binary, image_stages in self.images():
            with self.subTest(image=filename):
                self.assertGreaterEqual(len(image_stages), 2, "%s is not multi-stage" % filename)
                builds = [s for s in image_stages
                          if any(k == "RUN" and "cmake --build" in a for k, a in s["instructions"])]
                self.assertTrue(builds, "%s has no stage that runs cmake --build" % filename)
                self.assertNotIn(image_stages[-1], builds, "%s: the final stage builds" % filename)
                for stage in builds:
                    self.assertTrue(stage["name"], "%s: unnamed build stage" % filename)
                    targets = re.findall(r"--target\s+(\S+)", " ".join(a for _, a in stage["instructions"]))
                    self.assertEqual(targets, [binary], "%s builds %s, not only %s" % (filename, targets, binary))

    def test_base_images_are_pinned(self):
        for filename, _, image_stages in self.images():
            with self.subTest(image=filename):
                names = set()
                for stage in image_stages:
                    image = stage["image"]
                    if image in names:
                        continue
                    self.assertNotIn("$", image, "%s: FROM %s: pin the image, not a variable" % (filename, image))
                    reference, _, digest = image.partition("@")
                    repository, _, tag = reference.rpartition(":")
                    if "/" in tag or not repository:
                        tag = ""
                    self.assertTrue(tag and tag != "latest", "%s: FROM %s has no version tag" % (filename, image))
                    self.assertRegex(tag, r"\d", "%s: FROM %s: %r is not a version" % (filename, image, tag))
                    if digest:
                        self.assertRegex(digest, r"^sha256:[0-9a-f]{64}$", "%s: FROM %s" % (filename, image))
                    if stage["name"]:
                        names.add(stage["name"])

    def test_copy_sources_exist(self):
        patterns = dockerignore_patterns()
        for filename, _, image_stages in self.images():
            with self.subTest(image=filename):
                earlier = {}
                for stage in image_stages:
                    for keyword, args in stage["instructions"]:
                        self.assertNotEqual(keyword, "ADD", "%s: use COPY" % filename)
                        if keyword != "COPY":
                            continue
                        flags, words = split_flags(args)
                        sources = words[:-1]
                        self.assertTrue(sources, "%s: COPY %s" % (filename, args))
                        if "from" in flags:
                            source_stage = earlier.get(flags["from"])
                            self.assertIsNotNone(source_stage, "%s: COPY --from=%s: no such earlier stage"
                                                 % (filename, flags["from"]))
                            run = " ".join(a for k, a in source_stage["instructions"] if k == "RUN")
                            for source in sources:
                                # A built binary must be a target that stage builds.
                                built = re.match(r".*/build/bin/([^/]+)$", source)
                                if built:
                                    self.assertIn("--target " + built.group(1), run,
                                                  "%s: COPY %s from %s, which does not build it"
                                                  % (filename, source, flags["from"]))
                                else:
                                    # A file that stage writes, or one of its packages' files.
                                    self.assertTrue(source in run or (source.startswith("/usr/") and
                                                                      apt_installed(source_stage)),
                                                    "%s: COPY --from=%s %s: nothing in that stage makes it"
                                                    % (filename, flags["from"], source))
                            continue
                        for source in sources:
                            matches = glob.glob(os.path.join(SOURCE_DIR, source))
                            self.assertTrue(matches, "%s: COPY %s: not in the repository" % (filename, source))
                            self.assertFalse(ignored(source, patterns),
                                             "%s: COPY %s: excluded by .dockerignore" % (filename, source))
                    if stage["name"]:
                        earlier[stage["name"]] = stage

    def test_build_stages_copy_what_cmake_adds_and_install_the_build_packages(self):
        needed_dirs = root_subdirectories() - NOT_COPIED
        needed_packages = install_deps_packages() - NOT_FOR_BUILDING
        self.assertIn("libgrpc++-dev", needed_packages)
        for filename, _, image_stages in self.images():
            with self.subTest(image=filename):
                for stage in image_stages:
                    if not any(k == "RUN" and "cmake --build" in a for k, a in stage["instructions"]):
                        continue
                    copied = set()
                    for keyword, args in stage["instructions"]:
                        if keyword == "COPY":
                            flags, words = split_flags(args)
                            if "from" not in flags:
                                copied.update(os.path.normpath(w) for w in words[:-1])
                    self.assertIn("CMakeLists.txt", copied, filename)
                    self.assertFalse(needed_dirs - copied, "%s: the build stage does not copy %s"
                                     % (filename, sorted(needed_dirs - copied)))
                    missing = needed_packages - apt_installed(stage)
                    self.assertFalse(missing, "%s: the build stage does not install %s (scripts/install-deps.sh)"
                                     % (filename, sorted(missing)))

    def test_entrypoints_are_binaries_the_build_makes(self):
        built = executables()
        self.assertTrue({"kubeps", "kubeps-server", "kubeps-agent"} <= built, built)
        for filename, binary, image_stages in self.images():
            with self.subTest(image=filename):
                final = image_stages[-1]
                commands = [(k, a) for k, a in final["instructions"] if k in ("ENTRYPOINT", "CMD")]
                self.assertTrue(commands, "%s: no ENTRYPOINT or CMD" % filename)
                copied_to = set()
                for keyword, args in final["instructions"]:
                    if keyword == "COPY":
                        _, words = split_flags(args)
                        copied_to.add(words[-1])
                keyword, args = commands[0]
                self.assertTrue(args.startswith("["), "%s: %s in shell form" % (filename, keyword))
                program = json.loads(args)[0]
                self.assertEqual(os.path.basename(program), binary, filename)
                self.assertIn(os.path.basename(program), built,
                              "%s: %s runs %s, which no add_executable in the CMake files makes"
                              % (filename, keyword, program))
                self.assertIn(program, copied_to, "%s: %s is not copied into the image" % (filename, program))

    def test_runs_as_non_root(self):
        for filename, _, image_stages in self.images():
            with self.subTest(image=filename):
                users = [a for k, a in image_stages[-1]["instructions"] if k == "USER"]
                self.assertTrue(users, "%s: no USER in the final stage (it would run as root)" % filename)
                user, _, group = users[-1].partition(":")
                self.assertNotIn(user, ("root", "0"), filename)
                self.assertNotIn(group, ("root", "0"), filename)
                self.assertRegex(user, r"^[1-9]\d*$", "%s: a numeric USER lets runAsNonRoot check it" % filename)

    def test_dockerignore_excludes_build_outputs_and_git(self):
        patterns = dockerignore_patterns()
        for path in ["build", "build/bin/kubeps", ".git", ".git/config"]:
            self.assertTrue(ignored(path, patterns), "%s is not excluded by .dockerignore" % path)
        for path in ["CMakeLists.txt", "common/metrics.h", "docker/runtime-packages.sh"]:
            self.assertFalse(ignored(path, patterns), "%s is excluded by .dockerignore" % path)


@unittest.skipUnless(shutil.which("dpkg-query") and shutil.which("ldd"), "needs dpkg and ldd (Debian)")
class RuntimePackagesTest(unittest.TestCase):
    """The Debian runtime stages install the packages of every library the
    binary built here (on Debian bookworm, like the build stage) loads."""

    def runtime_packages(self, binary):
        result = subprocess.run(["sh", RUNTIME_PACKAGES, os.path.join(BIN_DIR, binary)],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        return set(result.stdout.split())

    def check_image(self, filename, binary):
        if not os.path.exists(os.path.join(BIN_DIR, binary)):
            self.skipTest("%s is not built" % binary)
        needed = self.runtime_packages(binary)
        runtime = stages(os.path.join(DOCKER_DIR, filename))[-1]
        self.assertTrue(runtime["image"].startswith("debian:"), runtime["image"])
        installed = apt_installed(runtime)
        covered = dependency_closure(installed | DEBIAN_SLIM_BASE)
        self.assertFalse(needed - covered, "%s: the runtime stage lacks %s, which %s loads"
                         % (filename, sorted(needed - covered), binary))
        # And installs no build packages.
        self.assertFalse({p for p in installed if p.endswith("-dev")}, filename)

    def test_script_names_the_library_packages(self):
        if not os.path.exists(os.path.join(BIN_DIR, "kubeps-server")):
            self.skipTest("kubeps-server is not built")
        packages = self.runtime_packages("kubeps-server")
        self.assertTrue({"libgrpc++1.51", "libprotobuf32", "libyaml-cpp0.7", "libc6"} <= packages, packages)
        self.assertFalse({p for p in packages if p.endswith("-dev")}, packages)

    def test_script_fails_on_a_library_no_package_owns(self):
        result = subprocess.run(["sh", RUNTIME_PACKAGES, "/nonexistent/binary"], capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)

    def test_server_image(self):
        self.check_image("server.Dockerfile", "kubeps-server")

    def test_operator_image(self):
        self.check_image("operator.Dockerfile", "kubeps-operator")


if __name__ == "__main__":
    unittest.main()
