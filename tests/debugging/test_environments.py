"""Libraries' named environments: what their sdists declare, resolved as wheels with PyPI, installed once, and
their suites run in the sandbox against that folder alone (not the project's site-packages).

Environments live under the checkout's var/environments (ignored by git), so a rerun resolves and installs
nothing: the first run needs the package index, later ones do not."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from flawforge.debugging.environments import EnvironmentBuilder, Pip, toolchain_pins
from flawforge.debugging.layout import layout_of, name_and_version, read_archive
from flawforge.debugging.requirements import declared_requirements
from flawforge.errors import InvalidInput
from flawforge.proto.sandbox import SandboxLimits
from flawforge.settings import Settings
from tests.sandbox.test_remote import ServedTraceExecutor, project_archive

REPO = Path(__file__).resolve().parents[2]
SETTINGS = Settings(debug_environments=str(REPO / "var" / "environments"))
LIBRARIES = {"arrow": "arrow-1.3.0.tar.gz", "markdown": "markdown-3.7.tar.gz",
             "python-dateutil": "python-dateutil-2.9.0.post0.tar.gz"}
LIMITS = SandboxLimits(timeout_s=300, memory_mb=2048, workdir_mb=256, open_files=1024, output_bytes=4 << 20)


@pytest.fixture(scope="session")
def builder() -> EnvironmentBuilder:
    return EnvironmentBuilder.from_settings(SETTINGS)


@pytest.fixture(scope="session")
def sandbox():
    from flawforge.sandbox.suites import suite_sandbox

    return suite_sandbox(SETTINGS.model_dump_json())


@pytest.fixture(scope="session")
def library(shared_data, builder):
    """name -> (archive, layout, built environment), each built once a session (and kept across sessions)."""
    built = {}

    def get(name: str):
        if name not in built:
            data = (shared_data / "python-libraries" / LIBRARIES[name]).read_bytes()
            files = read_archive(data)
            layout = layout_of(*name_and_version(LIBRARIES[name]), list(files))
            built[name] = (data, layout, builder.for_library(files, name))
        return built[name]

    return get


def declared(shared_data, archive: str):
    name, _ = name_and_version(archive)
    return declared_requirements(read_archive((shared_data / "python-libraries" / archive).read_bytes()), name)


def test_the_shared_libraries_declare_their_runtime_and_test_requirements(shared_data):
    arrow = declared(shared_data, LIBRARIES["arrow"])
    assert arrow.runtime == ("python-dateutil>=2.7.0", "types-python-dateutil>=2.8.10")
    assert arrow.test == ("dateparser==1.*", "pre-commit", "pytest", "pytest-cov", "pytest-mock", "pytz==2021.1",
                          "simplejson==3.*")
    markdown = declared(shared_data, LIBRARIES["markdown"])  # extra `testing`, and tox's deps
    assert markdown.runtime == ('importlib-metadata>=4.4; python_version < "3.10"',)
    assert markdown.test == ("coverage", "pytidylib", "pyyaml")
    dateutil = declared(shared_data, LIBRARIES["python-dateutil"])  # requirements-dev.txt, named by tox too
    assert dateutil.runtime == ("six>=1.5",)
    assert dateutil.test == ("attrs!=21.1.0", 'build>=0.3.0; python_version >= "3.6"', "coverage",
                             'freezegun; python_version != "3.3"', "hypothesis>=3.30", 'mock; python_version < "3.0"',
                             'pytest>=3.0; python_version != "3.3"', "pytest-cov>=2.0.0", "six")
    assert dateutil.names == ("python-dateutil",)
    assert declared(shared_data, "inflection-0.5.1.tar.gz").requirements == ()


def test_declarations_are_read_without_running_anything():
    files = {
        "PKG-INFO": b"Metadata-Version: 2.1\nName: Demo-Lib\nVersion: 1.0\n",
        "setup.py": b"import os\nEXTRA = ['attrs>=20']\nsetup(name='demo-lib', install_requires=os.environ['X'],\n"
                    b"      tests_require=EXTRA, extras_require={'yaml': ['pyyaml'], 'docs': ['sphinx'],\n"
                    b"      'testing:python_version<\"4\"': ['hypothesis', 'demo-lib[yaml]']})\n",
        "setup.cfg": b"[options]\ntests_require =\n    coverage\n",
        "requirements/tests.txt": b"-r base.txt\n-e .\n--index-url https://example.org\nnot a requirement!\n"
                                  b"tool @ https://example.org/tool.whl\nfreezegun \\\n  >=1.0  # dates\n",
        "requirements/base.txt": b"six\n",
        "requirements/docs.txt": b"sphinx\n",
        "tox.ini": b"[testenv]\ndeps =\n    py38: mock\n    {[base]deps}\n    pytest-mock\nextras = extra\n",
        "pyproject.toml": b"[project]\nname = 'demo-lib'\n[dependency-groups]\nbase = ['toolz']\n"
                          b"dev = ['pytest', {include-group = 'base'}]\nlint = ['ruff']\n",
    }
    found = declared_requirements(files)
    assert found.runtime == ("six",)  # requirements/base.txt; setup.py's computed install_requires is not read
    assert found.test == ("attrs>=20", "coverage", "freezegun>=1.0", 'hypothesis; python_version < "4"', "pytest",
                          "pytest-mock", "pyyaml", "toolz")
    dropped = dict(found.dropped)
    assert dropped.pop("not a requirement!").startswith("not a requirement: Expected")  # packaging's own words
    assert dropped == {
        "setup.py install_requires": "computed, not a literal", "-e .": "the library itself",
        "--index-url https://example.org": "an option, not a requirement",
        "tool @ https://example.org/tool.whl": "a direct URL, not a requirement of an index",
        "py38: mock": "a tox factor's line", "{[base]deps}": "a tox substitution",
        'demo-lib[yaml]; python_version<"4"': "the library itself"}
    assert found.names == ("demo-lib",)


def test_environments_hold_what_is_declared_and_the_toolchain_as_installed(library, builder, monkeypatch):
    toolchain = toolchain_pins()
    assert f"pytest=={importlib.metadata.version('pytest')}" in toolchain
    packages = {name: set(library(name)[2].environment.packages) for name in LIBRARIES}
    for name, held in packages.items():
        assert set(toolchain) <= held, name
        assert not any(p.startswith(("numpy==", "wcwidth==")) for p in held), name
    names = {name: {p.partition("==")[0] for p in held} for name, held in packages.items()}
    assert {"python-dateutil", "dateparser", "pytest-mock", "simplejson", "types-python-dateutil"} <= names["arrow"]
    assert "pytz==2021.1" in packages["arrow"]
    assert {"pyyaml", "coverage"} <= names["markdown"] and "pytidylib" not in names["markdown"]
    assert {"six", "freezegun", "hypothesis"} <= names["python-dateutil"]
    assert "python-dateutil" not in names["python-dateutil"]  # freezegun needs it: the tests use the library's own
    excluded = {name: {e.name: e.reason for e in library(name)[2].excluded} for name in LIBRARIES}
    assert excluded["arrow"] == {}
    assert list(excluded["markdown"]) == ["pytidylib"] and "pytidylib" in excluded["markdown"]["pytidylib"]
    assert [name.partition("==")[0] for name in excluded["python-dateutil"]] == ["python-dateutil"]
    built = library("python-dateutil")[2]
    assert Path(built.path).name == built.environment.key and (Path(built.path) / "freezegun").is_dir()

    def no_pip(*args):
        raise AssertionError("pip was asked again")

    monkeypatch.setattr(Pip, "_run", no_pip)  # resolved and built before: a second time needs no index
    data, layout, _ = library("python-dateutil")
    again = builder.for_library(read_archive(data), "python-dateutil")
    assert again == built


# Test files that need what only their environment holds: arrow's pytest-mock plugin (the mocker fixture) and its
# runtime dependency, dateutil's freezegun. (The pipeline's tests run markdown's and dateutil's whole suites.)
NEEDS_THE_ENVIRONMENT = {"arrow": ["tests/test_api.py", "tests/test_factory.py"],
                         "python-dateutil": ["tests/test_utils.py"]}


@pytest.mark.parametrize("name", sorted(NEEDS_THE_ENVIRONMENT))
def test_tests_that_need_their_environment_pass_in_it(library, sandbox, name):
    data, layout, built = library(name)
    run = sandbox.run_suite(data, source_roots=list(layout.source_roots), args=NEEDS_THE_ENVIRONMENT[name],
                            limits=LIMITS, environment=built.path)
    assert run.complete and run.tests and {test.outcome for test in run.tests} == {"passed"}, (run.outcome,
                                                                                           run.detail)
    if name == "python-dateutil":  # its freezegun tests
        assert {test.name: test.outcome for test in run.tests}["tests/test_utils.py::test_utils_today"] == "passed"
    host = sandbox.run_suite(data, source_roots=list(layout.source_roots), args=NEEDS_THE_ENVIRONMENT[name],
                             limits=LIMITS)  # the project's own venv lacks them
    assert not host.complete or {test.outcome for test in host.tests} != {"passed"}


PROBE = project_archive({"tests/test_imports.py": (
    "import sys\n\n\ndef test_numpy():\n    import numpy\n\n\ndef test_wcwidth():\n    import wcwidth\n\n\n"
    "def test_six():\n    import six\n\n\n"
    "def test_no_site_packages():\n    assert not [p for p in sys.path if 'site-packages' in p]\n")})


def test_an_environment_is_all_a_suite_imports_besides_the_standard_library(library, sandbox, tmp_path):
    environment = library("python-dateutil")[2].path
    inside = sandbox.run_suite(PROBE, args=["tests"], limits=LIMITS, environment=environment)
    assert {t.name.rpartition("::")[2]: t.outcome for t in inside.tests} == {
        "test_numpy": "failed", "test_wcwidth": "failed", "test_six": "passed", "test_no_site_packages": "passed"}
    assert "No module named 'numpy'" in next(t.message for t in inside.tests if t.name.endswith("test_numpy"))
    # Without one, the project's own venv (where importing numpy ends the whole run)
    host = sandbox.run_suite(PROBE, args=["tests/test_imports.py::test_wcwidth",
                                          "tests/test_imports.py::test_no_site_packages"], limits=LIMITS)
    assert {t.name.rpartition("::")[2]: t.outcome for t in host.tests} == {"test_wcwidth": "passed",
                                                                           "test_no_site_packages": "failed"}
    with pytest.raises(InvalidInput, match="not a folder under the sandbox's read paths"):
        sandbox.run_suite(PROBE, args=["tests"], limits=LIMITS, environment=str(tmp_path))


def test_a_trace_executor_runs_a_suite_in_an_environment_of_the_shared_folder(library, tmp_path):
    from flawforge.sandbox import Sandbox

    environment = library("python-dateutil")[2].path
    with ServedTraceExecutor(tmp_path / "trace-executor", debug_environments=SETTINGS.debug_environments) as served:
        with Sandbox.from_settings(served.client_settings(tmp_path)) as remote:
            run = remote.run_suite(PROBE, args=["tests/test_imports.py::test_six",
                                                "tests/test_imports.py::test_numpy"], environment=environment,
                                   limits=SandboxLimits(timeout_s=30, memory_mb=1024))
            with pytest.raises(InvalidInput, match="not a folder under the sandbox's read paths"):
                remote.run_suite(PROBE, args=["tests"], environment=str(tmp_path))
    assert {t.name.rpartition("::")[2]: t.outcome for t in run.tests} == {"test_six": "passed", "test_numpy": "failed"}


def test_a_requirement_file_in_the_test_folder_is_the_tests():
    """parse keeps pytest-cov, which its pytest configuration's addopts needs, in tests/requirements.txt."""
    files = {"PKG-INFO": b"Metadata-Version: 2.1\nName: lib\nVersion: 1.0\n",
             "tests/requirements.txt": b"pytest\npytest-cov\n", "tests/requirements-docs.txt": b"sphinx\n",
             "tests/data/requirements.txt": b"not-for-the-tests\n"}
    found = declared_requirements(files)
    assert found.test == ("pytest", "pytest-cov") and found.runtime == ()
