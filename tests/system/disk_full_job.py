"""Run inside a private mount namespace with a small tmpfs at DISK (see test_disk_full.py): replace a store while
the disk fills up, then free space and rerun. Writes what it saw as JSON to REPORT (outside the tmpfs).

    python tests/system/disk_full_job.py DISK REPORT PREVIOUS_STORE FREE_BYTES -- JOB ARGS...

PREVIOUS_STORE is copied in as the store being replaced; a ballast file leaves FREE_BYTES free on the disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def labeldist(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "labeldist.cli", *args], capture_output=True, text=True)
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def main() -> None:
    disk, report_path, previous, free = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    job = sys.argv[sys.argv.index("--") + 1 :]
    stores = disk / "stores"
    store = stores / "mpii-pose"
    shutil.copytree(previous, store)
    before = digest(store)
    ballast = disk / "ballast"
    with open(ballast, "wb") as f:
        stat = os.statvfs(disk)
        f.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - free))
    report: dict = {"disk_free_at_start": os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize}

    report["full"] = labeldist([*job, "--out", str(store), "--overwrite"])
    report["previous_intact"] = digest(store) == before
    report["entries_after_failure"] = sorted(p.name for p in stores.iterdir())
    from labeldist.engine.staging import staging_url
    from labeldist.store import blocks_done, read_manifest

    staged = staging_url(str(store))
    report["staged_complete"] = (read_manifest(staged) or {}).get("complete")
    report["staged_blocks_done"] = int(blocks_done(staged).sum()) if read_manifest(staged) else None

    ballast.unlink()
    report["rerun"] = labeldist([*job, "--out", str(store), "--overwrite"])
    report["entries_after_rerun"] = sorted(p.name for p in stores.iterdir())
    shutil.copytree(store, report_path.parent / "after")
    report_path.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
