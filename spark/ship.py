"""What the job ships to executors: one zip of the pure-Python code its tasks import.

Tasks decode pcaps (spark/frames.py -> tools/pcap.py), build plans (spark/plan.py) and replay
(spark/executor.py -> tools/replay.py); that is ``rmqgate.wire``, ``rmqgate.tools``, ``rmqgate.spark``
and ``construct``, all pure Python, so a zip on the executors' ``sys.path`` (``SparkContext.addPyFile``)
is all a stock Python with Spark's own ``pyspark.zip`` needs. The C extensions stay out of the
executors' import path: zstandard is imported only where an ``.rmqcap`` is read (the driver decodes
local ones), lmdb only by the broker's store. The zip is built at job start from the installed modules
and cached under the temp directory by content, so an unchanged install builds it once.
``python -m rmqgate.spark.ship [DIR]`` builds it for ``spark-submit --py-files`` (cluster deploy mode).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
import time
import zipfile
from pathlib import Path

#: the packages tasks import (everything else of rmqgate stays on the driver)
EXECUTOR_PACKAGES: tuple[str, ...] = ("rmqgate.wire", "rmqgate.tools", "rmqgate.spark", "construct")


def _sources() -> list[tuple[str, Path]]:
    """(archive name, file) of every module of EXECUTOR_PACKAGES, tests and caches left out."""
    out = []
    for name in EXECUTOR_PACKAGES:
        pkg = importlib.import_module(name)
        for root in pkg.__path__:
            base = Path(root)
            for path in sorted(base.rglob("*.py")):
                rel = path.relative_to(base)
                if rel.parts[0] == "tests" or "__pycache__" in rel.parts:
                    continue
                out.append(("/".join([*name.split("."), *rel.parts]), path))
    return out


def pyfiles_zip(directory: str | None = None) -> Path:
    """The executors' zip for the installed code, built if this content has none yet."""
    sources = _sources()
    key = hashlib.sha1()
    for arc, path in sources:
        st = path.stat()
        key.update(f"{arc}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    target = Path(directory or tempfile.gettempdir()) / f"rmqgate-executor-{key.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        # zipimport finds the namespace package ``rmqgate`` (no __init__.py) by its directory entry
        for d in sorted({arc.rsplit("/", 1)[0] + "/" for arc, _ in sources}):
            parts = d.rstrip("/").split("/")
            for i in range(1, len(parts) + 1):
                name = "/".join(parts[:i]) + "/"
                if name not in zf.namelist():
                    zf.writestr(name, b"")
        for arc, path in sources:
            zf.write(path, arc)
    os.replace(tmp, target)  # atomic: concurrent jobs never read a half-written zip
    # zips of code that has changed since: kept a day, as a job may still be handing one out
    for old in target.parent.glob("rmqgate-executor-*.zip"):
        try:
            if old != target and time.time() - old.stat().st_mtime > 86400:
                old.unlink()
        except OSError:
            pass
    return target


if __name__ == "__main__":  # python -m rmqgate.spark.ship [DIR]: build it for --py-files, print its path
    import sys

    print(pyfiles_zip(sys.argv[1] if len(sys.argv) > 1 else None))
