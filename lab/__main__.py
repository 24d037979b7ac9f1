"""The lab's command line: `python -m lab COMMAND ...`.

Each command is a module in lab/commands/ with `add_parser(subparsers)` and `main(args) -> int`;
this file only dispatches. Bad input ends with one line on stderr naming the argument or file, and
exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import lab.commands as commands_pkg

ORDER = ("run", "list", "env", "decode", "report", "compare", "diagnose")


def _command_modules() -> list[str]:
    found = [m.name for m in pkgutil.iter_modules(commands_pkg.__path__) if not m.name.startswith("_")]
    return sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__import__("lab").__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _command_modules():
        module = importlib.import_module(f"lab.commands.{name}")
        p = module.add_parser(sub)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._main(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: results measured so far are saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
