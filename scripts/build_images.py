#!/usr/bin/env python3
"""Build voxgate's container images with no container engine and no registry (CI, tests/deploy/test_images.py).

    scripts/build_images.py service            # prints the image reference
    scripts/build_images.py --json service sidecar

The base is made locally: mmdebstrap writes a minimal Debian (bookworm: Python 3.11, python-is-python3 for
the Dockerfiles' `python`, the build host's CA bundle so that pip reaches PyPI through the same proxies the
host trusts), `podman import` turns it into an image, and buildah (chroot isolation, vfs storage: no daemon,
no overlay, no user namespaces) builds deploy/docker/Dockerfile.service and Dockerfile.sidecar on it.

Everything is cached under $VOXGATE_CACHE_DIR, else $XDG_CACHE_HOME/voxgate or ~/.cache/voxgate, in images/
(buildah's own storage): the base is keyed by what makes it (this script, suite, mirror, packages, CA
bundle), each image by its Dockerfile, the files it copies and the base. A cached image is used as it
is, so a run after a cold one costs a hash of the sources. The sidecar's real base (vllm/vllm-openai)
cannot be pulled here: it is built on the Debian base plus a stand-in `vllm` 0.32.0 distribution
(metadata and a version string only, see deploy/README.md "Images built in CI"), which takes it through
every step of its Dockerfile. The two images build side by side.

Needs root (or rootless buildah with subuids), mmdebstrap, podman and buildah (scripts/ci_toolchains.sh).
Progress goes to stderr; stdout has the image references, or with --json one object:
{"images": {name: ref}, "built": [names built now], "seconds": {name: s}, "buildah": [global buildah flags]}.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "deploy" / "docker"
SUITE = "bookworm"
MIRROR = os.environ.get("VOXGATE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# python-is-python3: the Dockerfiles run `python` (the python:*-slim images have it); python3-pip: the
# sidecar's base is a system Python with pip (as the vLLM image is); passwd: groupadd/useradd.
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "passwd", "ca-certificates")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
SLIM = tuple(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("man", "doc", "locale", "info"))
EATMYDATA_HOOKS = Path("/usr/share/mmdebstrap/hooks/eatmydata")
REPO = "localhost/voxgate-ci"
VLLM_VERSION = "0.32.0"  # what Dockerfile.sidecar asserts the base has
TOOLS = ("mmdebstrap", "podman", "buildah")
PRUNE_AFTER_S = 600


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: Path
    copied: tuple[str, ...]  # what the Dockerfile COPYs from the context (its .dockerignore applies)
    base_arg: str  # the build argument that names the Python base


SERVICE = Image(
    "service",
    DOCKER / "Dockerfile.service",
    (
        "clients/python",
        "pyproject.toml",
        "README.md",
        "service",
        "engine_api",
        "engine_sidecar",
        "deploy/docker/healthcheck.py",
    ),
    "PYTHON_IMAGE",
)
SIDECAR = Image(
    "sidecar",
    DOCKER / "Dockerfile.sidecar",
    (
        "clients/python",
        "pyproject.toml",
        "README.md",
        "service",
        "engine_api",
        "engine_sidecar",
        "deploy/docker/healthcheck.py",
    ),
    "PYTHON_IMAGE",
)
IMAGES = {image.name: image for image in (SERVICE, SIDECAR)}
IGNORED_PARTS = {"__pycache__", "build", ".pytest_cache", ".mypy_cache", ".ruff_cache"}  # as the .dockerignore


def cache_dir() -> Path:
    base = os.environ.get("VOXGATE_CACHE_DIR")
    if not base:
        base = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voxgate")
    return Path(base) / "images"


def buildah_flags(cache: Path) -> list[str]:
    """Global flags of every buildah/podman call: storage of its own under the cache, vfs (no overlay mounts)."""
    return ["--root", str(cache / "storage"), "--runroot", str(cache / "runroot"), "--storage-driver", "vfs"]


def log(message: str) -> None:
    print(f"build_images: {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-6000:])
        raise SystemExit(f"build_images: failed ({proc.returncode}): {' '.join(cmd[:6])} ...")
    return proc


def image_exists(flags: list[str], ref: str) -> bool:
    return (
        subprocess.run(
            ["buildah", *flags, "inspect", "--type", "image", ref], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode
        == 0
    )


def _hash_file(digest: hashlib._Hash, path: Path) -> None:
    digest.update(f"{path.relative_to(ROOT)}\0{os.stat(path).st_mode & 0o111}\0".encode())
    digest.update(path.read_bytes() + b"\0")


def base_key() -> str:
    digest = hashlib.sha256(f"{SUITE}\0{MIRROR}\0{BASE_PACKAGES}\0{SLIM}\0".encode())
    digest.update(HOST_CA_BUNDLE.read_bytes() if HOST_CA_BUNDLE.exists() else b"")
    digest.update(Path(__file__).read_bytes())  # how the base and the vLLM stand-in are made
    return digest.hexdigest()[:16]


def image_key(image: Image, base: str) -> str:
    digest = hashlib.sha256(f"{base}\0{VLLM_VERSION}\0".encode())
    _hash_file(digest, image.dockerfile)
    for rel in image.copied:
        path = ROOT / rel
        files = (
            [path]
            if path.is_file()
            else sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not IGNORED_PARTS.intersection(p.relative_to(ROOT).parts)
                and not any(part.endswith(".egg-info") for part in p.parts)
            )
        )
        for file in files:
            _hash_file(digest, file)
    return digest.hexdigest()[:16]


@contextmanager
def locked(cache: Path) -> Iterator[None]:
    """One build at a time per cache: a second run waits and then finds the image built."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_base(flags: list[str], cache: Path) -> str:
    ref = f"{REPO}/debian-python:{SUITE}-{base_key()}"
    if image_exists(flags, ref):
        return ref
    log(f"making the Debian base {ref} with mmdebstrap ({MIRROR})")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        tar = Path(tmp) / "base.tar"
        hooks = []
        if shutil.which("eatmydata") and EATMYDATA_HOOKS.is_dir():  # no fsync: halves dpkg's time in the chroot
            hooks.append(f"--hook-dir={EATMYDATA_HOOKS}")
        if HOST_CA_BUNDLE.exists():  # trust what the build host trusts (a TLS-intercepting proxy's CA)
            hooks.append(f"--customize-hook=upload {HOST_CA_BUNDLE} /etc/ssl/certs/ca-certificates.crt")
        run(
            [
                "mmdebstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                *SLIM,
                *hooks,
                SUITE,
                str(tar),
                MIRROR,
            ]
        )
        run(["podman", *flags, "import", "--change", 'CMD ["python3"]', str(tar), ref])
    return ref


def build_vllm_standin(flags: list[str], base: str) -> str:
    """The Debian base plus a `vllm` distribution that is only its metadata and version: what
    Dockerfile.sidecar checks of its base, without the real (CUDA, multi-GB) vLLM."""
    ref = f"{base.replace('/debian-python:', '/vllm-standin:')}-{VLLM_VERSION}"
    if image_exists(flags, ref):
        return ref
    prune(flags, "vllm-standin", ref)
    log(f"making the vLLM stand-in base {ref}")
    site = "/usr/local/lib/python3.11/dist-packages"
    with tempfile.TemporaryDirectory() as tmp:
        pkg, info = Path(tmp, "vllm"), Path(tmp, f"vllm-{VLLM_VERSION}.dist-info")
        pkg.mkdir()
        info.mkdir()
        (pkg / "__init__.py").write_text(
            f'"""Stand-in for vLLM {VLLM_VERSION} (scripts/build_images.py): version only, no engine."""\n'
            f'__version__ = "{VLLM_VERSION}"\n'
        )
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}\n")
        (info / "INSTALLER").write_text("voxgate-build-images\n")
        (info / "RECORD").write_text("")
        container = run(["buildah", *flags, "from", "--pull-never", base]).stdout.strip().splitlines()[-1]
        try:
            run(["buildah", *flags, "copy", container, tmp, site])
            run(["buildah", *flags, "commit", "--rm", container, ref])
        except BaseException:
            subprocess.run(["buildah", *flags, "rm", container], capture_output=True)
            raise
    return ref


def build_image(flags: list[str], image: Image, base: str, ref: str) -> None:
    log(f"building {ref} from {image.dockerfile.relative_to(ROOT)}")
    build_args = ["--build-arg", f"{image.base_arg}={base}"]
    if image is SIDECAR:
        build_args += ["--build-arg", f"VLLM_IMAGE={build_vllm_standin(flags, base)}"]
    ignore = image.dockerfile.with_name(image.dockerfile.name + ".dockerignore")
    # --format docker keeps HEALTHCHECK and STOPSIGNAL in the image config (OCI has no field for them).
    run(
        [
            "buildah",
            *flags,
            "bud",
            "--isolation",
            "chroot",
            "--format",
            "docker",
            "--pull-never",
            "--ignorefile",
            str(ignore),
            *build_args,
            "-f",
            str(image.dockerfile),
            "-t",
            ref,
            str(ROOT),
        ]
    )


def prune(flags: list[str], name: str, keep: str) -> None:
    """Older builds of this image go once they are PRUNE_AFTER_S old: another checkout sharing the cache may
    have just built one to run it (and one a container uses stays: buildah refuses to remove it)."""
    listed = subprocess.run(
        ["buildah", *flags, "images", "--json", "--filter", f"reference={REPO}/{name}"], capture_output=True, text=True
    )
    if listed.returncode != 0:
        return
    for image in json.loads(listed.stdout or "[]"):
        if keep not in image["names"] and time.time() - image["created"] > PRUNE_AFTER_S:
            subprocess.run(["buildah", *flags, "rmi", image["id"]], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+", choices=sorted(IMAGES))
    parser.add_argument("--json", action="store_true", help="print one JSON object (see the module doc)")
    args = parser.parse_args(argv)
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        print(f"build_images: {', '.join(missing)} not found (scripts/ci_toolchains.sh installs them)", file=sys.stderr)
        return 3
    cache = cache_dir()
    flags = buildah_flags(cache)
    built: list[str] = []
    seconds: dict[str, float] = {}
    with locked(cache):
        start = time.monotonic()
        base = build_base(flags, cache)
        prune(flags, "debian-python", base)
        seconds["base"] = round(time.monotonic() - start, 1)
        refs = {name: f"{REPO}/{name}:{image_key(IMAGES[name], base)}" for name in args.images}

        def ensure(name: str) -> None:
            start = time.monotonic()
            if not image_exists(flags, refs[name]):
                build_image(flags, IMAGES[name], base, refs[name])
                built.append(name)
                prune(flags, name, refs[name])
            seconds[name] = round(time.monotonic() - start, 1)

        # Side by side: a build mostly waits on PyPI and the disk, so two take little longer than one.
        with ThreadPoolExecutor(max_workers=len(refs)) as pool:
            for done in [pool.submit(ensure, name) for name in refs]:
                done.result()
    if args.json:
        print(json.dumps({"images": refs, "built": built, "seconds": seconds, "buildah": flags}))
    else:
        print("\n".join(refs.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
