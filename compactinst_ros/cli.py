"""compactinst command line: one sub-command per job, each implemented in its own module.

Sub-command modules expose ``add_arguments(parser)`` and ``run(args) -> int`` and import heavy
libraries (torch, tensorrt) inside ``run`` so that ``compactinst --help`` stays fast.

Exit status, the same for every sub-command: 0 done as asked; 1 some inputs failed (named on
stderr); 2 usage (a flag or configuration that cannot work: argparse and ``ConfigError``); 3 a
regression (``replay-fleet --fail-on-regression``); 130 interrupted by Ctrl-C, after writing what
was done so far (a report marked partial, train's last.pt).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator

from .errors import CompactInstError, ConfigError, InterruptedJobError

#: sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("compactinst_ros.model.info", "parameters and GMACs per component of a config"),
    "export": ("compactinst_ros.export.onnx_export", "export a checkpoint to a model bundle"),
    "bundle-hash": ("compactinst_ros.bundle", "record stage file hashes in bundle.json"),
    "infer": ("compactinst_ros.infer", "segment images: masks (PNG, COCO RLE), overlays, JSON"),
    "synth": ("compactinst_ros.train.synthetic", "generate synthetic field/road scenes (COCO)"),
    "train": ("compactinst_ros.train.loop", "train a config on COCO-format data"),
    "import-fastinst": ("compactinst_ros.model.convert_fastinst", "convert a FastInst checkpoint"),
    "build-engine": ("compactinst_ros.backends.build_engine", "build typed TensorRT engines"),
    "engine-report": ("compactinst_ros.bench.engine_report", "what TensorRT builds of a bundle"),
    "fp16-check": ("compactinst_ros.export.precision", "per-layer FP16 ranges and FP32 pins"),
    "quantize": ("compactinst_ros.export.quantize", "FP16 and INT8 variants of a bundle"),
    "derive": ("compactinst_ros.export.derive", "write a bundle's typed graphs as files"),
    "evaluate": ("compactinst_ros.eval.evaluate", "mask AP and PQ of one precision of a bundle"),
    "precision-report": ("compactinst_ros.eval.precision_report", "FP32/FP16/INT8 side by side"),
    "ros": ("compactinst_ros.ros.tool", "drive a running node: parameters, lifecycle, tables"),
    "replay": ("compactinst_ros.eval.replay", "replay a bag: accuracy and latency report"),
    "replay-fleet": ("compactinst_ros.eval.fleet", "replay a manifest of drives on Ray, merged"),
    "bench": ("compactinst_ros.bench.latency", "decoder and model latency across resolutions"),
    "costmodel": ("compactinst_ros.bench.cost_model", "bytes and MACs per stage, predicted time"),
    "roofline": ("compactinst_ros.bench.roofline", "roofline from an Nsight Compute CSV"),
}

#: exit statuses of ``compactinst`` (module docstring)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def warn(command: str, message: str) -> None:
    """One warning line of sub-command ``command`` on stderr, e.g. for an option without effect."""
    print(f"compactinst {command}: warning: {message}", file=sys.stderr)


def shows_default(action: argparse.Action) -> bool:
    """Whether ``--help`` must show ``action``'s default: every option and optional positional
    except required ones and flags (store_true/false, count, help, version take no value)."""
    if action.required or action.nargs == 0 or action.default == argparse.SUPPRESS:
        return False
    return bool(action.option_strings) or action.nargs in ("?", "*")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to every option's help that does not already name its default;
    an option whose default is None must say in words what happens without it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or not shows_default(action) or action.default is None:
            return text
        return f"{text} (default: %(default)s)".lstrip()


def iter_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-command parser below it, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from iter_parsers(child)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Top-level parser; only ``command``'s module is imported to add its arguments."""
    parser = argparse.ArgumentParser(prog="compactinst", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    for p in iter_parsers(parser):
        p.formatter_class = DefaultsHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``compactinst`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        command = None
    args = build_parser(command).parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except InterruptedJobError as exc:
        print(f"compactinst {args.command}: interrupted: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:  # a job with nothing to save: no traceback, the shell's status
        print(f"compactinst {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConfigError as exc:
        print(f"compactinst {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CompactInstError as exc:
        print(f"compactinst {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
