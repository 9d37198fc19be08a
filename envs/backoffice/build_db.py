"""build_db.py -- make a seeded back-office SQLite file: migrate + seed, written atomically.

  python envs/backoffice/build_db.py /tmp/bo.sqlite3 --seed 0     (prints the seconds it took)
  from envs.backoffice.build_db import build_db; build_db("/tmp/bo.sqlite3", seed=0)

Django runs in child processes (manage.py with MAG_BACKOFFICE_DB set), so the caller -- the
collection harness, a test -- never imports Django or its settings and can build many files.
The file is built under a temporary name beside the target and renamed into place, so a
server or a reader never sees a half-built database. To reset an episode, copy a built file
over the served one (the server opens the file anew on every request).
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MANAGE = os.path.join(HERE, "manage.py")


def manage(db, *args, python=sys.executable):
    """Run `manage.py ARGS` against the SQLite file `db`; return its stdout."""
    env = {**os.environ, "MAG_BACKOFFICE_DB": os.path.abspath(db)}
    return subprocess.run([python, MANAGE, *args], env=env, cwd=HERE, check=True,
                          capture_output=True, text=True).stdout


def build_db(path, seed=0, python=sys.executable):
    """Write a migrated database seeded with `seed` to `path`; return the seconds it took."""
    t0 = time.perf_counter()
    tmp = f"{path}.tmp{os.getpid()}"
    if os.path.exists(tmp):
        os.remove(tmp)
    try:
        manage(tmp, "migrate", "--noinput", "-v", "0", python=python)
        manage(tmp, "seed", "--seed", str(seed), python=python)
        os.replace(tmp, path)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"building {path} failed: {e.stderr.strip()[-2000:]}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return time.perf_counter() - t0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="the SQLite file to write")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"built {args.path} (seed {args.seed}) in {build_db(args.path, args.seed):.2f}s")
