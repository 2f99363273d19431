"""Deployment artifacts, checked offline: the Helm chart rendered through the Helm SDK (helm-python-sdk)
and every manifest validated with `kubernetes-validate --strict`; the compose file through Docker
Compose v2's own `config`; the Dockerfiles with hadolint; envoy.yaml against Envoy's API types; the
systemd units with `systemd-analyze verify`.

Tools come with the dev extra. A missing one skips with its reason, or fails when
VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1 (CI).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from engine_sidecar.engines.voxtral.flags import parse_items, preset_options
from engine_sidecar.engines.voxtral.presets import get_preset
from tests.helpers import ROOT

DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "voxgate"
BIN = Path(sys.executable).parent
# The chart needs native sidecars (1.29); the newest schemas kubernetes-validate ships too.
KUBE_VERSIONS = ("1.29.0", "1.37.0")
DRAIN_SERVICE = "voxgate.v1.Speech"
# Value sets the chart must render and validate: defaults, every preset, all optional parts on.
RENDERS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "datacenter": {"preset": "datacenter"},
    "cpu": {"preset": "cpu"},
    "everything": {
        "autoscaling": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "engine": {"cache": {"existingClaim": "voxtral-cache"}, "hfTokenSecret": "hf"},
        "serviceArgs": ["--idle-timeout-s", "60"],
        "serviceEnv": {"VOXGATE_LOG_LEVEL": "debug"},
    },
    "plain-sidecar": {"engine": {"nativeSidecar": False}, "drain": {"graceSeconds": 60}},
    # TLS (its CA for the probes from the TLS Secret itself, as cert-manager writes it) and tokens.
    "tls-auth": {
        "tls": {"enabled": True, "secretName": "speech-tls"},
        "auth": {"enabled": True, "secretName": "speech-tokens", "key": "tokens.txt"},
    },
    # Mutual TLS, the probes with their own client certificate and CA, a named server certificate.
    "mtls": {
        "tls": {
            "enabled": True,
            "secretName": "speech-tls",
            "clientCA": {"secretName": "clients-ca", "key": "bundle.pem", "probeCertSecretName": "probe-client"},
            "probe": {"caSecretName": "speech-ca", "caKey": "root.pem", "serverName": "speech.example.com"},
        },
        "auth": {"enabled": True, "secretName": "speech-tokens", "key": "tokens.txt"},
    },
}
# What each secured render must mount: flag → (Secret, key) of the file it names.
SECURED: dict[str, dict[str, tuple[str, str]]] = {
    "tls-auth": {
        "--tls-cert": ("speech-tls", "tls.crt"),
        "--tls-key": ("speech-tls", "tls.key"),
        "--auth-tokens-file": ("speech-tokens", "tokens.txt"),
    },
    "mtls": {
        "--tls-cert": ("speech-tls", "tls.crt"),
        "--tls-key": ("speech-tls", "tls.key"),
        "--tls-client-ca": ("clients-ca", "bundle.pem"),
        "--auth-tokens-file": ("speech-tokens", "tokens.txt"),
    },
}
# ...and what the service's probes present: flag → (Secret, key).
PROBE_FILES: dict[str, dict[str, tuple[str, str]]] = {
    "tls-auth": {"--tls-ca": ("speech-tls", "ca.crt")},
    "mtls": {
        "--tls-ca": ("speech-ca", "root.pem"),
        "--tls-cert": ("probe-client", "tls.crt"),
        "--tls-key": ("probe-client", "tls.key"),
    },
}


def require(what: str, available: bool) -> None:
    if available:
        return
    if os.environ.get("VOXGATE_REQUIRE_CLIENT_TOOLCHAINS") == "1":
        pytest.fail(f"{what} is required in CI (VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1)")
    pytest.skip(f"{what} is not installed (dev extra / scripts/ci_toolchains.sh)")


def tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    require(name, path is not None)
    return str(path)


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        import helm_python as helm
    except ImportError:
        require("helm-python-sdk", False)
    chart = helm.Chart.load(CHART)
    out = chart.render(values, name="speech", namespace="voxgate", is_install=True)
    docs = [d for name, text in sorted(out.items()) if name.endswith(".yaml") for d in yaml.safe_load_all(text)]
    return [d for d in docs if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_containers(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(pod spec, service container, engine container)."""
    (deployment,) = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    everything = pod.get("initContainers", []) + pod["containers"]
    service = next(c for c in everything if c["name"] == "service")
    engine = next(c for c in everything if c["name"] == "engine")
    return pod, service, engine


def arg(container: dict[str, Any], flag: str) -> str:
    args = container["args"]
    return str(args[args.index(flag) + 1])


def engine_options(args: list[str]) -> dict[str, Any]:
    """The engine options a sidecar's command line sets with `--engine-option KEY=VALUE`, read as it reads them."""
    return parse_items(value for flag, value in zip(args, args[1:], strict=False) if flag == "--engine-option")


def flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def mounted_secret(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) of the file at `path`, which must come from a read-only Secret mount of `container`."""
    directory, key = path.rsplit("/", 1)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount.get("readOnly") is True, mount
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["defaultMode"] == 0o440, volume  # the pod's user through fsGroup; no one else
    return volume["secret"]["secretName"], key


def test_helm_lint_is_clean() -> None:
    try:
        import helm_python as helm
    except ImportError:
        require("helm-python-sdk", False)
    report = helm.lint(CHART, strict=True, kube_version="v1.29.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_every_rendered_manifest_is_valid_kubernetes(name: str, tmp_path: Path) -> None:
    docs = render(RENDERS[name])
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "PodDisruptionBudget", "ServiceAccount"} <= kinds
    files = []
    for i, doc in enumerate(docs):
        path = tmp_path / f"{i:02d}-{doc['kind']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        files.append(str(path))
    validate = tool("kubernetes-validate")
    for version in KUBE_VERSIONS:
        out = subprocess.run([validate, "--strict", "-k", version, *files], capture_output=True, text=True, timeout=120)
        report = out.stdout + out.stderr
        assert out.returncode == 0, report
        # kubernetes-validate has no CRD schemas: the ServiceMonitor is checked by hand below.
        for line in report.splitlines():
            assert line.startswith("INFO") or "kind ServiceMonitor" in line, line


def test_one_pod_is_service_plus_engine_sharing_the_socket() -> None:
    pod, service, engine = pod_containers(render({}))
    socket = arg(service, "--sidecar-socket")
    assert "--sidecar-external" in service["args"] and arg(engine, "--socket") == socket
    (mount,) = [m for m in service["volumeMounts"] if socket.startswith(m["mountPath"] + "/")]
    assert mount in engine["volumeMounts"]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["emptyDir"]["medium"] == "Memory"
    # Same user in both containers: the socket is 0600.
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"]
    # The engine is a native sidecar: started before the service, stopped after it has drained.
    assert engine in pod["initContainers"] and engine["restartPolicy"] == "Always"


@pytest.mark.parametrize("preset", ["16gb", "datacenter", "cpu"])
def test_the_gpu_is_requested_by_the_engine_only(preset: str) -> None:
    _, service, engine = pod_containers(render({"preset": preset}))
    assert "nvidia.com/gpu" not in json.dumps(service)
    if preset == "cpu":
        assert "nvidia.com/gpu" not in json.dumps(engine)
    else:
        assert engine["resources"]["limits"]["nvidia.com/gpu"] == engine["resources"]["requests"]["nvidia.com/gpu"] == 1


@pytest.mark.parametrize("preset", ["16gb", "datacenter"])
def test_chart_presets_match_voxgate_presets(preset: str) -> None:
    """The chart's engine options are what `voxgate serve --preset` would send the sidecar."""
    _, service, engine = pod_containers(render({"preset": preset}))
    assert engine_options(engine["args"]) == preset_options(preset)
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert dict(get_preset(preset).env).items() <= env.items()
    sessions = str(preset_options(preset)["max_num_seqs"])
    assert arg(engine, "--max-sessions") == arg(service, "--max-sessions") == sessions


def test_probes_use_grpc_health_liveness_and_readiness() -> None:
    _, service, engine = pod_containers(render({}))
    port = int(arg(service, "--port"))
    assert service["livenessProbe"]["grpc"] == {"port": port, "service": ""}
    assert service["readinessProbe"]["grpc"] == {"port": port, "service": DRAIN_SERVICE}
    assert engine["startupProbe"]["exec"]["command"][:2] == ["voxgate-healthcheck", "--socket"]


@pytest.mark.parametrize("name", sorted(SECURED))
def test_tls_and_tokens_are_secrets_mounted_read_only_into_the_service_only(name: str) -> None:
    pod, service, engine = pod_containers(render(RENDERS[name]))
    for flag, secret in SECURED[name].items():
        assert mounted_secret(pod, service, arg(service, flag)) == secret, flag
    assert ("--tls-client-ca" in service["args"]) == (name == "mtls")
    secret_volumes = {v["name"] for v in pod["volumes"] if "secret" in v}
    assert not secret_volumes & {m["name"] for m in engine["volumeMounts"]}, "the engine sees no keys or tokens"
    assert len(secret_volumes) == len({v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v})
    # Defaults stay plaintext and open, with nothing mounted.
    _, plain, _ = pod_containers(render({}))
    assert not {"--tls-cert", "--tls-key", "--tls-client-ca", "--auth-tokens-file"} & set(plain["args"])


@pytest.mark.parametrize("name", sorted(SECURED))
def test_with_tls_the_service_probes_are_exec_probes_over_tls(name: str) -> None:
    """Kubernetes' gRPC probe speaks plaintext only: `voxgate status --check` over TLS (mTLS) instead."""
    pod, service, _ = pod_containers(render(RENDERS[name]))
    port = int(arg(service, "--port"))
    for probe, check in (("livenessProbe", "live"), ("readinessProbe", "ready")):
        assert "grpc" not in service[probe]
        command = service[probe]["exec"]["command"]
        assert command[:4] == ["voxgate", "status", "--check", check]
        assert flag_value(command, "--server") == f"127.0.0.1:{port}"
        assert float(flag_value(command, "--timeout")) < service[probe]["timeoutSeconds"]
        for flag, secret in PROBE_FILES[name].items():
            assert mounted_secret(pod, service, flag_value(command, flag)) == secret, flag
        assert ("--tls-cert" in command) == (name == "mtls")
        assert "--token" not in command, "health needs no token"
        name_in_cert = "speech.example.com" if name == "mtls" else "speech-voxgate.voxgate.svc"
        assert flag_value(command, "--tls-server-name") == name_in_cert
    assert service["readinessProbe"]["periodSeconds"] >= service["readinessProbe"]["timeoutSeconds"]


def test_tls_probes_may_trust_the_system_roots_and_reuse_the_server_certificate() -> None:
    values = {
        "tls": {
            "enabled": True,
            "secretName": "speech-tls",
            "clientCA": {"secretName": "clients-ca"},
            "probe": {"caKey": ""},
        }
    }
    pod, service, _ = pod_containers(render(values))
    command = service["readinessProbe"]["exec"]["command"]
    assert "--tls" in command and "--tls-ca" not in command
    assert mounted_secret(pod, service, flag_value(command, "--tls-cert")) == ("speech-tls", "tls.crt")
    assert mounted_secret(pod, service, flag_value(command, "--tls-key")) == ("speech-tls", "tls.key")
    assert mounted_secret(pod, service, arg(service, "--tls-client-ca")) == ("clients-ca", "ca.crt")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tls": {"enabled": True}}, "tls.secretName"),
        ({"tls": {"clientCA": {"secretName": "clients-ca"}}}, "tls.enabled"),
        ({"auth": {"enabled": True}}, "auth.secretName"),
    ],
)
def test_security_settings_that_cannot_work_fail_to_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception, match=message):
        render(values)


@pytest.mark.parametrize("name", sorted(SECURED))
def test_rendered_flags_and_probes_work_against_a_real_server(name: str, tmp_path: Path) -> None:
    """The Secrets laid out as the pod would see them, `voxgate serve` with the chart's security flags, and
    the chart's probe commands run against it: SERVING over TLS (mTLS), with tokens on and no token sent."""
    from service.security import hash_token
    from tests.helpers import start_server
    from tests.security.pki import Authority

    ca = Authority(tmp_path, "ca")
    server_cert = ca.issue("server", server=True)  # localhost, 127.0.0.1
    probe_cert = ca.issue("probe", server=False)
    secrets = {
        "speech-tls": {
            "tls.crt": server_cert.cert.read_bytes(),
            "tls.key": server_cert.key.read_bytes(),
            "ca.crt": ca.pem,
        },
        "speech-ca": {"root.pem": ca.pem},
        "clients-ca": {"bundle.pem": ca.pem},
        "probe-client": {"tls.crt": probe_cert.cert.read_bytes(), "tls.key": probe_cert.key.read_bytes()},
        "speech-tokens": {"tokens.txt": f"{hash_token('a-token')} acme\n".encode()},
    }
    pod, service, _ = pod_containers(render(merged(RENDERS[name], {"tls": {"probe": {"serverName": "localhost"}}})))
    # Each Secret volume of the service container becomes a directory here, in place of its mountPath.
    where: dict[str, Path] = {}
    for mount in service["volumeMounts"]:
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        if "secret" in volume:
            directory = tmp_path / "mounts" / mount["name"]
            directory.mkdir(parents=True)
            for key, data in secrets[volume["secret"]["secretName"]].items():
                (directory / key).write_bytes(data)
            where[mount["mountPath"]] = directory

    def local(path: str) -> str:
        directory, _, key = path.rpartition("/")
        return str(where[directory] / key) if directory in where else path

    flags = [a for flag in SECURED[name] for a in (flag, local(arg(service, flag)))]
    client = grpc.ssl_channel_credentials(
        ca.pem, private_key=probe_cert.key.read_bytes(), certificate_chain=probe_cert.cert.read_bytes()
    )
    server = start_server(tmp_path, *flags, engine="fake", credentials=client)
    try:

        def probe(command: list[str]) -> subprocess.CompletedProcess[str]:
            command = [local(c) for c in command]
            command[command.index("--server") + 1] = server.target
            assert command[0] == "voxgate"
            env = {k: v for k, v in os.environ.items() if k != "VOXGATE_TOKEN"}
            return subprocess.run(
                [sys.executable, "-m", "service", *command[1:]],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )

        for which in ("livenessProbe", "readinessProbe"):
            command = service[which]["exec"]["command"]
            done = probe(command)
            assert done.returncode == 0, (which, done.stderr)
        # ...and they do check: plaintext fails, and without its client certificate under mTLS too.
        ready = service["readinessProbe"]["exec"]["command"]
        plaintext = probe(ready[: ready.index("--timeout")])
        assert plaintext.returncode == 1 and "UNAVAILABLE" in plaintext.stderr, plaintext.stderr
        if name == "mtls":
            i = ready.index("--tls-cert")
            no_cert = probe(ready[:i] + ready[i + 4 :])
            assert no_cert.returncode == 1 and "UNAVAILABLE" in no_cert.stderr, no_cert.stderr
        described = '"tls": "mutual"' if name == "mtls" else '"tls": true'
        assert described in server.log() and '"auth": "tokens"' in server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("name", ["defaults", "plain-sidecar"])
def test_termination_grace_covers_prestop_and_drain(name: str) -> None:
    values = RENDERS[name]
    grace = values.get("drain", {}).get("graceSeconds", 30)
    pod, service, engine = pod_containers(render(values))
    prestop = int(service["lifecycle"]["preStop"]["exec"]["command"][1])
    assert float(arg(service, "--drain-grace-s")) == grace
    assert pod["terminationGracePeriodSeconds"] >= prestop + grace + 10
    if name == "plain-sidecar":  # a plain engine container must outlive the service's drain
        engine_wait = int(engine["lifecycle"]["preStop"]["exec"]["command"][1])
        assert prestop + grace < engine_wait < pod["terminationGracePeriodSeconds"]


def test_pdb_hpa_and_servicemonitor_target_the_pods_and_the_metric() -> None:
    docs = render(RENDERS["everything"])
    (deployment,) = by_kind(docs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "voxgate_active_sessions"
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    services = [
        s
        for s in by_kind(docs, "Service")
        if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert any(p["name"] == endpoint["port"] for s in services for p in s["spec"]["ports"])
    _, service, _ = pod_containers(docs)
    assert {"name": "metrics", "containerPort": int(arg(service, "--metrics-port")), "protocol": "TCP"} in service[
        "ports"
    ]


def test_unknown_preset_fails_to_render() -> None:
    with pytest.raises(Exception, match="preset"):
        render({"preset": "nope"})


def test_dockerfiles_are_hadolint_clean() -> None:
    hadolint = tool("hadolint")
    for name in ("Dockerfile.service", "Dockerfile.sidecar"):
        out = subprocess.run([hadolint, str(DEPLOY / "docker" / name)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"{name}:\n{out.stdout}{out.stderr}"


def test_dockerfiles_copy_only_what_exists_and_run_as_non_root() -> None:
    for name in ("Dockerfile.service", "Dockerfile.sidecar"):
        text = (DEPLOY / "docker" / name).read_text()
        assert text.count("\nFROM ") >= 2, f"{name} is multi-stage"
        assert "\nUSER 10001:10001\n" in text
        for line in text.splitlines():
            if line.startswith("COPY") and "--from=" not in line:
                for source in line.split()[1:-1]:
                    if not source.startswith("--"):
                        assert (ROOT / source).exists(), f"{name}: {source} missing"
    assert "FROM ${VLLM_IMAGE}" in (DEPLOY / "docker" / "Dockerfile.sidecar").read_text()
    assert "ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0" in (DEPLOY / "docker" / "Dockerfile.sidecar").read_text()


def test_compose_file_is_valid_and_wires_socket_gpu_and_health(tmp_path: Path) -> None:
    compose = tool("docker-compose")
    out = subprocess.run(
        [compose, "-f", str(DEPLOY / "compose" / "docker-compose.yml"), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("VOXGATE_")},
    )
    assert out.returncode == 0, out.stderr
    project = json.loads(out.stdout)
    service, sidecar = project["services"]["service"], project["services"]["sidecar"]
    socket = service["command"][service["command"].index("--sidecar-socket") + 1]
    assert "--sidecar-external" in service["command"]
    shared = {v["source"] for v in service["volumes"]} & {v["source"] for v in sidecar["volumes"]}
    assert shared == {"engine-socket"}
    assert any(socket.startswith(v["target"] + "/") for v in sidecar["volumes"] if v["source"] == "engine-socket")
    (device,) = sidecar["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and "deploy" not in service
    assert sidecar["command"][sidecar["command"].index("--preset") + 1] == "16gb"
    assert service["healthcheck"]["test"][1] == "voxgate-healthcheck"
    assert sidecar["healthcheck"]["test"][1:3] == ["voxgate-healthcheck", "--socket"]
    assert service["depends_on"]["sidecar"]["condition"] == "service_started"
    drain = float(service["command"][service["command"].index("--drain-grace-s") + 1])
    assert (
        drain < int(service["stop_grace_period"].rstrip("s"))
        if isinstance(service["stop_grace_period"], str)
        else drain * 1e9 < service["stop_grace_period"]
    )


ENVOY_TYPES = (
    "envoy.extensions.filters.network.http_connection_manager.v3",
    "envoy.extensions.filters.http.router.v3",
    "envoy.extensions.upstreams.http.v3",
    "envoy.extensions.retry.host.previous_hosts.v3",
)


def test_envoy_config_matches_envoy_api_types() -> None:
    """No Envoy binary here: envoy-data-plane (Envoy's API as Python types) rejects unknown fields and types."""
    try:
        for module in ENVOY_TYPES:  # registers the typed_config types
            importlib.import_module("envoy_data_plane." + module)
        from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap
    except ImportError:
        require("envoy-data-plane", False)
    config = yaml.safe_load((DEPLOY / "envoy" / "envoy.yaml").read_text())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".* is deprecated", category=DeprecationWarning)
        bootstrap = Bootstrap.from_dict(config)  # and no field Envoy has deprecated
    (cluster,) = bootstrap.static_resources.clusters
    assert cluster.lb_policy.name == "LEAST_REQUEST"
    assert cluster.health_checks[0].grpc_health_check.service_name == DRAIN_SERVICE
    upstream = cluster.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert upstream.unpack().explicit_http_config.http2_protocol_options.connection_keepalive.interval
    hcm = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.unpack()
    assert hcm.http2_protocol_options.connection_keepalive.interval
    config["static_resources"]["clusters"][0]["lb_polcy"] = "ROUND_ROBIN"
    with pytest.raises(KeyError):
        Bootstrap.from_dict(config)


@pytest.mark.parametrize("unit", ["voxgate.service", "voxgate-sidecar.service"])
def test_systemd_units_verify(unit: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    require("systemd-analyze (Debian package systemd)", analyze is not None)
    # verify wants the ExecStart binaries to exist: point them at this venv's voxgate.
    for name in ("voxgate.service", "voxgate-sidecar.service"):
        text = (DEPLOY / "systemd" / name).read_text().replace("/opt/voxgate/.venv/bin/", f"{BIN}/")
        (tmp_path / name).write_text(text)
    out = subprocess.run(
        [analyze, "verify", "--man=no", str(tmp_path / unit)], capture_output=True, text=True, timeout=60
    )
    # Unknown keys and bad values are printed but do not change the exit status: no output at all.
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr
