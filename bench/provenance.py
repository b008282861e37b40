"""Which code a benchmark run measured: the git commit (with "-dirty" where tracked files differ from it) and a digest
of the sources themselves. The digest names the tree also where the machine that ran it holds a copy of the files but
stale git metadata (the device machine's copy keeps the .git of its session's start, so its commit alone misleads):

    python -m bench.provenance        # this checkout's commit and digest, to match a run's JSON ("git", "sources")
"""
from __future__ import annotations

import hashlib
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_SUFFIXES = (".py", ".cpp", ".h", ".cu", ".cuh")


def source_files(root: str = ROOT) -> list[str]:
    """The package's sources (Python, C++ and CUDA under convops/) and setup.py, as sorted paths relative to root."""
    paths = ["setup.py"] if os.path.isfile(os.path.join(root, "setup.py")) else []
    for directory, subdirectories, files in os.walk(os.path.join(root, "convops")):
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
        paths += [os.path.relpath(os.path.join(directory, f), root) for f in files if f.endswith(SOURCE_SUFFIXES)]
    return sorted(p.replace(os.sep, "/") for p in paths)


def source_digest(root: str = ROOT) -> str:
    """12 hex digits of SHA-256 over the source files' paths and contents."""
    digest = hashlib.sha256()
    for path in source_files(root):
        digest.update(path.encode() + b"\0")
        with open(os.path.join(root, path), "rb") as f:
            digest.update(f.read() + b"\0")
    return digest.hexdigest()[:12]


def git_revision(root: str = ROOT) -> str | None:
    """The short commit, "-dirty" where tracked files differ from it; None outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=root,
                              check=True).stdout.strip()
    try:
        revision = git("rev-parse", "--short", "HEAD")
        return revision + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return None


if __name__ == "__main__":
    print(f"git {git_revision()}  sources {source_digest()}")
