"""The lab's command line: `python -m lab COMMAND ...`.

Each command is a module in lab/commands/ with `add_parser(subparsers)` and `main(args) -> int`;
this file only dispatches. Bad input (a ValueError, a file that cannot be read or written) ends with
one line on stderr naming the argument or file, and exit status 2. Ctrl-C ends with 130, SIGTERM
and SIGHUP with 128 + the signal (results measured so far are saved); `run --stop-after` stopped at its
budget ends with 75 (lab.run.budget.EXIT_STOPPED: resume to continue). Anything else is a bug of the
lab: its traceback, then where to report it (exit status 1); LAB_DEBUG=1 shows the traceback of a
one-line error too. A dependency this interpreter lacks (torch, pydantic, jinja2, ...) is not a bug either:
one line names it and how to get it, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback

import lab.commands as commands_pkg
from lab.permissions import permission_denied

BUG_REPORT = ("this is a bug in the lab, not in what you typed: please report it to the lab's maintainers (README.md, "
              "'Reporting a bug') with the traceback above, the command line, and `python -m lab env --out env.json`")

# How to get the lab's dependencies, for the one line that names a missing one.
GET_DEPENDENCIES = ("`pip install -e .` from the repository into a virtualenv, nox's .nox/<session>/bin/python (made by "
                    "`nox -s lab`), or, on a host without network, the offline wheelhouse (README.md, 'A GPU host "
                    "without network')")
# Left to the host by the wheelhouse: these come with the torch build to be measured.
MEASURED = ("torch", "triton")
# Import names whose distribution is named otherwise.
DISTRIBUTIONS = {"yaml": "pyyaml", "PIL": "pillow", "dateutil": "python-dateutil"}

ORDER = ("run", "list", "env", "decode", "report", "compare", "diagnose")


def image_epilog() -> str | None:
    """Inside one of the lab's images (LAB_IMAGE set): how to run it so that results reach the host."""
    image = os.environ.get("LAB_IMAGE")
    if not image:
        return None
    profile = "gpu" if "cuda" in image else "cpu"
    gpus = " --gpus all" if profile == "gpu" else ""
    return (f"This is the image {image}. Run the lab with its results in a host folder:\n"
            f"  docker run --rm{gpus} --user \"$(id -u):$(id -g)\" -e HOME=/tmp -v \"$PWD/runs:/out\" {image} "
            f"run --profile {profile} --out /out\n(docs/containers.md)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__import__("lab").__doc__,
                                     epilog=image_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    found = [m.name for m in pkgutil.iter_modules(commands_pkg.__path__) if not m.name.startswith("_")]
    for name in sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n)):
        module = importlib.import_module(f"lab.commands.{name}")
        module.add_parser(sub).set_defaults(_main=module.main)
    return parser


def one_line(exc: BaseException) -> str:
    """An error as one line: an OSError names its file and the system's reason, others their message; a control
    character (from a hostile folder's name) shown as an escape, never interpreted (lab.untrusted.safe)."""
    from lab.untrusted import safe

    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        other = f" -> {exc.filename2}" if exc.filename2 else ""
        text = f"{where}{exc.strerror}{other}"
    else:
        text = str(exc) or type(exc).__name__
    return safe(" ".join(text.split()))


def missing_dependency(exc: ImportError) -> str | None:
    """The one line for an import of a package this interpreter lacks (or has in a version without what the lab
    imports); None when the module that failed is the lab's own (a bug, or a broken checkout)."""
    name = exc.name or ""
    top = name.split(".")[0]
    if not top or top in ("lab", "report"):
        return None
    package = DISTRIBUTIONS.get(top, top)
    where = sys.executable
    if top in MEASURED:
        return (f"this interpreter ({where}) has no {package}, the library the lab measures: install the torch build "
                f"to measure into it (`pip install -e .` brings one, nox's .nox/<session>/bin/python has one; the "
                f"offline wheelhouse leaves torch to the host)")
    if isinstance(exc, ModuleNotFoundError):
        return f"this interpreter ({where}) lacks {package}, which the lab needs: {GET_DEPENDENCIES}"
    detail = " ".join(str(exc).split(" (")[0].split())
    return (f"this interpreter's {package} is not a version the lab works with ({detail}): install the versions "
            f"pyproject.toml asks for; {GET_DEPENDENCIES}")


def _user_error(line: str, debug: bool) -> int:
    """One line the user can act on (the traceback too under LAB_DEBUG=1): exit status 2."""
    if debug:
        traceback.print_exc()
    print(f"error: {line}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    debug = os.environ.get("LAB_DEBUG") == "1"
    try:
        args = build_parser().parse_args(argv)
        return int(args._main(args) or 0)
    except PermissionError as exc:  # before OSError: the fix depends on where the lab runs
        return _user_error(permission_denied(exc.filename), debug)
    except (ValueError, OSError) as exc:
        return _user_error(one_line(exc), debug)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None)
        what = f"stopped by {exc}" if signum else "interrupted"
        print(f"{what}: results measured so far are saved", file=sys.stderr)
        return 128 + signum if signum else 130
    except Exception as exc:  # a missing dependency the user can install, else a bug of the lab's
        line = missing_dependency(exc) if isinstance(exc, ImportError) else None
        if line is not None:
            return _user_error(line, debug)
        traceback.print_exc()
        print(f"error: {BUG_REPORT}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    from lab.shutdown import leave

    leave(main())  # within 30 s of the last line, always (lab/shutdown.py says why)
