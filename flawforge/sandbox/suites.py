"""The suite sandbox: the one recipe of the sandbox that runs libraries' test suites, whoever starts it (a job or
the mutator in its own process, or the trace-executor serving a stack's)."""
from __future__ import annotations

import os
from functools import lru_cache

from flawforge.proto.debugging import SUITE_HASH_SEED
from flawforge.sandbox.engine import csv_setting, pytest_path
from flawforge.settings import Settings

# Suite units at once: about one a core and one waiting, so a core never idles between a unit's end and the next
# one's start.
SUITE_WORKERS = 2 * max(1, len(os.sched_getaffinity(0)))


def environments_folder(settings: Settings) -> str:
    """The absolute folder the libraries' environments live in (flawforge.debugging.environments), made if it can
    be (a read-only mount of it may not be)."""
    folder = os.path.abspath(settings.debug_environments)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        pass
    return folder


def suite_read_paths(settings: Settings) -> list[str]:
    """What suite units read besides the settings' paths: pytest's folder, the environments, and the system's
    time-zone database (the standard library's zoneinfo and date libraries look there; without it their tests read
    outside the sandbox's paths)."""
    import zoneinfo

    return [pytest_path(), environments_folder(settings),
            *(path for path in zoneinfo.TZPATH if os.path.isdir(path))]


def pytest_modules() -> tuple[str, ...]:
    """What a suite unit's pytest.main imports that `import pytest` does not: its built-in plugins, and the modules
    of pytest's own requirements and of the standard library they import only when pytest starts (reading
    pyproject.toml, checking minversion, its debugger and junitxml plugins). Imported once in the zygote, they cost a
    unit nothing; a unit importing them itself spent 0.01 to 0.03 CPU s, up to a fifth of a one-test run."""
    from _pytest.config import default_plugins

    return ("pytest", *(f"_pytest.{name}" for name in default_plugins), "tomllib", "packaging.version", "difflib",
            "pdb", "xml.etree.ElementTree")


def suite_options(settings: Settings) -> dict:
    """The suite sandbox's arguments to Sandbox.from_settings: it may also read suite_read_paths, its zygote has
    pytest imported (pytest_modules), and it hashes strings with a fixed seed, so that tests parametrized over a set
    get the same ids in every run (the pipeline's records name them)."""
    return {"read_paths": [*csv_setting(settings.sandbox_read_paths), *suite_read_paths(settings)],
            "hash_seed": SUITE_HASH_SEED, "preload": (pytest_modules(), pytest_path())}


@lru_cache(maxsize=2)
def suite_sandbox(settings_json: str | None = None):
    """The suite sandbox of this process (by the service's settings), SUITE_WORKERS units at once. On a stack
    (FLAWFORGE_SANDBOX_URL) it is the trace-executor's, made with the same options."""
    from flawforge.sandbox.engine import Sandbox

    settings = Settings.model_validate_json(settings_json) if settings_json else Settings()
    return Sandbox.from_settings(settings, workers=SUITE_WORKERS, **suite_options(settings))
