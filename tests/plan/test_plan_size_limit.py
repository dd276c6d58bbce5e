"""``plan`` applies the per-file size limit before it reads a committed file, as
``validate`` does on disk: an oversized blob is named with its size and never read into
memory (its size is asked of git first), so ``plan`` costs what ``validate`` costs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.shell import gitrepo, loading
from tests.e2e_repo import EXAMPLES, PROJECT, git


def _repo(tmp_path: Path, filler_bytes: int) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES, root)
    lines = filler_bytes // 5
    (root / "services" / "huge.yaml").write_text("# filler\n" + "k: v\n" * lines)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a huge file")
    return root


def test_an_oversized_blob_is_given_as_its_size_and_never_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _repo(tmp_path, 4096)
    commit = gitrepo.resolve(root, "HEAD")
    listing = {e.path: e.oid for e in gitrepo.tree(root, commit)}
    small, big = listing["settings.yaml"], listing["services/huge.yaml"]
    asked: list[bytes] = []
    real = gitrepo._git_bytes

    def spy(where: Path, *args: str, stdin: bytes = b"") -> bytes:
        if "--batch" in args:
            asked.append(stdin)
        return real(where, *args, stdin=stdin)

    monkeypatch.setattr(gitrepo, "_git_bytes", spy)
    out = gitrepo.read_blobs(root, [big, small], limit=1000)
    assert isinstance(out[0], int) and out[0] > 4000
    assert isinstance(out[1], bytes) and out[1] == (root / "settings.yaml").read_bytes()
    assert asked == [f"{small}\n".encode()]  # the content of the big one: never asked


def _max_rss_kb(*args: str) -> tuple[int, str]:
    """Run the CLI in a child of a fresh interpreter; the child's peak RSS and stderr."""
    probe = ("import resource, subprocess, sys\n"
             "done = subprocess.run([sys.executable, '-m', 'reconciler', *sys.argv[1:]],"
             " capture_output=True, text=True)\n"
             "sys.stderr.write(done.stdout + done.stderr)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
    env["PYTHONPATH"] = str(PROJECT)
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True,
                          text=True, cwd=PROJECT, env=env, timeout=300)
    return int(done.stdout.strip()), done.stderr


@pytest.mark.integration  # starts a process of its own
def test_plan_reads_no_more_of_a_huge_committed_file_than_validate(tmp_path: Path) -> None:
    assert loading.MAX_FILE_BYTES < 2 << 20
    root = _repo(tmp_path, 80 << 20)
    validate_kb, said = _max_rss_kb("validate", str(root))
    assert "huge.yaml" in said and f"the limit is {loading.MAX_FILE_BYTES}" in said, said
    plan_kb, said = _max_rss_kb("plan", str(root))
    assert "invalid" in said and "Traceback" not in said, said
    # Reading the 80 MB blob would add at least 80 MB (it was +120 MB before the fix).
    assert plan_kb < validate_kb + 40 * 1024, (plan_kb, validate_kb)
