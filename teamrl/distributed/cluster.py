"""Joining Ray for the Ray backend: the install check, the connection (failing fast where the cluster
cannot be reached), what the actors reserve, and the base-weights check every actor passes."""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import re
import socket

from teamrl.config import Config, ConfigError, RayConfig
from teamrl.policies.hf import HFPolicy
from teamrl.policies.openai_compat import OpenAICompatPolicy
from teamrl.protocol.plugins import python_path

log = logging.getLogger("teamrl")

RAY_MISSING = "Ray is not installed here: pip install 'teamrl[ray]' (or run with --backend local)"
_DEFAULT_PORTS = {"": 6379, "ray": 10001}  # Ray's GCS port; the Ray Client server's port
# The HTTP/2 client preface and an empty SETTINGS frame; a gRPC server answers with its SETTINGS.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 4
_ADDRESS = re.compile(r"^(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[^\]]+\]|[^:/]+)(?::(?P<port>\d+))?/?$")


class ActorLost(RuntimeError):
    """A Ray actor of the run died where the run cannot carry on without it."""


def require_ray() -> None:
    """Raise a :class:`ConfigError` naming the fix where Ray cannot be imported."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(f"run.backend is 'ray', but {RAY_MISSING}")


def reserved(r: RayConfig) -> dict[str, float]:
    """The CPUs and GPUs the run's actors reserve together: the rollout workers, the learner, and the
    sandbox workers of every rollout worker and of the driver (for counterfactual replays)."""
    sandboxes = (r.num_rollout_workers + 1) * r.num_sandbox_workers
    return {
        "CPU": r.num_rollout_workers * r.num_cpus_per_worker
        + r.num_cpus_per_learner
        + sandboxes * r.num_cpus_per_sandbox_worker,
        "GPU": r.num_rollout_workers * r.num_gpus_per_worker + r.num_gpus_per_learner,
    }


def connect(cfg: Config) -> bool:
    """Join the cluster of ``ray.address`` (else ``RAY_ADDRESS``, else start a local instance sized for
    the run's actors) unless Ray is initialised in this process already; True when this call joined
    (the caller then leaves with ``ray.shutdown``)."""
    import ray

    if ray.is_initialized():
        return False
    r = cfg.ray
    # the workers import the config's plugins (a workflow, tasks or rewards by import path) by name
    runtime_env = {"env_vars": {"PYTHONPATH": python_path()}} if python_path() else None
    address = r.address or os.environ.get("RAY_ADDRESS")
    if address:
        source = "ray.address" if r.address else "RAY_ADDRESS"
        _probe(address, source, r.connect_timeout_s)
        try:
            ray.init(address=address, logging_level=logging.WARNING, runtime_env=runtime_env)
        except ConnectionError as exc:
            raise ConfigError(
                f"{source}: cannot join the Ray cluster at {address!r} ({exc}); start it (ray start "
                "--head), fix the address, or unset it for a local instance. A cluster with token "
                "authentication also needs RAY_AUTH_MODE=token and its token here"
            ) from None
    else:  # a local instance: as many logical CPUs as the actors reserve, whatever the machine has
        cpus = math.ceil(reserved(r)["CPU"])
        ray.init(
            "local",
            num_cpus=cpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
            runtime_env=runtime_env,
        )
    have = ray.cluster_resources()
    for kind, want in reserved(r).items():
        if want > have.get(kind, 0.0):
            log.warning(
                "ray: the run's actors reserve %s %ss, the cluster has %s: they wait until it has them "
                "(lower ray.num_rollout_workers, ray.num_sandbox_workers or the ray.num_%ss_per_* keys if "
                "it never will)",
                want,
                kind,
                have.get(kind, 0.0),
                kind.lower(),
            )
    return True


def _probe(address: str, source: str, timeout_s: float) -> None:
    """Fail within ``timeout_s`` where no gRPC server (Ray's GCS, or its client server for ``ray://``)
    answers at ``address``: Ray itself retries an unreachable GCS for minutes. A TCP connection alone
    proves little (a proxy may accept it), so the probe opens HTTP/2 as gRPC does and waits for the
    server's first frame. ``auto`` and ``local`` are Ray's to resolve, and it answers those at once."""
    if address in ("auto", "local"):
        return
    match = _ADDRESS.match(address.strip())
    if match is None or match["scheme"] not in (None, *_DEFAULT_PORTS):
        raise ConfigError(
            f"{source}: {address!r} is not a Ray address; use HEAD_IP:6379, ray://HEAD_IP:10001 or auto"
        )
    host = match["host"].strip("[]")
    port = int(match["port"] or _DEFAULT_PORTS[match["scheme"] or ""])
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            if os.environ.get("RAY_USE_TLS", "0") in ("0", ""):  # under TLS the TCP connection must do
                conn.sendall(_HTTP2_PREFACE)
                frame = conn.recv(9)  # a server's first frame header: length (3), type (1), flags, stream
                if len(frame) < 4 or frame[3] != _HTTP2_SETTINGS:
                    raise ConnectionError("something answered there, but not a Ray (gRPC) server")
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
        raise ConfigError(
            f"{source}: cannot reach the Ray cluster at {host}:{port} within {timeout_s:g} s ({reason}); "
            "start it (ray start --head), fix the address, or unset it for a local instance "
            "(ray.connect_timeout_s sets the wait)"
        ) from None


def base_fingerprints(policies: dict[str, HFPolicy | OpenAICompatPolicy]) -> dict[str, str]:
    """Hash of each local policy's base weights (an openai endpoint holds none here)."""
    return {name: p.fingerprint(None) for name, p in policies.items() if isinstance(p, HFPolicy)}


def check_bases(mine: dict[str, str], theirs: dict[str, str], who: str) -> None:
    """Raise :class:`ActorLost` where ``who`` built a policy from other base weights than the driver."""
    for name, fp in theirs.items():
        if fp != mine[name]:
            raise ActorLost(
                f"{who} built policy {name!r} with other base weights than the driver's (fingerprint {fp} "
                f"vs {mine[name]}): give every Ray node the same checkpoint (policies.{name}.path) or the "
                f"same embedded base cache (policies.{name}.embedded.cache_dir)"
            )
