"""docker-compose.yml, checked for structure (this machine has no Docker engine to run it).

Every command a service runs is parsed by the real argument parser of the program it calls, so a renamed option
or a missing subcommand fails here rather than in a container.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from labeldist.cli import build_parser as labeldist_parser
from labeldist.core.extras import EXTRAS, KIND_EXTRAS
from labeldist.trainer.cli import build_parser as trainer_parser

REPO = Path(__file__).resolve().parents[2]
SERVICES = {"scheduler", "worker", "precompute", "api", "trainer"}
SCHEDULER_URL = "tcp://scheduler:8786"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def command(service: dict) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def mounts(service: dict) -> dict[str, str]:
    """Mount point -> 'volume' or 'volume:ro'."""
    out = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        out[target] = source + (":" + mode[0] if mode else "")
    return out


def main_job_commands(env: dict[str, str]) -> list[list[str]]:
    """The labeldist commands of tools/main_job.sh (conditional ones too) with the service's environment
    substituted."""
    text = (REPO / "tools" / "main_job.sh").read_text().replace("\\\n", " ")
    cluster = (
        f"--scheduler {env['SCHEDULER']} --min-workers {env.get('MIN_WORKERS', 1)}" if env.get("SCHEDULER") else ""
    )
    values = {
        "LABELDIST": "labeldist",
        "DATA": "data",
        "STORES": env.get("STORES", "stores"),
        "MODELS": env.get("MODELS", "models"),
        "CLUSTER": cluster,
    }
    commands = []
    for line in text.splitlines():
        if line.lstrip().startswith("$LABELDIST "):
            line = re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], line)
            commands.append(shlex.split(line))
    return commands


def main_job_stores(env: dict[str, str]) -> list[list[str]]:
    """The ``labeldist precompute`` commands of the main job."""
    return [cmd for cmd in main_job_commands(env) if cmd[1] == "precompute"]


def build_extras(service: dict, default: str) -> tuple[str, set[str]]:
    """(build context, the extras its image installs: the EXTRAS build argument, else the Dockerfile's default;
    ``all`` expanded)."""
    build = service["build"]
    context, args = (build, {}) if isinstance(build, str) else (build["context"], build.get("args") or {})
    names = {e.strip() for e in str(args.get("EXTRAS", default)).split(",") if e.strip()}
    return context, (names - {"all"}) | (set(EXTRAS) if "all" in names else set())


def extras_needed(args: argparse.Namespace) -> set[str]:
    """The extras a parsed ``labeldist`` command needs (labeldist.core.extras): serve, sts, or its kind's."""
    if args.command == "precompute":
        return {KIND_EXTRAS[args.kind_name][0]} if args.kind_name in KIND_EXTRAS else set()
    return {"serve": {"serve"}, "sts": {"sts"}}.get(args.command, set())


def test_each_service_is_built_from_the_dockerfile_with_the_extras_its_commands_need(
    compose: dict, services: dict
) -> None:
    assert set(services) == SERVICES
    dockerfile = (REPO / "Dockerfile").read_text()
    (default,) = re.findall(r"^ARG EXTRAS=(.*)$", dockerfile, re.M)
    assert default == "all"
    assert re.search(r'^RUN pip install -e "\.\$\{EXTRAS:\+\[\$EXTRAS\]\}"$', dockerfile, re.M), "installs EXTRAS"
    extras = {}
    for name, service in services.items():
        context, extras[name] = build_extras(service, default)
        assert context == ".", name
    # the worker runs the main job's tasks and nothing else: exactly the extras of its stores' kinds
    jobs = [labeldist_parser().parse_args(cmd[1:]) for cmd in main_job_commands(services["precompute"]["environment"])]
    stores = set().union(*(extras_needed(a) for a in jobs if a.command == "precompute"))
    assert stores == {"sts"}, stores  # the caption and sentence stores
    assert extras["worker"] == stores, "the workers' image: the smallest install its jobs need"
    # the scheduler and the main job's client in the workers' environment (Dask wants one), which has all they run
    for name in ("scheduler", "precompute"):
        assert services[name]["image"] == services["worker"]["image"] and extras[name] == extras["worker"], name
    assert set().union(*(extras_needed(a) for a in jobs)) <= extras["precompute"]  # `sts fit` too
    # the api serves (and computes on demand) every kind the main job stores; the trainer trains
    api = labeldist_parser().parse_args(command(services["api"])[1:])
    assert extras_needed(api) | stores <= extras["api"]
    assert "train" in extras["trainer"] and command(services["trainer"])[2].lstrip().startswith("trainer ")
    for name in ("api", "trainer"):
        assert services[name]["image"] == "labeldist:latest" and extras[name] == set(EXTRAS), name
    # one image name per install: a smaller build never replaces the full one
    images = {services[n]["image"]: frozenset(extras[n]) for n in services}
    assert len(images) == len(set(images.values())) == 2, images
    # what the commands use must be in the image
    for folder in ("labeldist", "api", "trainer", "data", "tools"):
        assert re.search(rf"^COPY {folder} {folder}$", dockerfile, re.M), folder
    assert set(compose["volumes"]) == {"stores", "models", "runs"}


def test_the_scheduler_listens_on_8786_with_a_healthcheck(services: dict) -> None:
    s = services["scheduler"]
    cmd = command(s)
    assert cmd[:2] == ["dask", "scheduler"] and cmd[cmd.index("--port") + 1] == "8786"
    assert "8786" in " ".join(s["healthcheck"]["test"])
    assert all(p.startswith("127.0.0.1:") for p in s.get("ports", [])), "published on the host's loopback only"


def test_workers_scale_and_write_into_the_shared_volume(services: dict) -> None:
    w = services["worker"]
    cmd = command(w)
    assert cmd[:2] == ["dask", "worker"] and SCHEDULER_URL in cmd
    assert cmd[cmd.index("--nthreads") + 1] == "1"
    # `docker compose up --scale worker=N` needs neither a fixed container name nor a published port
    assert "container_name" not in w and "ports" not in w
    assert mounts(w)["/stores"] == "stores", "workers write chunks: the store volume, read-write"
    assert mounts(w)["/app/models"] == "models:ro", "tasks load the fine-tuned sentence scorer"
    assert w["depends_on"]["scheduler"]["condition"] == "service_healthy"


def test_precompute_is_a_one_shot_main_job_on_the_cluster(services: dict) -> None:
    p = services["precompute"]
    assert command(p) == ["sh", "tools/main_job.sh"]
    assert p["environment"]["SCHEDULER"] == SCHEDULER_URL and p["environment"]["STORES"] == "/stores"
    assert p["restart"] == "no"
    assert mounts(p)["/stores"] == "stores"
    # the sentence embeddings the job makes once are read by the workers: a cache on the shared volume, in a
    # dot-folder that neither the service nor the store check takes for a store
    cache = p["environment"]["LABELDIST_CACHE"]
    assert cache.startswith("/stores/.") and services["worker"]["environment"]["LABELDIST_CACHE"] == cache
    assert p["depends_on"]["scheduler"]["condition"] == "service_healthy" and "worker" in p["depends_on"]
    env = p["environment"]
    jobs = main_job_commands(env)
    # every labeldist line parses (SystemExit on an unknown option or subcommand), the conditional fit too
    parsed = [labeldist_parser().parse_args(cmd[1:]) for cmd in jobs]
    steps = [" ".join(cmd[1:3]) for cmd in jobs]
    assert steps == ["precompute pose", "precompute layout", "precompute captions", "sts fit", "precompute sentences"]
    for args in parsed:
        if args.command == "precompute":
            assert args.scheduler == SCHEDULER_URL
            # the job waits for every worker replica: they may join after it starts
            assert args.min_workers == int(env["MIN_WORKERS"]) == services["worker"]["deploy"]["replicas"]
            assert args.out.startswith("/stores/"), "stores must land in the volume the workers and the api mount"
    # the sentence store's scorer: fine-tuned into the models volume, which survives the container and which the
    # workers mount as well (they load the model)
    fit, sentences = parsed[3], parsed[4]
    assert (fit.architecture, fit.loss, fit.epochs, fit.seed) == ("bi", "cosine", 1, 0)
    models = env["MODELS"]
    assert mounts(p)[models] == "models" and mounts(services["worker"])[models] == "models:ro"
    assert fit.out == f"{models}/sts-bi-cosine" == sentences.model
    assert sentences.scorer == "coarse_to_fine" and sentences.train == fit.train
    script = (REPO / "tools" / "main_job.sh").read_text()
    assert f'if [ ! -f "$MODELS/{Path(fit.out).name}/labeldist_sts.json" ]; then' in script, "trained once only"


def test_make_run_and_compose_run_the_same_main_job(services: dict) -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^run:.*\n\t.*sh tools/main_job\.sh$", makefile, re.M)
    assert command(services["precompute"])[-1] == "tools/main_job.sh"
    # without SCHEDULER the script runs each job on its own LocalCluster
    assert all("--scheduler" not in cmd for cmd in main_job_commands({"STORES": "stores"}))
    # and, without MODELS, fine-tunes the sentence scorer into models/ (git-ignored)
    assert [cmd[-2:] for cmd in main_job_commands({}) if cmd[1] == "sts"] == [["--out", "models/sts-bi-cosine"]]


def test_the_small_main_job_waits_for_the_two_workers_it_runs_on() -> None:
    """docker-compose.small.yml's job (make compose-small, which starts two workers) waits for both: a job that
    started before its workers had joined failed with "no valid workers found"."""
    small = yaml.safe_load((REPO / "docker-compose.small.yml").read_text())["services"]
    args = labeldist_parser().parse_args(command(small["precompute"])[1:])
    assert args.scheduler == SCHEDULER_URL and args.min_workers == 2
    assert "--scale worker=2" in (REPO / "tools" / "compose_small.sh").read_text()


def test_the_api_starts_on_a_complete_store_with_a_healthcheck(services: dict) -> None:
    a = services["api"]
    cmd = command(a)
    args = labeldist_parser().parse_args(cmd[1:])
    assert cmd[0] == "labeldist" and args.command == "serve" and args.stores == "/stores"
    assert mounts(a)["/stores"] == "stores:ro", "the service only reads stores"
    assert a["depends_on"]["precompute"]["condition"] == "service_completed_successfully"
    probe = " ".join(a["healthcheck"]["test"])
    assert f"127.0.0.1:{args.port}/healthz" in probe
    assert a["ports"] == [f"127.0.0.1:{args.port}:{args.port}"]
    assert "--host" in cmd and args.host == "0.0.0.0", "off loopback inside the container: compute needs the key"


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation of ``value`` (``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?error}``, ``${VAR?error}``) with ``env``; ValueError with the message where compose would refuse."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2) or "", match.group(3) or ""
        unset = name not in env or (op.startswith(":") and env[name] == "")
        if not unset:
            return env[name]
        if op.endswith("?"):
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return arg if op.endswith("-") else ""

    return re.sub(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}", one, value)


def test_the_api_key_must_be_set_by_the_user(services: dict) -> None:
    """No default key (it was the literal ``change-me``): compose refuses to start the api without one, and
    passes the user's key on unchanged."""
    value = services["api"]["environment"]["LABELDIST_API_KEY"]
    with pytest.raises(ValueError, match="set LABELDIST_API_KEY"):
        interpolate(value, {})
    with pytest.raises(ValueError, match="set LABELDIST_API_KEY"):
        interpolate(value, {"LABELDIST_API_KEY": ""})
    assert interpolate(value, {"LABELDIST_API_KEY": "a-key-of-mine"}) == "a-key-of-mine"
    for name in ("docker-compose.yml", "docker-compose.gpu.yml"):
        text = (REPO / name).read_text()
        assert "change-me" not in text, name
        assert not re.search(r"LABELDIST_API_KEY:?-", text), f"{name}: a default for the key"


def test_the_trainer_pulls_from_the_api_once_it_is_healthy(services: dict) -> None:
    t = services["trainer"]
    cmd = command(t)
    assert cmd[:2] == ["sh", "-c"]
    steps = [shlex.split(part) for part in cmd[2].split("&&")]
    assert [s[:2] for s in steps] == [["trainer", "demo-inputs"], ["trainer", "fit"]]
    parsed = [trainer_parser().parse_args(s[1:]) for s in steps]
    fit = parsed[1]
    api_port = labeldist_parser().parse_args(command(services["api"])[1:]).port
    assert fit.url == f"http://api:{api_port}" and fit.device == "auto"
    built = {Path(c[c.index("--out") + 1]).name for c in main_job_stores({"STORES": "/stores"})}
    assert fit.store in built and parsed[0].store == f"/stores/{fit.store}"
    assert fit.features == parsed[0].out
    assert t["depends_on"]["api"]["condition"] == "service_healthy"
    assert mounts(t)["/runs"] == "runs"


def test_the_gpu_override_reserves_a_gpu_for_the_trainer() -> None:
    override = yaml.safe_load((REPO / "docker-compose.gpu.yml").read_text())
    assert set(override["services"]) == {"trainer"}
    trainer = override["services"]["trainer"]
    devices = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"] and devices[0]["count"] == 1
    assert "cu" in trainer["build"]["args"]["TORCH_INDEX"], "a CUDA build of torch"
    assert trainer["image"] != "labeldist:latest", "the CUDA image must not replace the CPU one"


# ------------------------------------------------------------------------------------------ several hosts
@pytest.fixture(scope="module")
def cluster_services() -> dict:
    return yaml.safe_load((REPO / "docker-compose.cluster.yml").read_text())


def test_the_cluster_file_shares_one_nfs_export_and_one_image_on_every_host(cluster_services: dict) -> None:
    """docker-compose.cluster.yml (docs/cluster.md): every service from one image built from the Dockerfile; the
    stores and models volumes the same NFS export on every host, which compose refuses to create without
    NFS_SERVER and NFS_EXPORT; every service that reads or writes stores mounts it at /stores and shares one
    LABELDIST_CACHE there."""
    services = cluster_services["services"]
    assert set(services) == {"scheduler", "worker", "precompute", "api"}
    assert {s["image"] for s in services.values()} == {"labeldist:cluster-all"}
    assert all(s["build"]["context"] == "." and s["build"]["args"]["EXTRAS"] == "all" for s in services.values())
    env = {"NFS_SERVER": "10.0.0.5", "NFS_EXPORT": "/export/labeldist"}
    for name in ("stores", "models"):
        volume = cluster_services["volumes"][name]
        assert volume["driver_opts"]["type"] == "nfs"
        assert interpolate(volume["driver_opts"]["device"], env) == f":/export/labeldist/{name}"
        assert interpolate(volume["driver_opts"]["o"], env).startswith("addr=10.0.0.5,")
        with pytest.raises(ValueError, match="set NFS_SERVER"):
            interpolate(volume["driver_opts"]["o"], {})
    for name in ("worker", "precompute", "api"):
        assert mounts(services[name])["/stores"].split(":")[0] == "stores", name
        assert services[name]["environment"]["LABELDIST_CACHE"] == "/stores/.cache", name
    assert mounts(services["api"])["/stores"] == "stores:ro"


def test_the_cluster_workers_and_job_find_the_scheduler_of_another_host(cluster_services: dict) -> None:
    services = cluster_services["services"]
    assert "8786:8786" in services["scheduler"]["ports"], "reachable from the other hosts"
    host = {"SCHEDULER_HOST": "10.0.0.10"}
    worker = interpolate(" ".join(command(services["worker"])), host)
    assert "dask worker tcp://10.0.0.10:8786" in worker and "--nthreads 1" in worker
    with pytest.raises(ValueError, match="set SCHEDULER_HOST"):
        interpolate(" ".join(command(services["worker"])), {})
    job = services["precompute"]["environment"]
    assert interpolate(job["SCHEDULER"], host) == "tcp://10.0.0.10:8786"
    stores = main_job_stores({"SCHEDULER": "tcp://10.0.0.10:8786", "STORES": job["STORES"]})
    assert stores and all("--scheduler" in cmd and cmd[cmd.index("--out") + 1].startswith("/stores/") for cmd in stores)
