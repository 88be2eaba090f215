"""docs/architecture.md's pictures against the code: every import in the source (parsed, not run: lazy imports
inside functions count too) follows the layers and arrows the first picture draws, and each service consumes
exactly the queues the second one shows, on the port it shows."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"
SOURCES = {"flawforge": REPO / "flawforge", "flawforge.proto": REPO / "proto", "flawforge.services": REPO / "services"}
ARROW = "─►"

def fenced_block(marker: str) -> list[str]:
    """The lines of the fenced block that follows the HTML comment `marker` in docs/architecture.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"<!-- {marker}")
    opening = text.index("```", start)
    body = text.index("\n", opening) + 1
    return text[body:text.index("```", body)].splitlines()


def layers() -> tuple[dict[str, int], dict[str, set[str]]]:
    """From the import picture: each package's layer (0 the highest) and its arrows within its layer. A layer's
    line is its label, then its packages, some with arrows ('a ─► b, c'), two spaces or more apart; lines of
    box drawing only are the picture's connectors."""
    layer_of: dict[str, int] = {}
    arrows: dict[str, set[str]] = {}
    rows = [line for line in fenced_block("import layers") if re.match(r"\w", line)]
    for number, line in enumerate(rows):
        label, *entries = re.split(r"\s{2,}", line.strip())
        for entry in entries:
            source, _, targets = (part.strip() for part in entry.partition(ARROW))
            if " " in source:  # a note after the packages: words apart by one space
                break
            layer_of[source] = number
            arrows.setdefault(source, set()).update(t.strip() for t in targets.split(",") if t.strip())
    for source, targets in arrows.items():
        for target in targets:
            assert layer_of.get(target) == layer_of[source], f"the arrow {source} ─► {target} leaves its layer"
    return layer_of, arrows


def package_of(module: str) -> str | None:
    """The picture's name for the package a module is in; None for a module outside Flawforge."""
    parts = module.split(".")
    if parts[0] != "flawforge":
        return None
    if parts[1:3] == ["sandbox", "runtime"]:
        return "sandbox.runtime"
    return parts[1] if len(parts) > 1 else "flawforge"


def source_files():
    """(path relative to the repository, its module name) of every Python file of Flawforge."""
    for package, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            module = ".".join([package, *path.relative_to(root).with_suffix("").parts]).removesuffix(".__init__")
            yield path, module


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: a relative import"
            found.append((node.lineno, node.module))
    return found


def allowed(layer_of: dict[str, int], arrows: dict[str, set[str]], source: str, target: str) -> bool:
    return source == target or layer_of[target] > layer_of[source] or target in arrows[source]


def test_the_picture_forbids_what_the_house_rule_forbids():
    """The picture itself cannot drift into allowing the imports the rule is there to stop."""
    layer_of, arrows = layers()
    for source, target in [("jobs", "services"), ("runtime", "services"), ("runtime", "jobs"),
                           ("services", "pipelines"), ("pipelines", "services"), ("inference", "pressure"),
                           ("jobs", "pipelines"), ("runtime", "assembly"), ("math", "jobs")]:
        assert not allowed(layer_of, arrows, source, target), f"the picture lets {source} import {target}"
    assert allowed(layer_of, arrows, "pressure", "inference") and allowed(layer_of, arrows, "services", "jobs")


def test_every_import_follows_the_picture():
    layer_of, arrows = layers()
    files = list(source_files())
    assert {package_of(module) for _, module in files} == set(layer_of), \
        f"the picture's packages are not the code's: {sorted(set(layer_of) ^ {package_of(m) for _, m in files})}"
    against, unplaced = [], set()
    for path, module in files:
        source = package_of(module)
        relative = str(path.relative_to(REPO))
        for line, imported in imports(path):
            target = package_of(imported)
            if target is None:
                continue
            unplaced |= {p for p in (source, target) if p not in layer_of}
            if unplaced or allowed(layer_of, arrows, source, target):
                continue
            against.append(f"{relative}:{line}: {source} imports {imported} ({target})")
    assert not unplaced, f"packages in no layer of {ARCHITECTURE.name}: {sorted(unplaced)}"
    assert not against, "imports the picture in docs/architecture.md does not allow:\n" + "\n".join(against)


def drawn_services() -> tuple[dict[str, tuple[int, set[str]]], set[str]]:
    """From the services picture: each service's port and the queues it consumes (a row under the header, and the
    rows below it that continue its 'consumes' column); and the queues its pipelines publish."""
    rows = fenced_block("services and queues")
    header = next(i for i, line in enumerate(rows) if line.split()[:3] == ["service", "port", "consumes"])
    consumes_at = rows[header].index("consumes")
    publishes_at = rows[header].index("its pipelines publish")
    services: dict[str, tuple[int, set[str]]] = {}
    published: set[str] = set()
    current = None
    for line in rows[header + 1:]:
        if not line.strip():
            continue
        name = line[:consumes_at].split()
        if name:
            current = name[0]
            services[current] = (int(name[1]), set())
        cell = line[consumes_at:publishes_at]
        services[current][1].update(q.strip() for q in cell.split(",") if q.strip())
        published.update(re.findall(r"^[a-z-]+\.[a-z.-]+$", line[publishes_at:].strip()))
    return services, published


def test_the_services_picture_is_every_service_with_its_port_and_queues():
    from flawforge.services import SERVICE_NAMES, consumers_of, load_service

    actual = {name: (load_service(name).port, {c.queue for c in consumers_of(load_service(name))})
              for name in SERVICE_NAMES}
    services, published = drawn_services()
    assert services == actual
    # what the pipelines publish, some service consumes
    assert published and published <= set().union(*(queues for _, queues in actual.values())), published
