"""The Dockerfiles in docker/, checked without a Docker engine. Every image:
its header says how to build it from the repository root, what it COPYs
exists in the build context (or comes from an earlier stage that makes it),
base images are pinned, the build is multi-stage, it runs as a non-root
numeric user, and .dockerignore keeps build outputs and .git out of the
context. The images of kubeps' binaries: the entrypoints are binaries the
CMake build makes, the build stages install what scripts/install-deps.sh
installs to build, and the Debian runtime stages install the packages of
every library the binaries load. The image of a user's PyTorch program: it
holds what the example manifests that name it run, where they run it, with
torch, the kubeps Python package, the data set they read and the agent's user.
"""
import ast
import fnmatch
import glob
import json
import os
import posixpath
import re
import shutil
import subprocess
import unittest

from jobtools import BIN_DIR, SOURCE_DIR

DOCKER_DIR = os.path.join(SOURCE_DIR, "docker")
DOCKERIGNORE = os.path.join(SOURCE_DIR, ".dockerignore")
RUNTIME_PACKAGES = os.path.join(DOCKER_DIR, "runtime-packages.sh")
# image file -> the kubeps binary it runs, built by CMake in a build stage
BINARY_IMAGES = {"server.Dockerfile": "kubeps-server", "operator.Dockerfile": "kubeps-operator",
                 "agent.Dockerfile": "kubeps-agent"}
# image file -> the kubeps tools it carries beside its binary (kubeps-reshard,
# for a pod that mounts a job's checkpoint volume)
TOOLS_IN_IMAGES = {"server.Dockerfile": ["kubeps-reshard"]}
# image file -> the folder whose TrainingJobs name its images: a user's
# training program and the kubeps Python package, no kubeps binary (the
# operator runs kubeps-agent beside it, from the agent image)
PROGRAM_IMAGES = {"pytorch-worker.Dockerfile": "examples/pytorch"}
ALL_IMAGES = sorted(BINARY_IMAGES) + sorted(PROGRAM_IMAGES)
# What a build stage runs, and the final stage must not.
BUILD_COMMANDS = ("cmake --build", "pip install")


def build_targets(commands):
    """The targets that `cmake --build ... --target A B` in `commands` names."""
    return [t for found in re.findall(r"--target((?:\s+[\w-]+)+)", commands) for t in found.split()]


# Instructions in which Docker substitutes build arguments (RUN leaves them
# to its shell; FROM sees only the ARGs before it, and must not use any here).
SUBSTITUTED = {"ADD", "COPY", "ENV", "EXPOSE", "LABEL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}
# scripts/install-deps.sh packages that building a binary does not need:
# tools, test libraries, and what only the tests use (a real Prometheus,
# openssl and unshare for the Kubernetes stand-in, Go and sprig for Helm).
NOT_FOR_BUILDING = {"git", "curl", "python3", "ccache", "clang-format", "libgtest-dev", "libgmock-dev", "libbenchmark-dev",
                    "dataset-fashion-mnist", "prometheus", "openssl", "util-linux", "golang-go",
                    "golang-github-masterminds-sprig-dev", "golang-gopkg-yaml.v2-dev",
                    "faketime",  # a worker restarted with its clock behind
                    "python3-yaml",  # the Kubernetes tests read rendered manifests
                    "nftables",  # the Kubernetes stand-in enforces NetworkPolicy
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


def substitute(text, values):
    """$NAME and ${NAME} replaced by values[NAME]; others (not build
    arguments, or ones with no value) are left as they are."""
    def value(match):
        name = match.group(1) or match.group(2)
        return values[name] if values.get(name) is not None else match.group(0)
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


def stages(path, build_args=None):
    """[{image, name, instructions}] per FROM, the stage's ARGs (their
    defaults, or build_args) substituted where Docker substitutes them."""
    build_args = build_args or {}
    result = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            result.append({"image": words[0], "name": name, "instructions": [], "args": {}})
            continue
        if not result:
            assert keyword == "ARG", "%s: %s before the first FROM" % (path, keyword)
            continue
        stage = result[-1]
        if keyword == "ARG":
            name, has_default, default = args.partition("=")
            stage["args"][name] = build_args.get(name, default if has_default else None)
        elif keyword in SUBSTITUTED:
            args = substitute(args, stage["args"])
        stage["instructions"].append((keyword, args))
    return result


def declared_args(path):
    return {args.partition("=")[0] for keyword, args in instructions(path) if keyword == "ARG"}


def documented_builds(path):
    """The `docker build` commands of this file in its header comment:
    [{file, args (build arguments), tag, context, unknown (other flags)}]."""
    builds = []
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                break
            words = line[1:].split()
            if words[:2] != ["docker", "build"]:
                continue
            build = {"file": None, "args": {}, "tag": None, "context": None, "unknown": []}
            rest = words[2:]
            while rest:
                word = rest.pop(0)
                if word in ("-f", "--file") and rest:
                    build["file"] = rest.pop(0)
                elif word == "--build-arg" and rest:
                    name, _, value = rest.pop(0).partition("=")
                    build["args"][name] = value
                elif word in ("-t", "--tag") and rest:
                    build["tag"] = rest.pop(0)
                elif word.startswith("-"):
                    build["unknown"].append(word)
                else:
                    build["context"] = word
            if build["file"] == os.path.relpath(path, SOURCE_DIR):
                builds.append(build)
    return builds


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


def image_files(stage, patterns):
    """({path in the image: repository path} of the files a stage COPYs from
    the build context, the stage's last WORKDIR)."""
    files, workdir = {}, "/"
    for keyword, args in stage["instructions"]:
        if keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args))
        if keyword != "COPY":
            continue
        flags, words = split_flags(args)
        if "from" in flags:
            continue
        sources, dest = words[:-1], posixpath.join(workdir, words[-1])
        into_folder = words[-1].endswith("/") or len(sources) > 1
        for source in sources:
            local = os.path.join(SOURCE_DIR, source)
            if os.path.isdir(local):
                for root, _, names in os.walk(local):
                    for name in names:
                        path = os.path.relpath(os.path.join(root, name), SOURCE_DIR)
                        if not ignored(path, patterns):
                            inside = os.path.relpath(os.path.join(root, name), local)
                            files[posixpath.normpath(posixpath.join(dest, inside.replace(os.sep, "/")))] = path
            else:
                target = posixpath.join(dest, posixpath.basename(source)) if into_folder else dest
                files[posixpath.normpath(target)] = os.path.normpath(source)
    return files, workdir


def imported_modules(path):
    """Top-level names of the modules a Python file imports (absolute imports)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def module_beside_or_above(name, folder):
    """name.py in folder or the nearest folder above it in the repository, or None."""
    while True:
        candidate = os.path.join(folder, name + ".py")
        if os.path.isfile(candidate):
            return candidate
        if os.path.samefile(folder, SOURCE_DIR):
            return None
        folder = os.path.dirname(folder)


def dpkg_owners(path):
    """The packages installed here that own path, or None if dpkg cannot tell."""
    if not shutil.which("dpkg-query"):
        return None
    result = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True)
    if result.returncode != 0:
        return None
    return {p.strip().split(":")[0] for p in result.stdout.split("\n")[0].rpartition(": ")[0].split(",")}


def agent_user():
    """The user the operator gives a worker pod that names none (pod_builder.cc)."""
    with open(os.path.join(SOURCE_DIR, "operator", "kube", "pod_builder.cc")) as f:
        return int(re.search(r"kAgentUser\s*=\s*(\d+)", f.read()).group(1))


def final_user(image_stages):
    users = [a for k, a in image_stages[-1]["instructions"] if k == "USER"]
    return users[-1] if users else None


def yaml_documents(path):
    """The documents of a YAML file, read with PyYAML: this Python's, else
    that of $KUBEPS_TORCH_PYTHON (Debian's python3, whose python3-torch
    depends on python3-yaml); None when neither has it."""
    try:
        import yaml
    except ImportError:
        python = os.environ.get("KUBEPS_TORCH_PYTHON", "/usr/bin/python3")
        script = "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))"
        try:
            result = subprocess.run([python, "-c", script, path], capture_output=True, text=True,
                                    timeout=60)
        except OSError:
            return None
        return json.loads(result.stdout) if result.returncode == 0 else None
    with open(path) as f:
        return list(yaml.safe_load_all(f))


def training_job_containers(folder):
    """[(manifest path, container)] of every container that names an image in
    the TrainingJobs under folder; None without PyYAML."""
    result = []
    for path in sorted(glob.glob(os.path.join(SOURCE_DIR, folder, "**", "*.yaml"), recursive=True)):
        documents = yaml_documents(path)
        if documents is None:
            return None
        for job in (d for d in documents if isinstance(d, dict)):
            if job.get("kind") != "TrainingJob":
                continue
            for role in (job.get("spec", {}).get("replicaSpecs") or {}).values():
                pod = ((role or {}).get("template") or {}).get("spec") or {}
                result += [(path, c) for c in pod.get("containers", []) if c.get("image")]
    return result


class DockerfilesTest(unittest.TestCase):
    def images(self, filenames=ALL_IMAGES):
        """[(filename, build args, stages)]: once per distinct set of build
        arguments its header's `docker build` commands pass."""
        result = []
        for filename in sorted(filenames):
            path = os.path.join(DOCKER_DIR, filename)
            self.assertTrue(os.path.exists(path), path)
            variants = []
            for build in documented_builds(path) or [{"args": {}}]:
                if build["args"] not in variants:
                    variants.append(build["args"])
            result += [(filename, args, stages(path, args)) for args in variants]
        return result

    @staticmethod
    def label(filename, build_args):
        return " ".join([filename] + ["%s=%s" % item for item in sorted(build_args.items())])

    def test_every_dockerfile_is_checked(self):
        found = {os.path.basename(p) for p in glob.glob(os.path.join(DOCKER_DIR, "*Dockerfile*"))}
        self.assertEqual(found, set(ALL_IMAGES),
                         "add each image to BINARY_IMAGES or PROGRAM_IMAGES, so that it is checked")

    def test_headers_say_how_to_build_from_the_repository_root(self):
        for filename in ALL_IMAGES:
            with self.subTest(image=filename):
                path = os.path.join(DOCKER_DIR, filename)
                builds = documented_builds(path)
                self.assertTrue(builds, "%s: no `docker build -f docker/%s ...` in its header"
                                % (filename, filename))
                for build in builds:
                    self.assertEqual(build["context"], ".", "%s: build from the repository root" % filename)
                    self.assertTrue(build["tag"], "%s: a documented build names no tag" % filename)
                    self.assertFalse(build["unknown"], filename)
                    self.assertFalse(set(build["args"]) - declared_args(path),
                                     "%s: --build-arg of no ARG" % filename)

    def test_multi_stage_with_build_and_runtime_stages(self):
        for filename, build_args, image_stages in self.images():
            with self.subTest(image=self.label(filename, build_args)):
                self.assertGreaterEqual(len(image_stages), 2, "%s is not multi-stage" % filename)
                builds = [s for s in image_stages
                          if any(k == "RUN" and any(c in a for c in BUILD_COMMANDS) for k, a in s["instructions"])]
                self.assertTrue(builds, "%s has no stage that runs one of %s" % (filename, BUILD_COMMANDS))
                self.assertNotIn(image_stages[-1], builds, "%s: the final stage builds" % filename)
                for stage in builds:
                    self.assertTrue(stage["name"], "%s: unnamed build stage" % filename)

    def test_binary_images_build_only_their_binary(self):
        for filename, build_args, image_stages in self.images(BINARY_IMAGES):
            with self.subTest(image=self.label(filename, build_args)):
                binary = BINARY_IMAGES[filename]
                builds = [s for s in image_stages
                          if any(k == "RUN" and "cmake --build" in a for k, a in s["instructions"])]
                self.assertTrue(builds, "%s has no stage that runs cmake --build" % filename)
                for stage in builds:
                    targets = build_targets(" ".join(a for _, a in stage["instructions"]))
                    wanted = [binary] + TOOLS_IN_IMAGES.get(filename, [])
                    self.assertEqual(targets, wanted, "%s builds %s, not only %s" % (filename, targets, wanted))

    def test_base_images_are_pinned(self):
        for filename, build_args, image_stages in self.images():
            with self.subTest(image=self.label(filename, build_args)):
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
        for filename, build_args, image_stages in self.images():
            with self.subTest(image=self.label(filename, build_args)):
                earlier = {}
                for stage in image_stages:
                    for keyword, args in stage["instructions"]:
                        self.assertNotEqual(keyword, "ADD", "%s: use COPY" % filename)
                        if keyword != "COPY":
                            continue
                        flags, words = split_flags(args)
                        sources = words[:-1]
                        self.assertTrue(sources, "%s: COPY %s" % (filename, args))
                        self.assertNotIn("$", args, "%s: COPY %s: a build argument with no value" % (filename, args))
                        if "from" in flags:
                            source_stage = earlier.get(flags["from"])
                            self.assertIsNotNone(source_stage, "%s: COPY --from=%s: no such earlier stage"
                                                 % (filename, flags["from"]))
                            run = " ".join(a for k, a in source_stage["instructions"] if k == "RUN")
                            for source in sources:
                                # A built binary must be a target that stage builds.
                                built = re.match(r".*/build/bin/([^/]+)$", source)
                                if built:
                                    self.assertIn(built.group(1), build_targets(run),
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
        for filename, build_args, image_stages in self.images(BINARY_IMAGES):
            with self.subTest(image=self.label(filename, build_args)):
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
        for filename, build_args, image_stages in self.images(BINARY_IMAGES):
            with self.subTest(image=self.label(filename, build_args)):
                binary = BINARY_IMAGES[filename]
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
        for filename, build_args, image_stages in self.images():
            with self.subTest(image=self.label(filename, build_args)):
                user = final_user(image_stages)
                self.assertTrue(user, "%s: no USER in the final stage (it would run as root)" % filename)
                user, _, group = user.partition(":")
                self.assertNotIn(user, ("root", "0"), filename)
                self.assertNotIn(group, ("root", "0"), filename)
                self.assertRegex(user, r"^[1-9]\d*$", "%s: a numeric USER lets runAsNonRoot check it" % filename)

    def test_program_images_run_as_the_agents_user(self):
        # The agent's socket and shared memory are mode 0600: the program
        # and its kubeps-agent sidecar must run as one user, which is the
        # agent image's unless the pod says otherwise.
        expected = "%d:%d" % (agent_user(), agent_user())
        self.assertEqual(final_user(stages(os.path.join(DOCKER_DIR, "agent.Dockerfile"))), expected)
        for filename, build_args, image_stages in self.images(PROGRAM_IMAGES):
            with self.subTest(image=self.label(filename, build_args)):
                self.assertEqual(final_user(image_stages), expected, filename)

    def test_program_images_carry_torch_and_the_python_client(self):
        for filename, build_args, image_stages in self.images(PROGRAM_IMAGES):
            with self.subTest(image=self.label(filename, build_args)):
                final = image_stages[-1]
                # No kubeps binary: the operator adds the agent as a sidecar.
                self.assertFalse([a for k, a in final["instructions"]
                                  if k == "COPY" and re.search(r"build/bin/|kubeps-", a)], filename)
                self.assertIn("python3-torch", apt_installed(final), filename)
                # pip install ./python in a build stage, into a venv that sees
                # Debian's torch; the final stage takes the venv, not pip.
                venvs = {}
                for stage in image_stages[:-1]:
                    copied = [split_flags(a)[1] for k, a in stage["instructions"] if k == "COPY"]
                    run = " ".join(a for k, a in stage["instructions"] if k == "RUN")
                    venv = re.search(r"-m venv\s+((?:--\S+\s+)*)(/\S+)", run)
                    if venv and re.search(r"pip install\b.*\./python\b", run) and \
                            any(words[:-1] == ["python"] for words in copied):
                        self.assertIn("--system-site-packages", venv.group(1),
                                      "%s: the venv does not see Debian's torch" % filename)
                        venvs[stage["name"]] = venv.group(2)
                self.assertTrue(venvs, "%s: no stage installs ./python with pip into a venv" % filename)
                taken = [(split_flags(a)[0].get("from"), split_flags(a)[1]) for k, a in final["instructions"]
                         if k == "COPY"]
                venv = [venvs[source] for source, words in taken
                        if source in venvs and words == [venvs[source], venvs[source]]]
                self.assertTrue(venv, "%s: the final stage does not copy the venv from %s" % (filename, venvs))
                paths = [a for k, a in final["instructions"] if k == "ENV" and a.startswith("PATH=")]
                self.assertTrue(paths and paths[-1].startswith("PATH=%s/bin:" % venv[0]),
                                "%s: `python3` is not the venv's (PATH)" % filename)
                self.assertFalse([a for k, a in final["instructions"] if k == "RUN" and "pip install" in a],
                                 filename)
                self.assertFalse({p for p in apt_installed(final) if p.endswith("-dev") or p == "python3-pip"},
                                 filename)

    def test_program_images_hold_what_the_manifests_run(self):
        patterns = dockerignore_patterns()
        for filename, folder in sorted(PROGRAM_IMAGES.items()):
            containers = training_job_containers(folder)
            if containers is None:
                self.skipTest("needs PyYAML (python3-yaml, which Debian's python3-torch depends on), "
                              "here or in $KUBEPS_TORCH_PYTHON")
            path = os.path.join(DOCKER_DIR, filename)
            builds = {b["tag"]: b["args"] for b in documented_builds(path)}
            named = {c["image"] for _, c in containers}
            with self.subTest(image=filename):
                self.assertTrue(named, "no TrainingJob under %s names an image" % folder)
                self.assertFalse(named - set(builds), "%s: the TrainingJobs under %s name images its header "
                                 "does not build" % (filename, folder))
                self.assertFalse(set(builds) - named, "%s builds images no TrainingJob under %s names"
                                 % (filename, folder))
            for manifest, container in containers:
                build_args = builds.get(container["image"])
                if build_args is None:
                    continue
                image_stages = stages(path, build_args)
                final = image_stages[-1]
                label = "%s in %s" % (self.label(filename, build_args), os.path.relpath(manifest, SOURCE_DIR))
                with self.subTest(image=label):
                    files, workdir = image_files(final, patterns)
                    command = container.get("command") or []
                    self.assertEqual(command[:1], ["python3"], "%s: run `python3 SCRIPT`" % label)
                    self.assertGreaterEqual(len(command), 2, label)
                    # kubeps run runs the command in the manifest's folder (or
                    # its workingDir, relative to it); the pod in the image's
                    # WORKDIR (or the workingDir): the same files must be there.
                    working_dir = container.get("workingDir", "")
                    self.assertFalse(posixpath.isabs(working_dir),
                                     "%s: an absolute workingDir is not the manifest's folder" % label)
                    local_dir = os.path.normpath(os.path.join(os.path.dirname(manifest), working_dir))
                    image_dir = posixpath.normpath(posixpath.join(workdir, working_dir))
                    # The script and every module it imports (transitively)
                    # that lies beside it or in a folder above it.
                    todo = [(os.path.join(local_dir, command[1]),
                             posixpath.normpath(posixpath.join(image_dir, command[1])))]
                    seen = set()
                    while todo:
                        local, in_image = todo.pop()
                        if local in seen:
                            continue
                        seen.add(local)
                        self.assertTrue(os.path.isfile(local), "%s: %s is not in the repository" % (label, local))
                        self.assertEqual(files.get(in_image), os.path.relpath(local, SOURCE_DIR),
                                         "%s: the image's %s is not %s" % (label, in_image,
                                                                          os.path.relpath(local, SOURCE_DIR)))
                        for name in imported_modules(local):
                            module = module_beside_or_above(name, os.path.dirname(local))
                            if module:
                                relative = os.path.relpath(module, os.path.dirname(local)).replace(os.sep, "/")
                                todo.append((module, posixpath.normpath(
                                    posixpath.join(posixpath.dirname(in_image), relative))))
                    self.assertGreaterEqual(len(seen), 2, "%s: %s imports no module of the repository"
                                            % (label, command[1]))
                # The data set the manifest points DATA_DIR at is a package's
                # the image installs (when dpkg here knows the package).
                data_dirs = [e.get("value") for e in container.get("env", []) if e.get("name") == "DATA_DIR"]
                with self.subTest(image=label, data=data_dirs):
                    self.assertTrue(data_dirs, "%s: no DATA_DIR" % label)
                    owners = dpkg_owners(data_dirs[0])
                    if owners is None:
                        self.skipTest("dpkg here does not know who owns %s" % data_dirs[0])
                    self.assertTrue(owners & apt_installed(final), "%s: DATA_DIR %s (from %s) is not in the "
                                    "image" % (label, data_dirs[0], sorted(owners)))

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

    found = {}  # binary: its packages (dpkg -S per library takes seconds)

    def runtime_packages(self, binary):
        if binary not in self.found:
            result = subprocess.run(["sh", RUNTIME_PACKAGES, os.path.join(BIN_DIR, binary)],
                                    capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.found[binary] = set(result.stdout.split())
        return self.found[binary]

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
        self.check_image("server.Dockerfile", "kubeps-reshard")

    def test_operator_image(self):
        self.check_image("operator.Dockerfile", "kubeps-operator")


if __name__ == "__main__":
    unittest.main()
